"""The follower side of replication (Kafka's ReplicaFetcherManager and ReplicaFetcherThread).

One `ReplicaFetcher` task per leader broker fetches every partition this broker follows
from that leader, with Fetch requests that carry this broker's id as `replica_id`, and
appends the batches as they come (offsets and leader epochs kept). The leader learns the
follower's log end from the fetch offset, and answers with its high watermark; the
follower's HW is min(leader's HW, own LEO).

Before the first fetch of a partition (after becoming follower, after a restart, after a
leader change) the follower truncates its divergent tail, if any, as KIP-101/KIP-279 do:
it asks the leader, with OffsetForLeaderEpoch, where the latest epoch in its own
leader-epoch cache ends in the leader's log, and cuts its log there. If the leader
answers with an older epoch (it never had ours), the follower cuts at the end of its own
copy of that epoch and asks again, until both agree on an epoch. This is what keeps m2 in
the "lost m2" story (the follower does not trust its stale HW) and removes the old
leader's m2 in the "diverged" story (its epoch ends earlier on the new leader).

Fetches go in an incremental fetch session with the leader (KIP-227, fetch_session_handler.py):
after the first full request, a request names only the partitions whose fetch position
changed (or that were added or removed), and the leader answers only partitions with news.

A partition stops (until the next LeaderAndIsr) when the leader says we are fenced
(FENCED_LEADER_EPOCH) or not its follower (NOT_LEADER_OR_FOLLOWER); retriable errors and
an unreachable leader back off for replica.fetch.backoff.ms.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loglake.cluster.replication_quota import ReplicationQuota
from loglake.errors import ErrorCode, KafkaError
from loglake.protocol import ApiKey, ProtocolDecodeError
from loglake.record.header import RecordBatchHeader, peek_batch_size
from loglake.security.client import PLAINTEXT, ClientSecurity

from ingest_gateway.network.kafka_client import KafkaClient, KafkaConnectionError
from ingest_gateway.replica.fetch_session import ZERO_UUID, PartitionRequest, parse_topic_id
from ingest_gateway.replica.fetch_session_handler import FetchSessionHandler

if TYPE_CHECKING:
    from loglake.cluster.partition import Partition

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
EndpointOf = Callable[[int], "tuple[str, int] | None"]

FETCH_VERSION = 17  # topics by id
FETCH_VERSION_BY_NAME = 12  # for topics without an id
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

# Top-level errors after which the next request simply opens a new session.
_SESSION_ERRORS = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH)
# The errors after which a partition waits for the controller's next LeaderAndIsr.
# A partition is given up until the next LeaderAndIsr only when the leader fences its epoch
# (Kafka's onPartitionFenced). NOT_LEADER_OR_FOLLOWER is backed off and retried, as Kafka's
# fetcher does: a follower's LeaderAndIsr may arrive before its leader's, which answers so
# until it has become the leader, and no further LeaderAndIsr comes to unblock the follower.
_FENCED = (ErrorCode.FENCED_LEADER_EPOCH,)


@dataclass(frozen=True)
class ReplicaFetcherConfig:
    """Kafka's replica.fetch.* settings (same names, same defaults)."""

    fetch_wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    fetch_min_bytes: int = 1  # replica.fetch.min.bytes
    fetch_max_bytes: int = 1048576  # replica.fetch.max.bytes (per partition)
    fetch_response_max_bytes: int = 10485760  # replica.fetch.response.max.bytes
    fetch_backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30000  # replica.socket.timeout.ms

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ReplicaFetcherConfig:
        base = cls()

        def get(name: str, default: int) -> int:
            return int(props[name]) if name in props else default

        return cls(
            fetch_wait_max_ms=get("replica.fetch.wait.max.ms", base.fetch_wait_max_ms),
            fetch_min_bytes=get("replica.fetch.min.bytes", base.fetch_min_bytes),
            fetch_max_bytes=get("replica.fetch.max.bytes", base.fetch_max_bytes),
            fetch_response_max_bytes=get("replica.fetch.response.max.bytes", base.fetch_response_max_bytes),
            fetch_backoff_ms=get("replica.fetch.backoff.ms", base.fetch_backoff_ms),
            socket_timeout_ms=get("replica.socket.timeout.ms", base.socket_timeout_ms),
        )


@dataclass(eq=False)
class PartitionFetchState:
    """Where the fetcher is with one partition. A new object replaces it on every
    (re)add, so an answer to a request sent for an older one is recognised and dropped."""

    leader_id: int
    leader_epoch: int
    fetch_offset: int
    truncating: bool = True
    # An OFFSET_OUT_OF_RANGE above the leader's log start: the next truncation cuts to
    # the leader's LEO (asked as the end of the leader's current epoch).
    out_of_range: bool = False
    failed: bool = False
    delayed_until: float = 0.0  # event-loop time
    # Caught up with the leader's HW at the last fetch: replication throttles spare it.
    in_sync: bool = False
    # The request data last sent for it: reused while unchanged, so that the session
    # handler finds it unchanged at once (most partitions, most fetches).
    request: PartitionRequest | None = None

    @property
    def state(self) -> str:
        if self.failed:
            return "failed"
        return "truncating" if self.truncating else "fetching"


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader (an asyncio task)."""

    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        partition_of: Callable[[TopicPartition], Partition | None],
        endpoint_of: EndpointOf,
        config: ReplicaFetcherConfig,
        quota: ReplicationQuota | None = None,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.security = security
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._partition_of = partition_of
        self._endpoint_of = endpoint_of
        self.config = config
        self.quota = quota or ReplicationQuota(broker_id)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._client: KafkaClient | None = None
        self._session: FetchSessionHandler[TopicPartition] = FetchSessionHandler()
        self._stopped = False

    def __repr__(self) -> str:
        return f"ReplicaFetcher(broker {self.broker_id} <- leader {self.leader_id}, {len(self.partitions)} partitions)"

    # Partitions ---------------------------------------------------------------------------

    def add_partitions(self, entries: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """{tp: (leader epoch, fetch offset)}: (re)start each from truncation."""
        for tp, (epoch, offset) in entries.items():
            self.partitions[tp] = PartitionFetchState(self.leader_id, epoch, offset)
        self._wakeup.set()

    def remove_partitions(self, tps) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)

    # Lifecycle ----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if self._task is None and not self._stopped:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.broker_id}-from-{self.leader_id}"
            )

    def shutdown(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
        if self._client is not None:
            self._client.close_nowait()
            self._client = None

    async def stop(self) -> None:
        task = self._task
        self.shutdown()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    # The loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = self.config.fetch_backoff_ms / 1000
        try:
            while True:
                self._wakeup.clear()
                now = loop.time()
                ready = {tp: s for tp, s in self.partitions.items() if not s.failed and s.delayed_until <= now}
                if not ready:
                    await self._idle(now)
                    continue
                try:
                    client = self._connect()
                    truncating = {tp: s for tp, s in ready.items() if s.truncating}
                    if truncating:
                        await self._truncate(client, truncating)
                    else:
                        await self._fetch(client, ready)
                except (OSError, ConnectionError, ProtocolDecodeError) as exc:
                    # Unreachable leader, broken connection, timeout (TimeoutError is an OSError).
                    log.info(
                        "broker %d: fetching from broker %d failed (%s); retrying", self.broker_id, self.leader_id, exc
                    )
                    self._close_client()
                    await asyncio.sleep(backoff)
                except Exception:
                    log.exception("broker %d: replica fetcher for leader %d failed", self.broker_id, self.leader_id)
                    self._close_client()
                    await asyncio.sleep(backoff)
        finally:
            self._close_client()

    async def _wait_for_quota(self) -> None:
        delay = min(self.quota.seconds_until_allowed(), self.config.fetch_backoff_ms / 1000)
        try:
            await asyncio.wait_for(self._wakeup.wait(), delay)
        except TimeoutError:
            pass

    async def _idle(self, now: float) -> None:
        delays = [s.delayed_until for s in self.partitions.values() if not s.failed and s.delayed_until > now]
        timeout = (min(delays) - now) if delays else None
        try:
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        except TimeoutError:
            pass

    def _connect(self) -> KafkaClient:
        # The endpoint is looked up only to (re)connect: a leader that moved breaks the
        # connection first.
        if self._client is not None and self._client.connected:
            return self._client
        endpoint = self._endpoint_of(self.leader_id)
        if endpoint is None:
            raise KafkaConnectionError(f"no endpoint known for broker {self.leader_id}")
        host, port = endpoint
        client = self._client
        if client is not None and (client.host, client.port) != (host, port):
            self._close_client()
            client = None
        if client is None:
            client = self._client = KafkaClient(
                host,
                port,
                client_id=f"broker-{self.broker_id}-fetcher-{self.leader_id}",
                request_timeout_ms=self.config.socket_timeout_ms,
                security=self.security,
            )
        return client

    def _close_client(self) -> None:
        if self._client is not None:
            self._client.close_nowait()
            self._client = None

    def _current(self, tp: TopicPartition, state: PartitionFetchState) -> Partition | None:
        """The partition, if `state` is still how we fetch it and we still follow at its epoch."""
        if self.partitions.get(tp) is not state or state.failed:
            return None
        partition = self._partition_of(tp)
        if partition is None or partition.is_leader or partition.leader_epoch != state.leader_epoch:
            return None
        return partition

    def _delay(self, state: PartitionFetchState) -> None:
        state.delayed_until = asyncio.get_running_loop().time() + self.config.fetch_backoff_ms / 1000

    def _on_partition_error(self, tp: TopicPartition, state: PartitionFetchState, code: int, what: str) -> None:
        if code in _FENCED:
            log.info(
                "broker %d: %s of %s-%d from broker %d: %s; waiting for the next LeaderAndIsr",
                self.broker_id,
                what,
                tp[0],
                tp[1],
                self.leader_id,
                ErrorCode(code).name,
            )
            state.failed = True
        else:
            log.debug(
                "broker %d: %s of %s-%d from broker %d: %s; backing off",
                self.broker_id,
                what,
                tp[0],
                tp[1],
                self.leader_id,
                _name(code),
            )
            self._delay(state)

    # Truncation (KIP-101 / KIP-279) ---------------------------------------------------------

    async def _truncate(self, client: KafkaClient, states: dict[TopicPartition, PartitionFetchState]) -> None:
        asked: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        for tp, s in states.items():
            partition = self._current(tp, s)
            if partition is None:
                continue
            if s.out_of_range:
                asked[tp] = (s, s.leader_epoch)  # the end of the leader's epoch: its LEO
                continue
            epoch = partition.log.latest_epoch
            if epoch is None:
                # Nothing to compare epochs with: fall back to the high watermark.
                self._finish_truncation(tp, s, partition, min(partition.high_watermark, partition.log_end_offset))
                continue
            asked[tp] = (s, epoch)
        if not asked:
            return
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, p), (s, epoch) in asked.items():
            by_topic.setdefault(topic, []).append(
                {"partition": p, "current_leader_epoch": s.leader_epoch, "leader_epoch": epoch}
            )
        body = {
            "replica_id": self.broker_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        response = await client.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            OFFSET_FOR_LEADER_EPOCH_VERSION,
            body,
            timeout_ms=self.config.socket_timeout_ms,
        )
        answered = set()
        for t in response["topics"]:
            for r in t["partitions"]:
                tp = (t["topic"], r["partition"])
                entry = asked.get(tp)
                if entry is None:
                    continue
                answered.add(tp)
                s, epoch = entry
                partition = self._current(tp, s)
                if partition is None:
                    continue
                if r["error_code"]:
                    self._on_partition_error(tp, s, r["error_code"], "OffsetForLeaderEpoch")
                    continue
                self._apply_epoch_end_offset(tp, s, partition, epoch, r["leader_epoch"], r["end_offset"])
        for tp in asked.keys() - answered:
            self._delay(asked[tp][0])

    def _apply_epoch_end_offset(
        self,
        tp: TopicPartition,
        s: PartitionFetchState,
        partition: Partition,
        asked_epoch: int,
        leader_epoch: int,
        leader_end_offset: int,
    ) -> None:
        """Kafka's AbstractFetcherThread.getOffsetTruncationState."""
        leo = partition.log_end_offset
        if s.out_of_range:
            s.out_of_range = False
            if leader_end_offset == UNDEFINED_OFFSET:
                return  # the leader's epoch moved on: truncate by our own epochs next
            self._finish_truncation(tp, s, partition, min(leader_end_offset, leo))
            return
        if leader_end_offset == UNDEFINED_OFFSET:
            # The leader knows no epoch at or below ours (e.g. it has an older message format).
            self._finish_truncation(tp, s, partition, min(partition.high_watermark, leo))
            return
        if leader_epoch == UNDEFINED_EPOCH:
            self._finish_truncation(tp, s, partition, min(leader_end_offset, leo))
            return
        follower_epoch, follower_end = partition.log.end_offset_for_epoch(leader_epoch)
        if follower_end == UNDEFINED_OFFSET:
            # We have no epoch at or below the leader's: nothing in common to go by.
            self._finish_truncation(tp, s, partition, min(partition.high_watermark, leo))
        elif follower_epoch != leader_epoch:
            # We never had the leader's epoch: cut at the end of our largest epoch below it
            # and ask again with that one.
            target = min(follower_end, leo)
            log.info(
                "broker %d: %s-%d: leader %d has no epoch %d; truncating to %d (end of our epoch %d) and asking again",
                self.broker_id,
                tp[0],
                tp[1],
                self.leader_id,
                asked_epoch,
                target,
                follower_epoch,
            )
            partition.truncate_to(target)
            s.fetch_offset = partition.log_end_offset
        else:
            self._finish_truncation(tp, s, partition, min(follower_end, leader_end_offset, leo))

    def _finish_truncation(self, tp: TopicPartition, s: PartitionFetchState, partition: Partition, offset: int) -> None:
        if partition.truncate_to(max(offset, 0)):
            log.info(
                "broker %d: truncated %s-%d to offset %d (following broker %d at epoch %d)",
                self.broker_id,
                tp[0],
                tp[1],
                offset,
                self.leader_id,
                s.leader_epoch,
            )
        s.truncating = False
        s.fetch_offset = partition.log_end_offset

    # Fetching -----------------------------------------------------------------------------

    async def _fetch(self, client: KafkaClient, states: dict[TopicPartition, PartitionFetchState]) -> None:
        sent: dict[TopicPartition, tuple[PartitionFetchState, int]] = {}
        wanted: dict[TopicPartition, PartitionRequest] = {}
        topic_ids: dict[str, str] = {}
        config = self.config
        quota = self.quota
        throttled: set[TopicPartition] = set()
        for tp, s in states.items():
            partition = self._current(tp, s)
            if partition is None:
                continue
            if not s.in_sync and quota.is_throttled(tp[1], partition.config.follower_replication_throttled_replicas):
                if quota.is_quota_exceeded():
                    continue  # left out of this fetch (and of the session) until the quota allows
                throttled.add(tp)
            sent[tp] = (s, s.fetch_offset)
            last = s.request
            log_start = partition.log_start_offset
            if (
                last is None
                or last.fetch_offset != s.fetch_offset
                or last.log_start_offset != log_start
                or last.current_leader_epoch != s.leader_epoch
                or last.max_bytes != config.fetch_max_bytes
            ):
                last = s.request = PartitionRequest(
                    s.fetch_offset, config.fetch_max_bytes, s.leader_epoch, log_start_offset=log_start
                )
            wanted[tp] = last
            topic_ids[tp[0]] = partition.topic_id
        if not sent:
            # Everything ready is throttled: wait for the quota, or for new partitions.
            await self._wait_for_quota()
            return
        # Topics travel by id when every one has an id (as Kafka's fetcher decides).
        ids = {t: parse_topic_id(i) for t, i in topic_ids.items()} if all(topic_ids.values()) else {}
        request = self._session.build(wanted, bool(ids))
        version = FETCH_VERSION if ids else FETCH_VERSION_BY_NAME
        body = {
            "replica_id": self.broker_id,  # up to v14; from v15 in replica_state
            "replica_state": {"replica_id": self.broker_id, "replica_epoch": -1},
            "max_wait_ms": config.fetch_wait_max_ms,
            "min_bytes": config.fetch_min_bytes,
            "max_bytes": config.fetch_response_max_bytes,
            "isolation_level": 0,
            "session_id": request.session_id,
            "session_epoch": request.epoch,
            "topics": _fetch_topics(request.to_send, ids),
            "forgotten_topics_data": [
                {"topic": t, "topic_id": ids.get(t, ZERO_UUID), "partitions": ps}
                for t, ps in _group(request.to_forget).items()
            ],
            "rack_id": "",
        }
        try:
            response = await client.request(
                ApiKey.FETCH, version, body, timeout_ms=config.fetch_wait_max_ms + config.socket_timeout_ms
            )
        except BaseException:
            self._session.reset()  # the leader may or may not have seen this request
            raise
        error = response.get("error_code", 0)
        if not self._session.handle_response(request, error, response.get("session_id", 0)):
            if error in _SESSION_ERRORS:
                log.debug("broker %d: fetch session with broker %d: %s", self.broker_id, self.leader_id, _name(error))
                return  # the next request opens a new session
            log.info("broker %d: fetch from broker %d failed: %s", self.broker_id, self.leader_id, _name(error))
            for s, _ in sent.values():
                self._delay(s)
            return
        names = {i: t for t, i in ids.items()}
        for t in response["responses"]:
            topic = names.get(t["topic_id"]) if ids else t["topic"]
            if topic is None:
                continue  # an id this request did not name
            for p in t["partitions"]:
                tp = (topic, p["partition_index"])
                entry = sent.get(tp)
                if entry is None:
                    continue
                s, offset = entry
                partition = self._current(tp, s)
                if partition is None or s.truncating or s.fetch_offset != offset:
                    continue
                if tp in throttled and p["records"]:
                    quota.record(len(p["records"]))
                try:
                    self._process_partition_data(tp, s, partition, p)
                except KafkaError as exc:
                    log.warning(
                        "broker %d: cannot append %s-%d at %d from broker %d: %s",
                        self.broker_id,
                        tp[0],
                        tp[1],
                        offset,
                        self.leader_id,
                        exc,
                    )
                    if exc.code == ErrorCode.KAFKA_STORAGE_ERROR:
                        s.failed = True
                    else:
                        s.truncating = True
                        self._delay(s)

    def _process_partition_data(
        self, tp: TopicPartition, s: PartitionFetchState, partition: Partition, data: dict[str, Any]
    ) -> None:
        code = data["error_code"]
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_start = data["log_start_offset"]
            if 0 <= s.fetch_offset < leader_start:
                # The leader deleted what we still need: start over at its log start.
                log.info(
                    "broker %d: %s-%d: offset %d is below leader %d's log start %d; restarting the log there",
                    self.broker_id,
                    tp[0],
                    tp[1],
                    s.fetch_offset,
                    self.leader_id,
                    leader_start,
                )
                partition.truncate_fully_and_start_at(leader_start)
                s.fetch_offset = leader_start
            else:
                # We are past the leader's end (an unclean election): cut to its LEO.
                s.truncating = s.out_of_range = True
            return
        if code:
            self._on_partition_error(tp, s, code, "fetch")
            return
        records = _whole_batches(data["records"])
        if records is not None:
            first = RecordBatchHeader.parse(records, 0)
            leo = partition.log_end_offset
            if first.base_offset < leo <= first.last_offset and leo == partition.log_start_offset:
                # Our (empty) log starts inside the leader's first batch (DeleteRecords to a
                # mid-batch offset): restart it at the batch, as Kafka's follower does.
                partition.truncate_fully_and_start_at(first.base_offset)
            partition.append_records_as_follower(records)
            s.fetch_offset = partition.log_end_offset
        partition.update_follower_high_watermark(data["high_watermark"])
        s.in_sync = partition.log_end_offset >= data["high_watermark"]
        if data["log_start_offset"] >= 0:
            partition.maybe_increment_log_start_offset(data["log_start_offset"])


def _fetch_topics(to_send: dict[TopicPartition, PartitionRequest], ids: dict[str, uuid.UUID]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), r in to_send.items():
        by_topic.setdefault(topic, []).append(
            {
                "partition": p,
                "current_leader_epoch": r.current_leader_epoch,
                "fetch_offset": r.fetch_offset,
                "last_fetched_epoch": r.last_fetched_epoch,
                "log_start_offset": r.log_start_offset,
                "partition_max_bytes": r.max_bytes,
            }
        )
    return [{"topic": t, "topic_id": ids.get(t, ZERO_UUID), "partitions": ps} for t, ps in by_topic.items()]


def _group(tps: list[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in tps:
        by_topic.setdefault(topic, []).append(p)
    return by_topic


def _whole_batches(records) -> memoryview | None:
    """The records without a partial batch at the end (the protocol allows one)."""
    if records is None or not len(records):
        return None
    view = memoryview(records)
    pos = 0
    while True:
        size = peek_batch_size(view, pos)
        if size is None or pos + size > len(view):
            break
        pos += size
    return view[:pos] if pos else None


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ReplicaFetcherManager:
    """The fetchers of this broker, one per leader it follows partitions of."""

    def __init__(
        self,
        broker_id: int,
        partition_of: Callable[[TopicPartition], Partition | None],
        endpoint_of: EndpointOf,
        config: ReplicaFetcherConfig | None = None,
        quota: ReplicationQuota | None = None,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.broker_id = broker_id
        self.security = security
        self.config = config or ReplicaFetcherConfig()
        # follower.replication.throttled.rate, shared by all fetchers as in Kafka.
        self.quota = quota or ReplicationQuota(broker_id)
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._partition_of = partition_of
        self._endpoint_of = endpoint_of
        self._shutdown = False

    def add_fetcher_partitions(self, entries: Mapping[TopicPartition, tuple[int, int, int]]) -> None:
        """{tp: (leader id, leader epoch, fetch offset)}: fetch each from its leader,
        starting with truncation. Fetchers start at once if the event loop runs, else at
        `start()`."""
        if self._shutdown:
            return
        by_leader: dict[int, dict[TopicPartition, tuple[int, int]]] = {}
        for tp, (leader, epoch, offset) in entries.items():
            by_leader.setdefault(leader, {})[tp] = (epoch, offset)
        for leader, partitions in by_leader.items():
            for other_leader, other in self.fetchers.items():
                if other_leader != leader:
                    other.remove_partitions(partitions)
            fetcher = self.fetchers.get(leader)
            if fetcher is None:
                fetcher = self.fetchers[leader] = ReplicaFetcher(
                    self.broker_id,
                    leader,
                    self._partition_of,
                    self._endpoint_of,
                    self.config,
                    self.quota,
                    self.security,
                )
            fetcher.add_partitions(partitions)
        self._shutdown_idle_fetchers()
        if _loop_running():
            self.start()

    def remove_fetcher_partitions(self, tps) -> None:
        tps = list(tps)
        for fetcher in self.fetchers.values():
            fetcher.remove_partitions(tps)
        self._shutdown_idle_fetchers()

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        for fetcher in self.fetchers.values():
            state = fetcher.partitions.get(tp)
            if state is not None:
                return state
        return None

    def is_fetching(self, tp: TopicPartition, leader_id: int, leader_epoch: int) -> bool:
        """Whether `tp` is followed from that leader at that epoch and not stopped."""
        state = self.fetch_state(tp)
        return (
            state is not None
            and not state.failed
            and state.leader_id == leader_id
            and state.leader_epoch == leader_epoch
        )

    def _shutdown_idle_fetchers(self) -> None:
        for leader in [lid for lid, f in self.fetchers.items() if not f.partitions]:
            self.fetchers.pop(leader).shutdown()

    def start(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.start()

    def shutdown(self) -> None:
        self._shutdown = True
        for fetcher in self.fetchers.values():
            fetcher.shutdown()

    async def stop(self) -> None:
        fetchers = list(self.fetchers.values())
        self.shutdown()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
