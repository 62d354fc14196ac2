"""The walk over record length varints: runs of equal lengths checked at once must find
exactly what a record-by-record walk finds, and refuse what it refuses; the native walk
(C) must find and refuse exactly what the walk in Python does."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loglake.record import walk
from loglake.record.varint import encode_varint
from loglake.record.walk import (
    NativeWalk,
    holds_records,
    load_native,
    python_holds_records,
    python_record_starts,
    record_starts,
    sections_record_starts,
)
from native_helpers import build_native, build_other


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


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=20), start=st.integers(-2, 22), end=st.integers(-2, 22))
def test_property_one_record_check_agrees_with_the_walk(data, start, end) -> None:
    """A one-record batch (a linger.ms=0 producer's) has its own short check: it agrees with
    the general walk on any bytes, including sections cut short, empty or out of range."""
    expected = 0 <= start <= end <= len(data) and python_holds_records(data, start, end, 1)
    assert holds_records(data, start, end, 1) == expected


# The native walk (_walk.c) against the walk in Python. The library is built from the current
# source by set-up's own build script, into the test's directory: a library left from an older
# source next to walk.py cannot make these pass.


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> NativeWalk:
    loaded = load_native(build_native(tmp_path_factory.mktemp("native")).walk)
    assert loaded is not None
    return loaded


def _overlong(value: int, size: int) -> bytes:
    """`value` (unsigned) as a varint padded with continuation bytes to `size` bytes (Python's
    walk reads up to 10; an 11th is an error)."""
    out = bytearray()
    for i in range(size):
        out.append((value & 0x7F) | (0x80 if i < size - 1 else 0))
        value >>= 7
    return bytes(out)


# What can go wrong in a section: a record's length varint replaced by any signed 64-bit
# length (negative, past the end, a few bytes off), by its own length negated, by an over-long varint (up to 11 bytes,
# including 10-byte ones whose last byte holds bits past 64), a byte changed, bytes cut or added.
_mutation = st.one_of(
    st.just(("none",)),
    st.tuples(st.just("length"), st.integers(0, 10_000), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("length"), st.integers(0, 10_000), st.integers(-3, 300)),
    st.tuples(st.just("negative"), st.integers(0, 10_000)),
    st.tuples(st.just("overlong"), st.integers(0, 10_000), st.integers(0, 2**70), st.integers(1, 11)),
    st.tuples(st.just("byte"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.integers(1, 5)),
    st.tuples(st.just("extra"), st.binary(min_size=1, max_size=5)),
)


def _mutate(lengths: list[int], mutation: tuple) -> bytes:
    body, starts = _section(lengths)
    kind = mutation[0]
    if kind == "cut":
        return body[: max(0, len(body) - mutation[1])]
    if kind == "extra":
        return body + mutation[1]
    if not starts or kind == "none":
        return body
    i = mutation[1] % len(starts)
    at = starts[i]
    if kind == "byte":
        return body[:at] + bytes([mutation[2]]) + body[at + 1 :]
    if kind == "negative":  # -L-1 zig-zags to 2L+1: the sign bit on the record's own length
        replaced = encode_varint(-lengths[i] - 1)
    elif kind == "length":
        replaced = encode_varint(mutation[2])
    else:
        replaced = _overlong(mutation[2], mutation[3])
    return body[:at] + replaced + body[at + len(encode_varint(lengths[i])) :]


_lengths = st.lists(
    st.one_of(st.sampled_from([0, 1, 63, 64, 100, 8191, 8192, 20_000]), st.integers(0, 200)), max_size=60
)


@settings(max_examples=1000, deadline=None)
@given(
    lengths=_lengths,
    mutation=_mutation,
    count_delta=st.integers(-2, 2),
    prefix=st.binary(max_size=4),
    suffix=st.binary(max_size=12),
)
def test_property_the_native_walk_agrees_with_the_python_walk(
    native: NativeWalk, lengths, mutation, count_delta, prefix, suffix
) -> None:
    """Same starts on valid sections, same refusals on corrupted ones: truncated, a length past
    the end or negative, over-long varints, wrong counts, bytes added; the bytes after the
    section (`suffix`) never change the answer."""
    body = _mutate(lengths, mutation)
    data = prefix + body + suffix
    start, end = len(prefix), len(prefix) + len(body)
    count = max(0, len(lengths) + count_delta)
    expected = python_record_starts(data, start, end, count)
    found = native.record_starts(data, start, end, count)
    assert (found is None) == (expected is None)
    if expected is not None and found is not None:
        assert found.dtype == np.int64
        assert found.tolist() == expected.tolist()
    assert native.holds_records(data, start, end, count) == python_holds_records(data, start, end, count)
    assert native.holds_records(data, start, end, count) == (expected is not None)


def test_varints_of_ten_bytes_and_more_are_read_as_python_reads_them(native: NativeWalk) -> None:
    cases = [
        _overlong(0, 10) + b"",  # a length of 0 in 10 bytes: a record
        _overlong(2 * 5, 10) + bytes(5),  # 5 in 10 bytes
        _overlong(0, 11),  # 11 bytes: refused
        _overlong(1 << 63, 10),  # bit 63: a length of 2^62
        _overlong(1 << 64, 10),  # past 64 bits
        _overlong(2 * 3, 9) + bytes(3),
    ]
    for data in cases:
        expected = python_record_starts(data, 0, len(data), 1)
        found = native.record_starts(data, 0, len(data), 1)
        assert (None if found is None else found.tolist()) == (None if expected is None else expected.tolist())
    assert native.record_starts(cases[0], 0, 10, 1) is not None
    assert native.record_starts(cases[1], 0, 15, 1) is not None
    assert native.record_starts(cases[2], 0, 11, 1) is None


@settings(max_examples=200, deadline=None)
@given(sections=st.lists(st.tuples(_lengths, _mutation, st.integers(-1, 1)), max_size=5))
def test_property_sections_walked_natively_agree_with_each_section_walked_in_python(
    native: NativeWalk, sections
) -> None:
    """The decoder's walk of joined sections (one output array, each section written into its
    part) finds what walking each section alone in Python finds, and fails where any fails."""
    data = b""
    ends, counts, expected = [], [], []
    for lengths, mutation, count_delta in sections:
        at = len(data)
        data += _mutate(lengths, mutation)
        ends.append(len(data))
        counts.append(max(0, len(lengths) + count_delta))
        expected.append(python_record_starts(data, at, len(data), counts[-1]))
    data += bytes(16)
    found = native.sections_record_starts(data, ends, counts)
    if any(starts is None for starts in expected):
        assert found is None
    else:
        assert found is not None
        assert found.tolist() == [s for starts in expected if starts is not None for s in starts.tolist()]


def test_a_section_outside_the_data_or_too_small_for_its_count_is_refused_unwalked() -> None:
    data, _ = _section([5] * 10)
    assert record_starts(data, 0, len(data) + 6, 11) is None  # past the data
    assert record_starts(data, 3, 2, 0) is None
    assert record_starts(data, 0, len(data), 2**31 - 1) is None  # no 16 GB array for a corrupt count
    assert not holds_records(data, 0, len(data), 2**31 - 1)
    assert sections_record_starts(data, [len(data)], [2**31 - 1]) is None
    assert sections_record_starts(data, [len(data) + 1], [10]) is None


def test_the_native_walk_checks_bounds_before_the_c_code_reads(native: NativeWalk) -> None:
    """The C code reads data[start:end] unchecked: every native entry point refuses a section
    outside the data, or a count its size cannot hold, before calling it."""
    data, _ = _section([5] * 10)
    assert native.record_starts(data, 0, len(data) + 1000, 10) is None
    assert native.record_starts(data, -5, len(data), 10) is None
    assert native.record_starts(data, 0, len(data), 2**40) is None
    assert not native.holds_records(data, 0, len(data) + 1000, 10)
    assert native.sections_record_starts(data, [len(data), len(data) + 1000], [10, 1]) is None
    assert native.record_starts(data, 0, len(data), 10) is not None


def test_without_the_library_records_are_walked_in_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A missing library (no compiler at set-up) leaves the walk in Python, said once at debug
    level, and every entry point still answers."""
    caplog.set_level(logging.DEBUG, logger=walk.__name__)
    assert load_native(tmp_path / "absent.so") is None
    assert "record walk: in Python" in caplog.text
    monkeypatch.setattr(walk, "_NATIVE", None)
    data, starts = _section([3, 300, 3, 3] * 10)
    assert record_starts(data, 0, len(data), 40) is not None
    assert record_starts(data, 0, len(data), 40).tolist() == starts  # type: ignore[union-attr]
    assert holds_records(data, 0, len(data), 40)
    assert not holds_records(data, 0, len(data), 39)
    joined = sections_record_starts(data + data, [len(data), 2 * len(data)], [40, 40])
    assert joined is not None
    assert joined.tolist() == starts + [len(data) + s for s in starts]


# A library of an older source reports an older ABI version; one of this version's ABI
# without the functions this version calls is not used either.
@pytest.mark.parametrize(("abi", "said"), [(0, "ABI version 0"), (2, "loglake_record_columns")])
def test_a_library_not_built_from_this_source_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, abi: int, said: str
) -> None:
    source = f"long loglake_walk_abi(void) {{ return {abi}; }}\nlong loglake_walk(void) {{ return 0; }}\n"
    caplog.set_level(logging.DEBUG, logger=walk.__name__)
    assert load_native(build_other(tmp_path, source)) is None
    assert "record walk: in Python" in caplog.text and said in caplog.text


def test_the_library_set_up_built_is_the_one_in_use_when_present() -> None:
    """Found next to walk.py, where set-up builds it (the installed package's location)."""
    assert walk.LIBRARY.parent == Path(walk.__file__).parent
    assert (walk._NATIVE is not None) == (load_native(walk.LIBRARY) is not None)
