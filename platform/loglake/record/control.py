"""Control batches: the COMMIT/ABORT markers a transaction coordinator writes, in Kafka's format.

A marker is a batch with the control and transactional attribute bits, the producer id
and epoch of the transaction it ends, no sequence (-1), and one record whose key is
`version int16 (0) | type int16 (0 ABORT, 1 COMMIT)` and whose value (Kafka's
EndTransactionMarker) is `version int16 (0) | coordinatorEpoch int32`.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from loglake.errors import ErrorCode, KafkaError
from loglake.record.batch import decode_batch, encode_batch
from loglake.record.header import RecordBatchHeader

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlRecordType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    commit: bool
    coordinator_epoch: int


def encode_marker_batch(
    producer_id: int, producer_epoch: int, marker: EndTransactionMarker, now_ms: int, *, base_offset: int = 0
) -> bytes:
    """The control batch ending the producer's transaction (one record, offsets from `base_offset`)."""
    key = _KEY.pack(CONTROL_KEY_VERSION, ControlRecordType.COMMIT if marker.commit else ControlRecordType.ABORT)
    value = _VALUE.pack(END_TXN_MARKER_VERSION, marker.coordinator_epoch)
    return encode_batch(
        [(key, value, (), now_ms)],
        now_ms,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def decode_marker(batch: bytes | bytearray | memoryview) -> EndTransactionMarker:
    """The marker of a control batch (the whole batch's bytes; its CRC is not checked
    again: it was when it was appended). Raises INVALID_RECORD for anything else."""
    header, records = decode_batch(batch, verify_crc=False)
    if not header.is_control or not header.is_transactional or len(records) != 1:
        raise KafkaError(ErrorCode.INVALID_RECORD, "not a transaction marker: one record in a control batch")
    return decode_marker_record(records[0].key, records[0].value)


def decode_marker_record(key: bytes | None, value: bytes | None) -> EndTransactionMarker:
    """The marker of a control batch's one record. Raises INVALID_RECORD if it is none."""
    if key is None or len(key) < _KEY.size or value is None or len(value) < _VALUE.size:
        raise KafkaError(ErrorCode.INVALID_RECORD, "transaction marker with a short key or value")
    _, kind = _KEY.unpack_from(key)
    if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise KafkaError(ErrorCode.INVALID_RECORD, f"unknown control record type {kind}")
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return EndTransactionMarker(kind == ControlRecordType.COMMIT, coordinator_epoch)


def is_marker(header: RecordBatchHeader) -> bool:
    return header.is_control and header.producer_id >= 0
