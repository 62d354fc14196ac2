"""Authorizer.authorize_by_resource_type: Kafka's answer to "may this principal WRITE some
topic?" (an idempotent producer's InitProducerId, KIP-679); and the index `authorize` looks
patterns up in."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loglake.security.acls import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
WRITE, TOPIC = AclOperation.WRITE, ResourceType.TOPIC


def authorizer(*acls: tuple[str, PatternType, str, AclOperation, AclPermissionType], **kwargs) -> Authorizer:
    a = Authorizer(["User:admin"], **kwargs)
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for name, pattern, principal, operation, permission in acls:
        by_pattern.setdefault(ResourcePattern(TOPIC, name, pattern), []).append(
            AccessControlEntry(principal, "*", operation, permission)
        )
    a.replace_acls(by_pattern)
    return a


@pytest.mark.parametrize(
    ("acls", "allowed"),
    [
        ((), False),
        ((("orders", LITERAL, "User:alice", WRITE, ALLOW),), True),
        ((("orders", LITERAL, "User:alice", AclOperation.ALL, ALLOW),), True),
        ((("orders", LITERAL, "User:alice", AclOperation.READ, ALLOW),), False),  # another operation
        ((("orders", LITERAL, "User:bob", WRITE, ALLOW),), False),  # another principal
        ((("orders", LITERAL, "User:*", WRITE, ALLOW),), True),
        ((("ord", PREFIXED, "User:alice", WRITE, ALLOW),), True),
        # A DENY covering every ALLOW: the same literal, or a prefix of it.
        ((("orders", LITERAL, "User:alice", WRITE, ALLOW), ("orders", LITERAL, "User:alice", WRITE, DENY)), False),
        ((("orders", LITERAL, "User:alice", WRITE, ALLOW), ("or", PREFIXED, "User:*", WRITE, DENY)), False),
        ((("ord", PREFIXED, "User:alice", WRITE, ALLOW), ("orders", LITERAL, "User:alice", WRITE, DENY)), True),
        ((("orders", LITERAL, "User:alice", WRITE, ALLOW), ("other", LITERAL, "User:alice", WRITE, DENY)), True),
        # Wildcards: an ALLOW of "*" allows, a DENY of "*" refuses whatever else there is.
        ((("*", LITERAL, "User:alice", WRITE, ALLOW), ("orders", LITERAL, "User:alice", WRITE, DENY)), True),
        ((("orders", LITERAL, "User:alice", WRITE, ALLOW), ("*", LITERAL, "User:alice", WRITE, DENY)), False),
    ],
)
def test_write_on_some_topic(acls, allowed: bool) -> None:
    assert authorizer(*acls).authorize_by_resource_type("User:alice", "10.0.0.1", WRITE, TOPIC) is allowed


def test_super_users_and_allow_if_no_acl_found() -> None:
    denied_everything = authorizer(("*", LITERAL, "User:*", WRITE, DENY))
    assert denied_everything.authorize_by_resource_type("User:admin", "10.0.0.1", WRITE, TOPIC)
    assert authorizer(allow_if_no_acl_found=True).authorize_by_resource_type("User:alice", "h", WRITE, TOPIC)
    assert not authorizer().authorize_by_resource_type("User:alice", "h", WRITE, TOPIC)


NAMES = ("orders", "orders-eu", "ord", "o", "*", "payments", "")


@settings(max_examples=300, deadline=None)
@given(
    acls=st.lists(
        st.tuples(
            st.sampled_from(NAMES[:-1]),
            st.sampled_from((LITERAL, PREFIXED)),
            st.sampled_from(("User:alice", "User:*")),
            st.sampled_from((WRITE, AclOperation.READ, AclOperation.ALL)),
            st.sampled_from((ALLOW, DENY)),
        ),
        max_size=6,
    ),
    name=st.sampled_from(NAMES),
)
def test_authorize_looks_up_the_same_patterns_as_a_scan(acls, name: str) -> None:
    """The authorizer's index (the name, "*", each prefix) finds exactly the patterns that match."""
    a = authorizer(*acls)
    scanned = sorted((e for b in a.bindings() if b.pattern.matches(TOPIC, name) for e in [b.entry]), key=repr)
    assert sorted(a._matching(TOPIC, name), key=repr) == scanned
    assert a._matching(ResourceType.GROUP, name) == []
