"""One partition replica on this broker: its log plus the replication state around it.

The leader keeps each replica's log end offset (LEO); the high watermark (HW) is the
smallest LEO in the ISR, and consumers never read past it. With a single replica the
ISR is the leader alone, so HW follows the leader's LEO.
"""

from __future__ import annotations

import threading
from typing import Callable

from loglake.config import LogConfig
from loglake.coordination.model import PartitionState
from loglake.errors import ErrorCode, KafkaError
from loglake.storage.log import Log, LogAppendInfo

ACKS_ALL = -1


class Partition:
    def __init__(
        self,
        topic: str,
        partition: int,
        topic_id: str,
        log: Log,
        broker_id: int,
        on_high_watermark_change: Callable[[Partition], None] = lambda p: None,
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
        self._high_watermark = 0
        self._replica_leos: dict[int, int] = {}
        self._lock = threading.Lock()
        self._on_high_watermark_change = on_high_watermark_change

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, leader={self.leader_id}, epoch={self.leader_epoch})"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

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

    def make_leader(self, state: PartitionState, replicas: tuple[int, ...], high_watermark: int) -> None:
        """Become leader at `state.leader_epoch`; the HW starts from the checkpointed value."""
        with self._lock:
            self.leader_id = state.leader
            self.leader_epoch = state.leader_epoch
            self.replicas = replicas
            self.isr = state.isr
            self._replica_leos = {r: -1 for r in replicas if r != self.broker_id}
            self._high_watermark = min(max(high_watermark, self.log.log_start_offset), self.log.log_end_offset)
            self.log.assign_leader_epoch(state.leader_epoch, self.log.log_end_offset)
            self._maybe_increment_high_watermark()

    def append_records_to_leader(self, records: bytes | bytearray | memoryview, required_acks: int) -> LogAppendInfo:
        """Validate, assign offsets and append one request's batches for this partition."""
        with self._lock:
            if not self.is_leader:
                raise KafkaError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}",
                )
            min_isr = self.log.config.min_insync_replicas
            if required_acks == ACKS_ALL and len(self.isr) < min_isr:
                raise KafkaError(
                    ErrorCode.NOT_ENOUGH_REPLICAS,
                    f"{self.topic}-{self.partition} has {len(self.isr)} in-sync replicas; min.insync.replicas is {min_isr}",
                )
            info = self.log.append_as_leader(records, self.leader_epoch)
            self._maybe_increment_high_watermark()
            return info

    def _maybe_increment_high_watermark(self) -> None:
        leos = [self.log.log_end_offset] + [self._replica_leos.get(r, -1) for r in self.isr if r != self.broker_id]
        new_hw = min(leos)
        if new_hw > self._high_watermark:
            self._high_watermark = new_hw
            self._on_high_watermark_change(self)

    def read(self, offset: int, max_bytes: int, committed_only: bool = True, min_one_message: bool = True):
        """Whole batches from `offset`; consumers stop at the HW, replicas at the log end."""
        max_offset = self._high_watermark if committed_only else None
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
                    f"cannot delete {self.topic}-{self.partition} up to {offset}: the high watermark is {self._high_watermark}",
                )
            self.log.increment_log_start_offset(target)
            return self.log.log_start_offset
