"""The core Kafka APIs (part of the role of Kafka's KafkaApis).

One method per API. Each takes the decoded request body (a dict, see loglake.protocol)
and returns the response body. Produce goes through the same ReplicaManager path as the
HTTP API and hands each partition's record bytes over untouched. The handlers get the
collaborators they use (the metadata cache, the admin manager, the replica manager, ...),
never the whole broker.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from loglake.cluster.assignment import numbered_assignment
from loglake.config import BrokerConfig, validate_topic_name
from loglake.coordination.model import topic_uuid
from loglake.coordination.producer_ids import ProducerIdManager
from loglake.errors import ErrorCode, KafkaError, RecordValidationError
from loglake.internal_topics import INTERNAL_TOPICS
from loglake.protocol import ApiKey, IsolationLevel
from loglake.protocol.bodies import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsResponseCreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    CreateTopicsResponseCreatableTopicResult,
    DeleteRecordsRequest,
    DeleteRecordsRequestDeleteRecordsPartition,
    DeleteRecordsResponse,
    DeleteRecordsResponseDeleteRecordsPartitionResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicsResponseDeletableTopicResult,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    FindCoordinatorResponseCoordinator,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsRequestListOffsetsPartition,
    ListOffsetsResponse,
    ListOffsetsResponseListOffsetsPartitionResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseMetadataResponseBroker,
    MetadataResponseMetadataResponsePartition,
    MetadataResponseMetadataResponseTopic,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochRequestOffsetForLeaderPartition,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderEpochResponseEpochEndOffset,
    ProduceResponsePartitionProduceResponse,
)
from loglake.record.batch import validate_client_records
from loglake.record.header import first_batch_transactional
from loglake.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from loglake.security.quotas import ClientQuotaManager
from loglake.storage.log_manager import LogManager

from ingest_gateway.apis import authorized_operations
from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.apis.config_apis import describe_topic_configs
from ingest_gateway.apis.request_router import handles
from ingest_gateway.coordinators.coordinator_locator import CoordinatorLocator
from ingest_gateway.metadata.admin_manager import AdminManager
from ingest_gateway.metadata.client_endpoints import NodeEndpoint, node_endpoint, node_endpoints
from ingest_gateway.metadata.metadata_cache import MetadataCache
from ingest_gateway.network.request_context import CloseConnection, RequestContext, only_replication_left

if TYPE_CHECKING:
    from loglake.cluster.metadata_image import MetadataImage

    from ingest_gateway.metadata.dynamic_config import DynamicConfigManager
    from ingest_gateway.replica.replica_manager import ProduceResult, ReplicaManager

log = logging.getLogger(__name__)

Body = dict[str, Any]
# A requested partition and its answer, in _per_partition.
_Requested = TypeVar("_Requested")
_Answer = TypeVar("_Answer")

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the local log's start; without tiered storage, the log start
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: the last offset in remote storage; there is none here
# The first ListOffsets version that may ask for each special timestamp (as Kafka checks).
SPECIAL_TIMESTAMP_MIN_VERSION = {
    LATEST_TIMESTAMP: 1,
    EARLIEST_TIMESTAMP: 1,
    MAX_TIMESTAMP: 7,
    EARLIEST_LOCAL_TIMESTAMP: 8,
    LATEST_TIERED_TIMESTAMP: 9,
}

# FindCoordinator key types.
COORDINATOR_KEY_GROUP = 0
COORDINATOR_KEY_TRANSACTION = 1


def _error(exc: BaseException) -> tuple[ErrorCode, str | None]:
    if isinstance(exc, KafkaError):
        return exc.code, exc.message
    return ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)


class KafkaApis:
    """The core APIs: metadata, produce, offsets, topic administration, coordinators and
    producer ids. Fetch is FetchApis'; groups, transactions, configs, ACLs and the others
    are their own modules', each registered with the same RequestRouter."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        cache: MetadataCache,
        admin: AdminManager,
        coordinators: CoordinatorLocator,
        replica_manager: ReplicaManager,
        log_manager: LogManager,
        producer_ids: ProducerIdManager,
        authorization: RequestAuthorization,
        produce_quotas: ClientQuotaManager,
        dynamic_config: DynamicConfigManager,
        init_transactional_producer: Callable[[InitProducerIdRequest], Awaitable[InitProducerIdResponse]],
    ) -> None:
        self._config = config
        self._cache = cache
        self._admin = admin
        self._coordinators = coordinators
        self._replica_manager = replica_manager
        self._log_manager = log_manager
        self._producer_ids = producer_ids
        self._auth = authorization
        self._produce_quotas = produce_quotas
        self._dynamic_config = dynamic_config
        self._init_transactional_producer = init_transactional_producer
        # Topics a Metadata request is creating (Kafka's AutoTopicCreationManager in flight).
        self._auto_creations: dict[str, asyncio.Task[None]] = {}

    # Metadata ----------------------------------------------------------------------------

    def _auto_create_refusal(self, context: RequestContext, name: str) -> ErrorCode | None:
        """Why `name` may not be created with the broker defaults for this request, if it may not."""
        if not self._config.auto_create_topics_enable:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if name in INTERNAL_TOPICS:
            # Created only by their coordinators, with their own settings and replication
            # factor (FindCoordinator), never with the defaults of an ordinary topic.
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if not self._may_create(context, name):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            return exc.code
        return None

    async def _create_with_defaults(self, name: str) -> None:
        config = self._config
        try:
            await self._admin.create_topic(name, config.num_partitions, config.default_replication_factor, {})
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise

    async def _maybe_auto_create(self, context: RequestContext, name: str) -> ErrorCode | None:
        """Create `name` with the broker defaults if allowed, waiting for the controller; an
        error code if not."""
        refusal = self._auto_create_refusal(context, name)
        if refusal is not None:
            return refusal
        try:
            await self._create_with_defaults(name)
        except KafkaError as exc:
            return exc.code
        return None

    def _auto_create_in_background(self, context: RequestContext, name: str) -> ErrorCode:
        """Metadata's auto-creation, as Kafka's AutoTopicCreationManager: the creation goes
        to the controller in the background (once per topic at a time) and the answer is
        LEADER_NOT_AVAILABLE at once; the client asks again. A slow metadata store delays
        the topic, not the Metadata answer (which producers wait on)."""
        refusal = self._auto_create_refusal(context, name)
        if refusal is not None:
            return refusal
        if name not in self._auto_creations:
            task = asyncio.create_task(self._create_with_defaults(name), name=f"auto-create {name}")
            self._auto_creations[name] = task
            task.add_done_callback(functools.partial(self._auto_created, name))
        return ErrorCode.LEADER_NOT_AVAILABLE

    def _auto_created(self, name: str, task: asyncio.Task[None]) -> None:
        del self._auto_creations[name]
        if not task.cancelled() and task.exception() is not None:
            log.warning("auto-creating topic %s failed: %s", name, task.exception())

    def _require_topic(self, context: RequestContext, operation: AclOperation, topic: str) -> None:
        self._auth.require(context, operation, ResourceType.TOPIC, topic, ErrorCode.TOPIC_AUTHORIZATION_FAILED)

    def _may_create(self, context: RequestContext, topic: str) -> bool:
        """CREATE on the cluster, or on the topic (Kafka checks both)."""
        auth = self._auth
        return auth.allowed(
            context, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, False
        ) or auth.topic_allowed(context, AclOperation.CREATE, topic)

    @handles(ApiKey.METADATA, 0, 12)
    async def metadata(self, context: RequestContext, body: MetadataRequest) -> MetadataResponse:
        header = context.header
        version = header.request_api_version
        image = self._cache.image
        requested = body["topics"]
        asked_by_id: dict[str, uuid.UUID] = {}
        if requested is None or (version == 0 and not requested):
            names: list[str | None] = [*sorted(image.topics)]
        else:
            by_id = {topic_uuid(t.topic_id): n for n, t in image.topics.items()}
            names = [
                t["name"] if t["name"] is not None else by_id.get(t["topic_id"]) if "topic_id" in t else None
                for t in requested
            ]
            # Topics asked for by id: a denial names the id, not the topic (as Kafka).
            asked_by_id = {
                by_id[t["topic_id"]]: t["topic_id"]
                for t in requested
                if t.get("name") is None and t.get("topic_id") in by_id
            }
        allow_create = body.get("allow_auto_topic_creation", True) if version >= 4 else True
        auth = self._auth
        listing = requested is None or (version == 0 and not requested)
        if listing and auth.enabled:
            # A full listing leaves out the topics this principal may not describe.
            names = [
                n
                for n in names
                if n is not None and auth.allowed(context, AclOperation.DESCRIBE, ResourceType.TOPIC, n, False)
            ]
        topics: list[MetadataResponseMetadataResponseTopic] = []
        for name in names:
            if name is None:
                topics.append({"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "partitions": []})
                continue
            if not listing and not auth.topic_allowed(context, AclOperation.DESCRIBE, name):
                denied: MetadataResponseMetadataResponseTopic = {
                    "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    "name": name,
                    "partitions": [],
                }
                if name in asked_by_id:
                    denied["name"], denied["topic_id"] = None, asked_by_id[name]
                topics.append(denied)
                continue
            if name not in self._cache.image.topics:
                error = (
                    self._auto_create_in_background(context, name)
                    if allow_create
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                topics.append({"error_code": error, "name": name, "partitions": []})
                continue
            topics.append(self._topic_metadata(self._cache.image, name))
        for entry in topics:
            if entry["name"] is not None:  # not for unknown topic ids, as Kafka
                entry["topic_authorized_operations"] = authorized_operations.topic_operations(
                    auth, context, entry["name"], body["include_topic_authorized_operations"]
                )
        image = self._cache.image
        return {
            "throttle_time_ms": 0,
            # Rack is in every version the broker serves (the generated type has it optional: v0 lacks it).
            "brokers": cast(
                "list[MetadataResponseMetadataResponseBroker]",
                node_endpoints(context.listener_name, sorted(image.brokers.values(), key=lambda b: b.broker_id)),
            ),
            "cluster_id": image.cluster_id,
            "controller_id": image.controller_id,
            "topics": topics,
            "cluster_authorized_operations": authorized_operations.cluster_operations(
                auth, context, body["include_cluster_authorized_operations"]
            ),
        }

    def _topic_metadata(self, image: MetadataImage, name: str) -> MetadataResponseMetadataResponseTopic:
        topic = image.topics.get(name)
        if topic is None:
            # In the store (created just now, here or through another broker) but not yet
            # in this broker's image: as Kafka, "no leader yet", and the client retries.
            return {"error_code": ErrorCode.LEADER_NOT_AVAILABLE, "name": name, "partitions": []}
        states = image.partition_states.get(name, {})
        partitions: list[MetadataResponseMetadataResponsePartition] = []
        for p, replicas in sorted(topic.assignment.items()):
            state = states.get(p)
            if state is None:
                continue
            partitions.append(
                {
                    "error_code": ErrorCode.NONE if state.leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                    "partition_index": p,
                    "leader_id": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "replica_nodes": list(replicas),
                    "isr_nodes": list(state.isr),
                    "offline_replicas": [r for r in replicas if r not in image.brokers],
                }
            )
        return {
            "error_code": 0,
            "name": name,
            "topic_id": topic_uuid(topic.topic_id),
            "is_internal": name in INTERNAL_TOPICS,
            "partitions": partitions,
        }

    # Produce -------------------------------------------------------------------------------

    @handles(ApiKey.PRODUCE, 3, 11)
    async def produce(self, context: RequestContext, body: Body) -> Body | None:
        acks = body["acks"]
        entries: dict[tuple[str, int], Any] = {}
        errors: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
        auth = self._auth
        checked = auth.enabled
        # As Kafka: transactional batches need WRITE on the request's transactional id.
        transactional_id = body.get("transactional_id")
        txn_denied = (
            checked
            and any(first_batch_transactional(p["records"]) for t in body["topic_data"] for p in t["partition_data"])
            and (
                transactional_id is None
                or not auth.allowed(context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)
            )
        )
        for topic in body["topic_data"]:
            name = topic["name"]
            denied = (
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                if txn_denied
                else ErrorCode.TOPIC_AUTHORIZATION_FAILED
                if checked and not auth.topic_allowed(context, AclOperation.WRITE, name)
                else None
            )
            if denied is not None:
                for p in topic["partition_data"]:
                    errors[(name, p["index"])] = (denied, f"not authorized to write to {name}")
                continue
            if name in INTERNAL_TOPICS:
                # As Kafka: only the broker writes there. A client's record in
                # __consumer_offsets that the coordinator cannot decode would stop it
                # loading that partition, and so serving its groups.
                for p in topic["partition_data"]:
                    errors[(name, p["index"])] = (
                        ErrorCode.INVALID_TOPIC_EXCEPTION,
                        f"Cannot append to internal topic {name}",
                    )
                continue
            if name not in self._cache.image.topics:
                error = await self._maybe_auto_create(context, name)
                if error is not None:
                    for p in topic["partition_data"]:
                        errors[(name, p["index"])] = (error, f"topic {name!r} does not exist")
                    continue
            for p in topic["partition_data"]:
                records = p["records"]
                if records is None or len(records) == 0:
                    errors[(name, p["index"])] = (ErrorCode.CORRUPT_MESSAGE, "no record batch in the request")
                    continue
                try:
                    entries[(name, p["index"])] = validate_client_records(records)
                except KafkaError as exc:
                    errors[(name, p["index"])] = (exc.code, exc.message)
        if acks not in (-1, 0, 1):
            errors.update(
                {k: (ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, not {acks}") for k in entries}
            )
            entries = {}
        results: dict[tuple[str, int], ProduceResult] = {}
        quotas = self._produce_quotas
        throttle_ms = 0
        if entries:
            appended = self._replica_manager.append_to_leaders(entries, acks)
            if quotas.enabled:
                # Charged once appended (so that a throttled connection is muted before the
                # listener reads its next request, whatever the acks).
                throttle_ms = context.charge(quotas, sum(len(r) for r in entries.values()))
            if appended.pending:
                only_replication_left()
                await self._replica_manager.await_replication(appended, body["timeout_ms"])
            results = appended.results
        if acks == 0:
            # No response at all: the client does not wait for one. On an error Kafka
            # closes the connection instead, so that the producer notices and refreshes
            # its metadata.
            failed = dict(errors) | {
                k: (r.error.code, r.error.message) for k, r in results.items() if r.error is not None
            }
            if failed:
                raise CloseConnection(f"acks=0 produce failed: {_summary(failed)}")
            return None
        by_topic: dict[str, list[ProduceResponsePartitionProduceResponse]] = {}
        not_leader = False
        for (name, p), result in results.items():
            entry: ProduceResponsePartitionProduceResponse
            if result.error is None:
                entry = {
                    "index": p,
                    "error_code": 0,
                    "base_offset": result.base_offset,
                    "log_append_time_ms": result.log_append_time_ms,
                    "log_start_offset": result.log_start_offset,
                }
            else:
                entry = {
                    "index": p,
                    "error_code": result.error.code,
                    "base_offset": -1,
                    "error_message": result.error.message,
                }
                not_leader = not_leader or result.error.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                if isinstance(result.error, RecordValidationError):
                    entry["record_errors"] = [
                        {"batch_index": e.batch_index, "batch_index_error_message": e.message}
                        for e in result.error.record_errors
                    ]
            by_topic.setdefault(name, []).append(entry)
        for (name, p), (code, message) in errors.items():
            by_topic.setdefault(name, []).append(
                {"index": p, "error_code": code, "base_offset": -1, "error_message": message}
            )
            not_leader = not_leader or code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        return {
            "responses": [{"name": n, "partition_responses": parts} for n, parts in by_topic.items()],
            "throttle_time_ms": throttle_ms,
            "node_endpoints": self._point_to_current_leaders(by_topic, context.listener_name) if not_leader else [],
        }

    def _point_to_current_leaders(
        self, by_topic: dict[str, list[ProduceResponsePartitionProduceResponse]], listener_name: str
    ) -> list[NodeEndpoint]:
        """KIP-951 (Produce v10+): a partition answered NOT_LEADER_OR_FOLLOWER carries the
        leader and epoch this broker knows, and the response those leaders' endpoints, so the
        producer can retry without a metadata round trip. Returns the endpoints."""
        image = self._cache.image
        leaders = set()
        for name, entries in by_topic.items():
            for entry in entries:
                if entry["error_code"] != ErrorCode.NOT_LEADER_OR_FOLLOWER:
                    continue
                state = image.partition_states.get(name, {}).get(entry["index"])
                if state is not None and state.leader in image.brokers:
                    entry["current_leader"] = {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
                    leaders.add(state.leader)
        return node_endpoints(listener_name, [image.brokers[b] for b in sorted(leaders)]) if leaders else []

    # Offsets -------------------------------------------------------------------------------

    @handles(ApiKey.LIST_OFFSETS, 1, 9)
    async def list_offsets(self, context: RequestContext, body: ListOffsetsRequest) -> ListOffsetsResponse:
        header = context.header
        rm = self._replica_manager
        version = header.request_api_version
        read_committed = version >= 2 and body.get("isolation_level", 0) == IsolationLevel.READ_COMMITTED

        def answer(
            topic: str, lp: ListOffsetsRequestListOffsetsPartition
        ) -> ListOffsetsResponseListOffsetsPartitionResponse:
            ts = lp["timestamp"]
            if ts < 0 and version < SPECIAL_TIMESTAMP_MIN_VERSION.get(ts, version + 1):
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"timestamp {ts} needs a newer ListOffsets version")
            self._require_topic(context, AclOperation.DESCRIBE, topic)
            partition = rm.leader_partition(topic, lp["partition_index"])
            _check_leader_epoch(partition.leader_epoch, lp.get("current_leader_epoch", -1))
            entry = _offset_listed(lp, ErrorCode.NONE)
            entry["leader_epoch"] = partition.leader_epoch
            if ts == LATEST_TIMESTAMP:
                entry["offset"] = partition.last_stable_offset if read_committed else partition.high_watermark
            elif ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                entry["offset"] = partition.log_start_offset
            elif ts == LATEST_TIERED_TIMESTAMP:
                # Kafka's answer without remote storage: no offset, no epoch, no error.
                entry["leader_epoch"] = -1
            else:
                found = _max_timestamp_offset(partition) if ts == MAX_TIMESTAMP else partition.offset_for_timestamp(ts)
                if found is not None:
                    entry["offset"], entry["timestamp"] = found
            return entry

        answered = _per_partition(((t["name"], t["partitions"]) for t in body["topics"]), answer, _offset_listed)
        return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": ps} for n, ps in answered]}

    @handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4)
    async def offset_for_leader_epoch(
        self, context: RequestContext, body: OffsetForLeaderEpochRequest
    ) -> OffsetForLeaderEpochResponse:
        rm = self._replica_manager
        # As Kafka: CLUSTER_ACTION (replicas) may ask for every topic, others need DESCRIBE on each.
        cluster_action = self._auth.allowed(
            context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False
        )

        def answer(
            topic: str, ep: OffsetForLeaderEpochRequestOffsetForLeaderPartition
        ) -> OffsetForLeaderEpochResponseEpochEndOffset:
            if not cluster_action:
                self._require_topic(context, AclOperation.DESCRIBE, topic)
            # The epoch before leadership (as Kafka): a follower that already knows a newer
            # epoch than ours gets a retriable UNKNOWN_LEADER_EPOCH.
            local = rm.partitions.get((topic, ep["partition"]))
            if local is not None:
                _check_leader_epoch(local.leader_epoch, ep.get("current_leader_epoch", -1))
            partition = rm.leader_partition(topic, ep["partition"])
            leader_epoch, end_offset = partition.log.end_offset_for_epoch(ep["leader_epoch"])
            return {
                "partition": ep["partition"],
                "error_code": 0,
                "leader_epoch": leader_epoch,
                "end_offset": end_offset,
            }

        def failed(
            ep: OffsetForLeaderEpochRequestOffsetForLeaderPartition, error: ErrorCode
        ) -> OffsetForLeaderEpochResponseEpochEndOffset:
            return {"partition": ep["partition"], "error_code": error, "leader_epoch": -1, "end_offset": -1}

        answered = _per_partition(((t["topic"], t["partitions"]) for t in body["topics"]), answer, failed)
        return {"throttle_time_ms": 0, "topics": [{"topic": n, "partitions": ps} for n, ps in answered]}

    @handles(ApiKey.DELETE_RECORDS, 0, 2)
    async def delete_records(self, context: RequestContext, body: DeleteRecordsRequest) -> DeleteRecordsResponse:
        rm = self._replica_manager

        def answer(
            topic: str, dp: DeleteRecordsRequestDeleteRecordsPartition
        ) -> DeleteRecordsResponseDeleteRecordsPartitionResult:
            self._require_topic(context, AclOperation.DELETE, topic)
            low_watermark = rm.leader_partition(topic, dp["partition_index"]).delete_records(dp["offset"])
            return {"partition_index": dp["partition_index"], "low_watermark": low_watermark, "error_code": 0}

        def failed(
            dp: DeleteRecordsRequestDeleteRecordsPartition, error: ErrorCode
        ) -> DeleteRecordsResponseDeleteRecordsPartitionResult:
            return {"partition_index": dp["partition_index"], "low_watermark": -1, "error_code": error}

        answered = _per_partition(((t["name"], t["partitions"]) for t in body["topics"]), answer, failed)
        self._log_manager.checkpoint_log_start_offsets()
        return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": ps} for n, ps in answered]}

    # Topic administration ----------------------------------------------------------------

    @handles(ApiKey.CREATE_TOPICS, 0, 7)
    async def create_topics(self, context: RequestContext, body: CreateTopicsRequest) -> CreateTopicsResponse:
        config = self._config
        auth = self._auth
        results: list[CreateTopicsResponseCreatableTopicResult] = []
        for t in body["topics"]:
            name = t["name"]
            entry: CreateTopicsResponseCreatableTopicResult = {"name": name, "error_code": 0, "error_message": None}
            try:
                if not self._may_create(context, name):
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to create {name}")
                assignment = None
                if t["assignments"]:
                    if t["num_partitions"] != -1 or t["replication_factor"] != -1:
                        raise KafkaError(
                            ErrorCode.INVALID_REQUEST,
                            "Both numPartitions or replicationFactor and replicasAssignments were set. "
                            "Both cannot be used at the same time.",
                        )
                    assignment = numbered_assignment(
                        [(a["partition_index"], a["broker_ids"]) for a in t["assignments"]]
                    )
                partitions = t["num_partitions"] if t["num_partitions"] != -1 else config.num_partitions
                rf = t["replication_factor"] if t["replication_factor"] != -1 else config.default_replication_factor
                nulls = [c["name"] for c in t["configs"] if c["value"] is None]
                if nulls:
                    raise KafkaError(ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {nulls}")
                configs = {c["name"]: value for c in t["configs"] if (value := c["value"]) is not None}
                created = await self._admin.create_topic(
                    name,
                    partitions,
                    rf,
                    configs,
                    assignment=assignment,
                    validate_only=body.get("validate_only", False),
                    timeout_ms=body["timeout_ms"],
                )
                if not auth.allowed(context, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name, log_denial=False):
                    # As Kafka: the new topic's id, layout and configs only with DESCRIBE_CONFIGS.
                    entry["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    results.append(entry)
                    continue
                entry.update(
                    {
                        "topic_id": topic_uuid(created.topic_id),
                        "num_partitions": created.num_partitions,
                        "replication_factor": created.replication_factor,
                        "configs": [
                            {
                                "name": c.name,
                                "value": c.value,
                                "read_only": c.read_only,
                                "config_source": int(c.source),
                                "is_sensitive": c.sensitive,
                            }
                            for c in describe_topic_configs(created.config, self._dynamic_config.config)
                        ],
                    }
                )
            except KafkaError as exc:
                entry["error_code"], entry["error_message"] = exc.code, exc.message
            results.append(entry)
        return {"throttle_time_ms": 0, "topics": results}

    @handles(ApiKey.DELETE_TOPICS, 0, 6)
    async def delete_topics(self, context: RequestContext, body: DeleteTopicsRequest) -> DeleteTopicsResponse:
        header = context.header
        if header.request_api_version >= 6:
            by_id = {topic_uuid(t.topic_id): n for n, t in self._cache.image.topics.items()}
            # (name, id): the id of a topic named by its id only
            wanted: list[tuple[str | None, uuid.UUID | None]] = [
                (t["name"], None) if t["name"] else (by_id.get(t["topic_id"]), t["topic_id"]) for t in body["topics"]
            ]
        else:
            wanted = [(n, None) for n in body["topic_names"]]
        responses: list[DeleteTopicsResponseDeletableTopicResult] = []
        for name, topic_id in wanted:
            entry: DeleteTopicsResponseDeletableTopicResult = {
                "name": name,
                "topic_id": topic_id or uuid.UUID(int=0),
                "error_code": 0,
                "error_message": None,
            }
            try:
                if name is None:
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id}")
                if topic_id and not self._auth.topic_allowed(context, AclOperation.DESCRIBE, name):
                    entry["name"] = None  # as Kafka: an id does not tell its name without DESCRIBE
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "not authorized to describe that topic")
                self._require_topic(context, AclOperation.DELETE, name)
                await self._admin.delete_topic(name, body["timeout_ms"])
            except KafkaError as exc:
                entry["error_code"], entry["error_message"] = exc.code, exc.message
            responses.append(entry)
        return {"throttle_time_ms": 0, "responses": responses}

    @handles(ApiKey.CREATE_PARTITIONS, 0, 3)
    async def create_partitions(
        self, context: RequestContext, body: CreatePartitionsRequest
    ) -> CreatePartitionsResponse:
        results: list[CreatePartitionsResponseCreatePartitionsTopicResult] = []
        for t in body["topics"]:
            entry: CreatePartitionsResponseCreatePartitionsTopicResult = {
                "name": t["name"],
                "error_code": 0,
                "error_message": None,
            }
            try:
                self._require_topic(context, AclOperation.ALTER, t["name"])
                assignment = None if t["assignments"] is None else [tuple(a["broker_ids"]) for a in t["assignments"]]
                await self._admin.create_partitions(
                    t["name"], t["count"], body["validate_only"], assignment, body["timeout_ms"]
                )
            except KafkaError as exc:
                entry["error_code"], entry["error_message"] = exc.code, exc.message
            results.append(entry)
        return {"throttle_time_ms": 0, "results": results}

    # Coordinators and producer ids -------------------------------------------------------

    @handles(ApiKey.FIND_COORDINATOR, 0, 6)
    async def find_coordinator(self, context: RequestContext, body: FindCoordinatorRequest) -> FindCoordinatorResponse:
        header = context.header
        version = header.request_api_version
        keys = body["coordinator_keys"] if version >= 4 else [body["key"]]
        coordinators = [await self._coordinator_for(context, key, body.get("key_type", 0)) for key in keys]
        if version >= 4:
            return {"throttle_time_ms": 0, "coordinators": coordinators}
        c = coordinators[0]
        return {
            "throttle_time_ms": 0,
            "error_code": c["error_code"],
            "error_message": c["error_message"],
            "node_id": c["node_id"],
            "host": c["host"],
            "port": c["port"],
        }

    async def _coordinator_for(
        self, context: RequestContext, key: str, key_type: int
    ) -> FindCoordinatorResponseCoordinator:
        entry: FindCoordinatorResponseCoordinator = {
            "key": key,
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_code": 0,
            "error_message": None,
        }
        if key_type not in (COORDINATOR_KEY_GROUP, COORDINATOR_KEY_TRANSACTION):
            # Share groups (2, KIP-932) or an unknown type: not served; non-retriable.
            entry["error_code"] = ErrorCode.INVALID_REQUEST
            entry["error_message"] = f"coordinator key type {key_type} is not supported"
            return entry
        try:
            if key_type == COORDINATOR_KEY_TRANSACTION:
                self._auth.require(
                    context,
                    AclOperation.DESCRIBE,
                    ResourceType.TRANSACTIONAL_ID,
                    key,
                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                )
                endpoint = await self._coordinators.transaction_coordinator(key)
            else:
                self._auth.require(
                    context, AclOperation.DESCRIBE, ResourceType.GROUP, key, ErrorCode.GROUP_AUTHORIZATION_FAILED
                )
                endpoint = await self._coordinators.group_coordinator(key)
            node = node_endpoint(endpoint, context.listener_name)
            if node is None:
                raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator has no such listener")
            entry.update({"node_id": node["node_id"], "host": node["host"], "port": node["port"]})
        except KafkaError as exc:
            entry["error_code"], entry["error_message"] = exc.code, exc.message
        return entry

    # SASL listeners answer these before the router (network/sasl_authenticator.py); here they
    # reach only listeners without SASL. (librdkafka before 2.x needs SaslHandshake v0 offered.)
    @handles(ApiKey.SASL_HANDSHAKE, 0, 1)
    @handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
    async def sasl_without_sasl(self, context: RequestContext, body: Body) -> Body:
        """SASL on a listener without it, or after authentication without re-authenticating."""
        header = context.header
        message = f"listener {context.listener_name} does not authenticate with SASL here"
        if header.request_api_key == ApiKey.SASL_HANDSHAKE:
            return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}
        return {
            "error_code": ErrorCode.ILLEGAL_SASL_STATE,
            "error_message": message,
            "auth_bytes": b"",
            "session_lifetime_ms": 0,
        }

    @handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
    async def init_producer_id(self, context: RequestContext, body: InitProducerIdRequest) -> InitProducerIdResponse:
        if body["transactional_id"] is not None:
            return await self._init_transactional_producer(body)
        # A new block of ids is reserved in the metadata store: off the event loop.
        producer_id, epoch = await asyncio.to_thread(
            self._producer_ids.init_producer_id, body.get("producer_id", -1), body.get("producer_epoch", -1)
        )
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": epoch}


def _per_partition(
    topics: Iterable[tuple[str, list[_Requested]]],
    answer: Callable[[str, _Requested], _Answer],
    failed: Callable[[_Requested, ErrorCode], _Answer],
) -> list[tuple[str, list[_Answer]]]:
    """The per-topic, per-partition shape most answers share: each requested partition of
    each (topic, partitions) answered by `answer(topic, partition)`, or, if that raises a
    KafkaError, by `failed(partition, its code)`."""
    out = []
    for topic, requested in topics:
        answers = []
        for partition in requested:
            try:
                answers.append(answer(topic, partition))
            except KafkaError as exc:
                answers.append(failed(partition, exc.code))
        out.append((topic, answers))
    return out


def _offset_listed(
    lp: ListOffsetsRequestListOffsetsPartition, error: ErrorCode
) -> ListOffsetsResponseListOffsetsPartitionResponse:
    """A ListOffsets partition answer without an offset (yet)."""
    return {"partition_index": lp["partition_index"], "error_code": error, "timestamp": -1, "offset": -1}


def _max_timestamp_offset(partition: Any) -> tuple[int, int] | None:
    """KIP-734: (offset, timestamp) of the first record holding the partition's largest
    timestamp, or None for an empty partition."""
    largest = max((s.max_timestamp for s in partition.log.segments), default=-1)
    if largest < 0:
        return None
    return partition.offset_for_timestamp(largest)


def _summary(failed: Mapping[tuple[str, int], tuple[int, str | None]]) -> str:
    return ", ".join(
        f"{t}-{p}: {ErrorCode(code).name} ({message})" for (t, p), (code, message) in sorted(failed.items())
    )


def _check_leader_epoch(ours: int, theirs: int) -> None:
    """KIP-320: a client that knows a newer epoch talks to a stale leader, an older one is fenced."""
    if theirs < 0 or theirs == ours:
        return
    if theirs > ours:
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH, f"leader epoch {theirs} is newer than ours ({ours})")
    raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH, f"leader epoch {theirs} is older than ours ({ours})")
