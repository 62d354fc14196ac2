"""Leader epoch -> start offset, persisted in a partition's `leader-epoch-checkpoint`.

Each entry says "leader epoch E began writing at offset S". A follower that restarts or
follows a new leader asks the leader for the end offset of its latest epoch
(OffsetForLeaderEpoch) and truncates to the answer, which is how divergent tails are
found without trusting the high watermark (KIP-101/KIP-279). Entries are strictly
increasing in both epoch and start offset; every change is written through.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from loglake.storage.checkpoints import CheckpointFile, CheckpointFileError

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochFileCache:
    def __init__(self, path: str | Path) -> None:
        self._file = CheckpointFile(path, fields=2)
        self._lock = threading.RLock()
        try:
            self._entries = [EpochEntry(int(e), int(o)) for e, o in self._file.read()]
        except ValueError as exc:
            raise CheckpointFileError(f"{self._file.path}: {exc}") from None

    @property
    def path(self) -> Path:
        return self._file.path

    @path.setter
    def path(self, value: Path) -> None:
        """The partition directory was renamed (e.g. for deletion)."""
        self._file = CheckpointFile(value, fields=2)

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[-1] if entries else None

    @property
    def latest_epoch(self) -> int | None:
        latest = self.latest_entry
        return None if latest is None else latest.epoch

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; returns whether anything changed.

        As in Kafka, the new entry wins: entries with an epoch or start offset at or past
        it are dropped, so the cache stays monotonic even after an out-of-order assign.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"cannot assign epoch {epoch} at offset {start_offset}")
        with self._lock:
            latest = self.latest_entry
            if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
                return False
            kept = [e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset]
            self._store([*kept, EpochEntry(epoch, start_offset)])
            return True

    def maybe_assign(self, epoch: int, start_offset: int) -> None:
        """Record a batch's leader epoch if it is newer than the latest (cheap per batch)."""
        latest = self.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            self.assign(epoch, start_offset)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer: (epoch, end offset) for `requested_epoch`.

        The latest epoch ends at the log end offset; an older epoch ends where the next
        higher epoch starts, reported with the largest known epoch <= the requested one;
        an epoch newer than every entry (or UNDEFINED_EPOCH) gives (-1, -1).
        """
        with self._lock:
            entries = self._entries
            if requested_epoch == UNDEFINED_EPOCH or not entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if requested_epoch == entries[-1].epoch:
                return requested_epoch, log_end_offset
            higher = next((e for e in entries if e.epoch > requested_epoch), None)
            if higher is None:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            floor = [e for e in entries if e.epoch <= requested_epoch]
            return (floor[-1].epoch if floor else requested_epoch), higher.start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (the log was truncated there)."""
        with self._lock:
            if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
                return
            self._store([e for e in self._entries if e.start_offset < end_offset])

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: entries before it collapse into one at it."""
        with self._lock:
            before = [e for e in self._entries if e.start_offset <= start_offset]
            if start_offset < 0 or not before:
                return
            after = self._entries[len(before) :]
            entries = [EpochEntry(before[-1].epoch, start_offset), *after]
            if entries != self._entries:
                self._store(entries)

    def clear(self) -> None:
        with self._lock:
            self._store([])

    def _store(self, entries: list[EpochEntry]) -> None:
        self._file.write((e.epoch, e.start_offset) for e in entries)
        self._entries = entries
