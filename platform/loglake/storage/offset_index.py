"""The sparse `.index` file: relative offset -> file position of a batch in the segment.

Entries are 8 bytes (int32 offset relative to the segment's base, int32 position). An
entry maps the last offset of a batch to the position where that batch starts, so the
entry found for a target offset is at or before the batch holding it and a short scan of
batch headers from there finishes the lookup.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from loglake.storage.index import CorruptIndexError, Index

INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    offset: int
    position: int


class OffsetIndex(Index):
    ENTRY = struct.Struct(">ii")

    @property
    def last_offset(self) -> int:
        """The largest indexed offset, or the base offset when the index is empty."""
        return self.base_offset if self._last is None else self.base_offset + self._last[0]

    @property
    def last_position(self) -> int:
        return 0 if self._last is None else self._last[1]

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        if not 0 <= relative <= INT32_MAX:
            raise ValueError(f"offset {offset} does not fit a segment based at {self.base_offset}")
        if self._last is not None and offset <= self.last_offset:
            raise ValueError(f"index entry for offset {offset} would follow one for {self.last_offset}")
        self._append(relative, position)

    def lookup(self, offset: int) -> OffsetPosition:
        """The last entry with an offset <= `offset`, or (base offset, 0) when there is none."""
        slot = self._search(0, offset - self.base_offset)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        relative, position = self._entry(slot)
        return OffsetPosition(self.base_offset + relative, position)

    def position_of_batch_ending_before(self, position: int) -> int:
        """The start of an indexed batch that ends at or before `position` (0 if none).

        The entry before the last one at or below `position` qualifies: its batch ends no
        later than the next indexed batch begins. Scanning forward from it finds the last
        whole batch below `position` within about two index intervals.
        """
        slot = self._search(1, position) - 1
        return self._entry(slot)[1] if slot >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Remove the entries for offsets >= `offset`."""
        self._truncate_entries(self._search(0, offset - self.base_offset - 1) + 1)

    def sanity_check(self, log_size: int) -> None:
        self._check_whole_entries()
        if self._last is not None:
            relative, position = self._last
            # The first entry is made after at least one batch, so it is past the base offset.
            if relative <= 0 or not 0 < position < log_size:
                raise CorruptIndexError(
                    f"{self.path}: last entry (offset {self.base_offset + relative}, position {position}) "
                    f"cannot belong to a {log_size}-byte segment based at {self.base_offset}"
                )
