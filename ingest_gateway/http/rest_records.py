"""Records in the REST Proxy v2 shapes: produce bodies to batches, batches to JSON.

A JSON body has to be taken apart record by record. The common binary body (every record
a base64 key and value, or every record a value alone, nothing else) takes a native path:
list comprehensions pick the keys and values out of the parsed JSON and one C call
(`loglake.record.native_encode`) decodes, partitions and encodes them into each
partition's records; the response's offsets are written by C too. Anything else (other
fields, explicit nulls, mixed shapes, JSON embedded format, text that is not canonical
base64, a batch to split, null keys on a compacted topic, no native library) takes the
Python path, which says precisely what is wrong with a bad record: per-record decoding,
keys hashed together (`partitions_for_keys`), each partition's records encoded once.
"""

from __future__ import annotations

import base64
import binascii
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from loglake.cluster.partition import Partition
from loglake.errors import ErrorCode, KafkaError
from loglake.partitioner import StickyPartitioner, partitions_for_keys
from loglake.record.aborted import AbortedTransactionFilter
from loglake.record.batch import Record, RecordRow, decode_batches, encode_batches, frame_batch
from loglake.record.native_encode import NATIVE

from ingest_gateway.http.errors import BadRequest

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


@dataclass(slots=True)
class PartitionedRecords:
    """Batches per partition, and where each request record landed: partition `targets[i]`,
    offset delta `index[i]` in that partition's batches."""

    batches: dict[int, list[bytes]]
    targets: np.ndarray
    index: np.ndarray

    def placements(self) -> list[tuple[int, int]]:
        return list(zip(self.targets.tolist(), self.index.tolist()))

    def offsets_body(self, bases: dict[int, int]) -> bytes:
        """The produce response's body when every partition took its records: record i at
        offset `bases[targets[i]] + index[i]`."""
        if NATIVE is not None:
            base_array = np.zeros(max(bases) + 1, dtype=np.int64)
            base_array[list(bases)] = list(bases.values())
            return NATIVE.offsets_json(self.targets, self.index, base_array)
        offsets = [
            {"partition": p, "offset": bases[p] + i, "error_code": None, "error": None} for p, i in self.placements()
        ]
        return orjson.dumps({"offsets": offsets, "key_schema_id": None, "value_schema_id": None})


def embedded_format(content_type: str | None) -> str:
    ct = (content_type or "").split(";")[0].strip().lower()
    if ct in (JSON_V2, "application/json"):
        return "json"
    if ct == BINARY_V2:
        return "binary"
    raise BadRequest(415, f"unsupported Content-Type {ct or '(none)'!r}; use {JSON_V2} or {BINARY_V2}")


# binascii's strict mode rejects what base64.b64decode(validate=True) rejects, without its
# per-call regular expression.
_b64 = functools.partial(binascii.a2b_base64, strict_mode=True)


def _headers(raw: Any, index: int) -> list[tuple[str, bytes | None]]:
    if not isinstance(raw, list):
        raise BadRequest(422, f"records[{index}].headers must be a list of {{key, value}} objects", 2)
    out: list[tuple[str, bytes | None]] = []
    for h in raw:
        name = h.get("key", h.get("name")) if isinstance(h, dict) else None
        if not isinstance(name, str):
            raise BadRequest(422, f"records[{index}].headers entries need a string 'key'", 2)
        value = h.get("value")
        if value is None:
            out.append((name, None))
            continue
        try:
            out.append((name, _b64(value)))
        except (binascii.Error, TypeError, ValueError):
            raise BadRequest(422, f"records[{index}].headers[{name!r}] is not a base64 string", 2) from None
    return out


def _check_record(r: Any, index: int, fmt: str) -> None:
    """Say precisely what is wrong with record `index` (the slow path, after a failure)."""
    if not isinstance(r, dict):
        raise BadRequest(422, f"records[{index}] must be an object", 2)
    if fmt == "binary":
        for field in ("key", "value"):
            v = r.get(field)
            if v is None:
                continue
            try:
                _b64(v)
            except (binascii.Error, TypeError, ValueError):
                raise BadRequest(422, f"records[{index}].{field} must be a base64 string in binary format", 2) from None
    partition = r.get("partition")
    if partition is not None and (type(partition) is not int or not 0 <= partition < 2**31):
        raise BadRequest(422, f"records[{index}].partition must be a non-negative 32-bit integer", 2)
    timestamp = r.get("timestamp")
    if timestamp is not None and (type(timestamp) is not int or not 0 <= timestamp < 2**63):
        raise BadRequest(422, f"records[{index}].timestamp must be a non-negative integer (ms)", 2)
    if r.get("headers") is not None:
        _headers(r["headers"], index)


def load_records(body: bytes) -> list[Any]:
    """The body's `records` list, each record as parsed from JSON (not checked yet)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
    records = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(records, list) or not records:
        raise BadRequest(422, "request body must be an object with a non-empty 'records' list", 2)
    return records


def base64_fields(records: list[Any]) -> tuple[list[Any] | None, list[Any]] | None:
    """Every record's key and value when each record is an object of exactly those two
    fields, or every record's value (keys None) when each is an object of that field alone
    (their types not checked yet); else None. For `encode_base64_fields`."""
    try:
        values = [r.get("value") for r in records]
    except AttributeError:  # a record that is not an object
        return None
    # Absent fields read as None: one field each means exactly "value", two "key" and "value".
    fields = sum(map(len, records))
    if fields == len(records):
        return None, values
    if fields == 2 * len(records):
        return [r.get("key") for r in records], values
    return None


def encode_base64_fields(
    fields: tuple[list[Any] | None, list[Any]],
    num_partitions: int,
    forced_partition: int | None,
    sticky: StickyPartitioner,
    now_ms: int,
    max_batch_bytes: int,
) -> PartitionedRecords | None:
    """The native path of `rows_of` and `partition_records` for a binary body's keys and
    values (`base64_fields`; null keys go to `sticky`'s partition): the same batches and
    placements, or None when it does not apply (no native library, a key or value that is
    not a string of canonical base64, a partition out of range, a batch over
    `max_batch_bytes`): the Python path then decides."""
    if NATIVE is None:
        return None
    keys, values = fields
    if keys is None and forced_partition is None:
        forced_partition = sticky.next_partition(num_partitions)
    encoded = NATIVE.encode_base64_records(keys, values, num_partitions, forced_partition)
    if encoded is None:
        return None
    view = memoryview(encoded.data)
    batches = {}
    start = 0
    for partition, (end, count) in enumerate(zip(encoded.section_ends, encoded.counts)):
        if count:
            batch = frame_batch(view[start:end], count, now_ms, now_ms)
            if len(batch) > max_batch_bytes:
                return None
            batches[partition] = [batch]
        start = end
    return PartitionedRecords(batches, encoded.targets, encoded.index)


def rows_of(records: list[Any], fmt: str) -> tuple[list[RecordRow], list[int | None]]:
    """The records as (key, value, headers, timestamp), and each one's explicit partition."""
    decode = _b64 if fmt == "binary" else orjson.dumps
    parsed: list[RecordRow] = []
    partitions: list[int | None] = []
    add_row = parsed.append
    add_partition = partitions.append
    index = 0
    try:
        for index, r in enumerate(records):
            key = r.get("key")
            value = r.get("value")
            if key is not None:
                key = decode(key)
            if value is not None:
                value = decode(value)
            if len(r) == (key is not None) + (value is not None):
                # Only a key and/or a value: the common shape, no more lookups.
                add_row((key, value, (), None))
                add_partition(None)
                continue
            _check_record(r, index, fmt)
            headers = r.get("headers")
            add_row((key, value, _headers(headers, index) if headers is not None else (), r.get("timestamp")))
            add_partition(r.get("partition"))
    except (binascii.Error, TypeError, ValueError, AttributeError):
        _check_record(records[index], index, fmt)
        raise
    return parsed, partitions


def partition_records(
    rows: list[RecordRow],
    explicit: list[int | None],
    topic: str,
    num_partitions: int,
    forced_partition: int | None,
    sticky: StickyPartitioner,
    now_ms: int,
    max_batch_bytes: int,
) -> PartitionedRecords:
    """Place each record (explicit partition, murmur2 of the key, or sticky for null keys)
    and encode each partition's records into batches within `max.message.bytes`."""
    if forced_partition is not None:
        targets = np.full(len(rows), forced_partition, dtype=np.int64)
    else:
        keyed = [(i, key) for i, row in enumerate(rows) if explicit[i] is None and (key := row[0]) is not None]
        null_key_partition = sticky.next_partition(num_partitions)
        targets = np.array([null_key_partition if p is None else p for p in explicit], dtype=np.int64)
        if keyed:
            targets[[i for i, _ in keyed]] = partitions_for_keys([key for _, key in keyed], num_partitions)
    bad = (targets < 0) | (targets >= num_partitions)
    if bad.any():
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"topic {topic!r} has no partition {int(targets[bad][0])} (it has {num_partitions})",
        )
    # Each record's index within its partition's batch, without a Python loop over records.
    order = np.argsort(targets, kind="stable")
    sorted_targets = targets[order]
    group_starts = np.flatnonzero(np.r_[True, sorted_targets[1:] != sorted_targets[:-1]])
    group_sizes = np.diff(np.r_[group_starts, len(order)])
    index_in_group = np.empty(len(order), dtype=np.int64)
    index_in_group[order] = np.arange(len(order)) - np.repeat(group_starts, group_sizes)
    groups: dict[int, list[RecordRow]] = {}
    for start, size in zip(group_starts.tolist(), group_sizes.tolist()):
        members = order[start : start + size].tolist()
        groups[int(sorted_targets[start])] = [rows[i] for i in members]
    batches = {p: encode_batches(group, now_ms, max_batch_bytes) for p, group in groups.items()}
    return PartitionedRecords(batches, targets, index_in_group)


def accept_format(accept: str | None) -> str:
    accept = (accept or "").lower()
    return "json" if JSON_V2 in accept else "binary"


def read_records(
    partition: Partition, offset: int, max_bytes: int, read_committed: bool = True
) -> tuple[list[Record], int]:
    """Data records from `offset` within about `max_bytes` (the first batch always), and the
    bytes read: up to the last stable offset without the aborted transactions' records
    (read_committed), or up to the high watermark."""
    data = partition.read(offset, max_bytes, stable_only=read_committed).read_bytes()
    batches = list(decode_batches(data))
    aborted = []
    if read_committed and batches:
        found = partition.log.collect_aborted_transactions(offset, batches[-1][0].next_offset)
        aborted = [(a.producer_id, a.first_offset) for a in found]
    skipped = AbortedTransactionFilter(aborted)
    records = [
        record for header, batch in batches if not skipped.skips(header) for record in batch if record.offset >= offset
    ]
    return records, len(data)


def visible_end(partition: Partition, read_committed: bool) -> int:
    """Where a reader at that isolation level stops: the last stable offset or the high watermark."""
    return partition.last_stable_offset if read_committed else partition.high_watermark


def parse_isolation(value: str, name: str) -> bool:
    """True for read_committed; a 422 naming `name` for anything but the two levels."""
    if value not in ("read_committed", "read_uncommitted"):
        raise BadRequest(422, f"{name} must be 'read_committed' or 'read_uncommitted'", 2)
    return value == "read_committed"


def _b64_text(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def render_records(topic: str, partition: int, records: list[Record], fmt: str) -> list[dict[str, Any]]:
    """Records as the REST Proxy returns them; JSON values must parse (else 406)."""
    out = []
    for rec in records:
        if fmt == "json":
            try:
                key = None if rec.key is None else orjson.loads(rec.key)
                value = None if rec.value is None else orjson.loads(rec.value)
            except orjson.JSONDecodeError:
                raise BadRequest(
                    406, f"record at offset {rec.offset} is not JSON; ask with Accept: {BINARY_V2}"
                ) from None
        else:
            key, value = _b64_text(rec.key), _b64_text(rec.value)
        out.append(
            {
                "topic": topic,
                "partition": partition,
                "offset": rec.offset,
                "timestamp": rec.timestamp,
                "key": key,
                "value": value,
                "headers": [{"key": k, "value": _b64_text(v)} for k, v in rec.headers],
            }
        )
    return out
