"""The walk over record length varints: runs of equal lengths checked at once must find
exactly what a record-by-record walk finds, and refuse what it refuses."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loglake.record.varint import encode_varint
from loglake.record.walk import holds_records, record_starts


def _section(lengths: list[int]) -> tuple[bytes, list[int]]:
    """Records of the given body lengths (the body bytes are the low byte of the length, so
    bodies look like varints too), and where each starts."""
    out = bytearray()
    starts = []
    for length in lengths:
        starts.append(len(out))
        out += encode_varint(length) + bytes([length & 0xFF]) * length
    return bytes(out), starts


def _check(lengths: list[int], prefix: bytes = b"", suffix: bytes = b"") -> None:
    body, starts = _section(lengths)
    data = prefix + body + suffix
    found = record_starts(data, len(prefix), len(prefix) + len(body), len(lengths))
    assert found is not None
    assert found.dtype == np.int64
    assert found.tolist() == [len(prefix) + s for s in starts]


# Runs of equal lengths (including lengths whose varint changes size at 64 and 8192) broken
# by odd ones: every way a run can start, stop early, or be too short to try.
_runs = st.lists(
    st.tuples(st.sampled_from([0, 1, 5, 63, 64, 100, 127, 128, 300, 8191, 8192]), st.integers(1, 70)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(runs=_runs, prefix=st.binary(max_size=5), suffix=st.binary(max_size=5))
def test_property_runs_and_singles_find_every_record(runs, prefix, suffix) -> None:
    _check([length for length, times in runs for _ in range(times)], prefix, suffix)


def test_a_long_run_then_varied_lengths_then_a_run_again() -> None:
    _check([100] * 5000 + list(range(200)) + [7] * 3000 + [101] * 9 + [102] * 7)


def test_count_and_size_must_match_exactly() -> None:
    data, _ = _section([100] * 50)
    assert record_starts(data, 0, len(data), 49) is None
    assert record_starts(data, 0, len(data), 51) is None
    assert record_starts(data, 0, len(data) - 1, 50) is None  # the last record runs past the end
    assert record_starts(data + b"\x00", 0, len(data) + 1, 50) is None  # a byte too many
    assert record_starts(b"", 0, 0, 0).tolist() == []


def test_a_negative_length_is_refused_inside_a_run_and_alone() -> None:
    data = bytearray(_section([100] * 50)[0])
    run_position = 20 * (2 + 100)
    assert data[run_position] == encode_varint(100)[0]
    # -1 zig-zags to 1: as a length varint it reads as 0 bytes, so the walk stays aligned.
    broken = data[:run_position] + encode_varint(-1) + data[run_position + 2 + 100 :]
    assert record_starts(bytes(broken), 0, len(broken), 50) is None
    for times in (1, 40):  # alone, and a run of them
        negatives = encode_varint(-1) * times
        assert record_starts(negatives, 0, len(negatives), times) is None


def test_a_varint_cut_by_the_end_of_the_data_is_refused() -> None:
    data = encode_varint(5000)[:1]  # the first of two bytes
    assert record_starts(data, 0, len(data), 1) is None


def test_a_non_canonical_length_varint_breaks_a_run_but_still_reads() -> None:
    # 100 written in three bytes (zig-zag 200 = 0xC8 0x81, padded with a 0x80 continuation).
    padded = bytes([0xC8, 0x81, 0x00]) + bytes(100)
    plain, _ = _section([100] * 20)
    data = plain + padded + plain
    found = record_starts(data, 0, len(data), 41)
    assert found is not None
    assert found.tolist() == [i * 102 for i in range(20)] + [2040] + [2143 + i * 102 for i in range(20)]


@settings(max_examples=300, deadline=None)
@given(
    lengths=st.lists(st.sampled_from([0, 1, 5, 63, 64, 100, 8192]), max_size=12),
    count_delta=st.integers(-2, 2),
    cut=st.integers(-3, 3),
    noise=st.binary(max_size=12),
)
def test_property_holds_records_agrees_with_record_starts(lengths, count_delta, cut, noise) -> None:
    """The small-batch check (no numpy below a run's length) says yes exactly where the walk
    finds `count` records: right and wrong counts, sections cut short or too long, and
    arbitrary bytes."""
    body, _ = _section(lengths)
    count = max(0, len(lengths) + count_delta)
    for data in (body + noise, noise):
        end = max(0, min(len(data), len(body) + cut if data is not noise else len(noise)))
        assert holds_records(data, 0, end, count) == (record_starts(data, 0, end, count) is not None)
