"""One partition replica on this broker: its log plus the replication state around it.

As leader, the partition keeps each follower's state (Kafka's `Replica`): its log end
offset (LEO, the offset of its last fetch), when it last fetched, and when it was last
caught up. The high watermark (HW) is the smallest LEO in the ISR, and consumers never
read past it. With a single replica the ISR is the leader alone, so HW follows the
leader's LEO.

ISR changes are decided here and written by the caller (the replica manager) through a
compare-and-set on the partition state (/brokers/topics/<t>/partitions/<p>/state):
`propose_isr()` builds the new state, `complete_isr_update()` applies what was written.
A failed write changes nothing locally; the leader waits for the controller's next
LeaderAndIsr, as Kafka's ZooKeeper-era leader did.

As follower, the partition's log is appended to by the replica fetcher, and its HW is
min(leader's HW, own LEO).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from loglake.config import LogConfig
from loglake.coordination.model import PartitionState
from loglake.errors import ErrorCode, KafkaError
from loglake.record.batch import CheckedBatches
from loglake.storage.log import Log, LogAppendInfo

ACKS_ALL = -1

# Writes a new partition state (same leader and leader epoch, a new ISR) if the stored
# version still is `state.version`; returns the stored state (new version) or None.
AlterIsr = Callable[[str, int, PartitionState], "PartitionState | None"]


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


@dataclass
class ReplicaState:
    """The leader's view of one follower (Kafka's Replica).

    `last_caught_up_time_ms` follows Kafka's rule: a fetch at or past the leader's LEO
    (at the time of that fetch) means caught up now; a fetch at or past the leader's LEO
    at the time of the *previous* fetch means it was caught up then.
    """

    broker_id: int
    log_end_offset: int = -1
    last_fetch_leader_log_end_offset: int = -1
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0

    def update_fetch_state(self, fetch_offset: int, fetch_time_ms: int, leader_end_offset: int) -> None:
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms

    def reset_last_caught_up_time(self, leader_end_offset: int, now_ms: int, last_caught_up_time_ms: int) -> None:
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms
        self.last_caught_up_time_ms = last_caught_up_time_ms


class Partition:
    def __init__(
        self,
        topic: str,
        partition: int,
        topic_id: str,
        log: Log,
        broker_id: int,
        on_high_watermark_change: Callable[[Partition], None] = lambda p: None,
        high_watermark: int = 0,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = log
        self.broker_id = broker_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        # The partition state as last known from the controller or our own ISR writes;
        # its version is the expected version of the next compare-and-set.
        self.state: PartitionState | None = None
        # Where the current leader epoch began in our log (leaders only).
        self.leader_epoch_start_offset: int | None = None
        # The ISR being written (async writers), else None: no second write until it
        # completes, and see `_maybe_increment_high_watermark`.
        self._proposed_isr: tuple[int, ...] | None = None
        # Counts the times this broker became leader (not re-elections at a new epoch):
        # an acks=all wait that spans a loss of leadership must not succeed.
        self.leader_generation = 0
        self._high_watermark = min(max(high_watermark, log.log_start_offset), log.log_end_offset)
        self._followers: dict[int, ReplicaState] = {}
        self._lock = threading.Lock()
        self._on_high_watermark_change = on_high_watermark_change

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, leader={self.leader_id}, epoch={self.leader_epoch})"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def replace_log(self, swap: Callable[[], Log]) -> None:
        """Take the log `swap` returns (a replica moved to another log dir), under the
        partition lock so no append or truncation runs in between."""
        with self._lock:
            self.log = swap()

    @property
    def config(self) -> LogConfig:
        return self.log.config

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def followers(self) -> dict[int, ReplicaState]:
        """The leader's state of each follower (empty on a follower)."""
        return self._followers

    def check_leader_epoch(self, requested: int) -> None:
        """KIP-320: a request that knows a newer epoch reached us before the controller's
        LeaderAndIsr did (retriable); one with an older epoch comes from a fenced replica
        or client. -1 skips the check."""
        if requested < 0 or requested == self.leader_epoch:
            return
        if requested > self.leader_epoch:
            raise KafkaError(
                ErrorCode.UNKNOWN_LEADER_EPOCH,
                f"leader epoch {requested} of {self.topic}-{self.partition} is newer than ours ({self.leader_epoch})",
            )
        raise KafkaError(
            ErrorCode.FENCED_LEADER_EPOCH,
            f"leader epoch {requested} of {self.topic}-{self.partition} is older than ours ({self.leader_epoch})",
        )

    # Becoming leader or follower -----------------------------------------------------------

    def make_leader(
        self,
        state: PartitionState,
        replicas: tuple[int, ...],
        high_watermark: int | None = None,
        now_ms: int | None = None,
    ) -> bool:
        """Lead at `state.leader_epoch`. Returns whether this is a new leader epoch here.

        A new epoch starts at the LEO in the leader-epoch cache. Followers' LEOs are
        unknown until they fetch (so the HW cannot move before they do); ISR members count
        as caught up now, others as never. `high_watermark` (e.g. a checkpointed value)
        replaces the current HW when given.
        """
        now = monotonic_ms() if now_ms is None else now_ms
        with self._lock:
            new_epoch = not self.is_leader or state.leader_epoch != self.leader_epoch
            was_leader = self.is_leader
            if not was_leader:
                self.leader_generation += 1
            self.leader_id = state.leader
            self.leader_epoch = state.leader_epoch
            self.replicas = tuple(replicas)
            self.isr = tuple(state.isr)
            self.state = state
            if high_watermark is not None:
                self._high_watermark = min(max(high_watermark, self.log.log_start_offset), self.log.log_end_offset)
            if new_epoch:
                self._proposed_isr = None
                start = self.log.log_end_offset
                self.leader_epoch_start_offset = start
                self.log.assign_leader_epoch(state.leader_epoch, start)
                old = self._followers if was_leader else {}
                self._followers = {}
                for r in self.replicas:
                    if r == self.broker_id:
                        continue
                    follower = old.get(r) or ReplicaState(r)
                    follower.reset_last_caught_up_time(start, now, now if r in self.isr else 0)
                    self._followers[r] = follower
            else:
                # The same epoch again (e.g. a config change): keep what the followers told us.
                self._followers = {
                    r: self._followers.get(r) or ReplicaState(r, last_fetch_time_ms=now)
                    for r in self.replicas
                    if r != self.broker_id
                }
            self._maybe_increment_high_watermark()
            return new_epoch

    def make_follower(self, state: PartitionState, replicas: tuple[int, ...]) -> bool:
        """Follow `state.leader` at `state.leader_epoch`. Returns whether the leader or the
        epoch changed (the fetcher must then truncate and start over)."""
        with self._lock:
            changed = self.leader_id != state.leader or self.leader_epoch != state.leader_epoch
            self.leader_id = state.leader
            self.leader_epoch = state.leader_epoch
            self.replicas = tuple(replicas)
            self.isr = tuple(state.isr)
            self.state = state
            self.leader_epoch_start_offset = None
            self._proposed_isr = None
            self._followers = {}
            return changed

    def update_state_if_newer(self, state: PartitionState, replicas: tuple[int, ...]) -> None:
        """A LeaderAndIsr with our current epoch: take its ISR only if its version is
        newer than the one we know (our own ISR writes are newer than a resent state)."""
        with self._lock:
            self.replicas = tuple(replicas)
            if self.state is None or state.version > self.state.version:
                self.isr = tuple(state.isr)
                self.state = state
            if self.is_leader:
                now = monotonic_ms()
                self._followers = {
                    r: self._followers.get(r) or ReplicaState(r, last_fetch_time_ms=now)
                    for r in self.replicas
                    if r != self.broker_id
                }
                self._maybe_increment_high_watermark()

    # Leader: appends, follower fetches, HW and ISR ----------------------------------------

    def append_records_to_leader(
        self,
        records: bytes | bytearray | memoryview | CheckedBatches,
        required_acks: int,
        from_coordinator: bool = False,
    ) -> LogAppendInfo:
        """Validate, assign offsets and append one request's batches for this partition
        (`from_coordinator`: transaction markers, WriteTxnMarkers)."""
        with self._lock:
            if not self.is_leader:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}",
                )
            if required_acks == ACKS_ALL and len(self.isr) < (min_isr := self.log.config.min_insync_replicas):
                raise KafkaError(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"{self.topic}-{self.partition} has {len(self.isr)} in-sync replicas; "
                    f"min.insync.replicas is {min_isr}",
                )
            info = self.log.append_as_leader(records, self.leader_epoch, from_coordinator=from_coordinator)
            self._maybe_increment_high_watermark()
            return info

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from `fetch_offset`: that is its LEO now. Moves the HW if it
        can; returns whether the follower should join the ISR (it is out of it and has
        reached both the HW and the start of the current leader epoch)."""
        with self._lock:
            if not self.is_leader:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}",
                )
            follower = self._followers.get(replica_id)
            if follower is None:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"broker {replica_id} is not a follower of {self.topic}-{self.partition} "
                    f"(replicas {list(self.replicas)})",
                )
            follower.update_fetch_state(fetch_offset, now_ms, self.log.log_end_offset)
            self._maybe_increment_high_watermark()
            return replica_id not in self.isr and not self.isr_update_in_flight and self._is_follower_in_sync(follower)

    def follower_fetch_at_log_end(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """The usual fetch of an idle partition, cheaply: an in-sync follower fetching at the
        log end, with the HW there too. Then nothing can move (the HW cannot pass the LEO,
        the follower is in the ISR already) and there is nothing to read, so only the
        follower's fetch state is recorded, as `update_follower_fetch_state` records it.
        Returns False, having done nothing, in any other case (or if the log dir is
        offline: a read would fail)."""
        if fetch_offset != self._high_watermark or replica_id not in self.isr:
            return False
        with self._lock:
            log = self.log
            leo = log.log_end_offset
            follower = self._followers.get(replica_id)
            if (
                fetch_offset != leo
                or fetch_offset != self._high_watermark
                or follower is None
                or not self.is_leader
                or not log.online
            ):
                return False
            follower.update_fetch_state(fetch_offset, now_ms, leo)
            return True

    def _is_follower_in_sync(self, follower: ReplicaState) -> bool:
        start = self.leader_epoch_start_offset
        leo = follower.log_end_offset
        return leo >= self._high_watermark and start is not None and leo >= start

    def maybe_shrink_isr(self, now_ms: int, replica_lag_time_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without the followers that have not caught up to the leader's LEO within
        `replica_lag_time_max_ms` (Kafka's out-of-sync rule); None if nobody is out."""
        with self._lock:
            if not self.is_leader or self.isr_update_in_flight:
                return None
            leo = self.log.log_end_offset
            out = set()
            for r in self.isr:
                if r == self.broker_id:
                    continue
                follower = self._followers.get(r)
                if follower is None or (
                    follower.log_end_offset != leo
                    and now_ms - follower.last_caught_up_time_ms > replica_lag_time_max_ms
                ):
                    out.add(r)
            if not out:
                return None
            return tuple(r for r in self.isr if r not in out)

    def isr_with(self, replica_id: int) -> tuple[int, ...]:
        return (*self.isr, replica_id) if replica_id not in self.isr else self.isr

    def propose_isr(self, isr: tuple[int, ...]) -> PartitionState:
        """The state to compare-and-set for a new ISR: same leader and epoch, the version
        we last knew as the expected one. Marks an ISR update in flight."""
        with self._lock:
            base = self.state or PartitionState(self.broker_id, self.leader_epoch, self.isr, 0)
            self._proposed_isr = tuple(isr)
            return PartitionState(self.broker_id, self.leader_epoch, tuple(isr), base.controller_epoch, base.version)

    def complete_isr_update(self, proposed: PartitionState, written: PartitionState | None) -> bool:
        """Apply an ISR write's outcome: `written` is the stored state (None: the version
        moved on, nothing changes here). Returns whether the new ISR was applied."""
        with self._lock:
            self._proposed_isr = None
            if written is None:
                return False
            if not self.is_leader or proposed.leader_epoch != self.leader_epoch:
                return False  # leadership changed while the write was in flight
            self.isr = tuple(written.isr)
            self.state = written
            self._maybe_increment_high_watermark()
            return True

    def update_isr(self, isr: tuple[int, ...], alter_isr: AlterIsr | None) -> bool:
        """Write a new ISR synchronously through `alter_isr` (None: apply locally only)."""
        proposed = self.propose_isr(isr)
        written = proposed if alter_isr is None else alter_isr(self.topic, self.partition, proposed)
        return self.complete_isr_update(proposed, written)

    @property
    def isr_update_in_flight(self) -> bool:
        """An ISR write is in flight."""
        return self._proposed_isr is not None

    def _maybe_increment_high_watermark(self) -> None:
        leo = self.log.log_end_offset
        new_hw = leo
        followers = self._followers
        # Kafka's "maximal ISR" (KIP-497): an expansion being written counts at once. The
        # store may already name the new member, and a controller may make it leader: it
        # must hold everything acknowledged from then on.
        isr = self.isr if self._proposed_isr is None else set(self.isr) | set(self._proposed_isr)
        for r in isr:
            if r != self.broker_id:
                follower = followers.get(r)
                follower_leo = -1 if follower is None else follower.log_end_offset
                new_hw = min(new_hw, follower_leo)
        start = self.leader_epoch_start_offset
        # Kafka's rule: nothing is committed in a new epoch before the ISR reaches its start.
        if new_hw > self._high_watermark and (start is None or new_hw >= start):
            self._high_watermark = new_hw
            self._on_high_watermark_change(self)

    # Follower ----------------------------------------------------------------------------

    def append_records_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        with self._lock:
            if self.is_leader:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} leads {self.topic}-{self.partition}"
                )
            return self.log.append_as_follower(records)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """HW = min(leader's HW, own LEO), never below the log start."""
        with self._lock:
            log = self.log
            hw = max(min(leader_high_watermark, log.log_end_offset), log.log_start_offset)
            if hw != self._high_watermark:
                self._high_watermark = hw
                self._on_high_watermark_change(self)

    def maybe_increment_log_start_offset(self, leader_log_start_offset: int) -> None:
        """Follow the leader's log start (DeleteRecords, retention) within our log."""
        with self._lock:
            if self.log.log_start_offset < leader_log_start_offset <= self.log.log_end_offset:
                self.log.increment_log_start_offset(leader_log_start_offset)
                self._high_watermark = max(self._high_watermark, leader_log_start_offset)

    def truncate_to(self, offset: int) -> bool:
        """Drop our log from `offset` on (a divergent tail); the HW follows if above it."""
        with self._lock:
            truncated = self.log.truncate_to(offset)
            self._high_watermark = max(min(self._high_watermark, self.log.log_end_offset), self.log.log_start_offset)
            return truncated

    def truncate_fully_and_start_at(self, offset: int) -> None:
        with self._lock:
            self.log.truncate_fully_and_start_at(offset)
            self._high_watermark = offset

    # Reads -------------------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The LSO: read_committed consumers read below it."""
        return self.log.last_stable_offset(self._high_watermark)

    def read(
        self,
        offset: int,
        max_bytes: int,
        committed_only: bool = True,
        min_one_message: bool = True,
        stable_only: bool = False,
    ):
        """Whole batches from `offset`; consumers stop at the HW (read_committed ones,
        `stable_only`, at the LSO), replicas at the log end."""
        max_offset = self._high_watermark if committed_only else None
        if stable_only:
            max_offset = self.last_stable_offset
        return self.log.read(offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """First (offset, timestamp) at or after `timestamp` below the HW, or None."""
        found = self.log.fetch_offset_by_timestamp(timestamp)
        if found is None or found[0] >= self._high_watermark:
            return None
        return found

    def delete_records(self, offset: int) -> int:
        """DeleteRecords: move the log start to `offset` (-1: the HW); returns the new start."""
        with self._lock:
            if not self.is_leader:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}",
                )
            target = self._high_watermark if offset == -1 else offset
            if target < 0 or target > self._high_watermark:
                raise KafkaError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"cannot delete {self.topic}-{self.partition} up to {offset}: "
                    f"the high watermark is {self._high_watermark}",
                )
            self.log.increment_log_start_offset(target)
            return self.log.log_start_offset
