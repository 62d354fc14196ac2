"""Malformed input on a raw socket: truncated frames, absurd sizes, garbage, corrupt record
batches, unsupported versions. After each the broker still serves other clients and every
record stored before is still readable."""

from __future__ import annotations

import random
import socket
import time

import pytest
from confluent_kafka import Producer

from client_helpers import connect, create_topic, kcat, read_all, recv_frame
from loglake.protocol import ApiKey, decode_response, encode_request
from kafka_release import release_versions
from loglake.record.batch import encode_batch
from loglake.record.compression import CompressionType

CORRUPT_MESSAGE = 2
UNSUPPORTED_VERSION = 35
INVALID_RECORD = 87


@pytest.fixture(scope="module")
def canary(broker):
    """A topic with known records; the health check reads them all back after each test."""
    name = "canary"
    create_topic(broker.bootstrap, name, partitions=2)
    state = {"name": name, "values": []}
    _produce_canary(broker, state, 20)
    return state


def _produce_canary(broker, state: dict, n: int) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "message.timeout.ms": 20000})
    start = len(state["values"])
    values = [b"canary-%d" % i for i in range(start, start + n)]
    for i, v in enumerate(values):
        p.produce(state["name"], value=v, partition=(start + i) % 2)
    assert p.flush(30) == 0
    state["values"] += values


@pytest.fixture(autouse=True)
def broker_stays_healthy(broker, canary):
    """Runs each test, then checks the broker still serves: a fresh kcat -L, a confluent
    producer, and a read-back of every record stored so far."""
    yield
    assert broker.proc is not None and broker.proc.poll() is None, f"the broker died:\n{broker.output()}"
    out = kcat(broker.bootstrap, "-L", "-t", canary["name"], timeout=20).stdout.decode()
    assert f'topic "{canary["name"]}" with 2 partitions' in out
    _produce_canary(broker, canary, 4)
    rows = read_all(broker.bootstrap, canary["name"], partitions=2)
    assert sorted(r[3] for r in rows) == sorted(canary["values"]), "stored records were lost or duplicated"


def assert_closed_by_broker(sock: socket.socket, timeout: float = 10.0) -> None:
    """The broker closes the connection (EOF or reset) without sending a response."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    except socket.timeout:
        raise AssertionError("the broker kept the connection open") from None
    assert data == b"", f"expected the connection to be closed, got {data[:64]!r}"


def api_versions_on(sock: socket.socket, correlation_id: int = 99) -> dict:
    sock.sendall(
        encode_request(
            ApiKey.API_VERSIONS, 3, correlation_id, "raw", {"client_software_name": "t", "client_software_version": "1"}
        )
    )
    payload = recv_frame(sock)
    assert payload is not None, "connection closed"
    cid, body = decode_response(ApiKey.API_VERSIONS, 3, payload)
    assert cid == correlation_id and body["error_code"] == 0
    return body


# Framing -------------------------------------------------------------------------------


def test_truncated_frame_then_close(broker):
    # A size prefix that promises 100 bytes, 10 of them, then the client goes away.
    with connect(broker.bootstrap) as s:
        s.sendall((100).to_bytes(4, "big") + b"\x00\x12\x00\x03abcdef")
    # Half a size prefix.
    with connect(broker.bootstrap) as s:
        s.sendall(b"\x00\x00")
    # A whole valid request cut one byte short.
    frame = encode_request(ApiKey.METADATA, 9, 1, "raw", {"topics": None, "allow_auto_topic_creation": False})
    with connect(broker.bootstrap) as s:
        s.sendall(frame[:-1])
    # The other clients did not notice (checked by the fixture); a fresh connection works.
    with connect(broker.bootstrap) as s:
        api_versions_on(s)


def test_truncated_frames_held_open_do_not_block_others(broker):
    """Connections stuck mid-frame do not stall the broker for everyone else."""
    stuck = []
    try:
        for _ in range(20):
            s = connect(broker.bootstrap)
            s.sendall((1000).to_bytes(4, "big") + b"\x00" * 100)
            stuck.append(s)
        started = time.monotonic()
        kcat(broker.bootstrap, "-L", timeout=20)
        assert time.monotonic() - started < 10
    finally:
        for s in stuck:
            s.close()


@pytest.mark.parametrize("size", [0x7FFFFFFF, 0x7FFFFFF0, 100 * 1024 * 1024 + 1, -1, -0x80000000], ids=hex)
def test_absurd_frame_size_closes_connection(broker, size):
    with connect(broker.bootstrap) as s:
        s.sendall(size.to_bytes(4, "big", signed=True) + b"\x00\x03\x00\x09")
        assert_closed_by_broker(s)


def test_zero_size_frame_closes_connection(broker):
    with connect(broker.bootstrap) as s:
        s.sendall(b"\x00\x00\x00\x00")
        assert_closed_by_broker(s)


@pytest.mark.parametrize("framed", [False, True], ids=["raw", "framed"])
@pytest.mark.parametrize("seed", range(6))
def test_garbage_bytes(broker, seed, framed):
    """2 KB of (seeded) random bytes: as they come (their first 4 bytes are a size out of
    range for every seed here), or as the payload of a well-sized frame (an unknown API key
    for every seed here). Either way the broker closes the connection."""
    garbage = random.Random(seed).randbytes(2048)
    data = len(garbage).to_bytes(4, "big") + garbage if framed else garbage
    with connect(broker.bootstrap) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return  # closed while we were still writing
        assert_closed_by_broker(s)


def test_garbage_in_a_well_sized_frame(broker):
    # Unknown API key.
    with connect(broker.bootstrap) as s:
        payload = (
            (999).to_bytes(2, "big") + (0).to_bytes(2, "big") + (5).to_bytes(4, "big") + b"\xff\xff" + b"junk" * 10
        )
        s.sendall(len(payload).to_bytes(4, "big") + payload)
        assert_closed_by_broker(s)
    # A known API whose body is garbage: a Metadata v9 with nonsense after the header.
    with connect(broker.bootstrap) as s:
        header = encode_request(ApiKey.METADATA, 9, 5, "raw", {"topics": None})[4:]
        payload = header[: len(header) - 4] + b"\xff" * 40  # keep the header, garble the body
        s.sendall(len(payload).to_bytes(4, "big") + payload)
        assert_closed_by_broker(s)
    # A header too short to hold api key, version and correlation id.
    with connect(broker.bootstrap) as s:
        s.sendall(b"\x00\x00\x00\x03\x00\x03\x00")
        assert_closed_by_broker(s)


# Versions -------------------------------------------------------------------------------


def test_produce_v99_closes_connection(broker):
    with connect(broker.bootstrap) as s:
        header = (
            (0).to_bytes(2, "big") + (99).to_bytes(2, "big") + (11).to_bytes(4, "big") + (3).to_bytes(2, "big") + b"raw"
        )
        payload = header + b"\x00" * 30
        s.sendall(len(payload).to_bytes(4, "big") + payload)
        assert_closed_by_broker(s)


@pytest.mark.parametrize("version", [0, 2])
def test_produce_below_v3_closes_connection(broker, canary, version):
    """Produce v0-v2 carry message sets of magic 0/1, which the broker does not take."""
    body = {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": canary["name"], "partition_data": [{"index": 0, "records": b"\x00" * 40}]}],
    }
    with connect(broker.bootstrap) as s:
        s.sendall(encode_request(ApiKey.PRODUCE, version, 12, "raw", body))
        assert_closed_by_broker(s)


def test_api_versions_v99_answers_unsupported_version_in_v0(broker):
    with connect(broker.bootstrap) as s:
        # A v99 request: header v2 per KIP-511 clients, body unknown to us.
        header = (
            (18).to_bytes(2, "big")
            + (99).to_bytes(2, "big")
            + (21).to_bytes(4, "big")
            + (3).to_bytes(2, "big")
            + b"raw"
            + b"\x00"
        )
        payload = header + b"\x02t\x021\x00"
        s.sendall(len(payload).to_bytes(4, "big") + payload)
        response = recv_frame(s)
        assert response is not None
        cid, body = decode_response(ApiKey.API_VERSIONS, 0, response)
        assert cid == 21
        assert body["error_code"] == UNSUPPORTED_VERSION
        versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        assert versions[ApiKey.API_VERSIONS] == release_versions(ApiKey.API_VERSIONS)
        assert ApiKey.PRODUCE in versions and ApiKey.FETCH in versions
        # The connection stays usable: the client retries at a version we have.
        api_versions_on(s)


# Corrupt record batches ----------------------------------------------------------------


def _produce_body(topic: str, records: bytes, partition: int = 0) -> dict:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }


def _produce_raw(sock: socket.socket, version: int, body: dict, correlation_id: int) -> dict:
    sock.sendall(encode_request(ApiKey.PRODUCE, version, correlation_id, "raw", body))
    payload = recv_frame(sock)
    assert payload is not None, "the broker closed the connection instead of answering"
    cid, response = decode_response(ApiKey.PRODUCE, version, payload)
    assert cid == correlation_id
    ((topic_response,),) = [response["responses"]]
    (partition_response,) = topic_response["partition_responses"]
    return partition_response


def _rows(n: int, tag: str):
    return [(b"k%d" % i, f"{tag}-{i}".encode(), [("h", b"v")], None) for i in range(n)]


@pytest.mark.parametrize("version", [3, 7, 9])
@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP], ids=["none", "gzip"])
def test_produce_with_wrong_crc_is_corrupt_message(broker, canary, topic, version, compression):
    create_topic(broker.bootstrap, topic)
    good = encode_batch(_rows(5, "good"), int(time.time() * 1000), compression=compression)
    with connect(broker.bootstrap) as s:
        # A valid batch is taken ...
        ok = _produce_raw(s, version, _produce_body(topic, good), 1)
        assert ok["error_code"] == 0 and ok["base_offset"] == 0
        # ... the same with a flipped byte in the records (CRC no longer matches) is not.
        for where in ("last value", "first record", "attributes"):
            bad = bytearray(encode_batch(_rows(5, "bad"), int(time.time() * 1000), compression=compression))
            position = {"last value": len(bad) - 3, "first record": 70, "attributes": 21}[where]
            bad[position] ^= 0x01
            r = _produce_raw(s, version, _produce_body(topic, bytes(bad)), 2 + position)
            assert r["error_code"] == CORRUPT_MESSAGE, (where, r)
            assert r["base_offset"] == -1
        # A good batch then a bad one in the same request: the whole request is refused.
        bad = bytearray(good)
        bad[-1] ^= 0xFF
        r = _produce_raw(s, version, _produce_body(topic, good + bytes(bad)), 50)
        assert r["error_code"] == CORRUPT_MESSAGE, r
        # The connection still works.
        api_versions_on(s)
    # Nothing of the corrupt requests was stored.
    rows = read_all(broker.bootstrap, topic)
    assert [r[3] for r in rows] == [b"good-%d" % i for i in range(5)]
    # And produce via a real client continues at the next offset.
    p = Producer({"bootstrap.servers": broker.bootstrap})
    offsets = []
    p.produce(topic, value=b"after", partition=0, on_delivery=lambda e, m: offsets.append((e, m.offset())))
    assert p.flush(20) == 0
    assert offsets == [(None, 5)]


def test_produce_with_cut_or_nonsense_records(broker, topic):
    create_topic(broker.bootstrap, topic)
    good = encode_batch(_rows(3, "x"), int(time.time() * 1000))
    cases = {
        "cut short": good[:-10],
        "header only": good[:61],
        "shorter than a header": good[:30],
        "random bytes": random.Random(7).randbytes(200),
        "magic 1": good[:16] + b"\x01" + good[17:],
    }
    with connect(broker.bootstrap) as s:
        for i, (name, records) in enumerate(cases.items()):
            r = _produce_raw(s, 9, _produce_body(topic, records), 100 + i)
            assert r["error_code"] in (CORRUPT_MESSAGE, 87, 43), (
                f"{name}: {r}"
            )  # 87 INVALID_RECORD, 43 UNSUPPORTED_FOR_MESSAGE_FORMAT
            assert r["base_offset"] == -1, name
        api_versions_on(s)
    assert read_all(broker.bootstrap, topic) == []


def test_produce_with_lying_record_count(broker, topic):
    """CRC-valid batches whose header disagrees with its records are refused, not stored."""
    import struct

    import crc32c

    create_topic(broker.bootstrap, topic)

    def with_header(batch: bytes, fmt: str, pos: int, value: int) -> bytes:
        b = bytearray(batch)
        struct.pack_into(fmt, b, pos, value)
        b[17:21] = crc32c.crc32c(bytes(b[21:])).to_bytes(4, "big")
        return bytes(b)

    good = encode_batch(_rows(3, "x"), int(time.time() * 1000))
    # last_offset_delta at 23 (int32), record count at 57 (int32).
    cases = {
        "count 2 of 3": with_header(good, ">i", 57, 2),
        "count 0": with_header(good, ">i", 57, 0),
        "offset delta 5": with_header(good, ">i", 23, 5),
    }
    with connect(broker.bootstrap) as s:
        for i, (name, records) in enumerate(cases.items()):
            r = _produce_raw(s, 9, _produce_body(topic, records), 200 + i)
            assert r["error_code"] == INVALID_RECORD, f"{name}: {r}"
        api_versions_on(s)
    assert read_all(broker.bootstrap, topic) == []


def _crc_valid(batch: bytes, edits: list[tuple[int, int]]) -> bytes:
    """`batch` with int32 fields rewritten at the given positions and the CRC recomputed."""
    import struct

    import crc32c

    b = bytearray(batch)
    for pos, value in edits:
        struct.pack_into(">i", b, pos, value)
    b[17:21] = crc32c.crc32c(bytes(b[21:])).to_bytes(4, "big")
    return bytes(b)


def gzip_zeros() -> bytes:
    b = bytearray(encode_batch(_rows(3, "x"), int(time.time() * 1000), compression=CompressionType.GZIP))
    b[61:] = bytes(len(b) - 61)
    return bytes(b)


@pytest.mark.parametrize("case", ["2 records claim 3", "3 records claim 2", "garbage records", "gzip of zeros"])
def test_produce_with_records_not_matching_header(broker, topic, case):
    create_topic(broker.bootstrap, topic)
    now = int(time.time() * 1000)
    two = encode_batch(_rows(2, "x"), now)
    three = encode_batch(_rows(3, "x"), now)
    records = {
        "2 records claim 3": _crc_valid(two, [(23, 2), (57, 3)]),
        "3 records claim 2": _crc_valid(three, [(23, 1), (57, 2)]),
        # A header for 2 records followed by 20 bytes of 0xff; batch length fixed up.
        "garbage records": _crc_valid(two[:61] + b"\xff" * 20, [(8, 61 - 12 + 20)]),
        # gzip attributes over a payload that is not gzip.
        "gzip of zeros": _crc_valid(gzip_zeros(), []),
    }[case]
    with connect(broker.bootstrap) as s:
        r = _produce_raw(s, 9, _produce_body(topic, records), 300)
    # Nothing of it may be stored: a consumer could never get past it.
    assert r["error_code"] in (CORRUPT_MESSAGE, INVALID_RECORD), r


def test_produce_acks_zero_with_bad_crc_closes_connection(broker, topic):
    """acks=0 gets no response; on an error the broker closes the connection instead (as
    Kafka does, so the producer notices), and the corrupt batch is not stored."""
    create_topic(broker.bootstrap, topic)
    good = encode_batch(_rows(3, "ok"), int(time.time() * 1000))
    bad = bytearray(encode_batch(_rows(3, "x"), int(time.time() * 1000)))
    bad[-2] ^= 0x10
    with connect(broker.bootstrap) as s:
        # A good acks=0 produce: no response, the connection stays open.
        body = _produce_body(topic, good)
        body["acks"] = 0
        s.sendall(encode_request(ApiKey.PRODUCE, 9, 1, "raw", body))
        api_versions_on(s, correlation_id=2)  # the next response is for the next request
        # A corrupt one: closed.
        body = _produce_body(topic, bytes(bad))
        body["acks"] = 0
        s.sendall(encode_request(ApiKey.PRODUCE, 9, 3, "raw", body))
        assert_closed_by_broker(s)
    assert [r[3] for r in read_all(broker.bootstrap, topic)] == [b"ok-0", b"ok-1", b"ok-2"]


def test_produce_acks_zero_to_unknown_partition_closes_connection(broker, topic):
    create_topic(broker.bootstrap, topic)
    body = _produce_body(topic, encode_batch(_rows(1, "x"), int(time.time() * 1000)), partition=7)
    body["acks"] = 0
    with connect(broker.bootstrap) as s:
        s.sendall(encode_request(ApiKey.PRODUCE, 9, 1, "raw", body))
        assert_closed_by_broker(s)


def test_pipelined_requests_answered_in_order(broker):
    """Several requests written at once get their responses in order, each with its id."""
    frames = b"".join(
        encode_request(
            ApiKey.API_VERSIONS, 3, cid, "raw", {"client_software_name": "t", "client_software_version": "1"}
        )
        for cid in range(10, 30)
    )
    with connect(broker.bootstrap) as s:
        s.sendall(frames)
        for cid in range(10, 30):
            payload = recv_frame(s)
            assert payload is not None
            got, _ = decode_response(ApiKey.API_VERSIONS, 3, payload)
            assert got == cid


def test_an_answer_held_for_the_next_request_is_not_held_behind_its_wait(broker, topic):
    """A produce and a long-polling fetch written at once: the produce's answer is held only
    while the fetch is handled, and goes out as soon as the fetch waits. Proof without a
    clock: the fetch can only end with a record produced on another connection after the
    produce's answer came."""
    create_topic(broker.bootstrap, topic)
    produce = _produce_body(topic, encode_batch(_rows(1, "first"), int(time.time() * 1000)))
    produce["acks"] = 1
    partition = {"partition": 0, "fetch_offset": 1, "partition_max_bytes": 1 << 20}
    fetch = {
        "max_wait_ms": 60_000,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [{"topic": topic, "partitions": [partition]}],
    }
    with connect(broker.bootstrap, timeout=50) as s, connect(broker.bootstrap) as other:
        s.sendall(
            encode_request(ApiKey.PRODUCE, 9, 1, "raw", produce) + encode_request(ApiKey.FETCH, 12, 2, "raw", fetch)
        )
        produced = recv_frame(s)
        assert produced is not None
        assert decode_response(ApiKey.PRODUCE, 9, produced)[0] == 1
        second = _produce_body(topic, encode_batch(_rows(1, "second"), int(time.time() * 1000)))
        assert _produce_raw(other, 9, second, 3)["error_code"] == 0
        fetched = recv_frame(s)
        assert fetched is not None
        correlation_id, body = decode_response(ApiKey.FETCH, 12, fetched)
        assert correlation_id == 2
        assert b"second-0" in bytes(body["responses"][0]["partitions"][0]["records"])
