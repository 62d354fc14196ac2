"""The partitions this broker hosts, and the produce/fetch/replication paths over them.

Requests from the HTTP API and the Kafka listener arrive here; both run on the broker's
event loop, so partition state changes and the waiters they wake live on one thread.

Replication (Kafka's ReplicaManager): the controller's LeaderAndIsr makes each local
replica a leader or a follower. Followers are fetched by the `ReplicaFetcherManager`
(replica_fetcher.py). On leaders, follower fetches (`fetch_for_follower`) record each
follower's log end, move the high watermark and let followers back into the ISR; a
periodic check (`start()`) drops followers that lag more than replica.lag.time.max.ms.
ISR changes are compare-and-set writes through `isr_writer` (the broker's partition
state store); without one (a single node) they apply locally.
"""

from __future__ import annotations

import asyncio
import heapq
import inspect
import itertools
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from loglake.cluster.partition import ACKS_ALL, Partition, monotonic_ms
from loglake.cluster.replication_quota import ReplicationQuota
from loglake.config import LogConfig
from loglake.coordination.model import LeaderAndIsrPartition, PartitionState
from loglake.errors import ErrorCode, KafkaError
from loglake.record.batch import CheckedBatches
from loglake.security.client import PLAINTEXT, ClientSecurity
from loglake.storage.checkpoints import CheckpointFileError, OffsetCheckpointFile
from loglake.storage.file_records import LogSlice
from loglake.storage.log_manager import LogManager

from ingest_gateway.observability.metrics import BrokerMetrics, add_remote_time
from ingest_gateway.replica.replica_fetcher import ReplicaFetcherConfig, ReplicaFetcherManager

log = logging.getLogger(__name__)

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
TopicPartition = tuple[str, int]
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30000

# (topic, partition, proposed state) -> the stored state, or None if the stored version is
# not `proposed.version` any more (compare-and-set). May also return an awaitable of that.
IsrWriter = Callable[[str, int, PartitionState], "PartitionState | None | Awaitable[PartitionState | None]"]
# broker id -> (host, Kafka port) of its listener for inter-broker requests, or None.
EndpointOf = Callable[[int], "tuple[str, int] | None"]


class ProduceResult(NamedTuple):
    """One partition's outcome of a produce (a NamedTuple: one per partition per request)."""

    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error: KafkaError | None = None


class Appended(NamedTuple):
    """A produce's appends (`ReplicaManager.append_to_leaders`), before any acks=all wait."""

    results: dict[TopicPartition, ProduceResult]
    # acks=all: the offset each partition's HW must reach, and the leader generation it was
    # appended in
    pending: dict[TopicPartition, tuple[int, int]]


class FollowerFetchPartition(NamedTuple):
    """One partition of a follower's Fetch request (NamedTuples: one of each per session
    partition per fetch)."""

    topic: str
    partition: int
    fetch_offset: int
    current_leader_epoch: int = -1
    max_bytes: int = 1048576


class FollowerFetchResult(NamedTuple):
    topic: str
    partition: int
    error: ErrorCode = ErrorCode.NONE
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    records: LogSlice | None = None


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        log_defaults: LogConfig,
        *,
        isr_writer: IsrWriter | None = None,
        endpoint_of: EndpointOf | None = None,
        replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
        fetcher_config: ReplicaFetcherConfig | None = None,
        inter_broker_security: ClientSecurity = PLAINTEXT,
        partition_exists: Callable[[str, int], bool] = lambda topic, partition: False,
    ) -> None:
        """`partition_exists`: whether the metadata names the partition (a partition this
        broker does not host then answers NOT_LEADER_OR_FOLLOWER, not UNKNOWN_TOPIC_OR_PARTITION)."""
        self.broker_id = broker_id
        self._partition_exists = partition_exists
        self.log_manager = log_manager
        self.log_defaults = log_defaults
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = 0
        # Compare-and-set writer of partition states for ISR changes (None: single node,
        # ISR changes apply locally only). Settable after construction.
        self.isr_writer: IsrWriter | None = isr_writer
        # Where other brokers' Kafka listeners are, for the replica fetchers.
        self.endpoint_of: EndpointOf | None = endpoint_of
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        # Milliseconds for follower fetch and lag bookkeeping (a fake clock in tests).
        self.clock: Callable[[], int] = monotonic_ms
        # Replication throttles (leader.replication.throttled.rate and the follower's).
        self.leader_quota = ReplicationQuota(broker_id)
        self.follower_quota = ReplicationQuota(broker_id)
        self.fetcher_manager = ReplicaFetcherManager(
            broker_id,
            self.partitions.get,
            self._endpoint,
            fetcher_config or ReplicaFetcherConfig(),
            self.follower_quota,
            inter_broker_security,
        )
        self._waiters: dict[TopicPartition, list[asyncio.Future[None]]] = defaultdict(list)
        # Follower fetches waiting for new data, by follower: a change of a partition (its
        # LEO, HW, ISR or leadership) wakes the fetches of its replicas. Registering a wait
        # costs the same for a follower of thousands of partitions as for one of one.
        self._follower_waiters: dict[int, list[asyncio.Future[bool | None]]] = {}
        # acks=all produces waiting for a partition's HW to reach an offset: a heap per
        # partition, so that a HW move wakes only the produces it completes (a connection
        # can have many waiting at once, kafka_server.py).
        self._replication_waiters: dict[TopicPartition, list[tuple[int, int, asyncio.Future[None]]]] = {}
        self._replication_waiter_ids = itertools.count()
        self._checkpointed_hw = self._read_high_watermarks()
        self._checkpoint_lock = threading.Lock()
        self._isr_task: asyncio.Task | None = None
        # Told (topic, partition, is_leader) whenever this broker gains or loses leadership;
        # the group coordinator loads and unloads __consumer_offsets partitions this way.
        self.leadership_listeners: list[Callable[[str, int, bool], None]] = []
        # Told (topic, partition, state) after this broker changed a partition's ISR (the
        # broker may propagate it, as Kafka's /isr_change_notification did).
        self.isr_change_listeners: list[Callable[[str, int, PartitionState], None]] = []
        # Told of each partition this broker starts hosting (a move of its log to another
        # log dir, interrupted by a restart, resumes this way).
        self.hosted_listeners: list[Callable[[Partition], None]] = []
        # ISR changes this broker wrote as leader (the metrics read them at scrape time).
        self.isr_shrinks = 0
        self.isr_expands = 0
        # Bytes and records appended per topic go here (None: metrics.enabled=false).
        self.metrics: BrokerMetrics | None = None
        # Partitions whose log is on an offline log dir, with why: they answer
        # KAFKA_STORAGE_ERROR until the broker restarts (Kafka's HostedPartition.Offline).
        self.offline_partitions: dict[TopicPartition, str] = {
            key: f"its log dir {log_dir} is offline" for key, log_dir in log_manager.offline_partitions().items()
        }
        # Told the partitions that went offline (on the event loop): the broker tells the controller.
        self.log_dir_failure_listeners: list[Callable[[list[TopicPartition]], None]] = []
        # The offline partitions told in a controller epoch: a new controller hears of them
        # again at its first LeaderAndIsr naming them (Kafka's controller learns them from
        # that response's KAFKA_STORAGE_ERROR), or an unclean election could pick them.
        self._told_offline: tuple[int, set[TopicPartition]] = (-1, set())
        # The event loop, once `start` ran; dirs that went offline before wait for it.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._offline_before_start: list[tuple[Path, list[TopicPartition]]] = []
        self._loop_lock = threading.Lock()
        log_manager.offline_listeners.append(self._on_log_dir_offline)

    def _endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return None if self.endpoint_of is None else self.endpoint_of(broker_id)

    def _read_high_watermarks(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for d in self.log_manager.live_dirs:
            path = Path(d) / HIGH_WATERMARK_CHECKPOINT
            try:
                out.update(OffsetCheckpointFile(path).read())
            except CheckpointFileError as exc:
                # The high watermarks come back from the leaders (and, on a leader, from
                # its followers' fetches); until then consumers wait, nothing is lost.
                log.warning("ignoring the damaged %s: %s", path, exc)
        return out

    def checkpoint_high_watermarks(self) -> None:
        self.write_high_watermarks(self.high_watermarks_by_dir())

    def high_watermarks_by_dir(self) -> dict[Path, dict[TopicPartition, int]]:
        """What the HW checkpoint of each log dir holds now (read on the event loop)."""
        by_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_manager.live_dirs}
        for key, p in self.partitions.items():
            by_dir.setdefault(p.log.dir.parent, {})[key] = p.high_watermark
        # Logs the controller has not given us yet keep the HW they were loaded with.
        for key, hw in self._checkpointed_hw.items():
            log_ = self.log_manager.get_log(*key)
            if log_ is not None and key not in self.partitions:
                by_dir.setdefault(log_.dir.parent, {})[key] = hw
        return by_dir

    def write_high_watermarks(self, by_dir: dict[Path, dict[TopicPartition, int]]) -> None:
        """Write HW checkpoints (`high_watermarks_by_dir`); on any thread, one writer at a time."""
        channel = self.log_manager.failure_channel
        with self._checkpoint_lock:
            for d, offsets in by_dir.items():
                if channel.is_offline(d):
                    continue
                try:
                    OffsetCheckpointFile(d / HIGH_WATERMARK_CHECKPOINT).write(offsets)
                except OSError as exc:
                    channel.report(d, f"writing {HIGH_WATERMARK_CHECKPOINT}", exc)

    # Controller requests --------------------------------------------------------------

    def _fence(self, controller_epoch: int) -> None:
        if controller_epoch < self.controller_epoch:
            raise KafkaError(
                ErrorCode.STALE_CONTROLLER_EPOCH,
                f"controller epoch {controller_epoch} is older than {self.controller_epoch}",
            )
        self.controller_epoch = controller_epoch

    def become_leader_or_follower(self, controller_epoch: int, entries: list[LeaderAndIsrPartition]) -> None:
        """Apply a LeaderAndIsr: lead the partitions whose leader is this broker, follow the
        others (the fetchers truncate, then fetch). An entry with an older leader epoch
        than ours is stale and ignored; one with our epoch only updates config, replicas
        and (if its version is newer) the ISR."""
        self._fence(controller_epoch)
        to_follow: dict[TopicPartition, tuple[int, int, int]] = {}
        stop_following: list[TopicPartition] = []
        storage_errors: list[TopicPartition] = []
        for entry in entries:
            key = (entry.topic, entry.partition)
            config = LogConfig.from_properties(entry.config, self.log_defaults)
            state = entry.state
            partition = self.partitions.get(key)
            if partition is None:
                try:
                    # Epoch 0: the partition was just created (Kafka's isNew).
                    log_ = self.log_manager.get_or_create_log(
                        entry.topic, entry.partition, config, is_new=state.leader_epoch == 0
                    )
                except KafkaError as exc:
                    if exc.code != ErrorCode.KAFKA_STORAGE_ERROR:
                        raise
                    # The other partitions go on; the controller hears of this one below.
                    log.warning("broker %d: not hosting %s-%d: %s", self.broker_id, *key, exc.message)
                    self.offline_partitions.setdefault(key, exc.message)
                    epoch, told = self._told_offline
                    if epoch != controller_epoch or key not in told:
                        storage_errors.append(key)
                    continue
                partition = Partition(
                    entry.topic,
                    entry.partition,
                    entry.topic_id,
                    log_,
                    self.broker_id,
                    self._on_high_watermark_change,
                    high_watermark=self._checkpointed_hw.pop(key, 0),
                )
                self.partitions[key] = partition
                for listener in self.hosted_listeners:
                    listener(partition)
            else:
                partition.log.update_config(config)
            if state.leader_epoch < partition.leader_epoch:
                log.info(
                    "broker %d: ignoring LeaderAndIsr for %s-%d at leader epoch %d: ours is %d",
                    self.broker_id,
                    entry.topic,
                    entry.partition,
                    state.leader_epoch,
                    partition.leader_epoch,
                )
                continue
            was_leader = partition.is_leader
            same_epoch = state.leader_epoch == partition.leader_epoch and state.leader == partition.leader_id
            if state.leader == self.broker_id:
                stop_following.append(key)
                if same_epoch:
                    partition.update_state_if_newer(state, entry.replicas)
                else:
                    partition.make_leader(state, entry.replicas, now_ms=self.clock())
                self._wake(key)  # acks=all waits re-check the ISR against min.insync.replicas
                if not was_leader:
                    self._notify_leadership(key, True)
            else:
                if same_epoch:
                    partition.update_state_if_newer(state, entry.replicas)
                    changed = False
                else:
                    changed = partition.make_follower(state, entry.replicas)
                if was_leader:
                    self._notify_leadership(key, False)
                    self._wake(key)  # acks=all and consumer fetches waiting here must fail
                if state.leader < 0 or self.broker_id not in entry.replicas:
                    stop_following.append(key)
                elif changed or not self.fetcher_manager.is_fetching(key, state.leader, state.leader_epoch):
                    to_follow[key] = (state.leader, state.leader_epoch, partition.log_end_offset)
        if stop_following:
            self.fetcher_manager.remove_fetcher_partitions(stop_following)
        if to_follow:
            self.fetcher_manager.add_fetcher_partitions(to_follow)
        if storage_errors:
            self._tell_offline(storage_errors)

    def _notify_leadership(self, key: TopicPartition, is_leader: bool) -> None:
        for listener in self.leadership_listeners:
            listener(key[0], key[1], is_leader)

    def stop_replicas(self, controller_epoch: int, partitions: list[TopicPartition], delete: bool) -> None:
        self._fence(controller_epoch)
        self.fetcher_manager.remove_fetcher_partitions(partitions)
        for key in partitions:
            partition = self.partitions.pop(key, None)
            self._wake(key)
            self._wake_all_followers()
            if partition is not None and partition.is_leader:
                self._notify_leadership(key, False)
            if delete:
                self.offline_partitions.pop(key, None)
                try:
                    # Also a log this broker loaded from disk but was never told to host again.
                    self.log_manager.delete_log(*key)
                except KafkaError as exc:
                    # Its dir went offline meanwhile: the files go when the topic's stray
                    # log is found at the next start.
                    log.warning("broker %d: could not delete %s-%d: %s", self.broker_id, *key, exc.message)
        self.checkpoint_high_watermarks()

    # Log dir failures ----------------------------------------------------------------------

    def _on_log_dir_offline(self, log_dir: Path, partitions: list[TopicPartition]) -> None:
        # On the log manager's scheduler thread: the partitions live on the event loop.
        with self._loop_lock:
            loop = self._loop
            if loop is None:
                self._offline_before_start.append((log_dir, partitions))
                return
        if not loop.is_closed():
            loop.call_soon_threadsafe(self.handle_log_dir_failure, log_dir, partitions)

    def handle_log_dir_failure(self, log_dir: Path, partitions: list[TopicPartition]) -> None:
        """A log dir went offline (Kafka's ReplicaManager.handleLogDirFailure): stop
        fetching for its partitions, stop hosting them (they answer KAFKA_STORAGE_ERROR),
        wake whoever waits on them, and tell the listeners (the broker tells the controller)."""
        self.fetcher_manager.remove_fetcher_partitions(partitions)
        for key in partitions:
            self.offline_partitions[key] = f"its log dir {log_dir} is offline"
            partition = self.partitions.pop(key, None)
            self._wake(key)
            self._wake_all_followers()
            if partition is not None and partition.is_leader:
                self._notify_leadership(key, False)
        self._tell_offline(partitions)

    def _tell_offline(self, partitions: list[TopicPartition]) -> None:
        epoch, told = self._told_offline
        if epoch != self.controller_epoch:
            self._told_offline = epoch, told = self.controller_epoch, set()
        told.update(partitions)
        for listener in self.log_dir_failure_listeners:
            listener(partitions)

    def _offline_error(self, key: TopicPartition) -> KafkaError | None:
        why = self.offline_partitions.get(key) if self.offline_partitions else None
        if why is None:
            return None
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{key[0]}-{key[1]} is offline: {why}")

    # Produce ----------------------------------------------------------------------------

    def hosted_partition(self, topic: str, partition: int) -> Partition:
        """A partition this broker hosts, leader or follower."""
        p = self.partitions.get((topic, partition))
        if p is None:
            raise self._offline_error((topic, partition)) or self._not_hosted((topic, partition))
        return p

    def _not_hosted(self, key: TopicPartition) -> KafkaError:
        """Kafka's rule: a partition that exists but is not (or no longer) here, as after a
        reassignment moved it away, is NOT_LEADER_OR_FOLLOWER, so that clients refresh their
        metadata and find it (UNKNOWN_TOPIC_OR_PARTITION makes librdkafka give the partition up)."""
        topic, partition = key
        if self._partition_exists(topic, partition):
            return KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} hosts no replica of {topic}-{partition}"
            )
        return KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this broker hosts no partition {topic}-{partition}")

    def leader_partition(self, topic: str, partition: int) -> Partition:
        p = self.hosted_partition(topic, partition)
        if not p.is_leader:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} is not the leader of {topic}-{partition}"
            )
        return p

    async def append_records(
        self,
        entries: Mapping[TopicPartition, bytes | bytearray | memoryview | CheckedBatches],
        required_acks: int,
        timeout_ms: int,
        from_coordinator: bool = False,
    ) -> dict[TopicPartition, ProduceResult]:
        """Append each partition's batches; with acks=all wait until the ISR has them
        (`from_coordinator`: transaction markers and transactional offset commits)."""
        appended = self.append_to_leaders(entries, required_acks, from_coordinator)
        if appended.pending:
            await self.await_replication(appended, timeout_ms)
        return appended.results

    def append_to_leaders(
        self,
        entries: Mapping[TopicPartition, bytes | bytearray | memoryview | CheckedBatches],
        required_acks: int,
        from_coordinator: bool = False,
    ) -> Appended:
        """`append_records` up to its wait: every partition appended (or failed), and with
        acks=all what `await_replication` is to wait for."""
        if required_acks not in (-1, 0, 1):
            raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1 (all), 0 or 1, not {required_acks}")
        results: dict[TopicPartition, ProduceResult] = {}
        pending: dict[TopicPartition, tuple[int, int]] = {}
        follower_waiters = self._follower_waiters
        metrics = self.metrics
        for key, records in entries.items():
            try:
                partition = self.leader_partition(*key)
                info = partition.append_records_to_leader(records, required_acks, from_coordinator)
            except KafkaError as exc:
                results[key] = ProduceResult(error=exc)
                continue
            results[key] = ProduceResult(info.first_offset, info.log_append_time_ms, partition.log_start_offset)
            if metrics is not None and not info.duplicate:
                metrics.record_append(key[0], len(records), info.last_offset - info.first_offset + 1)
            if follower_waiters:
                self._wake_followers_of(partition)
            if required_acks == ACKS_ALL:
                pending[key] = (info.last_offset + 1, partition.leader_generation)
        return Appended(results, pending)

    async def await_replication(self, appended: Appended, timeout_ms: int) -> None:
        """Kafka's DelayedProduce: done when the HW passes the batch (with the ISR still at
        least min.insync.replicas, else NOT_ENOUGH_REPLICAS_AFTER_APPEND); fails at once if
        leadership is lost or the ISR shrinks below min.insync.replicas. Fills in the
        results of `appended`."""
        results = appended.results
        pending = dict(appended.pending)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while pending:
            for key, (required, generation) in list(pending.items()):
                partition = self.partitions.get(key)
                # A new leader epoch with the same leader (the controller shrank the ISR)
                # keeps the wait; having been a follower in between does not.
                if partition is None or not partition.is_leader or partition.leader_generation != generation:
                    results[key] = ProduceResult(
                        error=KafkaError(
                            ErrorCode.NOT_LEADER_OR_FOLLOWER,
                            f"broker {self.broker_id} lost the leadership of {key[0]}-{key[1]} "
                            "before the ISR had the records",
                        )
                    )
                elif len(partition.isr) < partition.config.min_insync_replicas:
                    results[key] = ProduceResult(
                        error=KafkaError(
                            ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                            f"{key[0]}-{key[1]} has {len(partition.isr)} in-sync replicas; "
                            f"min.insync.replicas is {partition.config.min_insync_replicas}",
                        )
                    )
                elif partition.high_watermark < required:
                    continue
                del pending[key]
            remaining = deadline - loop.time()
            if not pending:
                return
            if remaining <= 0:
                for key in pending:
                    results[key] = ProduceResult(error=KafkaError(ErrorCode.REQUEST_TIMED_OUT))
                return
            await self._wait_for_replication(pending, remaining)

    # Follower fetches (on the leader) ---------------------------------------------------------

    async def fetch_for_follower(
        self,
        replica_id: int,
        partitions: list[FollowerFetchPartition],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
    ) -> list[FollowerFetchResult]:
        """A follower's Fetch: read up to the LEO, take the fetch offset as the follower's
        LEO (moving the HW and maybe the ISR), and long-poll for `min_bytes` of new data
        up to `max_wait_ms`. Errors answer at once."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, max_wait_ms) / 1000
        while True:
            results, total, expand = self._read_for_follower(replica_id, partitions, max_bytes)
            for partition in expand:
                await self._alter_isr(partition, partition.isr_with(replica_id))
            if expand:
                # The HW the follower is told should reflect the new ISR.
                results = [
                    r if r.error else _with_high_watermark(r, self.partitions.get((r.topic, r.partition)))
                    for r in results
                ]
            remaining = deadline - loop.time()
            if total < 0 or total >= min_bytes or remaining <= 0:
                return results
            if not await self._wait_for_follower_change(replica_id, remaining):
                # Nothing this follower follows changed: this pass is the answer (a second
                # pass over thousands of idle partitions would only repeat it).
                return results

    def _read_for_follower(
        self, replica_id: int, requests: list[FollowerFetchPartition], max_bytes: int
    ) -> tuple[list[FollowerFetchResult], int, list[Partition]]:
        """One pass: (results, bytes read or -1 if an error is in them, partitions whose
        ISR should take the follower in)."""
        budget = max_bytes if max_bytes > 0 else 0x7FFFFFFF
        total = 0
        has_error = False
        expand: list[Partition] = []
        results = []
        now = self.clock()
        quota = self.leader_quota
        for req in requests:
            partition = self.partitions.get((req.topic, req.partition))
            if partition is None:
                key = (req.topic, req.partition)
                code = (self._offline_error(key) or self._not_hosted(key)).code
                results.append(FollowerFetchResult(req.topic, req.partition, code))
                has_error = True
                continue
            try:
                # The epoch first: a follower that already knows a newer epoch than ours
                # gets a retriable UNKNOWN_LEADER_EPOCH rather than being stopped.
                partition.check_leader_epoch(req.current_leader_epoch)
                if not partition.is_leader or replica_id == self.broker_id or replica_id not in partition.replicas:
                    raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                if partition.follower_fetch_at_log_end(replica_id, req.fetch_offset, now):
                    # Most of a session's partitions, most of the time: nothing to read or move.
                    piece = None
                else:
                    throttled = replica_id not in partition.isr and quota.is_throttled(
                        req.partition, partition.config.leader_replication_throttled_replicas
                    )
                    if throttled and quota.is_quota_exceeded():
                        piece = None  # the follower learns the HW now and gets data when the quota allows
                    else:
                        piece = partition.read(
                            req.fetch_offset,
                            min(req.max_bytes, budget),
                            committed_only=False,
                            min_one_message=total == 0,
                        )
                        if throttled:
                            quota.record(piece.size)
                    if partition.update_follower_fetch_state(replica_id, req.fetch_offset, now):
                        expand.append(partition)
            except KafkaError as exc:
                has_error = True
                known = partition.is_leader
                results.append(
                    FollowerFetchResult(
                        req.topic,
                        req.partition,
                        exc.code,
                        partition.high_watermark if known else -1,
                        partition.log_start_offset if known else -1,
                        partition.log_end_offset if known else -1,
                    )
                )
                continue
            results.append(
                FollowerFetchResult(
                    req.topic,
                    req.partition,
                    ErrorCode.NONE,
                    partition.high_watermark,
                    partition.log_start_offset,
                    partition.log_end_offset,
                    piece if piece is not None and piece.size else None,
                )
            )
            if piece is not None:
                total += piece.size
                budget -= piece.size
        return results, (-1 if has_error else total), expand

    # ISR changes ----------------------------------------------------------------------------

    async def _alter_isr(self, partition: Partition, isr: tuple[int, ...]) -> bool:
        """Write a new ISR for a partition we lead (compare-and-set through `isr_writer`);
        applied locally only once written. Returns whether it was."""
        if partition.isr_update_in_flight or tuple(isr) == partition.isr:
            return False
        old_isr = partition.isr
        proposed = partition.propose_isr(isr)
        written: PartitionState | None = proposed
        try:
            if self.isr_writer is not None:
                outcome = self.isr_writer(partition.topic, partition.partition, proposed)
                written = await outcome if inspect.isawaitable(outcome) else outcome
        except Exception:
            log.exception(
                "broker %d: writing the ISR of %s-%d failed", self.broker_id, partition.topic, partition.partition
            )
            written = None
        applied = partition.complete_isr_update(proposed, written)
        key = (partition.topic, partition.partition)
        if applied:
            if len(partition.isr) < len(old_isr):
                self.isr_shrinks += 1
            elif len(partition.isr) > len(old_isr):
                self.isr_expands += 1
            log.info(
                "broker %d: ISR of %s-%d changed from %s to %s",
                self.broker_id,
                partition.topic,
                partition.partition,
                list(old_isr),
                list(partition.isr),
            )
            for listener in self.isr_change_listeners:
                listener(partition.topic, partition.partition, partition.state or proposed)
        else:
            log.info(
                "broker %d: ISR change of %s-%d to %s not written (state version %d is stale); "
                "waiting for the controller's next LeaderAndIsr",
                self.broker_id,
                partition.topic,
                partition.partition,
                list(isr),
                proposed.version,
            )
        # acks=all waiters re-check the ISR against min.insync.replicas.
        self._wake(key)
        return applied

    async def maybe_shrink_isrs(self, now_ms: int | None = None) -> None:
        """Drop from every led partition's ISR the followers that lag more than
        replica.lag.time.max.ms."""
        now = self.clock() if now_ms is None else now_ms
        for partition in list(self.partitions.values()):
            if not partition.is_leader:
                continue
            isr = partition.maybe_shrink_isr(now, self.replica_lag_time_max_ms)
            if isr is not None:
                await self._alter_isr(partition, isr)

    async def _isr_expiration_loop(self) -> None:
        interval = max(self.replica_lag_time_max_ms / 2, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.maybe_shrink_isrs()
            except Exception:
                log.exception("broker %d: ISR expiration check failed", self.broker_id)

    # Lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background work (from the event loop): the ISR expiration check, and
        fetchers for partitions followed before the loop ran."""
        with self._loop_lock:
            self._loop = asyncio.get_running_loop()
            pending, self._offline_before_start = self._offline_before_start, []
        for log_dir, partitions in pending:
            self.handle_log_dir_failure(log_dir, partitions)
        if self._isr_task is None:
            self._isr_task = asyncio.get_running_loop().create_task(
                self._isr_expiration_loop(), name=f"isr-expiration-{self.broker_id}"
            )
        self.fetcher_manager.start()

    async def stop(self) -> None:
        """Stop fetching and the ISR check, and wait for those tasks to end (then call
        shutdown() for the checkpoints)."""
        task, self._isr_task = self._isr_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.fetcher_manager.stop()

    # Waiting for new data -----------------------------------------------------------------

    def _on_high_watermark_change(self, partition: Partition) -> None:
        key = (partition.topic, partition.partition)
        for fut in self._waiters.pop(key, ()):
            _resolve(fut)
        if self._follower_waiters:
            self._wake_followers_of(partition)
        waiting = self._replication_waiters.get(key)
        if waiting:
            hw = partition.high_watermark
            while waiting and waiting[0][0] <= hw:
                _resolve(heapq.heappop(waiting)[2])
            if not waiting:
                del self._replication_waiters[key]

    def _wake(self, key: TopicPartition) -> None:
        """Everything waiting on the partition re-checks (it changed hands, its ISR
        changed, it went away)."""
        for fut in self._waiters.pop(key, ()):
            _resolve(fut)
        for _, _, fut in self._replication_waiters.pop(key, ()):
            _resolve(fut)
        partition = self.partitions.get(key)
        if partition is not None:
            self._wake_followers_of(partition)
        else:
            self._wake_all_followers()

    def _wake_followers_of(self, partition: Partition) -> None:
        waiters = self._follower_waiters
        for replica in partition.replicas:
            for fut in waiters.pop(replica, ()):
                if not fut.done():
                    fut.set_result(True)

    def _wake_all_followers(self) -> None:
        waiters, self._follower_waiters = self._follower_waiters, {}
        for futs in waiters.values():
            for fut in futs:
                if not fut.done():
                    fut.set_result(True)

    async def _wait_for_follower_change(self, replica_id: int, timeout_s: float) -> bool:
        """Wait until a partition `replica_id` follows changes (True) or `timeout_s` passes."""
        fut: asyncio.Future[bool | None] = asyncio.get_running_loop().create_future()
        self._follower_waiters.setdefault(replica_id, []).append(fut)
        try:
            await _timed_wait(fut, timeout_s)
        finally:
            waiters = self._follower_waiters.get(replica_id)
            if waiters and fut in waiters:
                waiters.remove(fut)
                if not waiters:
                    del self._follower_waiters[replica_id]
        return fut.result() is True

    async def wait_for_change(self, keys: list[TopicPartition], timeout_s: float) -> None:
        """Return when any of these partitions' HW moves, it changes hands or is removed, or
        on timeout."""
        if timeout_s <= 0:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiters = self._waiters
        for key in keys:
            waiters[key].append(fut)
        try:
            await _timed_wait(fut, timeout_s)
        finally:
            for key in keys:
                registered = waiters.get(key)
                if not registered:
                    continue
                try:
                    registered.remove(fut)
                except ValueError:
                    continue  # woken through this key: its list is gone
                if not registered:
                    del waiters[key]

    async def _wait_for_replication(self, pending: dict[TopicPartition, tuple[int, int]], timeout_s: float) -> None:
        """Return when a HW reaches what `pending` waits for, on any other change of one of
        its partitions (`_wake`), or on timeout."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        for key, (required, _) in pending.items():
            waiting = self._replication_waiters.setdefault(key, [])
            if len(waiting) >= _COMPACT_WAITERS_FROM and len(waiting) & (len(waiting) - 1) == 0:
                # Entries of waits that ended otherwise (a timeout, another partition's HW)
                # stay until this HW passes them; on a stalled partition they would pile up
                # with every retry. Dropped whenever the heap reaches a power of two.
                waiting[:] = [entry for entry in waiting if not entry[2].done()]
                heapq.heapify(waiting)
            heapq.heappush(waiting, (required, next(self._replication_waiter_ids), fut))
        await _timed_wait(fut, timeout_s)

    def shutdown(self) -> None:
        task, self._isr_task = self._isr_task, None
        if task is not None:
            task.cancel()
        self.fetcher_manager.shutdown()
        self.checkpoint_high_watermarks()
        for fut_list in self._waiters.values():
            for fut in fut_list:
                if not fut.done():
                    fut.cancel()
        for follower_futs in self._follower_waiters.values():
            for follower_fut in follower_futs:
                if not follower_fut.done():
                    follower_fut.cancel()
        self._waiters.clear()
        self._follower_waiters.clear()
        for waiting in self._replication_waiters.values():
            for _, _, fut in waiting:
                if not fut.done():
                    fut.cancel()
        self._replication_waiters.clear()


# A partition's acks=all waits are compacted from this many entries on (see _wait_for_replication).
_COMPACT_WAITERS_FROM = 64


def _resolve(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _timed_wait(fut: asyncio.Future[Any], timeout_s: float) -> None:
    """Wait for `fut`, which a timer resolves at `timeout_s` (cheaper than wait_for: every
    long poll and acks=all wait goes through here); the wait is the request's remote time."""
    timer = asyncio.get_running_loop().call_later(timeout_s, _resolve, fut)
    started = time.perf_counter()
    try:
        await fut
    finally:
        timer.cancel()
        add_remote_time(time.perf_counter() - started)


def _with_high_watermark(result: FollowerFetchResult, partition: Partition | None) -> FollowerFetchResult:
    if partition is None or not partition.is_leader:
        return result
    return result._replace(high_watermark=partition.high_watermark)
