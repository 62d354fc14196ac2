"""How the tier job (loglake.spark.lake_retention) decides which of a partition's lake rows
retention expires (whole history: lake + local log), and how it counts a lake row's bytes."""

from __future__ import annotations

import pyarrow as pa

from loglake.spark.lake_retention import Retention, record_sizes, retention_cut

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
