"""The HTTP produce path's native encoding (`_encode.c`) against the Python path it stands in
for: the same murmur2, the same batches and placements from the same JSON records, base64
accepted only where binascii's strict mode accepts it (and decoded the same), the same
response body as orjson renders; and everything still answered without the library."""

from __future__ import annotations

import base64
import binascii
import logging
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from loglake import partitioner
from loglake.partitioner import StickyPartitioner, murmur2, numpy_murmur2_many, partition_for_key
from loglake.record import native_encode
from loglake.record.batch import decode_batches
from loglake.record.native_encode import NativeEncode, load_native
from native_helpers import build_native, build_other

from ingest_gateway.http import rest_records
from ingest_gateway.http.rest_records import (
    PartitionedRecords,
    base64_fields,
    encode_base64_fields,
    partition_records,
    rows_of,
)

NOW_MS = 1_700_000_000_000
MAX_BATCH = 1_048_588


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> NativeEncode:
    loaded = load_native(build_native(tmp_path_factory.mktemp("native")).encode)
    assert loaded is not None
    return loaded


@pytest.fixture(scope="module")
def with_native(native: NativeEncode) -> Iterator[NativeEncode]:
    """The HTTP path using the library built here (module-scoped: hypothesis runs each
    property's examples inside one call of the test)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(rest_records, "NATIVE", native)
        yield native


def _sticky() -> StickyPartitioner:
    """A sticky partitioner starting where every other one made here starts."""
    random.seed(7)
    return StickyPartitioner()


def _python_path(records: list, num_partitions: int, forced: int | None) -> PartitionedRecords:
    rows, explicit = rows_of(records, "binary")
    return partition_records(rows, explicit, "t", num_partitions, forced, _sticky(), NOW_MS, MAX_BATCH)


def _native_path(
    records: list, num_partitions: int = 3, forced: int | None = None, max_batch: int = MAX_BATCH
) -> PartitionedRecords | None:
    fields = base64_fields(records)
    if fields is None:
        return None
    return encode_base64_fields(fields, num_partitions, forced, _sticky(), NOW_MS, max_batch)


def _same(a: PartitionedRecords, b: PartitionedRecords) -> None:
    assert a.batches == b.batches
    assert a.placements() == b.placements()
    bases = {p: 1000 * p + 7 for p in a.batches}
    assert a.offsets_body(bases) == b.offsets_body(bases)


def test_murmur2_of_many_keys_matches_kafka_vectors_and_the_scalar_hash(native: NativeEncode) -> None:
    # Kafka's UtilsTest vectors, as signed ints.
    vectors = {b"21": -973932308, b"foobar": -790332482, b"abc": 479470107, b"a-little-bit-long-string": -985981536}
    hashed = native.murmur2_many(list(vectors)).astype(np.int64)
    assert [(h - (1 << 32)) if h & 0x80000000 else h for h in hashed.tolist()] == list(vectors.values())
    assert native.murmur2_many([]).tolist() == []


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.binary(max_size=300), max_size=50))
def test_property_native_and_numpy_murmur2_agree_with_the_scalar_one(native: NativeEncode, keys: list[bytes]) -> None:
    expected = [murmur2(k) & 0xFFFFFFFF for k in keys]
    assert native.murmur2_many(keys).tolist() == expected
    assert numpy_murmur2_many(keys).tolist() == expected


_keyed_records = st.lists(
    st.tuples(st.binary(max_size=40), st.binary(max_size=300)).map(
        lambda kv: {"key": base64.b64encode(kv[0]).decode(), "value": base64.b64encode(kv[1]).decode()}
    ),
    min_size=1,
    max_size=300,
)
_keyless_records = st.lists(
    st.binary(max_size=300).map(lambda v: {"value": base64.b64encode(v).decode()}), min_size=1, max_size=300
)


@settings(max_examples=150, deadline=None)
@given(
    records=_keyed_records | _keyless_records, num_partitions=st.integers(1, 40), forced=st.none() | st.integers(0, 39)
)
def test_property_the_native_path_encodes_what_the_python_path_does(
    with_native: NativeEncode, records: list, num_partitions: int, forced: int | None
) -> None:
    forced = None if forced is None else forced % num_partitions
    placed = _native_path(records, num_partitions, forced)
    assert placed is not None
    _same(placed, _python_path(records, num_partitions, forced))
    # Kafka's default partitioner: murmur2 of the decoded key; null keys stick to one partition.
    if forced is None and "key" in records[0]:
        assert placed.targets.tolist() == [
            partition_for_key(base64.b64decode(r["key"]), num_partitions) for r in records
        ]
    elif forced is None:
        assert len(set(placed.targets.tolist())) == 1


def test_records_of_a_partition_keep_request_order_and_read_back(with_native: NativeEncode) -> None:
    records = [
        {"key": base64.b64encode(b"k%d" % (i % 7)).decode(), "value": base64.b64encode(bytes([i]) * i).decode()}
        for i in range(200)
    ]
    placed = _native_path(records)
    assert placed is not None
    for partition, batches in placed.batches.items():
        ((header, decoded),) = list(decode_batches(b"".join(batches)))
        mine = [i for i, p in enumerate(placed.targets.tolist()) if p == partition]
        assert [(r.key, r.value, r.timestamp, r.offset) for r in decoded] == [
            (b"k%d" % (i % 7), bytes([i]) * i, NOW_MS, n) for n, i in enumerate(mine)
        ]
        assert header.record_count == len(mine)


# Text that is nearly base64: the alphabet, padding, the separator the native path joins
# with, whitespace and a non-ASCII letter, in short strings of every length.
_nearly_base64 = st.text(alphabet="AQgw+/09=,\n é", max_size=13)


@settings(max_examples=400, deadline=None)
@given(key=_nearly_base64, value=_nearly_base64, other=_nearly_base64)
@example(key="QUI=", value="QQ==", other="")  # padding taken
@example(key="QUJD", value="AB=C", other="")  # padding inside
@example(key="QQ=", value="QQ==", other="")  # padding short
@example(key="QR==", value="QUJ=", other="")  # leftover bits set: binascii takes them
@example(key="", value="", other="0000000,")  # the separator inside the last one
def test_property_base64_is_taken_only_where_binascii_strict_takes_it(
    with_native: NativeEncode, key: str, value: str, other: str
) -> None:
    """The native path declines (the Python path then answers) unless every key and value is
    base64 binascii's strict mode accepts, and decodes what it takes as binascii does."""
    records = [{"key": key, "value": value}, {"key": other, "value": "QQ=="}]
    placed = _native_path(records)

    def strict(text: str) -> bool:
        try:
            binascii.a2b_base64(text, strict_mode=True)
        except (binascii.Error, ValueError):
            return False
        return True

    canonical = all(strict(t) and len(t) % 4 == 0 for t in (key, value, other))
    assert (placed is not None) == canonical
    if placed is not None:
        _same(placed, _python_path(records, 3, None))


@pytest.mark.parametrize(
    "records",
    [
        [{"key": "QQ==", "value": None}],  # a null value
        [{"key": None, "value": "QQ=="}],  # a null key given
        [{"value": "QQ=="}, {"key": "QQ==", "value": "QQ=="}],  # keys and no keys
        [{"key": "QQ=="}, {"value": "QQ=="}],  # no value
        [{"key": "QQ==", "value": "QQ==", "partition": 0}],  # other fields
        [{"value": "QQ==", "timestamp": 5}, {}],  # other fields, two in all
        [{"key": "QQ==", "value": "QQ=="}, {"key": 1, "value": "QQ=="}],  # not a string
        [{"key": "QQ==", "value": "QQ=="}, ["QQ==", "QQ=="]],  # not an object
        [{"key": "QQ==", "value": "QQ==,QQ=="}, {"key": "QQ==", "value": "QQ=="}],  # the separator inside
    ],
)
def test_other_shapes_go_to_the_python_path(with_native: NativeEncode, records: list) -> None:
    assert _native_path(records) is None


def test_a_batch_over_max_message_bytes_goes_to_the_python_path_which_splits_it(with_native: NativeEncode) -> None:
    records = [{"key": "QQ==", "value": base64.b64encode(b"v" * 1000).decode()} for _ in range(10)]
    assert _native_path(records, 1, max_batch=5000) is None
    assert _native_path(records, 1, max_batch=20000) is not None


def test_partitions_out_of_range_are_declined(native: NativeEncode) -> None:
    assert native.encode_base64_records(["QQ=="], ["QQ=="], 0, None) is None
    assert native.encode_base64_records(["QQ=="], ["QQ=="], 3, 3) is None
    assert native.encode_base64_records(["QQ=="], ["QQ=="], 3, -1) is None
    assert native.encode_base64_records([], [], 3, None) is None
    assert native.encode_base64_records(["QQ=="], ["QQ==", "QQ=="], 3, None) is None
    assert native.encode_base64_records(None, ["QQ=="], 3, None) is None  # null keys need a partition
    assert native.encode_base64_records(None, ["QQ=="], 3, 2) is not None


@settings(max_examples=100, deadline=None)
@given(
    placements=st.lists(st.tuples(st.integers(0, 9), st.integers(0, 2**31)), min_size=1, max_size=50),
    bases=st.lists(st.integers(0, 2**62), min_size=10, max_size=10),
)
def test_property_the_offsets_body_is_what_orjson_renders(native: NativeEncode, placements, bases) -> None:
    targets = np.array([p for p, _ in placements], dtype=np.int32)
    index = np.array([i for _, i in placements], dtype=np.int64)
    body = native.offsets_json(targets, index, np.array(bases, dtype=np.int64))
    offsets = [{"partition": p, "offset": bases[p] + i, "error_code": None, "error": None} for p, i in placements]
    assert body == orjson.dumps({"offsets": offsets, "key_schema_id": None, "value_schema_id": None})


def test_the_offsets_body_refuses_a_partition_without_a_base(native: NativeEncode) -> None:
    with pytest.raises(ValueError):
        native.offsets_json(np.array([0, 3], dtype=np.int32), np.array([0, 0]), np.array([5, 6, 7]))
    with pytest.raises(ValueError):
        native.offsets_json(np.array([-1], dtype=np.int32), np.array([0]), np.array([5]))
    with pytest.raises(ValueError):
        native.offsets_json(np.array([0], dtype=np.int32), np.array([0, 1]), np.array([5]))


def test_without_the_library_python_does_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=native_encode.__name__)
    assert load_native(tmp_path / "absent.so") is None
    assert "record encoding: in Python" in caplog.text
    monkeypatch.setattr(rest_records, "NATIVE", None)
    monkeypatch.setattr(partitioner, "NATIVE", None)
    records = [{"key": base64.b64encode(b"k%d" % i).decode(), "value": "QQ=="} for i in range(20)]
    assert _native_path(records) is None
    placed = _python_path(records, 3, None)
    assert placed.targets.tolist() == [partition_for_key(b"k%d" % i, 3) for i in range(20)]
    bases = {p: 10 for p in placed.batches}
    offsets = [{"partition": p, "offset": 10 + i, "error_code": None, "error": None} for p, i in placed.placements()]
    assert placed.offsets_body(bases) == orjson.dumps(
        {"offsets": offsets, "key_schema_id": None, "value_schema_id": None}
    )


@pytest.mark.parametrize(
    "source, said",
    [
        ("long loglake_encode_abi(void) { return 0; }", "ABI version 0"),  # an older source's
        ("long loglake_encode_abi(void) { return 1; }", "loglake_murmur2_many"),  # a function missing
    ],
)
def test_a_library_not_built_from_this_source_is_not_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, source: str, said: str
) -> None:
    library = build_other(tmp_path, source + "\n")
    caplog.set_level(logging.DEBUG, logger=native_encode.__name__)
    assert load_native(library) is None
    assert "record encoding: in Python" in caplog.text and said in caplog.text


def test_the_library_set_up_built_is_the_one_in_use_when_present() -> None:
    assert native_encode.LIBRARY.parent == Path(native_encode.__file__).parent
    assert (native_encode.NATIVE is not None) == (load_native(native_encode.LIBRARY) is not None)
