"""CreateAcls, DescribeAcls and DeleteAcls (what kafka-acls.sh and `loglake acls` send).

ACLs live in the metadata store (ZooKeeper: /kafka-acl, /kafka-acl-extended, Kafka's
format), so any broker changes them; every broker's authorizer follows the store's change
notifications, and the broker that made a change applies it at once. Without an
authorizer the APIs answer SECURITY_DISABLED, as Kafka's do. Creating and deleting need
ALTER on the cluster, describing DESCRIBE.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey, RequestHeader
from loglake.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    validate_binding,
)

if TYPE_CHECKING:
    from loglake.coordination.store import MetadataStore

    from ingest_gateway.apis.authorization import RequestAuthorization
    from ingest_gateway.apis.request_router import RequestRouter

Body = dict[str, Any]


def _enum(kind: type, value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN


def binding_of(c: Body) -> AclBinding:
    return AclBinding(
        ResourcePattern(
            _enum(ResourceType, c["resource_type"]),
            c["resource_name"],
            _enum(PatternType, c.get("resource_pattern_type", PatternType.LITERAL)),
        ),
        AccessControlEntry(
            c["principal"],
            c["host"],
            _enum(AclOperation, c["operation"]),
            _enum(AclPermissionType, c["permission_type"]),
        ),
    )


def filter_of(f: Body) -> AclBindingFilter:
    return AclBindingFilter(
        _enum(ResourceType, f["resource_type_filter"]),
        f["resource_name_filter"],
        _enum(PatternType, f.get("pattern_type_filter", PatternType.LITERAL)),
        f["principal_filter"],
        f["host_filter"],
        _enum(AclOperation, f["operation"]),
        _enum(AclPermissionType, f["permission_type"]),
    )


def _described(binding: AclBinding) -> Body:
    p, e = binding.pattern, binding.entry
    return {
        "resource_type": int(p.resource_type),
        "resource_name": p.name,
        "pattern_type": int(p.pattern_type),
        "principal": e.principal,
        "host": e.host,
        "operation": int(e.operation),
        "permission_type": int(e.permission),
    }


class AclApis:
    def __init__(self, authorization: RequestAuthorization, store: MetadataStore) -> None:
        self._auth = authorization
        self._store = store

    def register(self, router: RequestRouter) -> None:
        router.register_all(
            {
                ApiKey.CREATE_ACLS: self.create_acls,
                ApiKey.DESCRIBE_ACLS: self.describe_acls,
                ApiKey.DELETE_ACLS: self.delete_acls,
            }
        )

    def _check(self, operation: AclOperation) -> None:
        auth = self._auth
        if not auth.enabled:
            raise KafkaError(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
        auth.require(operation, ResourceType.CLUSTER, CLUSTER_NAME, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

    async def _reload(self) -> None:
        """Apply the store's ACLs here now (other brokers follow its notifications)."""
        authorizer = self._auth.authorizer
        assert authorizer is not None
        authorizer.replace_acls(await asyncio.to_thread(self._store.acls))

    def bindings(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        authorizer = self._auth.authorizer
        assert authorizer is not None
        return [b for b in authorizer.bindings() if acl_filter.matches(b)]

    async def change(self, additions: list[AclBinding], removals: list[AclBinding]) -> None:
        """Add and remove ACLs, by resource pattern, in the store."""
        for pattern in {b.pattern for b in additions} | {b.pattern for b in removals}:
            added = {b.entry for b in additions if b.pattern == pattern}
            removed = {b.entry for b in removals if b.pattern == pattern}
            await asyncio.to_thread(
                self._store.update_acls,
                pattern,
                lambda entries, added=added, removed=removed: entries - removed | added,
            )
        await self._reload()

    async def create_acls(self, header: RequestHeader, body: Body) -> Body:
        try:
            self._check(AclOperation.ALTER)
        except KafkaError as exc:
            return {
                "throttle_time_ms": 0,
                "results": [{"error_code": exc.code, "error_message": exc.message}] * len(body["creations"]),
            }
        results, valid = [], []
        for creation in body["creations"]:
            binding = binding_of(creation)
            problem = validate_binding(binding)
            results.append({"error_code": ErrorCode.INVALID_REQUEST if problem else 0, "error_message": problem})
            if problem is None:
                valid.append(binding)
        if valid:
            await self.change(valid, [])
        return {"throttle_time_ms": 0, "results": results}

    async def describe_acls(self, header: RequestHeader, body: Body) -> Body:
        try:
            self._check(AclOperation.DESCRIBE)
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message, "resources": []}
        by_pattern: dict[ResourcePattern, list[Body]] = {}
        for binding in self.bindings(filter_of(body)):
            d = _described(binding)
            by_pattern.setdefault(binding.pattern, []).append(
                {k: d[k] for k in ("principal", "host", "operation", "permission_type")}
            )
        resources = [
            {
                "resource_type": int(p.resource_type),
                "resource_name": p.name,
                "pattern_type": int(p.pattern_type),
                "acls": acls,
            }
            for p, acls in by_pattern.items()
        ]
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": resources}

    async def delete_acls(self, header: RequestHeader, body: Body) -> Body:
        try:
            self._check(AclOperation.ALTER)
        except KafkaError as exc:
            failed = {"error_code": exc.code, "error_message": exc.message, "matching_acls": []}
            return {"throttle_time_ms": 0, "filter_results": [failed] * len(body["filters"])}
        results, doomed = [], []
        for f in body["filters"]:
            matching = self.bindings(filter_of(f))
            doomed += matching
            results.append(
                {
                    "error_code": 0,
                    "error_message": None,
                    "matching_acls": [{"error_code": 0, "error_message": None, **_described(b)} for b in matching],
                }
            )
        if doomed:
            await self.change([], doomed)
        return {"throttle_time_ms": 0, "filter_results": results}
