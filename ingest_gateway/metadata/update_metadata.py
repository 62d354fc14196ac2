"""The wire form of the controller's `MetadataUpdate`: an UpdateMetadata request (v8).

Kafka's fields carry it: the live brokers with their listeners and rack, each changed
topic's id and partition states (leader, epoch, ISR, the state znode's version, replicas),
and the request's type (2 full, 1 incremental; KIP-866). A deleted topic is named by a
partition whose leader is -2 (Kafka's LeaderDuringDelete). A broker's HTTP listener, which
Kafka has no field for, travels as one more endpoint under the listener name
`loglake.http` (a dot is not allowed in Kafka listener names, so it cannot clash).
"""

from __future__ import annotations

import uuid

from loglake.coordination.model import (
    LEADER_DURING_DELETE,
    BrokerEndpoint,
    MetadataUpdate,
    PartitionState,
    TopicDescription,
    topic_uuid,
)
from loglake.protocol.bodies import (
    UpdateMetadataRequest,
    UpdateMetadataRequestUpdateMetadataBroker,
    UpdateMetadataRequestUpdateMetadataEndpoint,
    UpdateMetadataRequestUpdateMetadataPartitionState,
    UpdateMetadataRequestUpdateMetadataTopicState,
)
from loglake.security.listeners import SecurityProtocol

UPDATE_METADATA_VERSION = 8
FULL, INCREMENTAL = 2, 1
HTTP_LISTENER = "loglake.http"
# Kafka's SecurityProtocol ids.
_PROTOCOL_IDS = {
    SecurityProtocol.PLAINTEXT: 0,
    SecurityProtocol.SSL: 1,
    SecurityProtocol.SASL_PLAINTEXT: 2,
    SecurityProtocol.SASL_SSL: 3,
}
_PROTOCOLS = {i: p for p, i in _PROTOCOL_IDS.items()}


def update_metadata_body(update: MetadataUpdate) -> UpdateMetadataRequest:
    topic_states: list[UpdateMetadataRequestUpdateMetadataTopicState] = []
    for name, topic in update.topics.items():
        topic_states.append(
            {
                "topic_name": name,
                "topic_id": topic_uuid(topic.topic_id),
                "partition_states": [
                    {
                        "partition_index": p,
                        "controller_epoch": state.controller_epoch,
                        "leader": state.leader,
                        "leader_epoch": state.leader_epoch,
                        "isr": list(state.isr),
                        "zk_version": state.version,
                        "replicas": list(topic.assignment.get(p, ())),
                        "offline_replicas": [],
                    }
                    for p, state in sorted(update.states.get(name, {}).items())
                ],
            }
        )
    for name in sorted(update.deleted):
        topic_states.append(
            {
                "topic_name": name,
                "topic_id": uuid.UUID(int=0),
                "partition_states": [
                    {
                        "partition_index": 0,
                        "controller_epoch": update.controller_epoch,
                        "leader": LEADER_DURING_DELETE,
                        "leader_epoch": -1,
                        "isr": [],
                        "zk_version": -1,
                        "replicas": [],
                        "offline_replicas": [],
                    }
                ],
            }
        )
    return {
        "controller_id": update.controller_id,
        "is_k_raft_controller": False,
        "type": FULL if update.full else INCREMENTAL,
        "controller_epoch": update.controller_epoch,
        "broker_epoch": -1,
        "topic_states": topic_states,
        "live_brokers": [_broker_body(b) for _, b in sorted(update.brokers.items())],
    }


def _broker_body(broker: BrokerEndpoint) -> UpdateMetadataRequestUpdateMetadataBroker:
    listeners = broker.listeners or (("PLAINTEXT", "PLAINTEXT", broker.host, broker.port),)
    endpoints: list[UpdateMetadataRequestUpdateMetadataEndpoint] = [
        {"port": port, "host": host, "listener": name, "security_protocol": _PROTOCOL_IDS[SecurityProtocol(protocol)]}
        for name, protocol, host, port in listeners
    ]
    endpoints.append(
        {"port": broker.http_port, "host": broker.http_host, "listener": HTTP_LISTENER, "security_protocol": 0}
    )
    return {"id": broker.broker_id, "endpoints": endpoints, "rack": broker.rack}


def update_from_body(body: UpdateMetadataRequest, inter_broker_listener: str) -> MetadataUpdate:
    """The update a request carries (any version: partition states grouped by topic from
    v5, brokers with endpoints from v1); its topics hold the id and shipped replicas only."""
    brokers = {b["id"]: _broker(b, inter_broker_listener) for b in body["live_brokers"]}
    topics: dict[str, TopicDescription] = {}
    states: dict[str, dict[int, PartitionState]] = {}
    deleted = set()
    topic_states = body.get("topic_states")
    if not topic_states:
        by_topic: dict[str, list[UpdateMetadataRequestUpdateMetadataPartitionState]] = {}
        for ps in body.get("ungrouped_partition_states", []):
            by_topic.setdefault(ps.get("topic_name", ""), []).append(ps)
        topic_states = [{"topic_name": name, "partition_states": ps} for name, ps in by_topic.items()]
    for t in topic_states:
        name = t["topic_name"]
        partitions = t["partition_states"]
        if any(ps["leader"] == LEADER_DURING_DELETE for ps in partitions):
            deleted.add(name)
            continue
        topic_id = t.get("topic_id", uuid.UUID(int=0))
        topics[name] = TopicDescription(
            name=name,
            topic_id="" if topic_id.int == 0 else str(topic_id),
            assignment={ps["partition_index"]: tuple(ps["replicas"]) for ps in partitions},
        )
        states[name] = {
            ps["partition_index"]: PartitionState(
                ps["leader"], ps["leader_epoch"], tuple(ps["isr"]), ps["controller_epoch"], ps["zk_version"]
            )
            for ps in partitions
        }
    return MetadataUpdate(
        controller_id=body["controller_id"],
        controller_epoch=body["controller_epoch"],
        brokers=brokers,
        topics=topics,
        states=states,
        deleted=frozenset(deleted),
        full=body.get("type") == FULL,
    )


def _broker(body: UpdateMetadataRequestUpdateMetadataBroker, inter_broker_listener: str) -> BrokerEndpoint:
    listeners = []
    http_host, http_port = "", 0
    if not body.get("endpoints"):  # v0: one plaintext host and port
        listeners.append(("PLAINTEXT", "PLAINTEXT", body.get("v0_host", ""), body.get("v0_port", -1)))
    for e in body.get("endpoints", []):
        name = e.get("listener", "")
        if name == HTTP_LISTENER:
            http_host, http_port = e["host"], e["port"]
        else:
            listeners.append((name, _PROTOCOLS[e["security_protocol"]].value, e["host"], e["port"]))
    host, port = next(((h, p) for n, _, h, p in listeners if n == inter_broker_listener), listeners[0][2:])
    return BrokerEndpoint(body["id"], host, port, http_host, http_port, body.get("rack"), listeners=tuple(listeners))
