"""The ACL matrix: every Kafka API this broker serves that takes an ACL, refused without it
(Kafka's error code, where Kafka puts it: KafkaApis / AuthHelper) and allowed with it, as a
LITERAL and as a PREFIXED ACL; a DENY beats the ALLOW; a super user passes a DENY.

One row per (API, resource the row is about): the request, where its answer carries the
error, the ACL the row needs, the ACLs given beforehand (an API that checks several
resources has a row per resource), the error without it and the answers with it. Raw
requests over SASL/PLAIN (`alice`, and `admin`, the super user who sets up) on one broker
process; every case uses names of its own and clears the ACLs after itself.

Also: DescribeConfigs (and the HTTP API's broker configs) never show the values of
sensitive configs, and a topic id does not tell its name to a principal without DESCRIBE.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from client_helpers import add_users, make_broker, serve
from harness.process import BrokerProcess, free_port
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from loglake.record.batch import encode_batch
from loglake.security.acls import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from loglake.security.client import ClientSecurity
from loglake.spark.protocol_client import BrokerConnection

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
ALICE, ADMIN = "User:alice", "User:admin"
# Secrets in the broker's config: DescribeConfigs must never show them.
SECRETS = {
    "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required password="jaas-secret";',
    "ssl.key.password": "key-secret",
    "ssl.keystore.password": "keystore-secret",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": 'x required username="b" password="listener-secret";',
}

Body = dict
_OP, _RT, _E = AclOperation, ResourceType, ErrorCode
# The answer of a listing that leaves out what the principal may not see (Kafka's answer for
# Metadata of all topics, ListGroups, ListTransactions, the topics of DescribeTransactions,
# and the authorized operations of DescribeCluster): no error, the resource is not there.
HIDDEN = "hidden"
AUTHORIZATION_ERRORS = {
    _E.TOPIC_AUTHORIZATION_FAILED,
    _E.GROUP_AUTHORIZATION_FAILED,
    _E.CLUSTER_AUTHORIZATION_FAILED,
    _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


@dataclass
class Names:
    """One case's resources; all start with `prefix` (what the PREFIXED ACLs name)."""

    prefix: str
    topic_id: uuid.UUID | None = None
    producer: tuple[int, int] = (-1, -1)  # the id and epoch of the `txn` admin initialised

    @property
    def topic(self) -> str:
        return f"{self.prefix}topic"

    @property
    def group(self) -> str:
        return f"{self.prefix}group"

    @property
    def txn(self) -> str:
        return f"{self.prefix}txn"

    def of(self, resource_type: ResourceType) -> str:
        return {_RT.TOPIC: self.topic, _RT.GROUP: self.group, _RT.TRANSACTIONAL_ID: self.txn}.get(
            resource_type, CLUSTER_NAME
        )


Acl = tuple[ResourceType, AclOperation]


@dataclass(frozen=True)
class Row:
    name: str
    api: ApiKey
    version: int
    request: Callable[[Names], Body]
    error_of: Callable[[Body, Names], object]  # the error code (or HIDDEN) the answer gives
    acl: Acl  # what the row is about
    denied: object  # the error without `acl` (or HIDDEN)
    allowed: frozenset = frozenset({_E.NONE})  # the answers with it
    given: tuple[Acl, ...] = ()  # ACLs granted before the first request
    setup: tuple[str, ...] = ()  # made by the super user first: "topic", "group", "txn", "txn-topic"


# Request bodies and where their answers carry the error --------------------------------------


def _partition(key: str, topics: str = "topics", partitions: str = "partitions") -> Callable[[Body, Names], object]:
    return lambda r, n: r[topics][0][partitions][0][key]


_top = lambda r, n: r["error_code"]  # noqa: E731
_topics_error = lambda r, n: r["topics"][0]["error_code"]  # noqa: E731
_partition_error = _partition("error_code")
_fetch_error = _partition("error_code", "responses")


def _records(n: Names, transactional: bool = False) -> bytes:
    producer_id, epoch = n.producer if transactional else (-1, -1)
    return encode_batch(
        [(None, b"v", (), None)], int(time.time() * 1000), producer_id=producer_id, producer_epoch=epoch,
        base_sequence=0 if transactional else -1, transactional=transactional,
    )  # fmt: skip


def _produce(n: Names, transactional: bool = False) -> Body:
    return {
        "transactional_id": n.txn if transactional else None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": n.topic, "partition_data": [{"index": 0, "records": _records(n, transactional)}]}],
    }


def _fetch(replica_id: int) -> Callable[[Names], Body]:
    return lambda n: {
        "replica_id": replica_id,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "topics": [
            {"topic": n.topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}]}
        ],
    }


def _metadata(auto_create: bool) -> Callable[[Names], Body]:
    return lambda n: {"topics": [{"name": n.topic}], "allow_auto_topic_creation": auto_create}


def _create_topic(n: Names) -> Body:
    topic = {"name": n.topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    return {"topics": [topic], "timeout_ms": 10000, "validate_only": True}


def _configs(resource_type: int, incremental: bool = False) -> Callable[[Names], Body]:
    def body(n: Names) -> Body:
        name = n.topic if resource_type == 2 else ""
        value = {"name": "retention.ms", "value": "86400000"} | ({"config_operation": 0} if incremental else {})
        configs = [value] if resource_type == 2 else []
        return {
            "resources": [{"resource_type": resource_type, "resource_name": name, "configs": configs}],
            "validate_only": True,
        }

    return body


def _describe_configs(resource_type: int) -> Callable[[Names], Body]:
    names = {2: lambda n: n.topic, 4: lambda n: "", 8: lambda n: "0", 32: lambda n: n.group}
    return lambda n: {
        "resources": [
            {"resource_type": resource_type, "resource_name": names[resource_type](n), "configuration_keys": None}
        ]
    }


def _commit(n: Names) -> Body:
    partition = {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}
    return {"group_id": n.group, "member_id": "", "topics": [{"name": n.topic, "partitions": [partition]}]}


def _offset_fetch(n: Names) -> Body:
    return {"groups": [{"group_id": n.group, "topics": [{"name": n.topic, "partition_indexes": [0]}]}]}


def _offset_delete(n: Names) -> Body:
    return {"group_id": n.group, "topics": [{"name": n.topic, "partitions": [{"partition_index": 0}]}]}


def _join(n: Names) -> Body:
    protocol = {"name": "range", "metadata": b""}
    return {"group_id": n.group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "protocol_type": "consumer", "protocols": [protocol]}  # fmt: skip


def _txn_offset_commit(n: Names) -> Body:
    partition = {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}
    return {"transactional_id": n.txn, "group_id": n.group, "producer_id": n.producer[0],
            "producer_epoch": n.producer[1], "topics": [{"name": n.topic, "partitions": [partition]}]}  # fmt: skip


def _add_partitions(n: Names) -> Body:
    return {"v3_and_below_transactional_id": n.txn, "v3_and_below_producer_id": n.producer[0],
            "v3_and_below_producer_epoch": n.producer[1], "v3_and_below_topics": [{"name": n.topic, "partitions": [0]}]}  # fmt: skip


def _acl_filter(n: Names) -> Body:
    return {"resource_type_filter": 2, "resource_name_filter": n.topic, "pattern_type_filter": 3,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}  # fmt: skip


def _listed(found: Callable[[Body, Names], bool]) -> Callable[[Body, Names], object]:
    return lambda r, n: _E.NONE if found(r, n) else HIDDEN


_add_partitions_error = _partition("partition_error_code", "results_by_topic_v3_and_below", "results_by_partition")
_election_error = _partition("error_code", "replica_election_results", "partition_result")
_offset_fetch_group = lambda r, n: r["groups"][0]["error_code"]  # noqa: E731
_offset_fetch_partition = lambda r, n: r["groups"][0]["topics"][0]["partitions"][0]["error_code"]  # noqa: E731
_WRITE_TOPIC, _READ_TOPIC, _DESCRIBE_TOPIC = (_RT.TOPIC, _OP.WRITE), (_RT.TOPIC, _OP.READ), (_RT.TOPIC, _OP.DESCRIBE)
_READ_GROUP, _WRITE_TXN = (_RT.GROUP, _OP.READ), (_RT.TRANSACTIONAL_ID, _OP.WRITE)
_CLUSTER_ACTION = (_RT.CLUSTER, _OP.CLUSTER_ACTION)
_TOPIC_DENIED, _GROUP_DENIED = _E.TOPIC_AUTHORIZATION_FAILED, _E.GROUP_AUTHORIZATION_FAILED
_CLUSTER_DENIED, _TXN_DENIED = _E.CLUSTER_AUTHORIZATION_FAILED, _E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
# What a transactional request about a producer the coordinator does not know is answered.
_NO_SUCH_PRODUCER = frozenset({_E.INVALID_PRODUCER_ID_MAPPING, _E.INVALID_PRODUCER_EPOCH, _E.INVALID_TXN_STATE})

TABLE = [
    # Topics: records and offsets.
    Row("produce", ApiKey.PRODUCE, 9, _produce, _partition("error_code", "responses", "partition_responses"),
        _WRITE_TOPIC, _TOPIC_DENIED, setup=("topic",)),
    Row("produce-transactional", ApiKey.PRODUCE, 9, lambda n: _produce(n, True),
        _partition("error_code", "responses", "partition_responses"), _WRITE_TXN, _TXN_DENIED,
        given=(_WRITE_TOPIC,), setup=("txn-topic",)),
    Row("fetch", ApiKey.FETCH, 12, _fetch(-1), _fetch_error, _READ_TOPIC, _TOPIC_DENIED, setup=("topic",)),
    Row("fetch-follower", ApiKey.FETCH, 12, _fetch(1), _fetch_error, _CLUSTER_ACTION, _TOPIC_DENIED,
        allowed=frozenset({_E.NOT_LEADER_OR_FOLLOWER}), setup=("topic",)),
    Row("list-offsets", ApiKey.LIST_OFFSETS, 7,
        lambda n: {"replica_id": -1, "topics": [{"name": n.topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        _partition_error, _DESCRIBE_TOPIC, _TOPIC_DENIED, setup=("topic",)),
    Row("offset-for-leader-epoch", ApiKey.OFFSET_FOR_LEADER_EPOCH, 4,
        lambda n: {"replica_id": -1, "topics": [{"topic": n.topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}]},
        _partition_error, _DESCRIBE_TOPIC, _TOPIC_DENIED, setup=("topic",)),
    Row("offset-for-leader-epoch-replica", ApiKey.OFFSET_FOR_LEADER_EPOCH, 4,
        lambda n: {"replica_id": 1, "topics": [{"topic": n.topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}]},
        _partition_error, _CLUSTER_ACTION, _TOPIC_DENIED, setup=("topic",)),
    Row("delete-records", ApiKey.DELETE_RECORDS, 2,
        lambda n: {"topics": [{"name": n.topic, "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout_ms": 5000},
        _partition_error, (_RT.TOPIC, _OP.DELETE), _TOPIC_DENIED, setup=("topic",)),
    Row("describe-producers", ApiKey.DESCRIBE_PRODUCERS, 0,
        lambda n: {"topics": [{"name": n.topic, "partition_indexes": [0]}]}, _partition_error, _READ_TOPIC,
        _TOPIC_DENIED, setup=("topic",)),
    # Topics: metadata and administration.
    Row("metadata", ApiKey.METADATA, 12, _metadata(False), _topics_error, _DESCRIBE_TOPIC, _TOPIC_DENIED,
        setup=("topic",)),
    Row("metadata-all-topics", ApiKey.METADATA, 12, lambda n: {"topics": None},
        _listed(lambda r, n: n.topic in {t["name"] for t in r["topics"]}), _DESCRIBE_TOPIC, HIDDEN, setup=("topic",)),
    Row("metadata-auto-create-cluster", ApiKey.METADATA, 12, _metadata(True), _topics_error, (_RT.CLUSTER, _OP.CREATE),
        _TOPIC_DENIED, allowed=frozenset({_E.NONE, _E.LEADER_NOT_AVAILABLE}), given=(_DESCRIBE_TOPIC,)),
    Row("metadata-auto-create-topic", ApiKey.METADATA, 12, _metadata(True), _topics_error, (_RT.TOPIC, _OP.CREATE),
        _TOPIC_DENIED, allowed=frozenset({_E.NONE, _E.LEADER_NOT_AVAILABLE}), given=(_DESCRIBE_TOPIC,)),
    Row("create-topics-cluster", ApiKey.CREATE_TOPICS, 7, _create_topic, _topics_error, (_RT.CLUSTER, _OP.CREATE),
        _TOPIC_DENIED, given=((_RT.TOPIC, _OP.DESCRIBE_CONFIGS),)),
    Row("create-topics-topic", ApiKey.CREATE_TOPICS, 7, _create_topic, _topics_error, (_RT.TOPIC, _OP.CREATE),
        _TOPIC_DENIED, given=((_RT.TOPIC, _OP.DESCRIBE_CONFIGS),)),
    Row("create-topics-configs", ApiKey.CREATE_TOPICS, 7, _create_topic,
        lambda r, n: r["topics"][0]["topic_config_error_code"], (_RT.TOPIC, _OP.DESCRIBE_CONFIGS), _TOPIC_DENIED,
        given=((_RT.CLUSTER, _OP.CREATE),)),
    Row("delete-topics", ApiKey.DELETE_TOPICS, 6, lambda n: {"topics": [{"name": n.topic}], "timeout_ms": 5000},
        lambda r, n: r["responses"][0]["error_code"], (_RT.TOPIC, _OP.DELETE), _TOPIC_DENIED, setup=("topic",)),
    Row("create-partitions", ApiKey.CREATE_PARTITIONS, 3,
        lambda n: {"topics": [{"name": n.topic, "count": 2, "assignments": None}], "timeout_ms": 5000, "validate_only": True},
        lambda r, n: r["results"][0]["error_code"], (_RT.TOPIC, _OP.ALTER), _TOPIC_DENIED, setup=("topic",)),
    Row("describe-configs-topic", ApiKey.DESCRIBE_CONFIGS, 4, _describe_configs(2),
        lambda r, n: r["results"][0]["error_code"], (_RT.TOPIC, _OP.DESCRIBE_CONFIGS), _TOPIC_DENIED, setup=("topic",)),
    Row("describe-configs-broker", ApiKey.DESCRIBE_CONFIGS, 4, _describe_configs(4),
        lambda r, n: r["results"][0]["error_code"], (_RT.CLUSTER, _OP.DESCRIBE_CONFIGS), _CLUSTER_DENIED),
    Row("describe-configs-broker-logger", ApiKey.DESCRIBE_CONFIGS, 4, _describe_configs(8),
        lambda r, n: r["results"][0]["error_code"], (_RT.CLUSTER, _OP.DESCRIBE_CONFIGS), _CLUSTER_DENIED,
        allowed=frozenset({_E.INVALID_REQUEST})),  # loglake has no broker loggers to describe
    Row("describe-configs-group", ApiKey.DESCRIBE_CONFIGS, 4, _describe_configs(32),
        lambda r, n: r["results"][0]["error_code"], (_RT.GROUP, _OP.DESCRIBE_CONFIGS), _GROUP_DENIED,
        allowed=frozenset({_E.INVALID_REQUEST})),  # nor group configs
    Row("alter-configs-topic", ApiKey.ALTER_CONFIGS, 2, _configs(2), lambda r, n: r["responses"][0]["error_code"],
        (_RT.TOPIC, _OP.ALTER_CONFIGS), _TOPIC_DENIED, setup=("topic",)),
    Row("alter-configs-broker", ApiKey.ALTER_CONFIGS, 2, _configs(4), lambda r, n: r["responses"][0]["error_code"],
        (_RT.CLUSTER, _OP.ALTER_CONFIGS), _CLUSTER_DENIED),
    Row("incremental-alter-configs-topic", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, _configs(2, incremental=True),
        lambda r, n: r["responses"][0]["error_code"], (_RT.TOPIC, _OP.ALTER_CONFIGS), _TOPIC_DENIED, setup=("topic",)),
    Row("incremental-alter-configs-broker", ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, _configs(4, incremental=True),
        lambda r, n: r["responses"][0]["error_code"], (_RT.CLUSTER, _OP.ALTER_CONFIGS), _CLUSTER_DENIED),
    # Groups.
    Row("find-coordinator-group", ApiKey.FIND_COORDINATOR, 4, lambda n: {"key_type": 0, "coordinator_keys": [n.group]},
        lambda r, n: r["coordinators"][0]["error_code"], (_RT.GROUP, _OP.DESCRIBE), _GROUP_DENIED),
    Row("join-group", ApiKey.JOIN_GROUP, 9, _join, _top, _READ_GROUP, _GROUP_DENIED,
        allowed=frozenset({_E.MEMBER_ID_REQUIRED})),
    Row("sync-group", ApiKey.SYNC_GROUP, 5,
        lambda n: {"group_id": n.group, "generation_id": 1, "member_id": "m", "protocol_type": "consumer",
                   "protocol_name": "range"},
        _top, _READ_GROUP, _GROUP_DENIED, allowed=frozenset({_E.UNKNOWN_MEMBER_ID})),
    Row("heartbeat", ApiKey.HEARTBEAT, 4, lambda n: {"group_id": n.group, "generation_id": 1, "member_id": "m"},
        _top, _READ_GROUP, _GROUP_DENIED, allowed=frozenset({_E.UNKNOWN_MEMBER_ID})),
    Row("leave-group", ApiKey.LEAVE_GROUP, 5, lambda n: {"group_id": n.group, "members": [{"member_id": "m"}]},
        _top, _READ_GROUP, _GROUP_DENIED, allowed=frozenset({_E.NONE, _E.UNKNOWN_MEMBER_ID})),
    Row("offset-commit-group", ApiKey.OFFSET_COMMIT, 8, _commit, _partition_error, _READ_GROUP, _GROUP_DENIED,
        given=(_READ_TOPIC,), setup=("topic",)),
    Row("offset-commit-topic", ApiKey.OFFSET_COMMIT, 8, _commit, _partition_error, _READ_TOPIC, _TOPIC_DENIED,
        given=(_READ_GROUP,), setup=("topic",)),
    Row("offset-fetch-group", ApiKey.OFFSET_FETCH, 8, _offset_fetch, _offset_fetch_group, (_RT.GROUP, _OP.DESCRIBE),
        _GROUP_DENIED, given=(_DESCRIBE_TOPIC,), setup=("group",)),
    Row("offset-fetch-topic", ApiKey.OFFSET_FETCH, 8, _offset_fetch, _offset_fetch_partition, _DESCRIBE_TOPIC,
        _TOPIC_DENIED, given=((_RT.GROUP, _OP.DESCRIBE),), setup=("group",)),
    Row("describe-groups", ApiKey.DESCRIBE_GROUPS, 5, lambda n: {"groups": [n.group]},
        lambda r, n: r["groups"][0]["error_code"], (_RT.GROUP, _OP.DESCRIBE), _GROUP_DENIED, setup=("group",)),
    Row("list-groups", ApiKey.LIST_GROUPS, 4, lambda n: {},
        _listed(lambda r, n: n.group in {g["group_id"] for g in r["groups"]}), (_RT.GROUP, _OP.DESCRIBE), HIDDEN,
        setup=("group",)),
    Row("list-groups-cluster", ApiKey.LIST_GROUPS, 4, lambda n: {},
        _listed(lambda r, n: n.group in {g["group_id"] for g in r["groups"]}), (_RT.CLUSTER, _OP.DESCRIBE), HIDDEN,
        setup=("group",)),
    Row("delete-groups", ApiKey.DELETE_GROUPS, 2, lambda n: {"groups_names": [n.group]},
        lambda r, n: r["results"][0]["error_code"], (_RT.GROUP, _OP.DELETE), _GROUP_DENIED, setup=("group",)),
    Row("offset-delete-group", ApiKey.OFFSET_DELETE, 0, _offset_delete, _top, (_RT.GROUP, _OP.DELETE), _GROUP_DENIED,
        given=(_READ_TOPIC,), setup=("group",)),
    Row("offset-delete-topic", ApiKey.OFFSET_DELETE, 0, _offset_delete, _partition_error, _READ_TOPIC, _TOPIC_DENIED,
        given=((_RT.GROUP, _OP.DELETE),), setup=("group",)),
    Row("consumer-group-heartbeat", ApiKey.CONSUMER_GROUP_HEARTBEAT, 0,
        lambda n: {"group_id": n.group, "member_id": uuid.uuid4().hex, "member_epoch": 0, "rebalance_timeout_ms": 10000,
                   "subscribed_topic_names": [n.topic], "topic_partitions": []},
        _top, _READ_GROUP, _GROUP_DENIED),
    Row("consumer-group-describe", ApiKey.CONSUMER_GROUP_DESCRIBE, 0, lambda n: {"group_ids": [n.group]},
        lambda r, n: r["groups"][0]["error_code"], (_RT.GROUP, _OP.DESCRIBE), _GROUP_DENIED,
        allowed=frozenset({_E.GROUP_ID_NOT_FOUND})),
    # Producers and transactions.
    Row("find-coordinator-transaction", ApiKey.FIND_COORDINATOR, 4,
        lambda n: {"key_type": 1, "coordinator_keys": [n.txn]}, lambda r, n: r["coordinators"][0]["error_code"],
        (_RT.TRANSACTIONAL_ID, _OP.DESCRIBE), _TXN_DENIED),
    Row("init-producer-id-transactional", ApiKey.INIT_PRODUCER_ID, 4,
        lambda n: {"transactional_id": n.txn, "transaction_timeout_ms": 60000}, _top, _WRITE_TXN, _TXN_DENIED),
    Row("init-producer-id-idempotent", ApiKey.INIT_PRODUCER_ID, 4,
        lambda n: {"transactional_id": None, "transaction_timeout_ms": 60000}, _top,
        (_RT.CLUSTER, _OP.IDEMPOTENT_WRITE), _CLUSTER_DENIED),
    Row("init-producer-id-idempotent-any-topic", ApiKey.INIT_PRODUCER_ID, 4,
        lambda n: {"transactional_id": None, "transaction_timeout_ms": 60000}, _top, _WRITE_TOPIC, _CLUSTER_DENIED),
    Row("add-partitions-to-txn-transaction", ApiKey.ADD_PARTITIONS_TO_TXN, 3, _add_partitions, _add_partitions_error,
        _WRITE_TXN, _TXN_DENIED, allowed=_NO_SUCH_PRODUCER, given=(_WRITE_TOPIC,), setup=("topic",)),
    Row("add-partitions-to-txn-topic", ApiKey.ADD_PARTITIONS_TO_TXN, 3, _add_partitions, _add_partitions_error,
        _WRITE_TOPIC, _TOPIC_DENIED, allowed=_NO_SUCH_PRODUCER, given=(_WRITE_TXN,), setup=("topic",)),
    Row("add-partitions-to-txn-brokers", ApiKey.ADD_PARTITIONS_TO_TXN, 4,
        lambda n: {"transactions": [{"transactional_id": n.txn, "producer_id": 1, "producer_epoch": 0,
                                     "verify_only": True, "topics": [{"name": n.topic, "partitions": [0]}]}]},
        _top, _CLUSTER_ACTION, _CLUSTER_DENIED, setup=("topic",)),
    Row("add-offsets-to-txn-transaction", ApiKey.ADD_OFFSETS_TO_TXN, 3,
        lambda n: {"transactional_id": n.txn, "producer_id": 1, "producer_epoch": 0, "group_id": n.group},
        _top, _WRITE_TXN, _TXN_DENIED, allowed=_NO_SUCH_PRODUCER, given=(_READ_GROUP,)),
    Row("add-offsets-to-txn-group", ApiKey.ADD_OFFSETS_TO_TXN, 3,
        lambda n: {"transactional_id": n.txn, "producer_id": 1, "producer_epoch": 0, "group_id": n.group},
        _top, _READ_GROUP, _GROUP_DENIED, allowed=_NO_SUCH_PRODUCER, given=(_WRITE_TXN,)),
    Row("txn-offset-commit-transaction", ApiKey.TXN_OFFSET_COMMIT, 3, _txn_offset_commit, _partition_error,
        _WRITE_TXN, _TXN_DENIED, allowed=_NO_SUCH_PRODUCER, given=(_READ_GROUP, _READ_TOPIC), setup=("txn-topic",)),
    Row("txn-offset-commit-group", ApiKey.TXN_OFFSET_COMMIT, 3, _txn_offset_commit, _partition_error,
        _READ_GROUP, _GROUP_DENIED, allowed=_NO_SUCH_PRODUCER, given=(_WRITE_TXN, _READ_TOPIC), setup=("txn-topic",)),
    Row("txn-offset-commit-topic", ApiKey.TXN_OFFSET_COMMIT, 3, _txn_offset_commit, _partition_error,
        _READ_TOPIC, _TOPIC_DENIED, allowed=_NO_SUCH_PRODUCER, given=(_WRITE_TXN, _READ_GROUP), setup=("txn-topic",)),
    Row("end-txn", ApiKey.END_TXN, 3,
        lambda n: {"transactional_id": n.txn, "producer_id": 1, "producer_epoch": 0, "committed": False},
        _top, _WRITE_TXN, _TXN_DENIED, allowed=_NO_SUCH_PRODUCER),
    Row("write-txn-markers-cluster-action", ApiKey.WRITE_TXN_MARKERS, 1,
        lambda n: {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": False,
                                "topics": [{"name": n.topic, "partition_indexes": [0]}], "coordinator_epoch": 0}]},
        lambda r, n: r["markers"][0]["topics"][0]["partitions"][0]["error_code"], _CLUSTER_ACTION, _CLUSTER_DENIED,
        allowed=frozenset({_E.UNKNOWN_TOPIC_OR_PARTITION, _E.NOT_LEADER_OR_FOLLOWER})),
    Row("write-txn-markers-alter", ApiKey.WRITE_TXN_MARKERS, 1,
        lambda n: {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": False,
                                "topics": [{"name": n.topic, "partition_indexes": [0]}], "coordinator_epoch": 0}]},
        lambda r, n: r["markers"][0]["topics"][0]["partitions"][0]["error_code"], (_RT.CLUSTER, _OP.ALTER),
        _CLUSTER_DENIED, allowed=frozenset({_E.UNKNOWN_TOPIC_OR_PARTITION, _E.NOT_LEADER_OR_FOLLOWER})),
    Row("describe-transactions", ApiKey.DESCRIBE_TRANSACTIONS, 0, lambda n: {"transactional_ids": [n.txn]},
        lambda r, n: r["transaction_states"][0]["error_code"], (_RT.TRANSACTIONAL_ID, _OP.DESCRIBE), _TXN_DENIED,
        setup=("txn",)),
    Row("describe-transactions-topics", ApiKey.DESCRIBE_TRANSACTIONS, 0, lambda n: {"transactional_ids": [n.txn]},
        _listed(lambda r, n: n.topic in {t["topic"] for t in r["transaction_states"][0]["topics"]}),
        _DESCRIBE_TOPIC, HIDDEN, given=((_RT.TRANSACTIONAL_ID, _OP.DESCRIBE),), setup=("txn-topic",)),
    Row("list-transactions", ApiKey.LIST_TRANSACTIONS, 1, lambda n: {"state_filters": [], "producer_id_filters": []},
        _listed(lambda r, n: n.txn in {t["transactional_id"] for t in r["transaction_states"]}),
        (_RT.TRANSACTIONAL_ID, _OP.DESCRIBE), HIDDEN, setup=("txn",)),
    # The cluster.
    Row("describe-cluster", ApiKey.DESCRIBE_CLUSTER, 1, lambda n: {"include_cluster_authorized_operations": True},
        _listed(lambda r, n: r["cluster_authorized_operations"] & (1 << _OP.DESCRIBE)), (_RT.CLUSTER, _OP.DESCRIBE),
        HIDDEN),
    Row("describe-acls", ApiKey.DESCRIBE_ACLS, 3, _acl_filter, _top, (_RT.CLUSTER, _OP.DESCRIBE), _CLUSTER_DENIED),
    Row("create-acls", ApiKey.CREATE_ACLS, 3,
        lambda n: {"creations": [{"resource_type": 2, "resource_name": n.topic, "resource_pattern_type": 3,
                                  "principal": "User:nobody", "host": "*", "operation": 3, "permission_type": 3}]},
        lambda r, n: r["results"][0]["error_code"], (_RT.CLUSTER, _OP.ALTER), _CLUSTER_DENIED),
    Row("delete-acls", ApiKey.DELETE_ACLS, 3, lambda n: {"filters": [_acl_filter(n)]},
        lambda r, n: r["filter_results"][0]["error_code"], (_RT.CLUSTER, _OP.ALTER), _CLUSTER_DENIED),
    Row("elect-leaders", ApiKey.ELECT_LEADERS, 2,
        lambda n: {"election_type": 0, "topic_partitions": [{"topic": n.topic, "partitions": [0]}], "timeout_ms": 5000},
        _top, (_RT.CLUSTER, _OP.ALTER), _CLUSTER_DENIED, setup=("topic",)),
    Row("elect-leaders-v0", ApiKey.ELECT_LEADERS, 0,  # no top-level error: each partition carries it
        lambda n: {"topic_partitions": [{"topic": n.topic, "partitions": [0]}], "timeout_ms": 5000},
        _election_error, (_RT.CLUSTER, _OP.ALTER), _CLUSTER_DENIED,
        allowed=frozenset({_E.NONE, _E.ELECTION_NOT_NEEDED}), setup=("topic",)),
    Row("alter-partition-reassignments", ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0,
        lambda n: {"topics": [{"name": n.topic, "partitions": [{"partition_index": 0, "replicas": None}]}]},
        _top, (_RT.CLUSTER, _OP.ALTER), _CLUSTER_DENIED, setup=("topic",)),
    Row("list-partition-reassignments", ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, lambda n: {"topics": None},
        _top, (_RT.CLUSTER, _OP.DESCRIBE), _CLUSTER_DENIED),
    Row("describe-log-dirs", ApiKey.DESCRIBE_LOG_DIRS, 4, lambda n: {"topics": None}, _top,
        (_RT.CLUSTER, _OP.DESCRIBE), _CLUSTER_DENIED),
    Row("alter-replica-log-dirs", ApiKey.ALTER_REPLICA_LOG_DIRS, 2,  # no top-level error: each partition carries it
        lambda n: {"dirs": [{"path": "/no/such/dir", "topics": [{"name": n.topic, "partitions": [0]}]}]},
        _partition("error_code", "results"), (_RT.CLUSTER, _OP.ALTER), _CLUSTER_DENIED,
        allowed=frozenset({_E.LOG_DIR_NOT_FOUND}), setup=("topic",)),
    # Client entities: SCRAM credentials and quotas.
    Row("describe-user-scram-credentials", ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, lambda n: {"users": None},
        _top, (_RT.CLUSTER, _OP.DESCRIBE), _CLUSTER_DENIED),
    Row("alter-user-scram-credentials", ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
        lambda n: {"deletions": [{"name": f"{n.prefix}user", "mechanism": 1}], "upsertions": []},
        lambda r, n: r["results"][0]["error_code"], (_RT.CLUSTER, _OP.ALTER), _CLUSTER_DENIED,
        allowed=frozenset({_E.RESOURCE_NOT_FOUND})),  # allowed, but there is no such credential
    Row("describe-client-quotas", ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, lambda n: {"components": [], "strict": False},
        _top, (_RT.CLUSTER, _OP.DESCRIBE_CONFIGS), _CLUSTER_DENIED),
    Row("alter-client-quotas", ApiKey.ALTER_CLIENT_QUOTAS, 1,
        lambda n: {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": f"{n.prefix}client"}],
                                "ops": [{"key": "producer_byte_rate", "value": 1e6, "remove": False}]}],
                   "validate_only": True},
        lambda r, n: r["entries"][0]["error_code"], (_RT.CLUSTER, _OP.ALTER_CONFIGS), _CLUSTER_DENIED),
]  # fmt: skip
SCENARIOS = ("literal", "prefixed", "deny", "super-user")


# The broker and the principals' connections ------------------------------------------------


@pytest.fixture(scope="module")
def sasl_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, sasl_port: int) -> Iterator[BrokerProcess]:
    process = make_broker(tmp_path_factory.mktemp("acl-matrix") / "logs")
    process.overrides["listeners"] += f",SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
    process.start()  # the users first, then a restart with the authorizer (as kafka-configs.sh --zookeeper)
    add_users(process, USERS)
    assert process.stop() == 0
    process.overrides.update(
        {
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": ADMIN,
            "transaction.state.log.num.partitions": "1",
            "http.authentication.method": "BASIC",
            # The SASL listener is the brokers' own, the only one WriteTxnMarkers is served on
            # (a single broker never dials it: the JAAS lines below are only read).
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            **SECRETS,
        }
    )
    yield from serve(process)


def connection(sasl_port: int, user: str) -> BrokerConnection:
    return BrokerConnection(
        "127.0.0.1", sasl_port, "acl-matrix", 15.0, ClientSecurity(None, "PLAIN", user, USERS[user])
    )


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess, sasl_port: int) -> Iterator[BrokerConnection]:
    conn = connection(sasl_port, "admin")
    # The transaction coordinator's topic, once: FindCoordinator creates it.
    deadline = time.monotonic() + 30
    while conn.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["warm-up"]})["coordinators"][0][
        "error_code"
    ]:
        assert time.monotonic() < deadline, "no transaction coordinator"
        time.sleep(0.05)
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def alice(broker: BrokerProcess, sasl_port: int) -> Iterator[BrokerConnection]:
    conn = connection(sasl_port, "alice")
    yield conn
    conn.close()


def change_acls(admin: BrokerConnection, api: ApiKey, body: Body, results: str) -> None:
    answer = admin.request(api, 3, body)
    assert all(r["error_code"] == 0 for r in answer[results]), answer


def grant(admin: BrokerConnection, acl: Acl, names: Names, principal: str, permission: AclPermissionType,
          pattern: PatternType = PatternType.LITERAL) -> None:  # fmt: skip
    resource_type, operation = acl
    name = names.prefix if pattern == PatternType.PREFIXED and resource_type != _RT.CLUSTER else names.of(resource_type)
    creation = {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
                "principal": principal, "host": "*", "operation": operation, "permission_type": permission}  # fmt: skip
    change_acls(admin, ApiKey.CREATE_ACLS, {"creations": [creation]}, "results")


def clear_acls(admin: BrokerConnection) -> None:
    everything = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}  # fmt: skip
    change_acls(admin, ApiKey.DELETE_ACLS, {"filters": [everything]}, "filter_results")


def prepare(admin: BrokerConnection, names: Names, needs: tuple[str, ...]) -> None:
    """What a row's requests are about, made by the super user."""
    if {"topic", "group", "txn-topic"} & set(needs):
        created = admin.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": names.topic, "num_partitions": 1,
                                                                      "replication_factor": 1}], "timeout_ms": 10000})  # fmt: skip
        assert created["topics"][0]["error_code"] == 0, created
        names.topic_id = created["topics"][0]["topic_id"]
        deadline = time.monotonic() + 15
        while True:  # until the partition has its leader
            (topic,) = admin.request(ApiKey.METADATA, 12, {"topics": [{"name": names.topic}]})["topics"]
            if topic["error_code"] == 0 and topic["partitions"] and topic["partitions"][0]["leader_id"] >= 0:
                break
            assert time.monotonic() < deadline, topic
            time.sleep(0.02)
    if "group" in needs:
        committed = admin.request(ApiKey.OFFSET_COMMIT, 8, _commit(names))
        assert _partition_error(committed, names) == 0, committed
    if {"txn", "txn-topic"} & set(needs):
        init = admin.request(
            ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": names.txn, "transaction_timeout_ms": 60000}
        )
        assert init["error_code"] == 0, init
        names.producer = (init["producer_id"], init["producer_epoch"])
    if "txn-topic" in needs:
        added = admin.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, _add_partitions(names))
        assert _add_partitions_error(added, names) == 0, added


def outcome(conn: BrokerConnection, row: Row, names: Names) -> object:
    answer = row.error_of(conn.request(row.api, row.version, row.request(names)), names)
    return answer if answer == HIDDEN else _E(answer)


@pytest.fixture
def names(admin: BrokerConnection) -> Iterator[Names]:
    yield Names(f"m{uuid.uuid4().hex[:10]}-")
    clear_acls(admin)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("row", TABLE, ids=[row.name for row in TABLE])
def test_acl_matrix(admin: BrokerConnection, alice: BrokerConnection, names: Names, row: Row, scenario: str) -> None:
    prepare(admin, names, row.setup)
    for acl in row.given:
        grant(admin, acl, names, ALICE, AclPermissionType.ALLOW)
    if scenario == "super-user":
        # super.users are allowed everything, a DENY naming them included.
        grant(admin, row.acl, names, ADMIN, AclPermissionType.DENY)
        assert outcome(admin, row, names) in row.allowed
        return
    assert outcome(alice, row, names) == row.denied
    if scenario == "deny":
        grant(admin, row.acl, names, ALICE, AclPermissionType.ALLOW)
        grant(admin, row.acl, names, ALICE, AclPermissionType.DENY, PatternType.PREFIXED)
        assert outcome(alice, row, names) == row.denied
        return
    pattern = PatternType.PREFIXED if scenario == "prefixed" else PatternType.LITERAL
    grant(admin, row.acl, names, ALICE, AclPermissionType.ALLOW, pattern)
    allowed = outcome(alice, row, names)
    assert allowed in row.allowed, allowed
    assert allowed not in AUTHORIZATION_ERRORS


def test_the_table_covers_every_api_that_takes_an_acl(alice: BrokerConnection) -> None:
    served = {k["api_key"] for k in alice.request(ApiKey.API_VERSIONS, 3, {})["api_keys"]}
    without_acls = {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
    assert served - without_acls == {row.api for row in TABLE}


def test_topic_ids_do_not_tell_names_without_describe(admin, alice, names: Names) -> None:
    prepare(admin, names, ("topic",))
    (by_id,) = alice.request(ApiKey.METADATA, 12, {"topics": [{"topic_id": names.topic_id, "name": None}]})["topics"]
    assert (by_id["error_code"], by_id["name"], by_id["topic_id"]) == (_TOPIC_DENIED, None, names.topic_id)
    deleted = alice.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"topic_id": names.topic_id}], "timeout_ms": 5000})
    assert (deleted["responses"][0]["error_code"], deleted["responses"][0]["name"]) == (_TOPIC_DENIED, None)


def test_transactional_records_need_a_transactional_id_even_for_a_super_user(admin, names: Names) -> None:
    prepare(admin, names, ("txn-topic",))
    body = _produce(names, transactional=True) | {"transactional_id": None}
    (answer,) = admin.request(ApiKey.PRODUCE, 9, body)["responses"]
    assert answer["partition_responses"][0]["error_code"] == _TXN_DENIED


def test_describe_configs_never_shows_sensitive_values(broker, admin, names: Names) -> None:
    prepare(admin, names, ("topic",))
    dynamic = {"name": "listener.name.internal.ssl.key.password", "config_operation": 0, "value": "dynamic-secret"}
    for entity in ("", "0"):  # the cluster-wide default and broker 0's own
        altered = admin.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": 4, "resource_name": entity, "configs": [dynamic]}], "validate_only": False})  # fmt: skip
        assert altered["responses"][0]["error_code"] == 0, altered
    secrets = [*SECRETS.values(), "dynamic-secret"]
    resources = [(4, "0"), (4, ""), (2, names.topic)]
    described = admin.request(ApiKey.DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": t, "resource_name": n, "configuration_keys": None} for t, n in resources],
        "include_synonyms": True})["results"]  # fmt: skip
    assert [r["error_code"] for r in described] == [0, 0, 0]
    shown = repr(described)
    assert not [s for s in secrets if s in shown], "a secret in DescribeConfigs"
    broker_configs = {c["name"]: c for c in described[0]["configs"]}
    for name in [*SECRETS, dynamic["name"]]:
        assert broker_configs[name]["is_sensitive"] and broker_configs[name]["value"] is None, broker_configs[name]
    assert broker_configs["sasl.enabled.mechanisms"]["value"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"  # others shown
    # The HTTP API's view of the stored broker configs hides them too.
    stored = httpx.get(f"{broker.http_url}/brokers/0/configs", auth=("admin", USERS["admin"])).json()["configs"]
    assert dynamic["name"] in stored and stored[dynamic["name"]] is None


def test_transactions_answer_refused_topics_per_partition(admin, alice, names: Names) -> None:
    """As Kafka: AddPartitionsToTxn refuses the denied, internal or unknown partitions and
    answers OPERATION_NOT_ATTEMPTED for the others; TxnOffsetCommit refuses the denied topics
    and commits the others."""
    prepare(admin, names, ("txn-topic",))
    other = f"{names.prefix}other"
    created = admin.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": other, "num_partitions": 1,
                                                                  "replication_factor": 1}], "timeout_ms": 10000})  # fmt: skip
    assert created["topics"][0]["error_code"] == 0, created
    for acl in (_WRITE_TXN, _WRITE_TOPIC, _READ_TOPIC, _READ_GROUP):
        grant(admin, acl, names, ALICE, AclPermissionType.ALLOW)

    def add(conn: BrokerConnection, *topics: str) -> dict[str, int]:
        body = _add_partitions(names) | {"v3_and_below_topics": [{"name": t, "partitions": [0]} for t in topics]}
        results = conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, body)["results_by_topic_v3_and_below"]
        return {r["name"]: r["results_by_partition"][0]["partition_error_code"] for r in results}

    assert add(alice, names.topic, other) == {names.topic: _E.OPERATION_NOT_ATTEMPTED, other: _TOPIC_DENIED}
    assert add(admin, names.topic, "__consumer_offsets") == {
        names.topic: _E.OPERATION_NOT_ATTEMPTED, "__consumer_offsets": _TOPIC_DENIED}  # fmt: skip
    assert add(admin, names.topic, f"{names.prefix}missing") == {
        names.topic: _E.OPERATION_NOT_ATTEMPTED, f"{names.prefix}missing": _E.UNKNOWN_TOPIC_OR_PARTITION}  # fmt: skip
    assert add(alice, names.topic) == {names.topic: 0}

    deadline = time.monotonic() + 30  # the group coordinator's topic: FindCoordinator creates it
    while admin.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [names.group]})["coordinators"][
        0
    ]["error_code"]:
        assert time.monotonic() < deadline, "no group coordinator"
        time.sleep(0.05)
    offsets = alice.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": names.txn, "producer_id": names.producer[0],
                                                         "producer_epoch": names.producer[1], "group_id": names.group})  # fmt: skip
    assert offsets["error_code"] == 0, offsets
    partition = {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}
    body = _txn_offset_commit(names) | {
        "topics": [{"name": t, "partitions": [partition]} for t in (names.topic, other)]
    }
    answer = alice.request(ApiKey.TXN_OFFSET_COMMIT, 3, body)["topics"]
    assert {t["name"]: t["partitions"][0]["error_code"] for t in answer} == {names.topic: 0, other: _TOPIC_DENIED}
