"""The Fetch API (v4-17), for consumers and followers, over fetch sessions (KIP-227).

Each request gets a context from the `FetchManager` (replica/fetch_session.py): the partitions to
read are the request's (full fetch) or the session's (incremental fetch). Consumers read
committed data up to the high watermark, followers up to the log end (the replica manager
records their position); either way the records stay `LogSlice` file ranges, which the
listener sends with sendfile. The context then keeps what the answer must carry.

From v13 topics travel by id: an id this broker does not know gets UNKNOWN_TOPIC_ID, one
that names a topic whose local replica has another id (a recreated topic) gets
INCONSISTENT_TOPIC_ID. From v16 a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH answer
names the current leader and its endpoint (KIP-951), so the client need not ask Metadata.

From v11 consumers may read from followers (KIP-392): a follower serves them up to its own
high watermark, and a leader whose `replica.selector.class` is the rack-aware selector
points a consumer that names its rack to an in-sync replica there (`preferred_read_replica`).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loglake.broker_configs import RACK_AWARE_REPLICA_SELECTOR
from loglake.cluster.partition import Partition, monotonic_ms
from loglake.cluster.replica_selector import rack_aware_read_replica
from loglake.config import BrokerConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey, IsolationLevel
from loglake.protocol.bodies import FetchRequest, FetchResponse, FetchResponseFetchableTopicResponse
from loglake.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from loglake.security.quotas import ClientQuotaManager

from ingest_gateway.apis.request_router import handles
from ingest_gateway.metadata.client_endpoints import NodeEndpoint, node_endpoints
from ingest_gateway.metadata.metadata_cache import MetadataCache
from ingest_gateway.network.request_context import RequestContext
from ingest_gateway.observability.metrics import FETCH_FOLLOWER, label_request
from ingest_gateway.replica.fetch_session import (
    DEFAULT_CACHE_SLOTS,
    DEFAULT_EVICTION_MS,
    ZERO_UUID,
    FetchContext,
    FetchManager,
    FetchSessionCache,
    PartitionRequest,
    PartitionResponse,
    TopicIdPartition,
    parse_topic_id,
    response_records_size,
)
from ingest_gateway.replica.replica_manager import FollowerFetchPartition, FollowerFetchResult, ReplicaManager

if TYPE_CHECKING:
    from loglake.coordination.model import BrokerEndpoint

    from ingest_gateway.apis.authorization import RequestAuthorization
    from ingest_gateway.observability.metrics import BrokerMetrics

Answers = list[tuple[TopicIdPartition, PartitionResponse]]

NO_MAX_BYTES = 0x7FFFFFFF
# Errors whose answer names the current leader from v16 on (KIP-951).
_LEADER_ERRORS = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def _partition_response(partition: int, error: int = ErrorCode.NONE) -> PartitionResponse:
    return {
        "partition_index": partition,
        "error_code": error,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


@dataclass(frozen=True)
class ConsumerRead:
    """How a consumer's fetch reads: isolation level, and whether followers may serve it
    (KIP-392, Fetch v11+) with the consumer's rack."""

    read_committed: bool
    from_followers: bool
    rack: str


class FetchApis:
    def __init__(
        self,
        config: BrokerConfig,
        cache: MetadataCache,
        replica_manager: ReplicaManager,
        authorization: RequestAuthorization,
        fetch_quotas: ClientQuotaManager,
        metrics: BrokerMetrics | None,
    ) -> None:
        self._config = config
        self._cache = cache
        self._replica_manager = replica_manager
        self._auth = authorization
        self._fetch_quotas = fetch_quotas
        self._metrics = metrics
        # Topic id -> name, rebuilt when the metadata image is replaced or an id is missing.
        self._names: dict[uuid.UUID, str] = {}
        self._names_image: object = None
        self._names_hosted = -1

    @functools.cached_property
    def sessions(self) -> FetchManager:
        # Built on first use: the broker's config is not needed before a fetch.
        raw = self._config.raw
        return FetchManager(
            FetchSessionCache(
                int(raw.get("max.incremental.fetch.session.cache.slots", DEFAULT_CACHE_SLOTS)),
                int(raw.get("min.incremental.fetch.session.eviction.ms", DEFAULT_EVICTION_MS)),
            )
        )

    # Topic ids ---------------------------------------------------------------------------

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        image = self._cache.image
        hosted = len(self._replica_manager.partitions)
        # Built again when the image or the hosted partitions change, not on every unknown
        # id: a session naming one would make each of its fetches cost every topic.
        if image is not self._names_image or (topic_id not in self._names and hosted != self._names_hosted):
            self._names_image = image
            self._names_hosted = hosted
            names = {parse_topic_id(t.topic_id): name for name, t in image.topics.items() if t.topic_id}
            # A leader learns its partitions (LeaderAndIsr) before the image has their
            # topic (UpdateMetadata): its followers may already fetch them by id.
            for (name, _), p in self._replica_manager.partitions.items():
                if name not in image.topics and p.topic_id:
                    names[parse_topic_id(p.topic_id)] = name
            self._names = names
        return self._names.get(topic_id)

    def _inconsistent(self, tp: TopicIdPartition) -> bool:
        """Whether the local replica of `tp` belongs to another topic of the same name."""
        if tp.topic_id == ZERO_UUID:
            return False
        local = self._replica_manager.partitions.get((tp.topic, tp.partition))  # type: ignore[arg-type]
        # The ints: UUID.__eq__ is Python code, and this runs for every partition of every fetch.
        return local is not None and bool(local.topic_id) and parse_topic_id(local.topic_id).int != tp.topic_id.int

    def _requested(
        self, version: int, body: FetchRequest
    ) -> tuple[list[tuple[TopicIdPartition, PartitionRequest]], list[TopicIdPartition]]:
        fetch_data = []
        for t in body["topics"]:
            if version >= 13:
                topic_id = t["topic_id"]
                topic = self.topic_name(topic_id)
            else:
                topic_id, topic = ZERO_UUID, t["topic"]
            for p in t["partitions"]:
                request = PartitionRequest(
                    p["fetch_offset"],
                    p["partition_max_bytes"],
                    p["current_leader_epoch"],
                    p["last_fetched_epoch"],
                    p["log_start_offset"],
                )
                fetch_data.append((TopicIdPartition(topic_id, topic, p["partition"]), request))
        to_forget = []
        for f in body["forgotten_topics_data"] or ():
            if version >= 13:
                topic_id, topic = f["topic_id"], self.topic_name(f["topic_id"])
            else:
                topic_id, topic = ZERO_UUID, f["topic"]
            to_forget += [TopicIdPartition(topic_id, topic, p) for p in f["partitions"]]
        return fetch_data, to_forget

    def _denied_topics(
        self, context: RequestContext, replica_id: int, partitions: Iterable[tuple[TopicIdPartition, PartitionRequest]]
    ) -> set[str]:
        """Topics this fetch may not read: followers need ClusterAction (else every topic is
        denied, as Kafka answers), consumers READ on each topic."""
        auth = self._auth
        if not auth.enabled:
            return set()
        topics = {tp.topic for tp, _ in partitions if tp.topic is not None}
        if replica_id >= 0:
            return (
                set()
                if auth.allowed(context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
                else topics
            )
        return auth.denied_topics(context, AclOperation.READ, topics)

    # The handler -------------------------------------------------------------------------

    @handles(ApiKey.FETCH, 4, 17)
    async def fetch(self, context: RequestContext, body: FetchRequest) -> FetchResponse:
        header = context.header
        version = header.request_api_version
        replica_id = body["replica_state"]["replica_id"] if version >= 15 else body["replica_id"]
        quotas = self._fetch_quotas
        if replica_id < 0 and quotas.enabled:
            throttle_ms = quotas.throttle_ms(context.principal.name, header.client_id or "")
            if throttle_ms > 0:
                # Over its consumer_byte_rate: an empty answer now, the connection muted (as Kafka).
                context.connection.throttle_ms = throttle_ms
                return {
                    "throttle_time_ms": throttle_ms,
                    "error_code": 0,
                    "session_id": body["session_id"],
                    "responses": [],
                }
        fetch_data, to_forget = self._requested(version, body)
        session = self.sessions.new_context(
            version, body["session_id"], body["session_epoch"], replica_id >= 0, fetch_data, to_forget, self.topic_name
        )
        # Partitions that cannot be read are answered at once and do not end a long poll.
        erroneous: Answers = []
        readable: list[tuple[TopicIdPartition, PartitionRequest]] = []
        wanted = list(session.partitions())
        denied = self._denied_topics(context, replica_id, wanted)
        for tp, partition_request in wanted:
            if tp.topic is None:
                erroneous.append((tp, _partition_response(tp.partition, ErrorCode.UNKNOWN_TOPIC_ID)))
            elif tp.topic in denied:
                erroneous.append((tp, _partition_response(tp.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
            elif self._inconsistent(tp):
                erroneous.append((tp, _partition_response(tp.partition, ErrorCode.INCONSISTENT_TOPIC_ID)))
            else:
                readable.append((tp, partition_request))
        max_bytes = body["max_bytes"] or NO_MAX_BYTES
        metrics = self._metrics
        if replica_id >= 0 and metrics is not None:
            label_request(FETCH_FOLLOWER)
        if not readable:
            answers: Answers = []
        elif replica_id >= 0:
            answers = await self._fetch_for_follower(
                replica_id, readable, body["max_wait_ms"], body["min_bytes"], max_bytes, session
            )
        else:
            read_committed = version >= 4 and body.get("isolation_level", 0) == IsolationLevel.READ_COMMITTED
            # From v11 a consumer may read from followers (KIP-392) and says its rack.
            reader = ConsumerRead(read_committed, version >= 11, body.get("rack_id") or "" if version >= 11 else "")
            answers = await self._fetch_for_consumer(
                readable, body["max_wait_ms"], body["min_bytes"], max_bytes, reader
            )
            if metrics is not None:
                # BytesOutPerSec counts what consumers are sent (replication is not in it).
                for tp, entry in answers:
                    if entry["records"]:
                        metrics.record_bytes_out(tp.topic, response_records_size(entry))  # type: ignore[arg-type]
        throttle_ms = 0
        if replica_id < 0 and quotas.enabled:
            sent = sum(response_records_size(entry) for _, entry in answers)
            if sent:
                throttle_ms = context.charge(quotas, sent)
        result = session.respond(answers + erroneous)
        response: FetchResponse = {
            "throttle_time_ms": throttle_ms,
            "error_code": result.error,
            "session_id": result.session_id,
            "responses": _by_topic(result.partitions),
        }
        if version >= 16:
            response["node_endpoints"] = self._current_leaders(result.partitions, context.listener_name)
        return response

    async def _fetch_for_consumer(
        self,
        readable: list[tuple[TopicIdPartition, PartitionRequest]],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        reader: ConsumerRead,
    ) -> Answers:
        """Committed data (read_committed: below the LSO, with the aborted transactions);
        long-polls until `min_bytes` or `max_wait_ms` (an error or a redirection to a
        preferred read replica answers at once)."""
        rm = self._replica_manager
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, max_wait_ms) / 1000
        keys = [(tp.topic, tp.partition) for tp, _ in readable]
        while True:
            answers, total = self._read_committed(readable, max_bytes, reader)
            remaining = deadline - loop.time()
            if total >= min_bytes or remaining <= 0 or total < 0:
                return answers
            await rm.wait_for_change(keys, remaining)  # type: ignore[arg-type]

    def _preferred_read_replica(self, partition: Partition, reader: ConsumerRead, fetch_offset: int) -> int:
        """KIP-392: another replica this consumer should read from, or -1."""
        if not reader.rack or not partition.is_leader:
            return -1
        if self._config.raw.get("replica.selector.class") != RACK_AWARE_REPLICA_SELECTOR:
            return -1
        brokers = self._cache.image.brokers

        def rack_of(broker_id: int) -> str | None:
            b = brokers.get(broker_id)
            return None if b is None else b.rack

        chosen = rack_aware_read_replica(partition, reader.rack, rack_of, fetch_offset, monotonic_ms())
        return -1 if chosen == partition.broker_id else chosen

    def _read_committed(
        self, readable: list[tuple[TopicIdPartition, PartitionRequest]], max_bytes: int, reader: ConsumerRead
    ) -> tuple[Answers, int]:
        """One pass over the partitions: (answers, bytes, or -1 to answer at once)."""
        rm = self._replica_manager
        read_committed = reader.read_committed
        budget = max_bytes
        total = 0
        answer_now = False
        answers = []
        for tp, request in readable:
            entry = _partition_response(tp.partition)
            try:
                if reader.from_followers:
                    partition = rm.hosted_partition(tp.topic, tp.partition)  # type: ignore[arg-type]
                else:
                    partition = rm.leader_partition(tp.topic, tp.partition)  # type: ignore[arg-type]
                partition.check_leader_epoch(request.current_leader_epoch)
                preferred = self._preferred_read_replica(partition, reader, request.fetch_offset)
                if preferred >= 0:
                    entry["preferred_read_replica"] = preferred
                    entry["high_watermark"] = partition.high_watermark
                    entry["last_stable_offset"] = partition.last_stable_offset
                    entry["log_start_offset"] = partition.log_start_offset
                    answers.append((tp, entry))
                    answer_now = True  # the consumer should go there at once
                    continue
                # KIP-74: the first batch goes out whole even over the limits, so a
                # consumer can always make progress.
                piece = partition.read(
                    request.fetch_offset,
                    min(request.max_bytes, budget),
                    committed_only=True,
                    min_one_message=total == 0,
                    stable_only=read_committed,
                )
                entry["high_watermark"] = partition.high_watermark
                entry["last_stable_offset"] = partition.last_stable_offset
                entry["log_start_offset"] = partition.log_start_offset
                if piece.size:
                    entry["records"] = piece
                    if read_committed:
                        # The consumer drops these producers' records from their first offset
                        # up to the ABORT marker (per batch, from the .txnindex).
                        entry["aborted_transactions"] = [
                            {"producer_id": a.producer_id, "first_offset": a.first_offset}
                            for a in partition.log.collect_aborted_transactions(request.fetch_offset, piece.next_offset)
                        ]
                    total += piece.size
                    budget -= piece.size
            except KafkaError as exc:
                entry["error_code"] = exc.code
                answer_now = True
            answers.append((tp, entry))
        return answers, (-1 if answer_now else total)

    async def _fetch_for_follower(
        self,
        replica_id: int,
        readable: list[tuple[TopicIdPartition, PartitionRequest]],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        session: FetchContext,
    ) -> Answers:
        """Up to the log end; the replica manager records the follower's position. Answers
        the session leaves out (an idle partition, in an incremental session) are not built."""
        requests = [
            FollowerFetchPartition(tp.topic, tp.partition, r.fetch_offset, r.current_leader_epoch, r.max_bytes)  # type: ignore[arg-type]
            for tp, r in readable
        ]
        results = await self._replica_manager.fetch_for_follower(
            replica_id, requests, max_wait_ms, min_bytes, max_bytes
        )
        omits = session.omits
        return [
            (tp, _follower_response(r))
            for (tp, _), r in zip(readable, results, strict=True)
            if r.error or r.records is not None or not omits(tp, r.high_watermark, r.log_start_offset)
        ]

    def _current_leaders(self, answers: Answers, listener_name: str) -> list[NodeEndpoint]:
        """KIP-951: name the leader in each NOT_LEADER/FENCED answer; the leaders' endpoints."""
        image = self._cache.image
        endpoints: dict[int, BrokerEndpoint] = {}
        for tp, entry in answers:
            if entry["error_code"] not in _LEADER_ERRORS or tp.topic is None:
                continue
            state = image.partition_states.get(tp.topic, {}).get(tp.partition)
            if state is None or state.leader < 0:
                continue
            entry["current_leader"] = {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
            broker = image.brokers.get(state.leader)
            if broker is not None:
                endpoints[broker.broker_id] = broker
        return node_endpoints(listener_name, list(endpoints.values()))


def _follower_response(r: FollowerFetchResult) -> PartitionResponse:
    entry = _partition_response(r.partition, r.error)
    entry["high_watermark"] = entry["last_stable_offset"] = r.high_watermark
    entry["log_start_offset"] = r.log_start_offset
    if r.records is not None:
        entry["records"] = r.records
    return entry


def _by_topic(answers: Answers) -> list[FetchResponseFetchableTopicResponse]:
    """Answers grouped by topic, in order (a topic whose partitions are not adjacent appears
    more than once, as in Kafka's responses)."""
    topics: list[FetchResponseFetchableTopicResponse] = []
    last: tuple[uuid.UUID, str | None] | None = None
    for tp, entry in answers:
        if (tp.topic_id, tp.topic) != last:
            last = (tp.topic_id, tp.topic)
            # No name: an unknown topic id (v13+, where the name is not sent).
            topics.append({"topic": tp.topic or "", "topic_id": tp.topic_id, "partitions": []})
        topics[-1]["partitions"].append(entry)
    return topics
