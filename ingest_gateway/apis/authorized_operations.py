"""The "authorized operations" bit sets of Metadata, DescribeCluster and DescribeGroups
(KIP-430): a client may ask which ACL operations it may perform on a resource; the answer
is a 32-bit field with bit `code` set for each allowed operation (Kafka's AclOperation
codes). Without an authorizer Kafka allows everything, so every operation the resource
type has is set; with one, those the authorizer allows this principal.
"""

from __future__ import annotations

from loglake.security.acls import CLUSTER_NAME, AclOperation, ResourceType

from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.network.request_context import RequestContext

# The value of an authorized-operations field the client did not ask for.
NOT_REQUESTED = -(2**31)


def topic_operations(auth: RequestAuthorization, context: RequestContext, topic: str, requested: bool) -> int:
    return auth.authorized_operations(context, ResourceType.TOPIC, topic) if requested else NOT_REQUESTED


def cluster_operations(auth: RequestAuthorization, context: RequestContext, requested: bool) -> int:
    """None without DESCRIBE on the cluster, as Kafka answers."""
    if not requested:
        return NOT_REQUESTED
    if not auth.allowed(context, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return auth.authorized_operations(context, ResourceType.CLUSTER, CLUSTER_NAME)


def group_operations(auth: RequestAuthorization, context: RequestContext, group: str, requested: bool) -> int:
    return auth.authorized_operations(context, ResourceType.GROUP, group) if requested else NOT_REQUESTED
