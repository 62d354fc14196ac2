"""The transaction APIs of the Kafka protocol, over `loglake.transactions.TransactionCoordinator`.

InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions go to the coordinator; WriteTxnMarkers (from a
transaction coordinator, this broker's own included) writes COMMIT/ABORT control batches on
the partitions this broker leads, with coordinators/transaction_markers.py's `MarkerWriter`.

TxnOffsetCommit goes to the group coordinator once the transaction is verified as Kafka 3.9
verifies it (KIP-890: GroupCoordinator.handleTxnCommitOffsets through
ReplicaManager.maybeStartTransactionVerificationForPartition and AddPartitionsToTxnManager):
the transactional id's coordinator, wherever it is, is asked with AddPartitionsToTxn's
verify-only form whether the producer (id and epoch) has the group's `__consumer_offsets`
partition in its open transaction (AddOffsetsToTxn added it). This broker's own coordinator
answers directly; another broker's over the inter-broker listener. So the answer is the same
whichever brokers lead the two internal partitions. (Kafka skips the question when the
offsets partition already holds the producer's open transaction; here it is asked for every
TxnOffsetCommit, one round trip, once per transaction in the usual loop.) Error codes a
request's version predates are mapped by the router (error_responses.ERROR_DOWNGRADES).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from loglake.errors import ErrorCode, KafkaError
from loglake.groups import OffsetCommitData, TopicPartition
from loglake.internal_topics import INTERNAL_TOPICS, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, map_append_error
from loglake.protocol import ApiKey
from loglake.protocol.bodies import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestAddPartitionsToTxnTopic,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResponseAddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponseAddPartitionsToTxnResult,
    AddPartitionsToTxnResponseAddPartitionsToTxnTopicResult,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersResponsePartitionResponse,
    DescribeProducersResponseTopicResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsResponseTransactionState,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponseTxnOffsetCommitResponsePartition,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
    WriteTxnMarkersResponseWritableTxnMarkerPartitionResult,
    WriteTxnMarkersResponseWritableTxnMarkerResult,
)
from loglake.security.acls import AclOperation, ResourceType
from loglake.transactions import TransactionCoordinator, TransactionState

from ingest_gateway.apis.request_router import handles
from ingest_gateway.network.kafka_client import KafkaClient
from ingest_gateway.network.request_context import RequestContext

if TYPE_CHECKING:
    from loglake.groups import GroupCoordinator
    from loglake.security.client import ClientSecurity

    from ingest_gateway.apis.authorization import RequestAuthorization
    from ingest_gateway.coordinators.transaction_markers import MarkerWriter
    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

# AddPartitionsToTxn v4+ is the broker-to-coordinator form (KIP-890) with per-transaction results.
_ADD_PARTITIONS_BATCHED_VERSION = 4
# What a TxnOffsetCommit's verification sends another broker (Kafka 3.9's AddPartitionsToTxnManager: v5).
_VERIFY_VERSION = 5
_VERIFY_TIMEOUT_MS = 10_000


def _topic_partitions(topics: list[AddPartitionsToTxnRequestAddPartitionsToTxnTopic]) -> list[TopicPartition]:
    return [TopicPartition(t["name"], p) for t in topics for p in t["partitions"]]


def _results_by_topic(
    errors: Mapping[TopicPartition, ErrorCode],
) -> list[AddPartitionsToTxnResponseAddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[AddPartitionsToTxnResponseAddPartitionsToTxnPartitionResult]] = defaultdict(list)
    for tp, error in errors.items():
        by_topic[tp.topic].append({"partition_index": tp.partition, "partition_error_code": error})
    return [{"name": topic, "results_by_partition": parts} for topic, parts in by_topic.items()]


class TxnApis:
    def __init__(
        self,
        coordinator: TransactionCoordinator,
        writer: MarkerWriter,
        cache: MetadataCache,
        replica_manager: ReplicaManager,
        group_coordinator: GroupCoordinator,
        authorization: RequestAuthorization,
        inter_broker_security: ClientSecurity | None = None,
    ) -> None:
        """`inter_broker_security`: how to reach other brokers' transaction coordinators
        (default: as the replica fetchers reach other brokers)."""
        self.coordinator = coordinator
        self._writer = writer
        self._cache = cache
        self._replica_manager = replica_manager
        self._group_coordinator = group_coordinator
        self._auth = authorization
        self._broker_id = replica_manager.broker_id
        self._inter_broker_security = (
            replica_manager.fetcher_manager.security if inter_broker_security is None else inter_broker_security
        )
        # Connections to the other brokers' transaction coordinators, by broker id.
        self._clients: dict[int, KafkaClient] = {}

    async def close(self) -> None:
        """Close the connections to other brokers."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    async def init_producer_id(self, body: InitProducerIdRequest) -> InitProducerIdResponse:
        """InitProducerId of a transactional producer (the idempotent one is KafkaApis')."""
        transactional_id = body["transactional_id"]
        assert transactional_id is not None  # KafkaApis hands over only transactional producers
        result = await self.coordinator.init_producer_id(
            transactional_id,
            body["transaction_timeout_ms"],
            body.get("producer_id", -1),
            body.get("producer_epoch", -1),
        )
        return {
            "throttle_time_ms": 0,
            "error_code": result.error,
            "producer_id": result.producer_id,
            "producer_epoch": result.producer_epoch,
        }

    @handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
    async def add_partitions_to_txn(
        self, context: RequestContext, body: AddPartitionsToTxnRequest
    ) -> AddPartitionsToTxnResponse:
        header = context.header
        if header.request_api_version < _ADD_PARTITIONS_BATCHED_VERSION:
            partitions = _topic_partitions(body["v3_and_below_topics"])
            errors = await self._add_partitions(
                body["v3_and_below_transactional_id"],
                body["v3_and_below_producer_id"],
                body["v3_and_below_producer_epoch"],
                partitions,
                verify_only=False,
                client=context,
            )
            return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _results_by_topic(errors)}
        results: list[AddPartitionsToTxnResponseAddPartitionsToTxnResult] = []
        for txn in body["transactions"]:
            partitions = _topic_partitions(txn["topics"])
            # The brokers' form: CLUSTER_ACTION was checked for the whole request (REQUEST_CHECKS).
            errors = await self._add_partitions(
                txn["transactional_id"],
                txn["producer_id"],
                txn["producer_epoch"],
                partitions,
                txn["verify_only"],
                client=None,
            )
            results.append({"transactional_id": txn["transactional_id"], "topic_results": _results_by_topic(errors)})
        return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": results}

    async def _add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        verify_only: bool,
        client: RequestContext | None,
    ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's checks, then the coordinator's answer for all the partitions. A client
        (`client`; None: a broker, whose request was authorized as a whole) must be allowed
        WRITE on the transactional id and on each topic (internal topics join only through
        AddOffsetsToTxn: they are refused as unauthorized, as Kafka does); if any
        partition is refused or unknown, the others answer OPERATION_NOT_ATTEMPTED."""
        auth = self._auth
        if client is not None and not auth.allowed(
            client, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id
        ):
            return dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        denied = set()
        if client is not None:
            denied = auth.denied_topics(client, AclOperation.WRITE, {tp.topic for tp in partitions} - INTERNAL_TOPICS)
            denied |= {tp.topic for tp in partitions} & INTERNAL_TOPICS
        refused = self._refused(partitions, denied)
        if refused:
            return {tp: refused.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions}
        if verify_only:
            return self.coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
        error = await self.coordinator.add_partitions_to_txn(transactional_id, producer_id, producer_epoch, partitions)
        return dict.fromkeys(partitions, error)

    def _refused(self, partitions: Iterable[TopicPartition], denied: set[str]) -> dict[TopicPartition, ErrorCode]:
        """TOPIC_AUTHORIZATION_FAILED for the partitions of `denied` topics, then
        UNKNOWN_TOPIC_OR_PARTITION for those of the others that do not exist."""
        states = self._cache.image.partition_states
        refused = {}
        for tp in partitions:
            if tp.topic in denied:
                refused[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif tp.partition not in states.get(tp.topic, {}):
                refused[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return refused

    @handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
    async def add_offsets_to_txn(
        self, context: RequestContext, body: AddOffsetsToTxnRequest
    ) -> AddOffsetsToTxnResponse:
        error = await self.coordinator.add_offsets_to_txn(
            body["transactional_id"], body["producer_id"], body["producer_epoch"], body["group_id"]
        )
        return {"throttle_time_ms": 0, "error_code": error}

    @handles(ApiKey.END_TXN, 0, 4)
    async def end_txn(self, context: RequestContext, body: EndTxnRequest) -> EndTxnResponse:
        error = await self.coordinator.end_txn(
            body["transactional_id"], body["producer_id"], body["producer_epoch"], body["committed"]
        )
        return {"throttle_time_ms": 0, "error_code": error, "producer_id": -1, "producer_epoch": -1}

    @handles(ApiKey.TXN_OFFSET_COMMIT, 0, 4)
    async def txn_offset_commit(self, context: RequestContext, body: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
        offsets = {
            TopicPartition(t["name"], p["partition_index"]): OffsetCommitData(
                p["committed_offset"], p.get("committed_leader_epoch", -1), p["committed_metadata"]
            )
            for t in body["topics"]
            for p in t["partitions"]
        }
        errors = self._refused_txn_offsets(context, body, offsets)
        valid = {tp: o for tp, o in offsets.items() if tp not in errors}
        if valid:
            error = await self._verify_txn_offset_commit(body)
            if error is not ErrorCode.NONE:
                errors |= dict.fromkeys(valid, error)
            else:
                errors |= await self._group_coordinator.commit_txn_offsets(
                    body["group_id"],
                    body["producer_id"],
                    body["producer_epoch"],
                    body.get("member_id", ""),
                    body.get("generation_id", -1),
                    valid,
                    group_instance_id=body.get("group_instance_id"),
                )
        by_topic: dict[str, list[TxnOffsetCommitResponseTxnOffsetCommitResponsePartition]] = defaultdict(list)
        for tp, code in errors.items():
            by_topic[tp.topic].append({"partition_index": tp.partition, "error_code": code})
        return {"throttle_time_ms": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def _refused_txn_offsets(
        self, context: RequestContext, body: TxnOffsetCommitRequest, offsets: Mapping[TopicPartition, OffsetCommitData]
    ) -> dict[TopicPartition, ErrorCode]:
        """Kafka's checks of a TxnOffsetCommit: WRITE on the transactional id and READ on the
        group (else every partition fails), READ on each topic and the partition's existence
        (else that partition fails and the others are committed)."""
        auth = self._auth
        if not auth.allowed(context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body["transactional_id"]):
            return dict.fromkeys(offsets, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not auth.allowed(context, AclOperation.READ, ResourceType.GROUP, body["group_id"]):
            return dict.fromkeys(offsets, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        return self._refused(offsets, auth.denied_topics(context, AclOperation.READ, {tp.topic for tp in offsets}))

    async def _verify_txn_offset_commit(self, body: TxnOffsetCommitRequest) -> ErrorCode:
        """The transactional id's coordinator (this broker's or another's, where the metadata
        says `__transaction_state`'s partition is led) verifies that the producer's open
        transaction holds the group's offsets partition; its answer as Kafka's group
        coordinator hands it on (GroupMetadataManager.maybeConvertOffsetCommitError)."""
        transactional_id, producer_id, epoch = body["transactional_id"], body["producer_id"], body["producer_epoch"]
        offsets = TopicPartition(OFFSETS_TOPIC, self._group_coordinator.partition_for(body["group_id"]))
        image = self._cache.image
        txn_partition = self.coordinator.partition_for(transactional_id)
        state = image.partition_states.get(TRANSACTION_STATE_TOPIC, {}).get(txn_partition)
        if state is not None and state.leader == self._broker_id:
            error = self.coordinator.verify_partitions(transactional_id, producer_id, epoch, [offsets])[offsets]
        elif state is None or state.leader not in image.brokers:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        else:
            error = await self._verify_remotely(state.leader, transactional_id, producer_id, epoch, offsets)
        if error is ErrorCode.NETWORK_EXCEPTION:
            # Older clients do not retry it well: they retry this one without a coordinator lookup.
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return map_append_error(KafkaError(error), too_large=ErrorCode.INVALID_COMMIT_OFFSET_SIZE)

    async def _verify_remotely(
        self, broker: int, transactional_id: str, producer_id: int, epoch: int, partition: TopicPartition
    ) -> ErrorCode:
        """AddPartitionsToTxn's verify-only form to `broker`'s transaction coordinator (Kafka's
        AddPartitionsToTxnManager): the partition's error, NETWORK_EXCEPTION if no answer came."""
        endpoint = self._cache.image.brokers[broker]
        client = self._clients.get(broker)
        if client is None or (client.host, client.port) != (endpoint.host, endpoint.port):
            if client is not None:
                client.close_nowait()
            client = self._clients[broker] = KafkaClient(
                endpoint.host,
                endpoint.port,
                security=self._inter_broker_security,
                request_timeout_ms=_VERIFY_TIMEOUT_MS,
            )
        transaction = {
            "transactional_id": transactional_id,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "verify_only": True,
            "topics": [{"name": partition.topic, "partitions": [partition.partition]}],
        }
        try:
            response = await client.request(
                ApiKey.ADD_PARTITIONS_TO_TXN, _VERIFY_VERSION, {"transactions": [transaction]}
            )
        except (ConnectionError, TimeoutError) as exc:
            log.warning("verifying %s's transaction with broker %d failed: %s", transactional_id, broker, exc)
            return ErrorCode.NETWORK_EXCEPTION
        if response["error_code"]:
            # The whole request refused: CLUSTER_AUTHORIZATION_FAILED is not the client's to see.
            top = ErrorCode(response["error_code"])
            return ErrorCode.INVALID_TXN_STATE if top is ErrorCode.CLUSTER_AUTHORIZATION_FAILED else top
        for result in response["results_by_transaction"]:
            for topic in result["topic_results"]:
                for p in topic["results_by_partition"]:
                    if (topic["name"], p["partition_index"]) == (partition.topic, partition.partition):
                        return ErrorCode(p["partition_error_code"])
        return ErrorCode.NONE  # as Kafka: only the partitions with an error count

    @handles(ApiKey.WRITE_TXN_MARKERS, 0, 1)
    async def write_txn_markers(self, context: RequestContext, body: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        markers: list[WriteTxnMarkersResponseWritableTxnMarkerResult] = []
        for m in body["markers"]:
            partitions = [TopicPartition(t["name"], p) for t in m["topics"] for p in t["partition_indexes"]]
            errors = await self._writer.write(
                m["producer_id"], m["producer_epoch"], m["transaction_result"], m["coordinator_epoch"], partitions
            )
            by_topic: dict[str, list[WriteTxnMarkersResponseWritableTxnMarkerPartitionResult]] = defaultdict(list)
            for tp, code in errors.items():
                by_topic[tp.topic].append({"partition_index": tp.partition, "error_code": code})
            markers.append(
                {
                    "producer_id": m["producer_id"],
                    "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
                }
            )
        return {"markers": markers}

    @handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
    async def describe_transactions(
        self, context: RequestContext, body: DescribeTransactionsRequest
    ) -> DescribeTransactionsResponse:
        states: list[DescribeTransactionsResponseTransactionState] = []
        auth = self._auth
        for d in self.coordinator.describe_transactions(body["transactional_ids"]):
            if not auth.allowed(context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, d.transactional_id):
                # The other fields as their encoded defaults: nothing of the transaction is told.
                states.append(
                    {
                        "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                        "transactional_id": d.transactional_id,
                        "transaction_state": "",
                        "transaction_timeout_ms": 0,
                        "transaction_start_time_ms": 0,
                        "producer_id": 0,
                        "producer_epoch": 0,
                        "topics": [],
                    }
                )
                continue
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in d.partitions:
                by_topic[tp.topic].append(tp.partition)
            for topic in auth.denied_topics(context, AclOperation.DESCRIBE, by_topic):
                del by_topic[topic]  # as Kafka: only the topics the principal may describe
            states.append(
                {
                    "error_code": d.error,
                    "transactional_id": d.transactional_id,
                    "transaction_state": d.state,
                    "transaction_timeout_ms": d.txn_timeout_ms,
                    "transaction_start_time_ms": d.txn_start_timestamp,
                    "producer_id": d.producer_id,
                    "producer_epoch": d.producer_epoch,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
                }
            )
        return {"throttle_time_ms": 0, "transaction_states": states}

    @handles(ApiKey.LIST_TRANSACTIONS, 0, 1)
    async def list_transactions(
        self, context: RequestContext, body: ListTransactionsRequest
    ) -> ListTransactionsResponse:
        known = {s.display_name for s in TransactionState}
        states = body["state_filters"]
        error, listings = self.coordinator.list_transactions(states, body["producer_id_filters"])
        duration = body.get("duration_filter", -1)
        if duration >= 0:
            described = {
                d.transactional_id: d
                for d in self.coordinator.describe_transactions([t.transactional_id for t in listings])
            }
            now = self.coordinator.now_ms()
            listings = [t for t in listings if 0 <= described[t.transactional_id].txn_start_timestamp <= now - duration]
        auth = self._auth
        listings = [
            t
            for t in listings
            if auth.allowed(context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id, False)
        ]
        return {
            "throttle_time_ms": 0,
            "error_code": error,
            "unknown_state_filters": [s for s in states if s not in known],
            "transaction_states": [
                {"transactional_id": t.transactional_id, "producer_id": t.producer_id, "transaction_state": t.state}
                for t in listings
            ],
        }

    @handles(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
    async def describe_producers(
        self, context: RequestContext, body: DescribeProducersRequest
    ) -> DescribeProducersResponse:
        """DescribeProducers (KIP-664): each partition's producers from this leader's producer
        state, with the first offset of an open transaction. Coordinator epochs are not kept
        per producer here: -1."""
        topics: list[DescribeProducersResponseTopicResponse] = []
        for t in body["topics"]:
            partitions: list[DescribeProducersResponsePartitionResponse] = []
            try:  # once per topic: one check, one audit line
                self._auth.require(
                    context, AclOperation.READ, ResourceType.TOPIC, t["name"], ErrorCode.TOPIC_AUTHORIZATION_FAILED
                )
                denied = None
            except KafkaError as exc:
                denied = exc
            for index in t["partition_indexes"]:
                try:
                    if denied is not None:
                        raise denied
                    log_ = self._replica_manager.leader_partition(t["name"], index).log
                except KafkaError as exc:
                    partitions.append(
                        {
                            "partition_index": index,
                            "error_code": exc.code,
                            "error_message": exc.message,
                            "active_producers": [],
                        }
                    )
                    continue
                entries = sorted(log_.producer_state.producers.values(), key=lambda e: e.producer_id)
                partitions.append(
                    {
                        "partition_index": index,
                        "error_code": ErrorCode.NONE,
                        "error_message": None,
                        "active_producers": [
                            {
                                "producer_id": e.producer_id,
                                "producer_epoch": e.producer_epoch,
                                "last_sequence": e.last_seq,
                                "last_timestamp": e.last_timestamp,
                                "coordinator_epoch": -1,
                                "current_txn_start_offset": e.current_txn_first_offset,
                            }
                            for e in entries
                        ],
                    }
                )
            topics.append({"name": t["name"], "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}
