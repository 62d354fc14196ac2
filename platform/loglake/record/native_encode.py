"""Record encoding in C for the HTTP produce path: murmur2 of many keys, base64 keys and
values straight into records grouped by partition, and the produce response's offsets.

A REST produce request carries its records as JSON with base64 keys and values; taking
them apart in Python costs about a microsecond a record per step (decode, hash, group,
encode, answer), most of a request's time. `_encode.c` does these loops in a few
nanoseconds a record. It is a shared library that set-up builds next to this file with
scripts/build_native.sh, loaded with ctypes at import; without it (no compiler), `NATIVE`
is None and callers do the same work in Python (one debug log line says which).

The base64 decoder takes only canonical base64 and declines anything else (None), so that
what it accepts decodes exactly as `binascii.a2b_base64(strict_mode=True)` decodes it, and
what it declines goes to the Python path, which accepts or refuses with its own message.
"""

from __future__ import annotations

import ctypes
import logging
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

LIBRARY = Path(__file__).with_name("libloglake_encode.so")
# _encode.c's LOGLAKE_ENCODE_ABI: a library built from another version of the source is not used.
_ABI = 1
# _encode.c's OFFSET_ENTRY_MAX and the text around the list.
_OFFSET_ENTRY_MAX = 96
_OFFSETS_FRAME = 128
# Bytes a record takes beyond its decoded key and value: its length, attributes, timestamp
# and offset deltas, the key and value lengths, the header count (varints of <= 10 bytes).
_RECORD_OVERHEAD = 40


@dataclass(frozen=True, slots=True)
class EncodedRecords:
    """Records grouped by partition: partition p's records section is
    `data[section_ends[p - 1] (or 0) : section_ends[p]]` with `counts[p]` records; record i of
    the request went to partition `targets[i]` at offset delta `index[i]`."""

    data: bytearray
    section_ends: array[int]
    counts: array[int]
    targets: np.ndarray
    index: np.ndarray


def _address(buffer: bytearray) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


@dataclass(frozen=True, slots=True)
class NativeEncode:
    """The C functions; every method checks what the C code trusts (sizes, bounds) first."""

    murmur2: Callable[..., None]
    encode: Callable[..., int]
    offsets: Callable[..., int]

    def murmur2_many(self, keys: Sequence[bytes]) -> np.ndarray:
        """Kafka's murmur2 of every key (uint32)."""
        out = np.empty(len(keys), dtype=np.uint32)
        if keys:
            lengths = array("q", map(len, keys))
            self.murmur2(b"".join(keys), lengths.buffer_info()[0], len(keys), out.ctypes.data)
        return out

    def encode_base64_records(
        self, keys: list[str] | None, values: list[str], num_partitions: int, forced_partition: int | None
    ) -> EncodedRecords | None:
        """The records whose keys and values are `keys[i]` and `values[i]` in base64 (keys
        None: every key null), each in its key's partition (murmur2, Kafka's default
        partitioner) or in `forced_partition` (required for null keys), with timestamp delta
        0 and no headers; None unless every key and value is a string of canonical base64
        and the partitions are in range."""
        n = len(values)
        if not n or (keys is not None and len(keys) != n) or not 0 < num_partitions < 2**31:
            return None
        if forced_partition is None and keys is None:
            return None
        if forced_partition is not None and not 0 <= forced_partition < num_partitions:
            return None
        try:
            # Comma-separated: a key or value holding a comma is not base64 and is declined.
            key_text = None if keys is None else ",".join(keys).encode("ascii")
            value_text = ",".join(values).encode("ascii")
        except (TypeError, UnicodeEncodeError):  # a null or a number, or not base64 at all
            return None
        key_size = 0 if key_text is None else len(key_text)
        # Decoded, base64 takes 3/4 of its text; the first pass decodes each key into `data`.
        data = bytearray((key_size + len(value_text)) // 4 * 3 + _RECORD_OVERHEAD * n)
        targets = np.empty(n, dtype=np.int32)
        index = np.empty(n, dtype=np.int64)
        section_ends = array("q", bytes(8 * num_partitions))
        counts = array("q", bytes(8 * num_partitions))
        written = self.encode(
            key_text,
            key_size,
            value_text,
            len(value_text),
            n,
            num_partitions,
            -1 if forced_partition is None else forced_partition,
            _address(data),
            len(data),
            targets.ctypes.data,
            index.ctypes.data,
            section_ends.buffer_info()[0],
            counts.buffer_info()[0],
        )
        if written < 0:
            return None
        return EncodedRecords(data, section_ends, counts, targets, index)

    def offsets_json(self, targets: np.ndarray, index: np.ndarray, bases: np.ndarray) -> bytes:
        """The produce response body (`{"offsets": [...], "key_schema_id": null, ...}`, as
        orjson renders it): record i at partition targets[i], offset bases[targets[i]] + index[i]."""
        n = len(targets)
        if len(index) != n:
            raise ValueError("a partition and an offset delta for every record")
        targets = np.ascontiguousarray(targets, dtype=np.int32)
        index = np.ascontiguousarray(index, dtype=np.int64)
        bases = np.ascontiguousarray(bases, dtype=np.int64)
        out = bytearray(_OFFSETS_FRAME + _OFFSET_ENTRY_MAX * n)
        size = self.offsets(targets.ctypes.data, index.ctypes.data, bases.ctypes.data, len(bases), n, _address(out))
        if size < 0:
            raise ValueError("a record's partition has no base offset")
        return bytes(memoryview(out)[:size])


def load_native(path: Path) -> NativeEncode | None:
    """The C functions of the library at `path`, or None (Python does the work) if it is
    missing, of another ABI version or not loadable; logs which is in use."""
    try:
        library = ctypes.CDLL(str(path))
        abi = library.loglake_encode_abi
        abi.restype = ctypes.c_int64
        if abi() != _ABI:
            raise OSError(f"ABI version {abi()}, this loglake needs {_ABI}: rebuild with scripts/build_native.sh")
        murmur2 = library.loglake_murmur2_many
        encode = library.loglake_encode_base64_records
        offsets = library.loglake_offsets_json
    except (OSError, AttributeError) as exc:
        logger.debug("record encoding: in Python (native encoding %s not loaded: %s)", path, exc)
        return None
    # c_void_p takes bytes as a pointer to their contents (no copy) and an int as an address.
    pointer, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    murmur2.argtypes = [pointer, pointer, i64, pointer]
    murmur2.restype = None
    encode.argtypes = [pointer, i64, pointer, i64, i64, i32, i32, pointer, i64, pointer, pointer, pointer, pointer]
    encode.restype = i64
    offsets.argtypes = [pointer, pointer, pointer, i64, i64, pointer]
    offsets.restype = i64
    logger.debug("record encoding: native (%s)", path)
    return NativeEncode(murmur2, encode, offsets)


NATIVE = load_native(LIBRARY)
