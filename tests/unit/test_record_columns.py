"""Every record's fields read in one C pass over joined records sections (`_walk.c`'s
loglake_record_columns) against the walk and numpy passes it stands in for: the same columns
for any records, and for corrupt bytes (records cut, bytes changed, keys and values running
past their record, varints too long, wrong counts, the padding left out) the same error."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loglake.errors import ErrorCode, KafkaError
from loglake.record import walk
from loglake.record.columns import (
    PADDING,
    RecordColumns,
    byte_ranges,
    native_record_columns,
    numpy_record_columns,
    read_record_columns,
)
from loglake.record.varint import encode_varint
from loglake.record.walk import COLUMNS_OUT_OF_DATA, NativeWalk, load_native
from native_helpers import build_native


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> NativeWalk:
    loaded = load_native(build_native(tmp_path_factory.mktemp("native")).walk)
    assert loaded is not None
    return loaded


def _bytes_field(value: bytes | None) -> bytes:
    return encode_varint(-1) if value is None else encode_varint(len(value)) + value


_delta = st.one_of(st.integers(-3, 300), st.integers(-(2**63), 2**63 - 1))
_header = st.tuples(st.binary(max_size=4), st.none() | st.binary(max_size=4))
# A valid record's fields: timestamp delta, offset delta, key, value, headers.
_record_fields = st.tuples(
    _delta,
    _delta,
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=150),
    st.lists(_header, max_size=3),
)


def _encode_body(fields: tuple) -> bytes:
    """A record after its length: attributes, deltas, key, value, headers."""
    timestamp_delta, offset_delta, key, value, headers = fields
    body = b"\x00" + encode_varint(timestamp_delta) + encode_varint(offset_delta)
    body += _bytes_field(key) + _bytes_field(value) + encode_varint(len(headers))
    for name, header_value in headers:
        body += encode_varint(len(name)) + name + _bytes_field(header_value)
    return body


_record_body = _record_fields.map(_encode_body)


# Varint bytes as a field may hold them: any value in its shortest form, or any run of
# continuation bytes (non-canonical, longer than 10 bytes, bits past 64).
_varint = st.one_of(
    st.integers(-3, 300).map(encode_varint),
    st.integers(-(2**63), 2**63 - 1).map(encode_varint),
    st.tuples(st.binary(max_size=11), st.integers(0, 127)).map(lambda t: bytes(b | 0x80 for b in t[0]) + bytes([t[1]])),
)

# A record's body changed while its length still covers it (the walk accepts it; its fields
# are what is wrong): bytes replaced by a varint or by any bytes, cut, extended, or any bytes.
_body_mutation = st.one_of(
    st.just(("none",)),
    st.tuples(st.just("replace"), st.integers(0, 300), st.integers(0, 11), _varint | st.binary(max_size=11)),
    st.tuples(st.just("cut"), st.integers(0, 300)),
    st.tuples(st.just("extend"), st.binary(min_size=1, max_size=11)),
    st.tuples(st.just("any"), st.binary(max_size=40)),
)


def _mutate_body(body: bytes, mutation: tuple) -> bytes:
    kind = mutation[0]
    if kind == "replace":
        at = mutation[1] % (len(body) + 1)
        return body[:at] + mutation[3] + body[at + mutation[2] :]
    if kind == "cut":
        return body[: mutation[1] % (len(body) + 1)]
    if kind == "extend":
        return body + mutation[1]
    if kind == "any":
        return mutation[1]
    return body


# The joined sections changed: a count off, a byte changed (a record's length, most likely
# breaking the walk), the records cut short, the padding shortened or left out.
_data_mutation = st.one_of(
    st.just(("none",)),
    st.tuples(st.just("count"), st.integers(0, 10), st.sampled_from([-1, 1, 2**31])),
    st.tuples(st.just("byte"), st.integers(0, 100_000), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.integers(1, 20)),
    st.tuples(st.just("padding"), st.integers(0, len(PADDING) - 1)),
)

_sections = st.lists(st.lists(st.tuples(_record_body, _body_mutation), max_size=12), max_size=4)


def _joined(sections: list[list[tuple[bytes, tuple]]], mutation: tuple) -> tuple[bytes, list[int], list[int]]:
    records, ends, counts = b"", [], []
    for section in sections:
        for body, body_mutation in section:
            body = _mutate_body(body, body_mutation)
            records += encode_varint(len(body)) + body
        ends.append(len(records))
        counts.append(len(section))
    padding = PADDING
    kind = mutation[0]
    if kind == "count" and counts:
        i = mutation[1] % len(counts)
        counts[i] = max(0, counts[i] + mutation[2])
    elif kind == "byte" and records:
        at = mutation[1] % len(records)
        records = records[:at] + bytes([mutation[2]]) + records[at + 1 :]
    elif kind == "cut":
        records = records[: max(0, len(records) - mutation[1])]
    elif kind == "padding":
        padding = PADDING[: mutation[1]]
    return records + padding, ends, counts


_CORRUPT = ("KafkaError", ErrorCode.CORRUPT_MESSAGE)


def _outcome(read: Callable[..., RecordColumns], *args: object) -> object:
    """The columns as lists (with their dtypes), or the error raised."""
    try:
        columns = read(*args)
    except KafkaError as exc:
        return ("KafkaError", exc.code, exc.message)
    except IndexError:  # the numpy path's take past the data: the padding left out
        return ("IndexError",)
    return [(str(value.dtype), value.tolist()) for value in dataclasses.astuple(columns)]


@settings(max_examples=1500, deadline=None)
@given(sections=_sections, mutation=_data_mutation)
def test_property_native_columns_are_the_numpy_columns_or_the_same_error(
    native: NativeWalk, sections, mutation
) -> None:
    data, ends, counts = _joined(sections, mutation)
    expected = _outcome(numpy_record_columns, data, ends, counts)
    assert _outcome(native_record_columns, native, data, ends, counts) == expected
    answer = native.record_columns(data, ends, counts)
    if isinstance(answer, int) and answer == COLUMNS_OUT_OF_DATA:
        # The C code answers "past the data" only where numpy's read fails too (then the
        # numpy path gives its own error), never for records with their padding.
        assert expected == ("IndexError",)
        assert mutation[0] in ("padding", "cut")


@settings(max_examples=300, deadline=None)
@given(sections=st.lists(st.lists(_record_fields, max_size=12), max_size=4))
def test_property_valid_records_read_natively_as_written(native: NativeWalk, sections) -> None:
    """Records that are not corrupt read as they were written."""
    data, ends, counts = _joined([[(_encode_body(fields), ("none",)) for fields in s] for s in sections], ("none",))
    columns = native_record_columns(native, data, ends, counts)
    written = [fields for section in sections for fields in section]
    assert columns.timestamp_delta.tolist() == [fields[0] for fields in written]
    assert columns.offset_delta.tolist() == [fields[1] for fields in written]
    for pos, length, index in ((columns.key_pos, columns.key_len, 2), (columns.value_pos, columns.value_len, 3)):
        found = [None if n < 0 else data[p : p + n] for p, n in zip(pos.tolist(), length.tolist(), strict=True)]
        assert found == [fields[index] for fields in written]
    assert columns.header_count.tolist() == [len(fields[4]) for fields in written]
    assert columns.starts.tolist()[1:] == columns.ends.tolist()[:-1]  # records tile the sections
    assert _outcome(native_record_columns, native, data, ends, counts) == _outcome(
        numpy_record_columns, data, ends, counts
    )


def test_a_length_near_2_to_the_63_runs_past_the_record_in_both_paths(native: NativeWalk) -> None:
    """A key or value length so large that its end position overflows int64 is refused as a
    field past its record's end (the numpy path once let the overflowed position through)."""
    huge = encode_varint(2**63 - 1)
    for body in (
        b"\x00\x00\x00" + huge + b"\x02\x00\x00",  # the key's length
        b"\x00\x00\x00\x02a" + huge + b"\x00",  # the value's length
    ):
        data = encode_varint(len(body)) + body + PADDING
        for outcome in (
            _outcome(numpy_record_columns, data, [len(data) - len(PADDING)], [1]),
            _outcome(native_record_columns, native, data, [len(data) - len(PADDING)], [1]),
        ):
            assert outcome == _CORRUPT + ("a record's fields run past its length",)


def test_of_two_bad_varints_in_one_field_the_one_running_past_the_data_is_said_first(native: NativeWalk) -> None:
    """numpy reads a field's bytes for every record before it finds one too long: a varint
    running past the data (only without the padding) fails first, whichever record holds it;
    with the padding, the one too long is the error."""
    too_long = b"\x00" + b"\x80" * 10 + b"\x00\x00\x00\x00\x00"  # the timestamp delta: 11 bytes
    cut = b"\x00\x80"  # the last record: its timestamp delta continues past it, and past the data
    records = b"".join(encode_varint(len(body)) + body for body in (too_long, cut))
    for padding, error in ((b"", ("IndexError",)), (PADDING, _CORRUPT + ("varint longer than 10 bytes",))):
        data = records + padding
        assert _outcome(numpy_record_columns, data, [len(records)], [2]) == error
        assert _outcome(native_record_columns, native, data, [len(records)], [2]) == error


def test_a_count_no_section_can_hold_is_refused_before_anything_is_sized(native: NativeWalk) -> None:
    body = b"\x00\x00\x00\x01\x01\x00"
    data = encode_varint(len(body)) + body + PADDING
    for count in (2**40, -1):
        with pytest.raises(KafkaError, match="do not match its record count"):
            native_record_columns(native, data, [len(body) + 1], [count])
    with pytest.raises(KafkaError, match="do not match its record count"):
        native_record_columns(native, data, [len(data) + 1], [1])  # a section past the data


def test_read_record_columns_uses_the_library_when_loaded_and_numpy_without(monkeypatch: pytest.MonkeyPatch) -> None:
    body = b"\x00\x02\x04\x06key\x0avalue\x00"
    records = (encode_varint(len(body)) + body) * 3
    data = records + PADDING
    loaded = read_record_columns(data, [len(records)], [3])
    assert loaded.key_len.tolist() == [3, 3, 3] and loaded.value_len.tolist() == [5, 5, 5]
    assert loaded.offset_delta.tolist() == [2, 2, 2] and loaded.timestamp_delta.tolist() == [1, 1, 1]
    monkeypatch.setattr(walk, "_NATIVE", None)
    without = read_record_columns(data, [len(records)], [3])
    assert _outcome(lambda: without) == _outcome(lambda: loaded)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=40), nulls=st.lists(st.booleans()))
def test_property_byte_ranges_copied_natively_or_by_arrow_are_the_bytes(
    native: NativeWalk, data: bytes, cuts: list[int], nulls: list[bool]
) -> None:
    points = sorted(cut % (len(data) + 1) for cut in cuts)
    starts = points[0:-1:2]
    lengths = [-1 if null else end - start for start, end, null in zip(starts, points[1::2], nulls + [False] * 20)]
    expected = [None if length < 0 else data[start : start + length] for start, length in zip(starts, lengths)]
    buffer = pa.py_buffer(data)
    gathered = native.gather_ranges(
        buffer.address, buffer.size, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64)
    )
    assert gathered is not None
    offsets, values = gathered
    assert [values[a:b].tobytes() for a, b in itertools.pairwise(offsets)] == [v or b"" for v in expected]
    for library in (native, None):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(walk, "_NATIVE", library)
            ranges = byte_ranges(
                pa.binary(), buffer, np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64)
            )
        ranges.validate(full=True)
        assert ranges.to_pylist() == expected


def test_byte_ranges_outside_the_data_are_not_copied(native: NativeWalk) -> None:
    buffer = pa.py_buffer(b"0123456789")
    for starts, lengths in (([8], [3]), ([-1], [2]), ([0, 5], [5, 2**62])):
        assert native.gather_ranges(buffer.address, 10, np.array(starts), np.array(lengths)) is None
    assert native.gather_ranges(buffer.address, 10, np.array([10, 0]), np.array([0, -1])) is not None
