"""Moving hosted replicas to another log dir of this broker (Kafka's ReplicaAlterLogDirsManager, KIP-113).

A move fills the partition's future log (see LogManager) from its current log while the
partition keeps serving from the current log: chunks of whole batches are copied off the
event loop, and before each chunk the future log is aligned with the current one as a
follower is with its leader (truncated by leader epoch, its start following the current
start). Once the future log has caught up, the swap runs on the event loop, where every
append and truncation of a partition runs: nothing can be appended between the last
check and the swap, so nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_right
from operator import attrgetter

from loglake.cluster.partition import Partition
from loglake.errors import ErrorCode, KafkaError
from loglake.storage.log import Log

from ingest_gateway.replica.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
RETRY_BACKOFF_S = 0.1


def copy_start_offset(current: Log) -> int:
    """Where a copy of `current` starts: the base offset of the segment holding its log
    start, a batch boundary (the log start itself may be inside a batch)."""
    segments = current.segments
    index = bisect_right(segments, current.log_start_offset, key=attrgetter("base_offset")) - 1
    return segments[max(index, 0)].base_offset


def align_future_log(current: Log, future: Log) -> None:
    """Make the future log a prefix of the current one again: the current log may have
    been truncated (a follower's divergent tail, cut by leader epoch as OffsetForLeaderEpoch
    does) or had its start moved (retention, DeleteRecords) since the last chunk."""
    epoch = future.latest_epoch
    if epoch is not None:
        _, end = current.end_offset_for_epoch(epoch)
        if end < 0:
            future.truncate_fully_and_start_at(copy_start_offset(current))
        elif end < future.log_end_offset:
            future.truncate_to(end)
    if future.log_end_offset > current.log_end_offset:
        future.truncate_to(current.log_end_offset)
    start = copy_start_offset(current)
    if future.log_end_offset < start:
        future.truncate_fully_and_start_at(start)
    if future.log_start_offset < current.log_start_offset <= future.log_end_offset:
        future.increment_log_start_offset(current.log_start_offset)


def copy_chunk(current: Log, future: Log, max_bytes: int) -> int:
    """Append the current log's next batches (up to `max_bytes`, at least one) to the
    future log; returns the bytes copied. A short chunk means the copy is near the end:
    the future log is flushed then, so the swap's own flush is short. Below the current
    log start the copy resumes at the batch holding the start: a gap the future log takes
    as a follower's log does."""
    piece = current.read(max(future.log_end_offset, current.log_start_offset), max_bytes)
    if piece.size:
        future.append_as_follower(piece.read_bytes())
    if piece.size < max_bytes:
        future.flush()
    return piece.size


class ReplicaAlterLogDirsManager:
    """One move task per partition being moved, on the broker's event loop. A chunk is
    at most replica.fetch.max.bytes, as Kafka's ReplicaAlterLogDirsThread fetches."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self._replicas = replica_manager
        self._logs = replica_manager.log_manager
        self.chunk_bytes = replica_manager.fetcher_manager.config.fetch_max_bytes
        self._moves: dict[TopicPartition, asyncio.Task[None]] = {}
        self._cancelled: set[TopicPartition] = set()
        self._running = False
        replica_manager.hosted_listeners.append(self._on_hosted)

    def start(self) -> None:
        """Resume the moves a restart interrupted (from the event loop): future logs of
        partitions hosted already; the others resume when they are hosted."""
        self._running = True
        for future in self._logs.future_logs():
            self._on_hosted_key((future.topic, future.partition))

    async def stop(self) -> None:
        """Stop every move after its current chunk (the future logs stay, to resume)."""
        self._running = False
        await asyncio.gather(*self._moves.values(), return_exceptions=True)

    def is_moving(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self._moves

    def _on_hosted(self, partition: Partition) -> None:
        self._on_hosted_key((partition.topic, partition.partition))

    def _on_hosted_key(self, key: TopicPartition) -> None:
        if self._running and key in self._replicas.partitions and self._logs.get_future_log(*key) is not None:
            self._start_move(key)

    async def alter_log_dir(self, topic: str, partition: int, path: str) -> None:
        """AlterReplicaLogDirs for one partition, with Kafka's rules: LOG_DIR_NOT_FOUND
        for a path not in log.dirs, KAFKA_STORAGE_ERROR for an offline one; a move to
        another dir replaces a move in progress; a partition not hosted yet will be
        created in `path` and gets REPLICA_NOT_AVAILABLE."""
        if len(f"{topic}-{partition}.{'0' * 32}-future") > 255:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic {topic} is too long to move between dirs")
        log_dir = self._logs.resolve_log_dir(path)
        key = (topic, partition)
        future = self._logs.get_future_log(topic, partition)
        if future is not None and future.dir.parent != log_dir:
            await self._cancel_move(key)
            self._logs.remove_future_log(topic, partition)
        self._logs.maybe_update_preferred_log_dir(topic, partition, log_dir)
        if key not in self._replicas.partitions:
            raise KafkaError(ErrorCode.REPLICA_NOT_AVAILABLE, f"this broker hosts no replica of {topic}-{partition}")
        if self._logs.create_future_log(topic, partition, log_dir) is not None:
            self._start_move(key)

    def _start_move(self, key: TopicPartition) -> None:
        if key not in self._moves:
            self._moves[key] = asyncio.get_running_loop().create_task(self._move(key), name=f"alter-log-dir-{key}")

    async def _cancel_move(self, key: TopicPartition) -> None:
        task = self._moves.get(key)
        if task is not None:
            self._cancelled.add(key)
            await asyncio.gather(task, return_exceptions=True)
            self._cancelled.discard(key)

    async def _move(self, key: TopicPartition) -> None:
        # Not cancelled through the task: a chunk being copied in a thread must finish
        # before anyone touches the future log, so the loop checks flags between chunks.
        try:
            while self._running and key not in self._cancelled:
                partition = self._replicas.partitions.get(key)
                current, future = self._logs.get_log(*key), self._logs.get_future_log(*key)
                if partition is None or current is None or future is None:
                    return  # no longer hosted (resumes when it is again) or abandoned
                align_future_log(current, future)
                if future.log_end_offset == current.log_end_offset:
                    self._swap(partition, current, future)
                    return
                try:
                    await asyncio.to_thread(copy_chunk, current, future, self.chunk_bytes)
                except KafkaError as exc:
                    # The current log moved under the chunk (truncated, start advanced):
                    # the next alignment accounts for it.
                    log.info("moving %s-%d: %s; retrying", key[0], key[1], exc)
                    await asyncio.sleep(RETRY_BACKOFF_S)
        except Exception:
            if self._logs.get_future_log(*key) is None:
                # Deleted under a chunk being copied (StopReplica with delete): nothing to keep.
                log.info("moving %s-%d: abandoned, its future log was deleted", *key)
            else:
                log.exception("moving %s-%d to another log dir failed; the future log is kept", *key)
        finally:
            self._moves.pop(key, None)

    def _swap(self, partition: Partition, current: Log, future: Log) -> None:
        # A leader epoch that began with no batch yet (a leader just elected) is in the
        # current log's epoch cache but in no copied batch.
        latest = future.latest_epoch
        for entry in current.leader_epoch_cache.entries:
            if latest is None or entry.epoch > latest:
                future.assign_leader_epoch(entry.epoch, entry.start_offset)
        future.update_config(current.config)
        old_dir = current.dir.parent
        partition.replace_log(lambda: self._logs.replace_current_with_future(partition.topic, partition.partition))
        self._replicas.checkpoint_high_watermarks()
        log.info("moved %s-%d from %s to %s", partition.topic, partition.partition, old_dir, partition.log.dir.parent)
