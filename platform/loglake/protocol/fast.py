"""Hand-written codecs for the messages on the produce path: ProduceRequest decode and
ProduceResponse encode, at every version the broker serves.

The compiled codec (schema.py) costs one Python call per field and per array element; a
producer with linger.ms=0 sends a Produce request per record, so that per-field cost is paid
per record. These functions read and write the same dicts and bytes in straight-line code.
They take the common shape only: anything else (tagged fields present, a null where none is
allowed, a length that runs past the buffer, a field the fast encoder does not write) goes to
the compiled codec, which answers it exactly as it always did, errors included.
tests/unit/protocol/test_protocol_fast.py checks both against each other.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from loglake.protocol import types as t
from loglake.protocol.errors import ProtocolDecodeError
from loglake.protocol.types import Buffer

Reader = Callable[[Buffer, int], tuple[Any, int]]
Writer = Callable[[list, Any], None]

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_INDEX_LENGTH = struct.Struct(">ii")  # a partition's index and its records' int32 length
_THROTTLE = struct.Struct(">i")
# A partition's fixed fields: index, error_code, base_offset, then by version
# log_append_time_ms (v2+) and log_start_offset (v5+).
_PARTITION_V0 = struct.Struct(">ihq")
_PARTITION_V2 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_UVARINT_SMALL = [bytes((i,)) for i in range(0x80)]


class Irregular(Exception):
    """What the fast path does not take: the compiled codec reads it instead."""


def string_at(buf: Buffer, pos: int, n: int, size: int) -> str:
    """The `n`-byte UTF-8 string at `pos` of a buffer of `size` bytes."""
    end = pos + n
    if n < 0 or end > size:
        raise Irregular
    return str(buf[pos:end], "utf-8")


def compact_records_at(buf: Buffer, pos: int, size: int) -> tuple[Buffer | None, int]:
    """The compact records field at `pos` (a slice of `buf`, None if null), and the end."""
    n, pos = t.read_unsigned_varint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > size:
        raise Irregular
    return buf[pos:end], end


def write_compact_count(out: list, n: int) -> None:
    """A compact array's length."""
    out.append(_UVARINT_SMALL[n + 1] if n < 0x7F else t.encode_unsigned_varint(n + 1))


def for_generic_writer(body: dict, partitions_key: str, irregular: Callable[[dict], bool]) -> bool:
    """Whether a Produce or Fetch response has node endpoints or a partition entry that
    `irregular` picks: the fast writers leave those responses to the compiled one."""
    endpoints = body.get("node_endpoints", ())
    if endpoints is None or endpoints:
        return True
    for topic in body.get("responses", ()):
        for p in topic.get(partitions_key, ()):
            if irregular(p):
                return True
    return False


def produce_request_reader(version: int, generic: Reader) -> Reader:
    """ProduceRequest v3+ (`generic`: the compiled reader, for what this one does not take)."""
    flexible = version >= 9

    def read_flexible(buf: Buffer, pos: int) -> tuple[dict, int]:
        size = len(buf)
        n = buf[pos] - 1
        if n >= 0x7E:  # a longer varint than a short id takes
            raise Irregular
        transactional_id = None if n < 0 else string_at(buf, pos + 1, n, size)
        pos += 1 + max(n, 0)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
        pos += 6
        topics = []
        n_topics = buf[pos] - 1
        pos += 1
        if not 0 <= n_topics < 0x7E:
            raise Irregular
        for _ in range(n_topics):
            n = buf[pos] - 1
            if not 0 <= n < 0x7E:
                raise Irregular
            name = string_at(buf, pos + 1, n, size)
            pos += 1 + n
            n_partitions = buf[pos] - 1
            pos += 1
            if not 0 <= n_partitions < 0x7E:
                raise Irregular
            partitions = []
            for _ in range(n_partitions):
                index = _INT32.unpack_from(buf, pos)[0]
                records, pos = compact_records_at(buf, pos + 4, size)
                if buf[pos]:  # tagged fields: none are defined, but they must be skipped
                    raise Irregular
                pos += 1
                partitions.append({"index": index, "records": records})
            if buf[pos]:
                raise Irregular
            pos += 1
            topics.append({"name": name, "partition_data": partitions})
        if buf[pos]:
            raise Irregular
        return {
            "transactional_id": transactional_id,
            "acks": acks,
            "timeout_ms": timeout_ms,
            "topic_data": topics,
        }, pos + 1

    def read_classic(buf: Buffer, pos: int) -> tuple[dict, int]:
        size = len(buf)
        n = _INT16.unpack_from(buf, pos)[0]
        pos += 2
        transactional_id = None if n < 0 else string_at(buf, pos, n, size)
        pos += max(n, 0)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, pos)
        n_topics = _INT32.unpack_from(buf, pos + 6)[0]
        pos += 10
        if not 0 <= n_topics <= size - pos:
            raise Irregular
        topics = []
        for _ in range(n_topics):
            n = _INT16.unpack_from(buf, pos)[0]
            name = string_at(buf, pos + 2, n, size)
            pos += 2 + n
            n_partitions = _INT32.unpack_from(buf, pos)[0]
            pos += 4
            if not 0 <= n_partitions <= size - pos:
                raise Irregular
            partitions = []
            for _ in range(n_partitions):
                index, n = _INDEX_LENGTH.unpack_from(buf, pos)
                pos += 8
                if n < 0:
                    records = None
                else:
                    end = pos + n
                    if end > size:
                        raise Irregular
                    records = buf[pos:end]
                    pos = end
                partitions.append({"index": index, "records": records})
            topics.append({"name": name, "partition_data": partitions})
        return {
            "transactional_id": transactional_id,
            "acks": acks,
            "timeout_ms": timeout_ms,
            "topic_data": topics,
        }, pos

    return with_fallback(read_flexible if flexible else read_classic, generic)


def with_fallback(fast: Reader, generic: Reader) -> Reader:
    """`fast`, or `generic` for what it does not take (and for the errors, which the
    generic reader raises as it always did)."""

    def read(buf: Buffer, pos: int) -> tuple[Any, int]:
        try:
            return fast(buf, pos)
        except (Irregular, IndexError, struct.error, UnicodeDecodeError, ProtocolDecodeError, ValueError):
            return generic(buf, pos)

    return read


def produce_response_writer(version: int, generic: Writer) -> Writer:
    """ProduceResponse, every version (`generic`: the compiled writer, for responses with
    record errors, a current leader or node endpoints: errors that are rare on this path)."""
    flexible = version >= 9
    partition = _PARTITION_V5 if version >= 5 else _PARTITION_V2 if version >= 2 else _PARTITION_V0
    # The fields a partition entry may hold that this writer writes; any other means generic.
    with_error_fields = version >= 8
    write_string = t.write_compact_string if flexible else t.write_string
    write_nullable_string = t.write_compact_nullable_string if flexible else t.write_nullable_string

    def int32_count(out: list, n: int) -> None:
        out.append(_INT32.pack(n))

    count = write_compact_count if flexible else int32_count

    def irregular(p: dict) -> bool:
        record_errors = p.get("record_errors", ())
        return record_errors is None or bool(record_errors) or "current_leader" in p

    def write(out: list, body: dict) -> None:
        if for_generic_writer(body, "partition_responses", irregular):
            generic(out, body)
            return
        responses = body.get("responses", ())
        count(out, len(responses))
        for topic in responses:
            write_string(out, topic.get("name", ""))
            partitions = topic.get("partition_responses", ())
            count(out, len(partitions))
            for p in partitions:
                get = p.get
                if version >= 5:
                    fixed = partition.pack(
                        get("index", 0),
                        get("error_code", 0),
                        get("base_offset", 0),
                        get("log_append_time_ms", -1),
                        get("log_start_offset", -1),
                    )
                elif version >= 2:
                    fixed = partition.pack(
                        get("index", 0), get("error_code", 0), get("base_offset", 0), get("log_append_time_ms", -1)
                    )
                else:
                    fixed = partition.pack(get("index", 0), get("error_code", 0), get("base_offset", 0))
                out.append(fixed)
                if with_error_fields:
                    count(out, 0)  # record_errors
                    write_nullable_string(out, get("error_message"))
                if flexible:
                    out.append(b"\x00")
            if flexible:
                out.append(b"\x00")
        if version >= 1:
            out.append(_THROTTLE.pack(body.get("throttle_time_ms", 0)))
        if flexible:
            out.append(b"\x00")

    return write
