"""Authorization of requests: the one place every API asks whether the principal of the
request being handled may do an operation on a resource (Kafka's `authHelper`).

With `authorizer.class.name` unset (the default, as in Kafka) everything is allowed. With
Kafka's `kafka.security.authorizer.AclAuthorizer` (or KRaft's StandardAuthorizer name)
the broker keeps the ACLs of the metadata store in an `Authorizer` and decides by them;
`super.users` (`User:admin;User:ops`) and `allow.everyone.if.no.acl.found` as in Kafka.
Every denial is logged at INFO in Kafka's audit form, on the `loglake.authorizer` logger.

APIs whose whole request is about one resource (a group, a transactional id, the cluster)
are checked before their handler runs (`REQUEST_CHECKS`) and answered with the API's
top-level error; APIs about topics check each topic in their handler and answer
TOPIC_AUTHORIZATION_FAILED for it, as Kafka does.
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

from ingest_gateway.kafka_server import current_request

audit = logging.getLogger("loglake.authorizer")

AUTHORIZER_CLASSES = (
    "kafka.security.authorizer.AclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)

Body = dict[str, Any]
_OP, _RT = AclOperation, ResourceType


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
    """One resource a whole request is about, and the error if it is denied."""

    operation: AclOperation
    resource_type: ResourceType
    name_of: Callable[[Body], str | None]  # None: nothing to check for this request
    error: ErrorCode


def _group(body: Body) -> str:
    return body["group_id"]


def _transactional_id(body: Body) -> str | None:
    return body["transactional_id"]


def _cluster(body: Body) -> str:
    return CLUSTER_NAME


_CLUSTER_ACTION = (RequestCheck(_OP.CLUSTER_ACTION, _RT.CLUSTER, _cluster, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),)
_READ_GROUP = (RequestCheck(_OP.READ, _RT.GROUP, _group, ErrorCode.GROUP_AUTHORIZATION_FAILED),)
_WRITE_TXN = RequestCheck(
    _OP.WRITE, _RT.TRANSACTIONAL_ID, _transactional_id, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
)
_ALTER_CLUSTER = (RequestCheck(_OP.ALTER, _RT.CLUSTER, _cluster, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),)
_DESCRIBE_CLUSTER = (RequestCheck(_OP.DESCRIBE, _RT.CLUSTER, _cluster, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),)

REQUEST_CHECKS: dict[int, tuple[RequestCheck, ...]] = {
    ApiKey.JOIN_GROUP: _READ_GROUP,
    ApiKey.SYNC_GROUP: _READ_GROUP,
    ApiKey.HEARTBEAT: _READ_GROUP,
    ApiKey.LEAVE_GROUP: _READ_GROUP,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _READ_GROUP,
    ApiKey.OFFSET_DELETE: (RequestCheck(_OP.DELETE, _RT.GROUP, _group, ErrorCode.GROUP_AUTHORIZATION_FAILED),),
    ApiKey.END_TXN: (_WRITE_TXN,),
    ApiKey.ADD_OFFSETS_TO_TXN: (_WRITE_TXN, *_READ_GROUP),
    # Transactional producers need WRITE on their id (no id: nothing to check); idempotent
    # ones need nothing more than WRITE on the topics they produce to (KIP-679).
    ApiKey.INIT_PRODUCER_ID: (_WRITE_TXN,),
    ApiKey.LEADER_AND_ISR: _CLUSTER_ACTION,
    ApiKey.STOP_REPLICA: _CLUSTER_ACTION,
    ApiKey.UPDATE_METADATA: _CLUSTER_ACTION,
    ApiKey.WRITE_TXN_MARKERS: _CLUSTER_ACTION,
    ApiKey.ELECT_LEADERS: _ALTER_CLUSTER,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _ALTER_CLUSTER,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _DESCRIBE_CLUSTER,
    ApiKey.ALTER_REPLICA_LOG_DIRS: _ALTER_CLUSTER,
    ApiKey.DESCRIBE_LOG_DIRS: _DESCRIBE_CLUSTER,
}


class RequestAuthorization:
    """The broker's authorizer (None: authorization is off), asked for the current request."""

    def __init__(self, authorizer: Authorizer | None) -> None:
        self.authorizer = authorizer

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def allowed(self, operation: AclOperation, resource_type: ResourceType, name: str, log_denial: bool = True) -> bool:
        if self.authorizer is None:
            return True
        request = current_request()
        principal, host = str(request.principal), request.client_host
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

    def require(self, operation: AclOperation, resource_type: ResourceType, name: str, error: ErrorCode) -> None:
        if not self.allowed(operation, resource_type, name):
            raise KafkaError(error, f"not authorized to {operation.name} {RESOURCE_NAMES[resource_type]} {name}")

    def topic_allowed(self, operation: AclOperation, topic: str) -> bool:
        return self.allowed(operation, _RT.TOPIC, topic)

    def denied_topics(self, operation: AclOperation, topics: Iterable[str]) -> set[str]:
        """The topics among `topics` this request may not `operation` (each asked once)."""
        if self.authorizer is None:
            return set()
        return {t for t in set(topics) if not self.topic_allowed(operation, t)}

    def check_request(self, api_key: int, body: Body) -> ErrorCode | None:
        """The top-level error for a request about one denied resource, else None."""
        if self.authorizer is None:
            return None
        for check in REQUEST_CHECKS.get(api_key, ()):
            name = check.name_of(body)
            if name is not None and not self.allowed(check.operation, check.resource_type, name):
                return check.error
        return None

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """KIP-430's bit set: each operation of the resource type this principal may do."""
        return sum(
            1 << op
            for op in RESOURCE_OPERATIONS[resource_type]
            if self.allowed(op, resource_type, name, log_denial=False)
        )
