"""The "authorized operations" bit sets of Metadata and DescribeCluster (KIP-430).

A client may ask which ACL operations it may perform on a topic or the cluster. The answer
is a 32-bit field with bit `code` set for each allowed operation (Kafka's AclOperation
codes). Without an authorizer, Kafka allows everything, so it answers every operation the
resource type supports; loglake has no authorizer, so it always answers that.
"""

from __future__ import annotations

from enum import IntEnum

# The value of an authorized-operations field the client did not ask for.
NOT_REQUESTED = -(2**31)


class AclOperation(IntEnum):
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


def _bits(*operations: AclOperation) -> int:
    return sum(1 << op for op in set(operations))


_OP = AclOperation
TOPIC_OPERATIONS = _bits(
    _OP.READ, _OP.WRITE, _OP.CREATE, _OP.DESCRIBE, _OP.DELETE, _OP.ALTER, _OP.DESCRIBE_CONFIGS, _OP.ALTER_CONFIGS
)
CLUSTER_OPERATIONS = _bits(
    _OP.CREATE,
    _OP.CLUSTER_ACTION,
    _OP.DESCRIBE_CONFIGS,
    _OP.ALTER_CONFIGS,
    _OP.IDEMPOTENT_WRITE,
    _OP.ALTER,
    _OP.DESCRIBE,
)


def topic_operations(requested: bool) -> int:
    return TOPIC_OPERATIONS if requested else NOT_REQUESTED


def cluster_operations(requested: bool) -> int:
    return CLUSTER_OPERATIONS if requested else NOT_REQUESTED
