"""Authorization of requests: the one place every API asks whether the principal of a
request may do an operation on a resource (Kafka's `authHelper`). Each question names who
asks: the request's context (or, for the HTTP API, its connection).

With `authorizer.class.name` unset (the default, as in Kafka) everything is allowed. With
Kafka's `kafka.security.authorizer.AclAuthorizer` (or KRaft's StandardAuthorizer name)
the broker keeps the ACLs of the metadata store in an `Authorizer` and decides by them;
`super.users` (`User:admin;User:ops`) and `allow.everyone.if.no.acl.found` as in Kafka.
Every denial is logged at INFO in Kafka's audit form, on the `loglake.authorizer` logger.

APIs whose whole request is about one resource (a group, a transactional id, the cluster)
are checked before their handler runs (`REQUEST_CHECKS`) and answered with the API's
error, top-level or, for the APIs whose answers carry errors only in their entries
(`ERROR_RESPONSES`), in every entry; APIs about topics check each topic in their handler
and answer TOPIC_AUTHORIZATION_FAILED for it, as Kafka does. tests/clients/test_acl_matrix.py
checks every API against Kafka's answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey
from loglake.security.acls import (
    CLUSTER_NAME,
    RESOURCE_NAMES,
    RESOURCE_OPERATIONS,
    AclOperation,
    Authorizer,
    ResourceType,
)

from ingest_gateway.network.request_context import RequestContext, Requester

audit = logging.getLogger("loglake.authorizer")

AUTHORIZER_CLASSES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)

Body = dict[str, Any]
_OP, _RT = AclOperation, ResourceType

# The error a denial on a resource of each type answers.
AUTHORIZATION_ERRORS = {
    _RT.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    _RT.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    _RT.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    _RT.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


def authorizer_from_config(props: Mapping[str, str]) -> Authorizer | None:
    name = (props.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASSES:
        raise ValueError(
            f"authorizer.class.name={name}: loglake's authorizer answers to {' or '.join(AUTHORIZER_CLASSES)}"
        )
    super_users = [u.strip() for u in (props.get("super.users") or "").split(";") if u.strip()]
    allow = (props.get("allow.everyone.if.no.acl.found") or "false").strip().lower() == "true"
    return Authorizer(super_users, allow)


@dataclass(frozen=True)
class RequestCheck:
    """One resource a whole request is about, and the error if it is denied. Any of
    `operations` allows (only the last one's denial is logged, as Kafka tries the others
    quietly); `min_version`: the first version the check applies to."""

    operations: tuple[AclOperation, ...]
    resource_type: ResourceType
    name_of: Callable[[Body], str | None]  # None: nothing to check for this request
    error: ErrorCode
    min_version: int = 0

    def denied(self, auth: RequestAuthorization, context: RequestContext, body: Body) -> ErrorCode | None:
        name = self.name_of(body) if context.header.request_api_version >= self.min_version else None
        if name is None:
            return None
        *quiet, logged = self.operations
        if any(auth.allowed(context, op, self.resource_type, name, log_denial=False) for op in quiet):
            return None
        return None if auth.allowed(context, logged, self.resource_type, name) else self.error


@dataclass(frozen=True)
class IdempotentProducerCheck:
    """InitProducerId without a transactional id: IDEMPOTENT_WRITE on the cluster, or WRITE
    on any topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED, as Kafka checks it."""

    def denied(self, auth: RequestAuthorization, context: RequestContext, body: Body) -> ErrorCode | None:
        if body["transactional_id"] is not None:
            return None
        if auth.allowed(context, _OP.IDEMPOTENT_WRITE, _RT.CLUSTER, CLUSTER_NAME, log_denial=False):
            return None
        if auth.allowed_by_resource_type(context, _OP.WRITE, _RT.TOPIC):
            return None
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _group(body: Body) -> str:
    return body["group_id"]


def _transactional_id(body: Body) -> str | None:
    return body["transactional_id"]


def _cluster(body: Body) -> str:
    return CLUSTER_NAME


def _cluster_check(*operations: AclOperation, min_version: int = 0) -> RequestCheck:
    return RequestCheck(operations, _RT.CLUSTER, _cluster, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, min_version)


_CLUSTER_ACTION = (_cluster_check(_OP.CLUSTER_ACTION),)
_READ_GROUP = (RequestCheck((_OP.READ,), _RT.GROUP, _group, ErrorCode.GROUP_AUTHORIZATION_FAILED),)
_WRITE_TXN = RequestCheck(
    (_OP.WRITE,), _RT.TRANSACTIONAL_ID, _transactional_id, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
)
_ALTER_CLUSTER = (_cluster_check(_OP.ALTER),)
_DESCRIBE_CLUSTER = (_cluster_check(_OP.DESCRIBE),)

REQUEST_CHECKS: dict[int, tuple[RequestCheck | IdempotentProducerCheck, ...]] = {
    ApiKey.JOIN_GROUP: _READ_GROUP,
    ApiKey.SYNC_GROUP: _READ_GROUP,
    ApiKey.HEARTBEAT: _READ_GROUP,
    ApiKey.LEAVE_GROUP: _READ_GROUP,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _READ_GROUP,
    ApiKey.OFFSET_DELETE: (RequestCheck((_OP.DELETE,), _RT.GROUP, _group, ErrorCode.GROUP_AUTHORIZATION_FAILED),),
    ApiKey.END_TXN: (_WRITE_TXN,),
    ApiKey.ADD_OFFSETS_TO_TXN: (_WRITE_TXN, *_READ_GROUP),
    # Transactional producers need WRITE on their id, idempotent ones IDEMPOTENT_WRITE or
    # WRITE on some topic.
    ApiKey.INIT_PRODUCER_ID: (_WRITE_TXN, IdempotentProducerCheck()),
    # v4+ is the brokers' form (KIP-890); clients' versions are checked per transaction.
    ApiKey.ADD_PARTITIONS_TO_TXN: (_cluster_check(_OP.CLUSTER_ACTION, min_version=4),),
    ApiKey.LEADER_AND_ISR: _CLUSTER_ACTION,
    ApiKey.STOP_REPLICA: _CLUSTER_ACTION,
    ApiKey.UPDATE_METADATA: _CLUSTER_ACTION,
    ApiKey.WRITE_TXN_MARKERS: (_cluster_check(_OP.ALTER, _OP.CLUSTER_ACTION),),
    ApiKey.ELECT_LEADERS: _ALTER_CLUSTER,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _ALTER_CLUSTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _DESCRIBE_CLUSTER,
    ApiKey.ALTER_REPLICA_LOG_DIRS: _ALTER_CLUSTER,
    ApiKey.DESCRIBE_LOG_DIRS: _DESCRIBE_CLUSTER,
}


def _partition_errors(
    topics: Iterable[tuple[str, Iterable[int]]], error: ErrorCode, name: str, index: str
) -> list[Body]:
    return [{name: t, "partitions": [{index: p, "error_code": error} for p in ps]} for t, ps in topics]


# Denial answers of the APIs whose errors live in their entries (no top-level error code,
# or not in every version): each entry of the request gets the error, as Kafka's
# getErrorResponse gives it.
ERROR_RESPONSES: dict[int, Callable[[Body, ErrorCode], Body]] = {
    ApiKey.ALTER_REPLICA_LOG_DIRS: lambda body, error: {
        "results": _partition_errors(
            ((t["name"], t["partitions"]) for d in body["dirs"] for t in d["topics"]),
            error,
            "topic_name",
            "partition_index",
        )
    },
    ApiKey.WRITE_TXN_MARKERS: lambda body, error: {
        "markers": [
            {
                "producer_id": m["producer_id"],
                "topics": _partition_errors(
                    ((t["name"], t["partition_indexes"]) for t in m["topics"]), error, "name", "partition_index"
                ),
            }
            for m in body["markers"]
        ]
    },
    ApiKey.ELECT_LEADERS: lambda body, error: {
        "replica_election_results": [
            {
                "topic": t["topic"],
                "partition_result": [{"partition_id": p, "error_code": error} for p in t["partitions"]],
            }
            for t in body["topic_partitions"] or ()
        ]
    },
}


class RequestAuthorization:
    """The broker's authorizer (None: authorization is off), asked for a request's principal and host."""

    def __init__(self, authorizer: Authorizer | None) -> None:
        self.authorizer = authorizer

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def allowed(
        self, who: Requester, operation: AclOperation, resource_type: ResourceType, name: str, log_denial: bool = True
    ) -> bool:
        if self.authorizer is None:
            return True
        principal, host = str(who.principal), who.client_host
        if self.authorizer.authorize(principal, host, operation, resource_type, name):
            return True
        if log_denial:
            audit.info(
                "Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s",
                principal,
                operation.name,
                host,
                RESOURCE_NAMES.get(resource_type, resource_type.name),
                name,
            )
        return False

    def require(
        self, who: Requester, operation: AclOperation, resource_type: ResourceType, name: str, error: ErrorCode
    ) -> None:
        if not self.allowed(who, operation, resource_type, name):
            raise KafkaError(error, f"not authorized to {operation.name} {RESOURCE_NAMES[resource_type]} {name}")

    def topic_allowed(self, who: Requester, operation: AclOperation, topic: str) -> bool:
        return self.allowed(who, operation, _RT.TOPIC, topic)

    def denied_topics(self, who: Requester, operation: AclOperation, topics: Iterable[str]) -> set[str]:
        """The topics among `topics` `who` may not `operation` (each asked once)."""
        if self.authorizer is None:
            return set()
        return {t for t in set(topics) if not self.topic_allowed(who, operation, t)}

    def allowed_by_resource_type(self, who: Requester, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether `who` may do `operation` on some resource of the type."""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_by_resource_type(str(who.principal), who.client_host, operation, resource_type)

    def denied_response(self, context: RequestContext, body: Body) -> Body | None:
        """The answer to a request about one denied resource (`REQUEST_CHECKS`), else None."""
        if self.authorizer is None:
            return None
        api_key = context.header.request_api_key
        for check in REQUEST_CHECKS.get(api_key, ()):
            error = check.denied(self, context, body)
            if error is not None:
                entries = ERROR_RESPONSES.get(api_key)
                return {"error_code": error, "throttle_time_ms": 0, **(entries(body, error) if entries else {})}
        return None

    def authorized_operations(self, who: Requester, resource_type: ResourceType, name: str) -> int:
        """KIP-430's bit set: each operation of the resource type `who` may do."""
        return sum(
            1 << op
            for op in RESOURCE_OPERATIONS[resource_type]
            if self.allowed(who, op, resource_type, name, log_denial=False)
        )
