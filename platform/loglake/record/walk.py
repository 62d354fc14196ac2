"""Where each record of a records section starts: the walk over the records' length varints.

Where a record starts depends on where the previous one ended, so the walk is sequential.
But the records of one batch often have the same length (fixed-size keys and values, deltas
of the same varint size): from a record of length L, the walk checks a whole run of records
at once by comparing the length varint's bytes at every (varint size + L)-th position with
numpy, over a strided view (no copy, no per-record Python). Where lengths differ it walks
one record at a time, trying a run again after a number of records that doubles while runs
keep failing, so sections of varied lengths cost little more than the plain loop.

Both the broker (checking produced batches before storing them) and the Spark reader
(decoding fetched ones) find records with this walk.

The same walk in C (`_walk.c`, a shared library that set-up builds next to this file with
scripts/build_native.sh) takes a few nanoseconds a record whatever the lengths; it is
loaded with ctypes at import and used when present, else the walk above runs (one debug
log line says which). Both accept and refuse exactly the same sections.

The library also holds what `loglake.record.columns` does fastest in C, bound here with the
walk (`NativeWalk`): every record's fields read in the walk's one pass over joined sections
(`record_columns`), and byte ranges copied out into an Arrow binary array's buffers
(`gather_ranges`).
"""

from __future__ import annotations

import ctypes
import logging
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loglake.errors import KafkaError
from loglake.record.varint import decode_unsigned_varint

logger = logging.getLogger(__name__)

LIBRARY = Path(__file__).with_name("libloglake_walk.so")
# _walk.c's LOGLAKE_WALK_ABI: a library built from another version of the source is not used.
_ABI = 2
_ZERO = array("q", [0])

# loglake_record_columns' errors (_walk.c's COLUMNS_*).
COLUMNS_NOT_RECORDS = -1  # a section's walk failed, or a section is outside the data
COLUMNS_LONG_VARINT = -2  # a field's varint is longer than 10 bytes
COLUMNS_PAST_RECORD = -3  # a key or a value runs past its record's end
COLUMNS_OUT_OF_DATA = -4  # a field's varint runs past the data (the caller left out the padding)
# The arrays of loglake_record_columns' output, in order (RecordColumns' fields).
COLUMNS_FIELDS = 10
_INT32_MAX = 2**31 - 1

# A run is taken only when at least this many records have the same length; the first
# _PROBE of them are checked before all of them, so a failed try costs little.
_MIN_RUN = 8
_PROBE = 32
# Records walked one by one after a failed try, doubling up to _MAX_SINGLES.
_MIN_SINGLES = 16
_MAX_SINGLES = 4096


@dataclass(frozen=True, slots=True)
class NativeWalk:
    """The C walk: `walk(data, start, end, count, starts address or None)` is 0 when
    `data[start:end]` holds exactly `count` records (writing their starts), else negative.
    `columns(data, size, section ends address, counts address, sections, out address)`
    reads every record's fields (`record_columns`); `gather(...)` copies byte ranges out
    (`gather_ranges`). The C code trusts its bounds: every method checks them first."""

    walk: Callable[[bytes, int, int, int, int | None], int]
    columns: Callable[[bytes, int, int, int, int, int], int]
    gather: Callable[[int, int, int, int, int, int, int, int], int]

    def record_starts(self, data: bytes, start: int, end: int, count: int) -> np.ndarray | None:
        if not _plausible(data, start, end, count):
            return None
        starts = _ZERO * count
        if self.walk(data, start, end, count, starts.buffer_info()[0]):
            return None
        return np.frombuffer(starts, dtype=np.int64)

    def sections_record_starts(self, data: bytes, section_ends: list[int], counts: list[int]) -> np.ndarray | None:
        at = 0
        for end, count in zip(section_ends, counts, strict=True):
            if not _plausible(data, at, end, count):
                return None  # before the array is sized by the counts
            at = end
        # One array for all sections, each walked straight into its part: no concatenation.
        starts = _ZERO * sum(counts)
        address = starts.buffer_info()[0]
        at = 0
        for end, count in zip(section_ends, counts, strict=True):
            if self.walk(data, at, end, count, address):
                return None
            address += 8 * count
            at = end
        return np.frombuffer(starts, dtype=np.int64)

    def holds_records(self, data: bytes, start: int, end: int, count: int) -> bool:
        return _plausible(data, start, end, count) and self.walk(data, start, end, count, None) == 0

    def record_columns(self, data: bytes, section_ends: list[int], counts: list[int]) -> np.ndarray | int:
        """The sections of `sections_record_starts` walked once, every record's fields read on
        the way: an array of COLUMNS_FIELDS rows (start, end, timestamp delta, offset delta,
        key position and length, value position and length, header count and position) with
        one column per record, or a negative COLUMNS_* code."""
        at = 0
        for end, count in zip(section_ends, counts, strict=True):
            if not _plausible(data, at, end, count):
                return COLUMNS_NOT_RECORDS  # before the array is sized by the counts
            at = end
        out = np.empty((COLUMNS_FIELDS, sum(counts)), dtype=np.int64)
        ends, sizes = array("q", section_ends), array("q", counts)
        code = self.columns(
            data, len(data), ends.buffer_info()[0], sizes.buffer_info()[0], len(counts), out.ctypes.data
        )
        return out if code == 0 else code

    def gather_ranges(
        self, address: int, size: int, starts: np.ndarray, lengths: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The byte ranges [starts[i], starts[i] + lengths[i]) of the `size` bytes at
        `address` (none for a negative length) copied one after the other: an Arrow binary
        array's offsets (int32) and values; None if a range lies outside the bytes or they
        would not fit int32 offsets."""
        starts = np.ascontiguousarray(starts, dtype=np.int64)
        lengths = np.ascontiguousarray(lengths, dtype=np.int64)
        total = int(np.maximum(lengths, 0).sum())
        if not 0 <= total <= min(size, _INT32_MAX):
            return None
        offsets = np.empty(len(starts) + 1, dtype=np.int32)
        values = np.empty(total, dtype=np.uint8)
        code = self.gather(
            address, size, starts.ctypes.data, lengths.ctypes.data, len(starts), offsets.ctypes.data,
            values.ctypes.data, total,
        )  # fmt: skip
        return None if code else (offsets, values)


def load_native(path: Path) -> NativeWalk | None:
    """The C walk of the library at `path`, or None (the walk in Python) if it is missing,
    of another ABI version or not loadable; logs which walk is in use."""
    try:
        library = ctypes.CDLL(str(path))
        abi = library.loglake_walk_abi
        abi.restype = ctypes.c_int64
        if abi() != _ABI:
            raise OSError(f"ABI version {abi()}, this loglake needs {_ABI}: rebuild with scripts/build_native.sh")
        walk = library.loglake_walk
        columns = library.loglake_record_columns
        gather = library.loglake_gather
    except (OSError, AttributeError) as exc:
        logger.debug("record walk: in Python (native walk %s not loaded: %s)", path, exc)
        return None
    # c_void_p takes bytes as a pointer to their contents (no copy) and an int as an address.
    pointer, number = ctypes.c_void_p, ctypes.c_int64
    walk.argtypes = [pointer, number, number, number, pointer]
    columns.argtypes = [pointer, number, pointer, pointer, number, pointer]
    gather.argtypes = [pointer, number, pointer, pointer, number, pointer, pointer, number]
    for function in (walk, columns, gather):
        function.restype = number
    logger.debug("record walk: native (%s)", path)
    return NativeWalk(walk, columns, gather)


_NATIVE = load_native(LIBRARY)


def native() -> NativeWalk | None:
    """The C walk in use, or None when records are walked in Python."""
    return _NATIVE


# A ctypes call costs about what walking one record in Python does (~0.6 µs, measured):
# a single record (a linger.ms=0 producer's request) is checked in Python.
_NATIVE_MIN_COUNT = 2


def _plausible(data: bytes, start: int, end: int, count: int) -> bool:
    """Whether `data[start:end]` is inside `data` and big enough for `count` records (each
    takes at least its one-byte length): a corrupt count never sizes an allocation."""
    return 0 <= start <= end <= len(data) and 0 <= count <= end - start


def record_starts(data: bytes, start: int, end: int, count: int) -> np.ndarray | None:
    """The positions in `data` where the records of the section `data[start:end]` start,
    or None unless the section holds exactly `count` records whose lengths (none negative)
    add up to its size. Bytes past `end` may follow (they are never taken as records)."""
    if _NATIVE is not None:
        return _NATIVE.record_starts(data, start, end, count)
    if not _plausible(data, start, end, count):
        return None
    return python_record_starts(data, start, end, count)


def sections_record_starts(data: bytes, section_ends: list[int], counts: list[int]) -> np.ndarray | None:
    """`record_starts` of consecutive sections, the i-th `data[section_ends[i-1]:section_ends[i]]`
    (the first from 0) with `counts[i]` records, joined; None if any section fails."""
    if _NATIVE is not None:
        return _NATIVE.sections_record_starts(data, section_ends, counts)
    pieces = []
    at = 0
    for end, count in zip(section_ends, counts, strict=True):
        starts = record_starts(data, at, end, count)
        if starts is None:
            return None
        pieces.append(starts)
        at = end
    return np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)


def holds_records(data: bytes, start: int, end: int, count: int) -> bool:
    """Whether the section `data[start:end]` holds exactly `count` records whose lengths
    (none negative) add up to its size: `record_starts`'s check without the positions."""
    if _NATIVE is not None and count >= _NATIVE_MIN_COUNT:
        return _NATIVE.holds_records(data, start, end, count)
    if count == 1 and 0 <= start < end <= len(data):
        # A linger.ms=0 producer's batch: one length varint, which must reach the end exactly.
        try:
            length, after = decode_unsigned_varint(data, start)
        except KafkaError:
            return False
        return not length & 1 and after + (length >> 1) == end
    return _plausible(data, start, end, count) and python_holds_records(data, start, end, count)


def python_record_starts(data: bytes, start: int, end: int, count: int) -> np.ndarray | None:
    """`record_starts` walked in Python, runs of equal lengths with numpy."""
    buf: np.ndarray | None = None  # made when a run is first tried: small batches never need it
    pieces: list[np.ndarray] = []
    singles = array("q")
    found = 0
    at = start
    singles_budget = _MIN_SINGLES
    try:
        while at < end:
            length, after = decode_unsigned_varint(data, at)
            stride = after - at + (length >> 1)
            limit = min(count - found, (end - at) // stride)
            # The next record's first byte, in Python, turns most varied lengths away cheaply.
            if limit >= _MIN_RUN and data[at + stride] == data[at]:
                if buf is None:
                    buf = np.frombuffer(data, dtype=np.uint8)
                run = _run(buf, at, stride, after - at, limit)
                if run >= _MIN_RUN:
                    if length & 1:
                        return None  # a negative length, the same for the whole run
                    if singles:
                        pieces.append(np.frombuffer(singles, dtype=np.int64))
                        singles = array("q")  # the old one is exported to numpy: a new one
                    pieces.append(np.arange(at, at + run * stride, stride, dtype=np.int64))
                    at += run * stride
                    found += run
                    singles_budget = _MIN_SINGLES
                    continue
            walked = len(singles)
            at = _walk(data, at, end, singles_budget, singles)
            if at < 0:
                return None
            found += len(singles) - walked
            singles_budget = min(2 * singles_budget, _MAX_SINGLES)
    except (IndexError, KafkaError):  # a varint cut by the end of the data
        return None
    if at != end or found != count:
        return None
    if not pieces:
        return np.frombuffer(singles, dtype=np.int64)
    if singles:
        pieces.append(np.frombuffer(singles, dtype=np.int64))
    return np.concatenate(pieces)


def python_holds_records(data: bytes, start: int, end: int, count: int) -> bool:
    """`holds_records` walked in Python."""
    if count >= _MIN_RUN:
        return python_record_starts(data, start, end, count) is not None
    # Too few records for a run: the plain walk, without numpy's fixed cost (a producer
    # with linger.ms=0 sends a batch of one record per request).
    starts = array("q")
    try:
        at = _walk(data, start, end, count + 1, starts)
    except (IndexError, KafkaError):  # a varint cut by the end of the data
        return False
    return at == end and len(starts) == count


def _run(buf: np.ndarray, at: int, stride: int, size: int, limit: int) -> int:
    """How many of the next `limit` records, if all were `stride` bytes long, do start with
    the same `size` length-varint bytes as the one at `at` (so that they are)."""
    probe = min(limit, _PROBE)
    same = _same_prefix(buf, at, stride, size, probe)
    if same == probe < limit:
        same = _same_prefix(buf, at, stride, size, limit)
    return same


def _same_prefix(buf: np.ndarray, at: int, stride: int, size: int, n: int) -> int:
    stop = at + n * stride
    equal = buf[at:stop:stride] == buf[at]
    for i in range(1, size):
        equal &= buf[at + i : stop + i : stride] == buf[at + i]
    return n if equal.all() else int(equal.argmin())


def _walk(data: bytes, at: int, end: int, budget: int, starts: array) -> int:
    """Walk up to `budget` records one by one from `at`, appending their starts; returns
    where the walk stopped, or -1 at a negative length."""
    append = starts.append
    for _ in range(budget):
        if at >= end:
            break
        append(at)
        # Record lengths take one or two varint bytes unless records exceed 8 KB.
        z = data[at]
        if z & 1:  # zig-zag: the sign is the lowest bit of the first byte
            return -1
        if z < 0x80:
            at += 1 + (z >> 1)
        elif data[at + 1] < 0x80:
            at += 2 + (((z & 0x7F) | (data[at + 1] << 7)) >> 1)
        else:
            z, at = decode_unsigned_varint(data, at)
            at += z >> 1
    return at
