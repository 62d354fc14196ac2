"""Cluster administration APIs of the Kafka protocol: ElectLeaders, DescribeCluster and
the partition reassignments (KIP-455).

ElectLeaders and AlterPartitionReassignments run on the controller (a broker that is not
the controller forwards them); DescribeCluster answers from this broker's metadata image,
as Kafka's brokers do, and ListPartitionReassignments from the metadata store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loglake.coordination.controller import ElectionType
from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey
from loglake.protocol.bodies import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionReassignmentsResponseReassignablePartitionResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ElectLeadersResponsePartitionResult,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponseOngoingPartitionReassignment,
)

from ingest_gateway.apis import authorized_operations
from ingest_gateway.apis.request_router import handles
from ingest_gateway.metadata.client_endpoints import node_endpoints
from ingest_gateway.network.request_context import RequestContext

if TYPE_CHECKING:
    from ingest_gateway.apis.authorization import RequestAuthorization
    from ingest_gateway.metadata.admin_manager import AdminManager
    from ingest_gateway.metadata.metadata_cache import MetadataCache

# DescribeCluster v1's endpoint types (KIP-919): a broker answers only for brokers.
ENDPOINT_TYPE_BROKER = 1
ENDPOINT_TYPES = {1: "BROKER", 2: "CONTROLLER"}


class AdminApis:
    def __init__(self, admin: AdminManager, cache: MetadataCache, authorization: RequestAuthorization) -> None:
        self._admin = admin
        self._cache = cache
        self._auth = authorization

    @handles(ApiKey.ELECT_LEADERS, 0, 2)
    async def elect_leaders(self, context: RequestContext, body: ElectLeadersRequest) -> ElectLeadersResponse:
        requested = body["topic_partitions"]
        partitions = None if requested is None else [(t["topic"], p) for t in requested for p in t["partitions"]]
        try:
            if body["election_type"] not in ElectionType._value2member_map_:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"unknown election type {body['election_type']}")
            results = await self._admin.elect_leaders(
                partitions, ElectionType(body["election_type"]), body["timeout_ms"]
            )
        except KafkaError as exc:
            # The whole request failed (no controller, say): every partition gets the error.
            return _election_response(exc.code, {tp: exc for tp in partitions or ()})
        if partitions is None:
            # As Kafka: an election over all partitions reports only those it acted on.
            results = {tp: e for tp, e in results.items() if e is None or e.code != ErrorCode.ELECTION_NOT_NEEDED}
        return _election_response(ErrorCode.NONE, results)

    @handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0)
    async def alter_partition_reassignments(
        self, context: RequestContext, body: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        targets = {
            (t["name"], p["partition_index"]): None if p["replicas"] is None else tuple(p["replicas"])
            for t in body["topics"]
            for p in t["partitions"]
        }
        response: AlterPartitionReassignmentsResponse = {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "responses": [],
        }
        try:
            results = await self._admin.alter_partition_reassignments(targets, body["timeout_ms"])
        except KafkaError as exc:
            return response | {"error_code": exc.code, "error_message": exc.message, "responses": []}
        by_topic: dict[str, list[AlterPartitionReassignmentsResponseReassignablePartitionResponse]] = {}
        for (topic, p), error in results.items():
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": p,
                    "error_code": ErrorCode.NONE if error is None else error.code,
                    "error_message": None if error is None else error.message,
                }
            )
        return response | {"responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    @handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
    async def list_partition_reassignments(
        self, context: RequestContext, body: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        requested = body["topics"]
        partitions = None if requested is None else [(t["name"], p) for t in requested for p in t["partition_indexes"]]
        try:
            ongoing = await self._admin.list_partition_reassignments(partitions, body["timeout_ms"])
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message, "topics": []}
        by_topic: dict[str, list[ListPartitionReassignmentsResponseOngoingPartitionReassignment]] = {}
        for (topic, p), (replicas, adding, removing) in sorted(ongoing.items()):
            by_topic.setdefault(topic, []).append(
                {
                    "partition_index": p,
                    "replicas": list(replicas),
                    "adding_replicas": list(adding),
                    "removing_replicas": list(removing),
                }
            )
        return {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }

    @handles(ApiKey.DESCRIBE_CLUSTER, 0, 1)
    async def describe_cluster(self, context: RequestContext, body: DescribeClusterRequest) -> DescribeClusterResponse:
        header = context.header
        image = self._cache.image
        response: DescribeClusterResponse = {
            "throttle_time_ms": 0,
            "error_code": 0,
            "error_message": None,
            "cluster_id": image.cluster_id,
            "controller_id": -1,
            "brokers": [],
            "cluster_authorized_operations": authorized_operations.NOT_REQUESTED,
        }
        endpoint_type = body["endpoint_type"]
        if endpoint_type != ENDPOINT_TYPE_BROKER:
            # Kafka: v0 cannot carry the endpoint-type errors, so it gets INVALID_REQUEST.
            v0 = header.request_api_version == 0
            if endpoint_type in ENDPOINT_TYPES:
                code = ErrorCode.INVALID_REQUEST if v0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE
                message = f"This is a broker endpoint, not a {ENDPOINT_TYPES[endpoint_type]} one"
            else:
                code = ErrorCode.INVALID_REQUEST if v0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
                message = f"Unsupported endpoint type {endpoint_type}"
            return response | {"error_code": code, "error_message": message}
        brokers = sorted(image.brokers.values(), key=lambda b: b.broker_id)
        return response | {
            # A controller this broker does not know as alive is reported as unknown (-1), as Kafka.
            "controller_id": image.controller_id if image.controller_id in image.brokers else -1,
            "brokers": [
                {"broker_id": n["node_id"], "host": n["host"], "port": n["port"], "rack": n["rack"]}
                for n in node_endpoints(context.listener_name, brokers)
            ],
            "cluster_authorized_operations": authorized_operations.cluster_operations(
                self._auth, context, body["include_cluster_authorized_operations"]
            ),
        }


def _election_response(
    error_code: ErrorCode, results: dict[tuple[str, int], KafkaError | None]
) -> ElectLeadersResponse:
    by_topic: dict[str, list[ElectLeadersResponsePartitionResult]] = {}
    for (topic, p), error in results.items():
        by_topic.setdefault(topic, []).append(
            {
                "partition_id": p,
                "error_code": ErrorCode.NONE if error is None else error.code,
                "error_message": None if error is None else error.message,
            }
        )
    return {
        "throttle_time_ms": 0,
        "error_code": error_code,
        "replica_election_results": [{"topic": t, "partition_result": ps} for t, ps in by_topic.items()],
    }
