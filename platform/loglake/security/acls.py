"""ACLs and the authorizer (Kafka's AclAuthorizer model), independent of any transport.

An ACL binds a resource pattern (a type, a name, LITERAL or PREFIXED; the literal name
"*" matches every resource of the type) to an entry: a principal ("User:alice", or
"User:*"), a host ("*" or an address), an operation and ALLOW or DENY. A request is
allowed when no DENY entry matches and an ALLOW entry does, where ALLOW of READ, WRITE,
DELETE or ALTER implies DESCRIBE, and ALTER_CONFIGS implies DESCRIBE_CONFIGS. `super.users`
are always allowed; a resource that no ACL matches is allowed only with
`allow.everyone.if.no.acl.found=true`.

The metadata store keeps ACLs in Kafka's ZooKeeper format: one document per resource
pattern, `{"version": 1, "acls": [{"principal", "permissionType", "operation", "host"}]}`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource
WILDCARD = "*"

# Names as Kafka writes them in ZooKeeper and in kafka-acls.sh output.
RESOURCE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
OPERATION_NAMES = {
    AclOperation.ALL: "All",
    AclOperation.READ: "Read",
    AclOperation.WRITE: "Write",
    AclOperation.CREATE: "Create",
    AclOperation.DELETE: "Delete",
    AclOperation.ALTER: "Alter",
    AclOperation.DESCRIBE: "Describe",
    AclOperation.CLUSTER_ACTION: "ClusterAction",
    AclOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
    AclOperation.ALTER_CONFIGS: "AlterConfigs",
    AclOperation.IDEMPOTENT_WRITE: "IdempotentWrite",
    AclOperation.CREATE_TOKENS: "CreateTokens",
    AclOperation.DESCRIBE_TOKENS: "DescribeTokens",
}
PERMISSION_NAMES = {AclPermissionType.ALLOW: "Allow", AclPermissionType.DENY: "Deny"}

# What ALLOW of an operation also allows (Kafka's implied operations).
_IMPLIED_BY = {
    AclOperation.DESCRIBE: (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.ALTER_CONFIGS,),
}

# The operations each resource type has (for KIP-430's authorized-operations bit sets).
RESOURCE_OPERATIONS = {
    ResourceType.TOPIC: (
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
}  # fmt: skip


@dataclass(frozen=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def matches(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == WILDCARD or self.name == name


@dataclass(frozen=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def applies_to(self, principal: str, host: str) -> bool:
        return self.principal in (principal, "User:*") and self.host in (host, WILDCARD)

    def to_document(self) -> dict[str, str]:
        return {
            "principal": self.principal,
            "permissionType": PERMISSION_NAMES[self.permission],
            "operation": OPERATION_NAMES[self.operation],
            "host": self.host,
        }

    @classmethod
    def from_document(cls, doc: Mapping[str, str]) -> AccessControlEntry:
        operations = {v: k for k, v in OPERATION_NAMES.items()}
        permissions = {v: k for k, v in PERMISSION_NAMES.items()}
        return cls(doc["principal"], doc["host"], operations[doc["operation"]], permissions[doc["permissionType"]])


@dataclass(frozen=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select; None/ANY fields match anything, and
    pattern type MATCH selects the patterns that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        p, e = binding.pattern, binding.entry
        if self.resource_type != ResourceType.ANY and p.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.name is not None and not p.matches(p.resource_type, self.name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and p.pattern_type != self.pattern_type:
                return False
            if self.name is not None and p.name != self.name:
                return False
        return (
            (self.principal is None or e.principal == self.principal)
            and (self.host is None or e.host == self.host)
            and (self.operation == AclOperation.ANY or e.operation == self.operation)
            and (self.permission == AclPermissionType.ANY or e.permission == self.permission)
        )


def validate_binding(binding: AclBinding) -> str | None:
    """Why Kafka would refuse to create this ACL (INVALID_REQUEST), or None."""
    p, e = binding.pattern, binding.entry
    if p.resource_type not in RESOURCE_NAMES or p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "ACLs need a concrete resource type and a LITERAL or PREFIXED pattern"
    if not p.name:
        return "the resource name must not be empty"
    if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
        return f"the Cluster resource is named {CLUSTER_NAME}"
    if e.operation not in OPERATION_NAMES or e.permission not in PERMISSION_NAMES:
        return "ACLs need a concrete operation and ALLOW or DENY"
    if ":" not in e.principal:
        return f"principal {e.principal!r} is not of the form Type:name"
    return None


class Authorizer:
    """Decides from the ACLs it holds (kept current by the broker from the store)."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl_found = allow_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        # By (resource type, name) and pattern type, so that a check looks up the patterns that
        # can match (the name, "*", each prefix of the name) instead of scanning every ACL.
        self._index: dict[tuple[ResourceType, str, PatternType], frozenset[AccessControlEntry]] = {}

    def replace_acls(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        self._acls = {p: frozenset(entries) for p, entries in acls.items() if entries}
        self._index = {(p.resource_type, p.name, p.pattern_type): entries for p, entries in self._acls.items()}

    def bindings(self) -> list[AclBinding]:
        return [AclBinding(p, e) for p, entries in self._acls.items() for e in entries]

    def _matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The entries of every pattern matching the resource (`ResourcePattern.matches`)."""
        index, empty = self._index, frozenset[AccessControlEntry]()
        found = [*index.get((resource_type, name, PatternType.LITERAL), empty)]
        if name != WILDCARD:
            found += index.get((resource_type, WILDCARD, PatternType.LITERAL), empty)
        for end in range(len(name) + 1):
            found += index.get((resource_type, name[:end], PatternType.PREFIXED), empty)
        return found

    def authorize(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        entries = self._matching(resource_type, name)
        if not entries:
            return self.allow_if_no_acl_found
        mine = [e for e in entries if e.applies_to(principal, host)]
        if any(e.permission == AclPermissionType.DENY and e.operation in (operation, AclOperation.ALL) for e in mine):
            return False
        allowing = (operation, AclOperation.ALL, *_IMPLIED_BY.get(operation, ()))
        return any(e.permission == AclPermissionType.ALLOW and e.operation in allowing for e in mine)

    def authorize_by_resource_type(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type may be `operation`-ed by the principal (Kafka's
        `authorizeByResourceType`, KIP-679: an idempotent producer needs WRITE on any topic):
        an ALLOW of the operation (or ALL) whose pattern no DENY covers, a LITERAL "*" DENY
        refusing everything."""
        # Super users, and allow.everyone.if.no.acl.found for a type without ACLs, as Kafka
        # checks a made-up name first.
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        allowed: list[ResourcePattern] = []
        wildcard_allowed = False
        denied_literal: set[str] = set()
        denied_prefixes: set[str] = set()
        for pattern, entries in self._acls.items():
            if pattern.resource_type != resource_type:
                continue
            for e in entries:
                if not e.applies_to(principal, host) or e.operation not in (operation, AclOperation.ALL):
                    continue
                if e.permission == AclPermissionType.DENY:
                    if pattern.pattern_type == PatternType.LITERAL and pattern.name == WILDCARD:
                        return False
                    (denied_prefixes if pattern.pattern_type == PatternType.PREFIXED else denied_literal).add(
                        pattern.name
                    )
                elif pattern.pattern_type == PatternType.LITERAL and pattern.name == WILDCARD:
                    wildcard_allowed = True
                else:
                    allowed.append(pattern)
        return wildcard_allowed or any(
            not (p.pattern_type == PatternType.LITERAL and p.name in denied_literal)
            and not any(p.name.startswith(prefix) for prefix in denied_prefixes)
            for p in allowed
        )
