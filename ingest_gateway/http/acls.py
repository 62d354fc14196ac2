"""HTTP for ACLs (what `loglake acls` sends, as kafka-acls.sh): list by filter, add,
remove by filter, through the same AclApis as CreateAcls/DescribeAcls/DeleteAcls. Names as
kafka-acls.sh writes them: resource types Topic, Group, Cluster, TransactionalId; pattern
types LITERAL, PREFIXED; operations Read, Write, ...; permissions Allow, Deny.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response
from loglake.errors import ErrorCode, KafkaError
from loglake.security.acls import (
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_NAMES,
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

from ingest_gateway.http.errors import BadRequest, json_object

if TYPE_CHECKING:
    from ingest_gateway.apis.acl_apis import AclApis
    from ingest_gateway.apis.authorization import RequestAuthorization

_TYPES = {v.lower(): k for k, v in RESOURCE_NAMES.items()}
_OPERATIONS = {v.lower(): k for k, v in OPERATION_NAMES.items()}
_PERMISSIONS = {v.lower(): k for k, v in PERMISSION_NAMES.items()}
_PATTERNS = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED}


def _pick(table: dict[str, Any], value: Any, what: str) -> Any:
    if not isinstance(value, str) or value.lower() not in table:
        raise BadRequest(422, f"{what} must be one of {', '.join(sorted(table))}, not {value!r}", 2)
    return table[value.lower()]


def binding_json(b: AclBinding) -> dict[str, str]:
    return {
        "resource_type": RESOURCE_NAMES[b.pattern.resource_type],
        "resource_name": b.pattern.name,
        "pattern_type": b.pattern.pattern_type.name,
        "principal": b.entry.principal,
        "host": b.entry.host,
        "operation": OPERATION_NAMES[b.entry.operation],
        "permission": PERMISSION_NAMES[b.entry.permission],
    }


def _filter(params: dict[str, str]) -> AclBindingFilter:
    return AclBindingFilter(
        _pick(_TYPES, params["resource_type"], "resource_type") if "resource_type" in params else ResourceType.ANY,
        params.get("resource_name"),
        _pick(_PATTERNS, params["pattern_type"], "pattern_type") if "pattern_type" in params else PatternType.ANY,
        params.get("principal"),
        params.get("host"),
        _pick(_OPERATIONS, params["operation"], "operation") if "operation" in params else AclOperation.ANY,
        _pick(_PERMISSIONS, params["permission"], "permission") if "permission" in params else AclPermissionType.ANY,
    )


def acl_routes(acl_apis: AclApis, authorization: RequestAuthorization) -> APIRouter:
    router = APIRouter()

    def require_authorizer() -> None:
        if not authorization.enabled:
            raise KafkaError(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")

    @router.get("/acls")
    async def list_acls(request: Request) -> list[dict[str, str]]:
        """The ACLs matching the query's filter (resource_type, resource_name, ...)."""
        require_authorizer()
        return [binding_json(b) for b in acl_apis.bindings(_filter(dict(request.query_params)))]

    @router.post("/acls", status_code=201)
    async def add_acl(request: Request) -> dict[str, str]:
        require_authorizer()
        doc = await json_object(request)
        binding = AclBinding(
            ResourcePattern(
                _pick(_TYPES, doc.get("resource_type"), "resource_type"),
                str(doc.get("resource_name", "")),
                _pick(_PATTERNS, doc.get("pattern_type", "literal"), "pattern_type"),
            ),
            AccessControlEntry(
                str(doc.get("principal", "")),
                str(doc.get("host", "*")),
                _pick(_OPERATIONS, doc.get("operation"), "operation"),
                _pick(_PERMISSIONS, doc.get("permission", "allow"), "permission"),
            ),
        )
        problem = validate_binding(binding)
        if problem is not None:
            raise BadRequest(422, problem, 2)
        await acl_apis.change([binding], [])
        return binding_json(binding)

    @router.delete("/acls")
    async def remove_acls(request: Request) -> Response:
        """Remove the ACLs matching the query's filter (at least a resource type)."""
        require_authorizer()
        params = dict(request.query_params)
        if "resource_type" not in params:
            raise BadRequest(422, "say which ACLs to remove: resource_type (and more) in the query", 2)
        doomed = acl_apis.bindings(_filter(params))
        if doomed:
            await acl_apis.change([], doomed)
        return Response(status_code=204)

    return router
