"""HTTP for consumer groups: REST Proxy v2 consumer instances, and group administration
(list, describe with lag, reset offsets, delete) for the `loglake groups` CLI."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from fastapi import APIRouter, Request, Response
from loglake.errors import ErrorCode, KafkaError
from loglake.groups import (
    CONSUMER_PROTOCOL_TYPE,
    GroupCoordinator,
    GroupDescription,
    GroupState,
    OffsetCommitData,
    TopicPartition,
    decode_assignment,
)
from loglake.groups.api import CLASSIC_GROUP_TYPE, CONSUMER_GROUP_TYPE
from loglake.groups.consumer_group import ConsumerGroupDescription, ConsumerGroupMemberDescription, TopicPartitions
from loglake.security.acls import AclOperation, ResourceType

from ingest_gateway.http.errors import BadRequest, JSONBytesResponse
from ingest_gateway.http.rest_records import BINARY_V2, JSON_V2, parse_isolation, render_records
from ingest_gateway.http.security import requester

if TYPE_CHECKING:
    from ingest_gateway.apis.authorization import RequestAuthorization
    from ingest_gateway.coordinators.coordinator_locator import CoordinatorLocator
    from ingest_gateway.http.consumers import ConsumerManager
    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.replica.replica_manager import ReplicaManager


async def _optional_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest(422, "request body must be a JSON object", 2)
    return doc


def _partitions(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = doc.get(key)
    if not isinstance(items, list) or not all(
        isinstance(i, dict) and isinstance(i.get("topic"), str) and isinstance(i.get("partition"), int) for i in items
    ):
        raise BadRequest(422, f"'{key}' must be a list of {{topic, partition, ...}} objects", 2)
    return items


def _check(error: ErrorCode, what: str) -> None:
    if error != ErrorCode.NONE:
        raise KafkaError(error, what)


def group_routes(
    *,
    broker_id: int,
    coordinator: GroupCoordinator,
    consumers: ConsumerManager,
    locator: CoordinatorLocator,
    authorization: RequestAuthorization,
    cache: MetadataCache,
    replica_manager: ReplicaManager,
) -> APIRouter:
    router = APIRouter()

    # Consumer instances (REST Proxy v2) --------------------------------------------------

    @router.post("/consumers/{group_id}")
    async def create_consumer(group_id: str, request: Request) -> dict[str, Any]:
        """Create a consumer instance: {"name", "format": "binary"|"json", "auto.offset.reset",
        "auto.commit.enable", "isolation.level": "read_committed" (default)|"read_uncommitted",
        "group.protocol": "classic" (default)|"consumer", "group.remote.assignor" (consumer)}."""
        doc = await _optional_json(request)
        protocol = doc.get("group.protocol", CLASSIC_GROUP_TYPE)
        # Case-insensitive, as Kafka's consumers take it.
        if not isinstance(protocol, str) or protocol.lower() not in (CLASSIC_GROUP_TYPE, CONSUMER_GROUP_TYPE):
            raise BadRequest(422, "group.protocol must be 'classic' or 'consumer'", 2)
        protocol = protocol.lower()
        assignor = doc.get("group.remote.assignor")
        if assignor is not None and protocol != CONSUMER_GROUP_TYPE:
            raise BadRequest(422, "group.remote.assignor is only taken with group.protocol 'consumer'", 2)
        if assignor is not None and assignor not in consumers.assignors:
            raise BadRequest(422, f"group.remote.assignor must be one of {', '.join(consumers.assignors)}", 2)
        fmt = doc.get("format", "binary")
        if fmt not in ("binary", "json"):
            raise BadRequest(422, "format must be 'binary' or 'json'", 2)
        reset = doc.get("auto.offset.reset", "latest")
        if reset not in ("earliest", "latest"):
            raise BadRequest(422, "auto.offset.reset must be 'earliest' or 'latest'", 2)
        auto_commit = str(doc.get("auto.commit.enable", "true")).lower() == "true"
        read_committed = parse_isolation(doc.get("isolation.level", "read_committed"), "isolation.level")
        await locator.group_coordinator(group_id)
        instance = consumers.create(
            group_id, doc.get("name"), fmt, reset, auto_commit, read_committed, protocol, assignor
        )
        base = str(request.base_url).rstrip("/")
        return {"instance_id": instance.name, "base_uri": f"{base}/consumers/{group_id}/instances/{instance.name}"}

    @router.delete("/consumers/{group_id}/instances/{name}", status_code=204)
    async def delete_consumer(group_id: str, name: str) -> Response:
        await consumers.close(consumers.get(group_id, name))
        return Response(status_code=204)

    @router.post("/consumers/{group_id}/instances/{name}/subscription", status_code=204)
    async def subscribe(group_id: str, name: str, request: Request) -> Response:
        doc = await _optional_json(request)
        topics = doc.get("topics")
        if not isinstance(topics, list) or not topics or not all(isinstance(t, str) for t in topics):
            raise BadRequest(422, "'topics' must be a non-empty list of topic names", 2)
        for topic in topics:  # the instance reads them inside the broker: check Read here
            authorization.require(
                requester(request), AclOperation.READ, ResourceType.TOPIC, topic, ErrorCode.TOPIC_AUTHORIZATION_FAILED
            )
        await consumers.subscribe(consumers.get(group_id, name), topics)
        return Response(status_code=204)

    @router.get("/consumers/{group_id}/instances/{name}/subscription")
    async def subscription(group_id: str, name: str) -> dict[str, Any]:
        return {"topics": list(consumers.get(group_id, name).topics)}

    @router.delete("/consumers/{group_id}/instances/{name}/subscription", status_code=204)
    async def unsubscribe(group_id: str, name: str) -> Response:
        await consumers.unsubscribe(consumers.get(group_id, name))
        return Response(status_code=204)

    @router.get("/consumers/{group_id}/instances/{name}/assignments")
    async def assignments(group_id: str, name: str) -> dict[str, Any]:
        instance = consumers.get(group_id, name)
        return {"partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in instance.assignment]}

    @router.get("/consumers/{group_id}/instances/{name}/records")
    async def records(group_id: str, name: str, timeout: int = 1000, max_bytes: int = 1048576) -> Response:
        """Records from the assigned partitions (waits up to `timeout` ms for some)."""
        instance = consumers.get(group_id, name)
        if not instance.topics:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION, "the instance has no subscription")
        fetched = await consumers.fetch(instance, timeout, max_bytes)
        out = []
        for tp, record in fetched:
            out.extend(render_records(tp.topic, tp.partition, [record], instance.format))
        return JSONBytesResponse(out, media_type=JSON_V2 if instance.format == "json" else BINARY_V2)

    @router.post("/consumers/{group_id}/instances/{name}/offsets")
    async def commit(group_id: str, name: str, request: Request) -> dict[str, Any]:
        """Commit {"offsets": [{topic, partition, offset}]} (the last consumed offset, as the
        REST Proxy takes it), or every position when the body is empty."""
        instance = consumers.get(group_id, name)
        doc = await _optional_json(request)
        offsets = None
        if "offsets" in doc:
            offsets = {TopicPartition(o["topic"], o["partition"]): o["offset"] + 1 for o in _partitions(doc, "offsets")}
        errors = await consumers.commit(instance, offsets)
        failed = {tp: e for tp, e in errors.items() if e != ErrorCode.NONE}
        if failed:
            tp, error = next(iter(failed.items()))
            raise KafkaError(error, f"commit of {tp.topic}-{tp.partition} failed")
        return {"committed": [{"topic": tp.topic, "partition": tp.partition} for tp in errors]}

    @router.get("/consumers/{group_id}/instances/{name}/offsets")
    async def committed(group_id: str, name: str, request: Request) -> dict[str, Any]:
        instance = consumers.get(group_id, name)
        doc = await _optional_json(request)
        wanted = [TopicPartition(p["topic"], p["partition"]) for p in _partitions(doc, "partitions")] if doc else None
        offsets = await consumers.committed(instance, wanted)
        return {
            "offsets": [
                {"topic": tp.topic, "partition": tp.partition, "offset": offset, "metadata": ""}
                for tp, offset in sorted(offsets.items())
            ]
        }

    # Group administration ----------------------------------------------------------------

    @router.get("/groups")
    async def list_groups() -> list[dict[str, Any]]:
        result = await coordinator.list_groups()
        _check(result.error, "cannot list groups")
        return [
            {
                "group_id": g.group_id,
                "group_protocol": g.group_type,
                "protocol_type": g.protocol_type,
                "state": g.state.value,
            }
            for g in sorted(result.groups, key=lambda g: g.group_id)
        ]

    @router.get("/groups/{group_id}")
    async def describe_group(group_id: str) -> dict[str, Any]:
        """Members and their assignment; per partition the committed offset, the log end
        offset and the lag (kafka-consumer-groups.sh --describe)."""
        await locator.group_coordinator(group_id)
        (consumer_group,) = await coordinator.consumer_group_describe([group_id])
        if consumer_group.error is ErrorCode.NONE:
            summary = _consumer_group_summary(consumer_group)
        else:
            (described,) = await coordinator.describe_groups([group_id])
            _check(described.error, f"cannot describe group {group_id!r}")
            summary = _classic_group_summary(described)
        fetched = await coordinator.fetch_offsets(group_id)
        _check(fetched.error, f"cannot fetch the offsets of group {group_id!r}")
        if summary["state"] == GroupState.DEAD.value and not fetched.partitions:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        owner = {
            TopicPartition(a["topic"], a["partition"]): m["member_id"]
            for m in summary["members"]
            for a in m["assignment"]
        }
        rows = []
        partitions = sorted(set(fetched.partitions) | set(owner))
        ends = await _log_ends(broker_id, replica_manager, cache, partitions)
        for tp in partitions:
            po = fetched.partitions.get(tp)
            committed_offset = po.offset if po is not None and po.offset >= 0 else None
            end = ends[tp]
            rows.append(
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "committed_offset": committed_offset,
                    "log_end_offset": end,
                    "lag": None if committed_offset is None or end is None else max(0, end - committed_offset),
                    "member_id": owner.get(tp),
                }
            )
        return {"group_id": group_id, **summary, "offsets": rows}

    @router.post("/groups/{group_id}/reset-offsets")
    async def reset_offsets(group_id: str, request: Request) -> dict[str, Any]:
        """Move an inactive group's offsets: {"topic", "to": "earliest"|"latest"|"offset",
        "offset": n (with "offset"), "partitions": [p, ...] (default all)}."""
        doc = await _optional_json(request)
        topic = doc.get("topic")
        to = doc.get("to")
        if not isinstance(topic, str) or to not in ("earliest", "latest", "offset"):
            raise BadRequest(422, "need 'topic' and 'to' (earliest, latest or offset)", 2)
        if to == "offset" and not isinstance(doc.get("offset"), int):
            raise BadRequest(422, "'offset' must be an integer with to=offset", 2)
        partitions = doc.get("partitions") or list(range(cache.image.partition_count(topic)))
        await locator.group_coordinator(group_id)
        (consumer_group,) = await coordinator.consumer_group_describe([group_id])
        members: Sequence[object] = consumer_group.members
        if consumer_group.error is not ErrorCode.NONE:  # not a consumer-protocol group
            (described,) = await coordinator.describe_groups([group_id])
            members = described.members
        if members:
            raise KafkaError(
                ErrorCode.NON_EMPTY_GROUP,
                f"group {group_id!r} has {len(members)} active members; stop them before resetting offsets",
            )
        offsets = {}
        for p in partitions:
            leader = replica_manager.leader_partition(topic, p)
            if to == "earliest":
                target = leader.log_start_offset
            elif to == "latest":
                target = leader.high_watermark
            else:
                target = min(max(doc["offset"], leader.log_start_offset), leader.high_watermark)
            offsets[TopicPartition(topic, p)] = OffsetCommitData(target)
        errors = await coordinator.commit_offsets(group_id, "", -1, offsets)
        for tp, error in errors.items():
            _check(error, f"cannot reset {tp.topic}-{tp.partition}")
        return {
            "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": o.offset} for tp, o in offsets.items()]
        }

    @router.delete("/groups/{group_id}", status_code=204)
    async def delete_group(group_id: str) -> Response:
        await locator.group_coordinator(group_id)
        errors = await coordinator.delete_groups([group_id])
        _check(errors[group_id], f"cannot delete group {group_id!r}")
        return Response(status_code=204)

    return router


def _partitions_json(parts: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(parts)]


def _classic_group_summary(described: GroupDescription) -> dict[str, Any]:
    members = []
    for m in described.members:
        assigned: tuple[TopicPartition, ...] = ()
        if described.protocol_type == CONSUMER_PROTOCOL_TYPE and m.assignment:
            assigned = decode_assignment(m.assignment).partitions
        members.append(
            {
                "member_id": m.member_id,
                "member_type": CLASSIC_GROUP_TYPE,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "assignment": _partitions_json(assigned),
            }
        )
    return {
        "group_protocol": CLASSIC_GROUP_TYPE,
        "state": described.state,
        "protocol_type": described.protocol_type,
        "protocol": described.protocol,
        "members": members,
    }


def _consumer_group_summary(described: ConsumerGroupDescription) -> dict[str, Any]:
    """A KIP-848 group: epochs, the server assignor, and per member its protocol (a classic
    member of a group migrating between the protocols, or a consumer member), its epoch and
    its current assignment (what it consumes) next to the target the coordinator moves it to."""

    def named(m: ConsumerGroupMemberDescription, parts: tuple[TopicPartitions, ...]) -> list[dict[str, Any]]:
        return _partitions_json(
            TopicPartition(m.topic_names.get(tp.topic_id, str(tp.topic_id)), p) for tp in parts for p in tp.partitions
        )

    return {
        "group_protocol": CONSUMER_GROUP_TYPE,
        "state": described.state,
        "protocol_type": CONSUMER_PROTOCOL_TYPE,
        "protocol": described.assignor_name,
        "group_epoch": described.group_epoch,
        "assignment_epoch": described.assignment_epoch,
        "members": [
            {
                "member_id": m.member_id,
                "member_type": CLASSIC_GROUP_TYPE if m.uses_classic_protocol else CONSUMER_GROUP_TYPE,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_epoch": m.member_epoch,
                "assignment": named(m, m.assignment),
                "target_assignment": named(m, m.target_assignment),
            }
            for m in described.members
        ],
    }


# A leader that does not answer within this leaves its partitions' lag unknown.
LEADER_TIMEOUT_S = 5.0


async def _log_ends(
    broker_id: int, replica_manager: ReplicaManager, cache: MetadataCache, partitions: list[TopicPartition]
) -> dict[TopicPartition, int | None]:
    """Each partition's high watermark: read here for the partitions this broker leads, asked
    of the leader's HTTP API for the others (None where there is no answer)."""
    ends: dict[TopicPartition, int | None] = {}
    remote = []
    for tp in partitions:
        try:
            ends[tp] = replica_manager.leader_partition(tp.topic, tp.partition).high_watermark
        except KafkaError:
            remote.append(tp)
    if not remote:
        return ends
    image = cache.image
    urls = {b.broker_id: f"http://{b.http_host}:{b.http_port}" for b in image.brokers.values()}
    urls.pop(broker_id, None)

    async def ask(client: httpx.AsyncClient, tp: TopicPartition) -> int | None:
        state = image.partition_states.get(tp.topic, {}).get(tp.partition)
        url = urls.get(state.leader) if state is not None else None
        if url is None:
            return None
        try:
            answer = await client.get(f"{url}/topics/{tp.topic}/partitions/{tp.partition}/offsets")
        except httpx.HTTPError:
            return None
        return answer.json()["end_offset"] if answer.status_code == 200 else None

    async with httpx.AsyncClient(timeout=LEADER_TIMEOUT_S) as client:
        for tp, end in zip(remote, await asyncio.gather(*(ask(client, tp) for tp in remote))):
            ends[tp] = end
    return ends
