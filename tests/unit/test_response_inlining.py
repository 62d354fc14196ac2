"""Fetch answers with a few small batches go out as one bytes object (one write); bigger
ones keep their file ranges for sendfile; a range cut under us is left to sendfile, which
closes the connection."""

from __future__ import annotations

from pathlib import Path

from test_storage_support import make_batch

from ingest_gateway.network.kafka_server import _INLINE_RECORDS_BYTES, _inlined
from loglake.config import LogConfig
from loglake.protocol import encode_response
from loglake.protocol.api import ApiKey
from loglake.storage.file_records import LogSlice
from loglake.storage.log import Log


def _fetch_answer(records: LogSlice) -> dict:
    partition = {
        "partition_index": 0,
        "error_code": 0,
        "high_watermark": records.next_offset,
        "last_stable_offset": records.next_offset,
        "log_start_offset": 0,
        "aborted_transactions": [],
        "preferred_read_replica": -1,
        "records": records,
    }
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "t", "partitions": [partition]}],
    }


def _log(tmp_path: Path, batches: int, value_size: int) -> Log:
    log = Log.open(tmp_path / "t-0", LogConfig())
    for _ in range(batches):
        log.append_as_leader(make_batch(1, value_size=value_size), leader_epoch=0)
    return log


def _wire(chunks: list) -> bytes:
    return b"".join(c if isinstance(c, bytes) else c.read_bytes() for c in chunks)


def test_small_records_are_read_into_one_write(tmp_path: Path) -> None:
    log = _log(tmp_path, 5, 100)
    chunks = encode_response(ApiKey.FETCH, 12, 7, _fetch_answer(log.read(0, 1 << 20)))
    assert len(chunks) == 3  # head, the file range, tail
    inlined = _inlined(chunks)
    assert len(inlined) == 1 and isinstance(inlined[0], bytes)
    assert inlined[0] == _wire(chunks)


def test_bigger_records_keep_their_file_range(tmp_path: Path) -> None:
    log = _log(tmp_path, 40, 2000)
    records = log.read(0, 1 << 20)
    assert records.size > _INLINE_RECORDS_BYTES
    chunks = encode_response(ApiKey.FETCH, 12, 7, _fetch_answer(records))
    assert _inlined(chunks) is chunks


def test_a_range_cut_under_us_is_left_to_sendfile(tmp_path: Path) -> None:
    log = _log(tmp_path, 5, 100)
    records = log.read(0, 1 << 20)
    chunks = encode_response(ApiKey.FETCH, 12, 7, _fetch_answer(records))
    log.truncate_to(2)
    assert _inlined(chunks) is chunks
