"""How the tier job (loglake.spark.lake_retention) decides which of a partition's lake rows
retention expires (whole history: lake + local log), and how it counts a lake row's bytes."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from loglake.spark.lake_retention import (
    Retention,
    RowSpan,
    file_groups,
    record_sizes,
    retention_cut,
    streamed_retention_cut,
)

NOW = 1_000_000


def cut(timestamps: list[int], sizes: list[int], log_start: int, log_size: int, ms: int, size: int) -> int | None:
    offsets = pa.array(range(10, 10 + len(timestamps)), pa.int64())
    return retention_cut(
        offsets,
        pa.array(timestamps, pa.int64()),
        pa.array(sizes, pa.int64()),
        log_start,
        log_size,
        Retention(ms, size),
        NOW,
    )


def test_time_expires_a_leading_run_only() -> None:
    old, young = NOW - 5000, NOW - 10
    # Kafka deletes leading segments only: an old record after a young one stays.
    assert cut([old, old, young, old, young], [1] * 5, 15, 0, 1000, -1) == 12
    assert cut([young, old], [1, 1], 12, 0, 1000, -1) is None
    # Everything expired: the lake part starts past its last row.
    assert cut([old, old], [1, 1], 12, 0, 1000, -1) == 12
    # Exactly retention.ms old is not expired (Kafka: now - timestamp > retention.ms).
    assert cut([NOW - 1000], [1], 11, 0, 1000, -1) is None
    assert cut([old], [1], 11, 0, -1, -1) is None  # -1: no limit


def test_size_drops_the_oldest_lake_only_rows_while_the_history_is_too_large() -> None:
    young = NOW
    rows = [young] * 6
    sizes = [10, 20, 30, 40, 50, 60]
    # Lake-only rows: offsets 10..13 (below the log start 14), 100 bytes; the log: 150.
    assert cut(rows, sizes, 14, 150, -1, 250) is None  # 250 fits exactly
    assert cut(rows, sizes, 14, 150, -1, 249) == 11  # dropping 10 bytes is enough
    assert cut(rows, sizes, 14, 150, -1, 220) == 12  # 30 bytes: two rows
    assert cut(rows, sizes, 14, 150, -1, 221) == 12  # 29 bytes: still two rows
    # The rows also in the local log are never dropped for size: that is local retention's.
    assert cut(rows, sizes, 14, 150, -1, 10) == 14
    assert cut(rows, sizes, 10, 500, -1, 10) is None


def test_time_and_size_together_take_the_further_cut() -> None:
    old, young = NOW - 5000, NOW
    assert cut([old, young, young, young], [5, 5, 5, 5], 14, 0, 1000, 12) == 12
    assert cut([old, old, old, young], [5, 5, 5, 5], 14, 0, 1000, 12) == 13


def test_a_rows_bytes_are_its_key_value_and_headers() -> None:
    header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    rows = pa.table(
        {
            "key": pa.array([b"ab", None, b""], pa.binary()),
            "value": pa.array([b"12345", b"xyz", None], pa.binary()),
            "headers": pa.array(
                [[{"key": "h", "value": b"vv"}, {"key": "é", "value": None}], None, []], pa.list_(header)
            ),
        }
    )
    assert record_sizes(rows).to_pylist() == [2 + 5 + 1 + 2 + 2, 3, 0]


@given(
    rows=st.lists(st.tuples(st.booleans(), st.integers(0, 50), st.integers(1, 3)), min_size=1, max_size=30),
    cuts=st.sets(st.integers(1, 29)),
    log_start=st.integers(0, 120),
    log_size=st.integers(0, 200),
    ms=st.sampled_from([-1, 1000]),
    size=st.integers(-1, 600),
)
def test_rows_read_a_span_at_a_time_cut_where_all_at_once_do(
    rows: list[tuple[bool, int, int]], cuts: set[int], log_start: int, log_size: int, ms: int, size: int
) -> None:
    """The retention task reads a partition's rows a file (group) at a time and stops at the
    cut: any split of the rows into spans gives the cut of the rows taken together. Offsets
    ascend with gaps (compaction, transaction markers)."""
    offsets = np.cumsum([gap for _, _, gap in rows]) + 9
    millis = np.array([NOW - 5000 if old else NOW for old, _, _ in rows])
    sizes = np.array([n for _, n, _ in rows])
    whole = cut_of([(0, len(rows))], offsets, millis, sizes, log_start, log_size, ms, size)
    bounds = [0, *sorted(c for c in cuts if c < len(rows)), len(rows)]
    split = cut_of(list(zip(bounds, bounds[1:])), offsets, millis, sizes, log_start, log_size, ms, size)
    assert split == whole
    assert whole == retention_cut(
        pa.array(offsets), pa.array(millis), pa.array(sizes), log_start, log_size, Retention(ms, size), NOW
    )


def cut_of(
    parts: list[tuple[int, int]],
    offsets: np.ndarray,
    millis: np.ndarray,
    sizes: np.ndarray,
    log_start: int,
    log_size: int,
    ms: int,
    size: int,
) -> int | None:
    def spans(sized):
        for i, (a, b) in enumerate(parts):
            yield RowSpan(offsets[a:b], millis[a:b], sizes[a:b] if sized(i) else None)

    return streamed_retention_cut(spans, log_start, log_size, Retention(ms, size), NOW)


def test_files_whose_offsets_interleave_are_read_together() -> None:
    """Rows of one range split between two dates (timestamps back across midnight) interleave
    in offsets: those files are one group, sorted together; the others go one by one, in
    offset order."""
    files = [(300, 399, "c"), (0, 99, "a"), (100, 250, "b1"), (150, 180, "b2"), (251, 260, "b3")]
    assert file_groups(files) == (("a",), ("b1", "b2"), ("b3",), ("c",))
    assert file_groups([(0, 9, "a"), (None, None, "x")]) == (("a", "x"),)
    assert file_groups([]) == ()
