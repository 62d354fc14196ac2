"""The partitions this broker hosts, and the produce/fetch paths over them.

Requests from the HTTP API and the Kafka listener arrive here; both run on the broker's
event loop, so partition state changes and the waiters they wake live on one thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loglake.cluster.partition import ACKS_ALL, Partition
from loglake.config import LogConfig
from loglake.coordination.model import LeaderAndIsrPartition
from loglake.errors import ErrorCode, KafkaError
from loglake.storage.checkpoints import OffsetCheckpointFile
from loglake.storage.log_manager import LogManager

log = logging.getLogger(__name__)

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ProduceResult:
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error: KafkaError | None = None


class ReplicaManager:
    def __init__(self, broker_id: int, log_manager: LogManager, log_defaults: LogConfig) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.log_defaults = log_defaults
        self.partitions: dict[TopicPartition, Partition] = {}
        self.controller_epoch = 0
        self._waiters: dict[TopicPartition, list[asyncio.Future[None]]] = defaultdict(list)
        self._checkpointed_hw = self._read_high_watermarks()
        # Told (topic, partition, is_leader) whenever this broker gains or loses leadership;
        # the group coordinator loads and unloads __consumer_offsets partitions this way.
        self.leadership_listeners: list[Callable[[str, int, bool], None]] = []

    def _read_high_watermarks(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for d in self.log_manager.log_dirs:
            path = Path(d) / HIGH_WATERMARK_CHECKPOINT
            if path.exists():
                out.update(OffsetCheckpointFile(path).read())
        return out

    def checkpoint_high_watermarks(self) -> None:
        by_dir: dict[Path, dict[TopicPartition, int]] = {Path(d): {} for d in self.log_manager.log_dirs}
        for key, p in self.partitions.items():
            by_dir.setdefault(p.log.dir.parent, {})[key] = p.high_watermark
        for d, offsets in by_dir.items():
            OffsetCheckpointFile(d / HIGH_WATERMARK_CHECKPOINT).write(offsets)

    # Controller requests --------------------------------------------------------------

    def _fence(self, controller_epoch: int) -> None:
        if controller_epoch < self.controller_epoch:
            raise KafkaError(
                ErrorCode.STALE_CONTROLLER_EPOCH,
                f"controller epoch {controller_epoch} is older than {self.controller_epoch}",
            )
        self.controller_epoch = controller_epoch

    def become_leader_or_follower(self, controller_epoch: int, entries: list[LeaderAndIsrPartition]) -> None:
        self._fence(controller_epoch)
        for entry in entries:
            key = (entry.topic, entry.partition)
            config = LogConfig.from_properties(entry.config, self.log_defaults)
            partition = self.partitions.get(key)
            if partition is None:
                log_ = self.log_manager.get_or_create_log(entry.topic, entry.partition, config)
                partition = Partition(
                    entry.topic, entry.partition, entry.topic_id, log_, self.broker_id, self._on_high_watermark_change
                )
                self.partitions[key] = partition
            else:
                partition.log.update_config(config)
            was_leader = partition.is_leader
            if entry.state.leader == self.broker_id:
                hw = self._checkpointed_hw.get(key, partition.high_watermark)
                partition.make_leader(entry.state, entry.replicas, hw)
                if not was_leader:
                    self._notify_leadership(key, True)

    def _notify_leadership(self, key: TopicPartition, is_leader: bool) -> None:
        for listener in self.leadership_listeners:
            listener(key[0], key[1], is_leader)

    def stop_replicas(self, controller_epoch: int, partitions: list[TopicPartition], delete: bool) -> None:
        self._fence(controller_epoch)
        for key in partitions:
            partition = self.partitions.pop(key, None)
            self._wake(key)
            if partition is not None and partition.is_leader:
                self._notify_leadership(key, False)
            if partition is not None and delete:
                self.log_manager.delete_log(*key)
        self.checkpoint_high_watermarks()

    # Produce ----------------------------------------------------------------------------

    def leader_partition(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this broker hosts no partition {topic}-{partition}"
            )
        if not p.is_leader:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} is not the leader of {topic}-{partition}"
            )
        return p

    async def append_records(
        self, entries: dict[TopicPartition, bytes | bytearray | memoryview], required_acks: int, timeout_ms: int
    ) -> dict[TopicPartition, ProduceResult]:
        """Append each partition's batches; with acks=all wait until the ISR has them."""
        if required_acks not in (-1, 0, 1):
            raise KafkaError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1 (all), 0 or 1, not {required_acks}")
        results: dict[TopicPartition, ProduceResult] = {}
        pending: dict[TopicPartition, int] = {}
        for key, records in entries.items():
            try:
                partition = self.leader_partition(*key)
                info = partition.append_records_to_leader(records, required_acks)
            except KafkaError as exc:
                results[key] = ProduceResult(error=exc)
                continue
            results[key] = ProduceResult(info.first_offset, info.log_append_time_ms, partition.log_start_offset)
            if required_acks == ACKS_ALL:
                pending[key] = info.last_offset + 1
        if pending:
            await self._await_replication(pending, results, timeout_ms)
        return results

    async def _await_replication(
        self, pending: dict[TopicPartition, int], results: dict[TopicPartition, ProduceResult], timeout_ms: int
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while pending:
            for key, required in list(pending.items()):
                partition = self.partitions.get(key)
                if partition is None:
                    results[key] = ProduceResult(error=KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER))
                elif partition.high_watermark >= required:
                    pass
                elif len(partition.isr) < partition.config.min_insync_replicas:
                    results[key] = ProduceResult(error=KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND))
                else:
                    continue
                del pending[key]
            remaining = deadline - loop.time()
            if not pending:
                return
            if remaining <= 0:
                for key in pending:
                    results[key] = ProduceResult(error=KafkaError(ErrorCode.REQUEST_TIMED_OUT))
                return
            await self.wait_for_change(list(pending), remaining)

    # Waiting for new data -----------------------------------------------------------------

    def _on_high_watermark_change(self, partition: Partition) -> None:
        self._wake((partition.topic, partition.partition))

    def _wake(self, key: TopicPartition) -> None:
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    async def wait_for_change(self, keys: list[TopicPartition], timeout_s: float) -> None:
        """Return when any of these partitions' HW moves (or it is removed), or on timeout."""
        if timeout_s <= 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._waiters[key].append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters and fut in waiters:
                    waiters.remove(fut)
                    if not waiters:
                        del self._waiters[key]

    def shutdown(self) -> None:
        self.checkpoint_high_watermarks()
        for fut_list in self._waiters.values():
            for fut in fut_list:
                if not fut.done():
                    fut.cancel()
        self._waiters.clear()
