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
"""

from __future__ import annotations

from array import array

import numpy as np

from loglake.errors import KafkaError
from loglake.record.varint import decode_unsigned_varint

# A run is taken only when at least this many records have the same length; the first
# _PROBE of them are checked before all of them, so a failed try costs little.
_MIN_RUN = 8
_PROBE = 32
# Records walked one by one after a failed try, doubling up to _MAX_SINGLES.
_MIN_SINGLES = 16
_MAX_SINGLES = 4096


def record_starts(data: bytes, start: int, end: int, count: int) -> np.ndarray | None:
    """The positions in `data` where the records of the section `data[start:end]` start,
    or None unless the section holds exactly `count` records whose lengths (none negative)
    add up to its size. Bytes past `end` may follow (they are never taken as records)."""
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


def holds_records(data: bytes, start: int, end: int, count: int) -> bool:
    """Whether the section `data[start:end]` holds exactly `count` records whose lengths
    (none negative) add up to its size: `record_starts`'s check without the positions."""
    if count >= _MIN_RUN:
        return record_starts(data, start, end, count) is not None
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
