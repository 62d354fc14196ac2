"""CreateAcls, DescribeAcls and DeleteAcls (what kafka-acls.sh and `loglake acls` send).

ACLs live in the metadata store (ZooKeeper: /kafka-acl, /kafka-acl-extended, Kafka's
format), so any broker changes them; every broker's authorizer follows the store's change
notifications, and the broker that made a change applies it at once. Without an
authorizer the APIs answer SECURITY_DISABLED, as Kafka's do. Creating and deleting need
ALTER on the cluster, describing DESCRIBE.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey
from loglake.protocol.bodies import (
    CreateAclsRequest,
    CreateAclsRequestAclCreation,
    CreateAclsResponse,
    CreateAclsResponseAclCreationResult,
    DeleteAclsRequest,
    DeleteAclsRequestDeleteAclsFilter,
    DeleteAclsResponse,
    DeleteAclsResponseDeleteAclsFilterResult,
    DeleteAclsResponseDeleteAclsMatchingAcl,
    DescribeAclsRequest,
    DescribeAclsResponse,
    DescribeAclsResponseAclDescription,
    DescribeAclsResponseDescribeAclsResource,
)
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

from ingest_gateway.apis.request_router import handles
from ingest_gateway.metadata.admin_manager import ADMIN_TIMEOUT_MS
from ingest_gateway.metadata.metadata_thread import Deadline, MetadataThread
from ingest_gateway.network.request_context import RequestContext

if TYPE_CHECKING:
    from loglake.coordination.store import MetadataStore

    from ingest_gateway.apis.authorization import RequestAuthorization


def _enum(kind: type, value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN


def binding_of(c: CreateAclsRequestAclCreation) -> AclBinding:
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


def filter_of(f: DescribeAclsRequest | DeleteAclsRequestDeleteAclsFilter) -> AclBindingFilter:
    return AclBindingFilter(
        _enum(ResourceType, f["resource_type_filter"]),
        f["resource_name_filter"],
        _enum(PatternType, f.get("pattern_type_filter", PatternType.LITERAL)),
        f["principal_filter"],
        f["host_filter"],
        _enum(AclOperation, f["operation"]),
        _enum(AclPermissionType, f["permission_type"]),
    )


def _edited(
    added: set[AccessControlEntry], removed: set[AccessControlEntry], entries: frozenset[AccessControlEntry]
) -> frozenset[AccessControlEntry]:
    return entries - removed | added


def _entry(e: AccessControlEntry) -> DescribeAclsResponseAclDescription:
    return {
        "principal": e.principal,
        "host": e.host,
        "operation": int(e.operation),
        "permission_type": int(e.permission),
    }


def _matching(binding: AclBinding) -> DeleteAclsResponseDeleteAclsMatchingAcl:
    p = binding.pattern
    return {
        "error_code": 0,
        "error_message": None,
        "resource_type": int(p.resource_type),
        "resource_name": p.name,
        "pattern_type": int(p.pattern_type),
        **_entry(binding.entry),
    }


class AclApis:
    def __init__(
        self,
        authorization: RequestAuthorization,
        store: MetadataStore,
        metadata_thread: MetadataThread,
        store_timeout_ms: int = ADMIN_TIMEOUT_MS,
    ) -> None:
        self._auth = authorization
        self._store = store
        self._thread = metadata_thread
        # How long a change waits for the store before it is answered REQUEST_TIMED_OUT.
        self._store_timeout_ms = store_timeout_ms

    def _check(self, context: RequestContext, operation: AclOperation) -> None:
        auth = self._auth
        if not auth.enabled:
            raise KafkaError(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
        auth.require(context, operation, ResourceType.CLUSTER, CLUSTER_NAME, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

    async def _reload(self, deadline: Deadline) -> None:
        """Apply the store's ACLs here now (other brokers follow its notifications)."""
        authorizer = self._auth.authorizer
        assert authorizer is not None
        authorizer.replace_acls(await self._thread.run(self._store.acls, timeout_ms=deadline.remaining_ms()))

    def bindings(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        authorizer = self._auth.authorizer
        assert authorizer is not None
        return [b for b in authorizer.bindings() if acl_filter.matches(b)]

    async def change(self, additions: list[AclBinding], removals: list[AclBinding]) -> None:
        """Add and remove ACLs, by resource pattern, in the store. A store that does not
        answer in time raises REQUEST_TIMED_OUT (the changes made by then stay made)."""
        deadline = Deadline.after_ms(self._store_timeout_ms)
        for pattern in {b.pattern for b in additions} | {b.pattern for b in removals}:
            added = {b.entry for b in additions if b.pattern == pattern}
            removed = {b.entry for b in removals if b.pattern == pattern}
            edit = functools.partial(_edited, added, removed)
            await self._thread.run(self._store.update_acls, pattern, edit, timeout_ms=deadline.remaining_ms())
        await self._reload(deadline)

    @handles(ApiKey.CREATE_ACLS, 0, 3)
    async def create_acls(self, context: RequestContext, body: CreateAclsRequest) -> CreateAclsResponse:
        try:
            self._check(context, AclOperation.ALTER)
        except KafkaError as exc:
            return {
                "throttle_time_ms": 0,
                "results": [{"error_code": exc.code, "error_message": exc.message}] * len(body["creations"]),
            }
        results: list[CreateAclsResponseAclCreationResult] = []
        valid: list[AclBinding] = []
        for creation in body["creations"]:
            binding = binding_of(creation)
            problem = validate_binding(binding)
            results.append({"error_code": ErrorCode.INVALID_REQUEST if problem else 0, "error_message": problem})
            if problem is None:
                valid.append(binding)
        if valid:
            try:
                await self.change(valid, [])
            except KafkaError as exc:  # REQUEST_TIMED_OUT: whether they were made is unknown
                for result in results:
                    if result["error_code"] == ErrorCode.NONE:
                        result["error_code"], result["error_message"] = exc.code, exc.message
        return {"throttle_time_ms": 0, "results": results}

    @handles(ApiKey.DESCRIBE_ACLS, 0, 3)
    async def describe_acls(self, context: RequestContext, body: DescribeAclsRequest) -> DescribeAclsResponse:
        try:
            self._check(context, AclOperation.DESCRIBE)
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message, "resources": []}
        by_pattern: dict[ResourcePattern, list[DescribeAclsResponseAclDescription]] = {}
        for binding in self.bindings(filter_of(body)):
            by_pattern.setdefault(binding.pattern, []).append(_entry(binding.entry))
        resources: list[DescribeAclsResponseDescribeAclsResource] = [
            {
                "resource_type": int(p.resource_type),
                "resource_name": p.name,
                "pattern_type": int(p.pattern_type),
                "acls": acls,
            }
            for p, acls in by_pattern.items()
        ]
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": resources}

    @handles(ApiKey.DELETE_ACLS, 0, 3)
    async def delete_acls(self, context: RequestContext, body: DeleteAclsRequest) -> DeleteAclsResponse:
        try:
            self._check(context, AclOperation.ALTER)
        except KafkaError as exc:
            failed: DeleteAclsResponseDeleteAclsFilterResult = {
                "error_code": exc.code,
                "error_message": exc.message,
                "matching_acls": [],
            }
            return {"throttle_time_ms": 0, "filter_results": [failed] * len(body["filters"])}
        results: list[DeleteAclsResponseDeleteAclsFilterResult] = []
        doomed: list[AclBinding] = []
        for f in body["filters"]:
            matching = self.bindings(filter_of(f))
            doomed += matching
            results.append(
                {
                    "error_code": 0,
                    "error_message": None,
                    "matching_acls": [_matching(b) for b in matching],
                }
            )
        if doomed:
            try:
                await self.change([], doomed)
            except KafkaError as exc:  # REQUEST_TIMED_OUT: whether they were deleted is unknown
                results = [{"error_code": exc.code, "error_message": exc.message, "matching_acls": []} for _ in results]
        return {"throttle_time_ms": 0, "filter_results": results}
