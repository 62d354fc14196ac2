"""Kafka's text checkpoint files: a version line, an entry count, then one entry per line.

    0
    2
    orders 0 1200
    orders 1 873

`recovery-point-offset-checkpoint`, `replication-offset-checkpoint` and
`log-start-offset-checkpoint` hold `<topic> <partition> <offset>` entries (topic names
cannot contain spaces); `leader-epoch-checkpoint` holds `<epoch> <start offset>`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from loglake.storage.fileutil import atomic_write_text

CHECKPOINT_VERSION = 0

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"


class CheckpointFileError(ValueError):
    """A checkpoint file that is not in Kafka's format (wrong version, count or line)."""


class CheckpointFile:
    """Entries of `fields` whitespace-separated values, written atomically."""

    def __init__(self, path: str | Path, fields: int) -> None:
        self.path = Path(path)
        self.fields = fields

    def write(self, entries: Iterable[Sequence[object]]) -> None:
        lines = [" ".join(str(v) for v in entry) for entry in entries]
        atomic_write_text(self.path, f"{CHECKPOINT_VERSION}\n{len(lines)}\n" + "".join(f"{line}\n" for line in lines))

    def read(self) -> list[list[str]]:
        """The entries, each split into its fields; [] when the file does not exist."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except UnicodeDecodeError:
            raise CheckpointFileError(f"{self.path}: not text") from None
        lines = text.splitlines()
        if len(lines) < 2:
            raise CheckpointFileError(f"{self.path}: expected a version and a count, got {len(lines)} lines")
        if lines[0].strip() != str(CHECKPOINT_VERSION):
            raise CheckpointFileError(f"{self.path}: unsupported checkpoint version {lines[0]!r}")
        try:
            count = int(lines[1])
        except ValueError:
            raise CheckpointFileError(f"{self.path}: bad entry count {lines[1]!r}") from None
        entries = [line.split() for line in lines[2:] if line.strip()]
        if count != len(entries):
            raise CheckpointFileError(f"{self.path}: header says {count} entries, found {len(entries)}")
        for entry in entries:
            if len(entry) != self.fields:
                raise CheckpointFileError(f"{self.path}: malformed line {' '.join(entry)!r}")
        return entries


class OffsetCheckpointFile:
    """(topic, partition) -> offset, in Kafka's checkpoint format."""

    def __init__(self, path: str | Path) -> None:
        self._file = CheckpointFile(path, fields=3)

    @property
    def path(self) -> Path:
        return self._file.path

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self._file.write((topic, partition, offset) for (topic, partition), offset in sorted(offsets.items()))

    def read(self) -> dict[tuple[str, int], int]:
        offsets: dict[tuple[str, int], int] = {}
        for topic, partition, offset in self._file.read():
            try:
                offsets[(topic, int(partition))] = int(offset)
            except ValueError:
                raise CheckpointFileError(f"{self.path}: bad entry {topic} {partition} {offset}") from None
        return offsets
