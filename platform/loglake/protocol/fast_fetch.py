"""Hand-written codecs for the replication round trip and the consumer's fetch: FetchRequest
decode, FetchResponse encode and decode, at the flexible versions (12+: a follower's 12 and
17, today's clients).

Every produce on a replicated partition costs a follower fetch: the follower encodes a
FetchRequest, the leader decodes it and encodes the FetchResponse, the follower decodes that;
with the compiled codec (schema.py) that was ~30 µs of the round trip. These functions read
and write the same dicts and bytes in straight-line code for the common shape, as fast.py
does for Produce: anything else (tagged fields other than the follower's replica state, a
diverging epoch, a current leader, node endpoints, lengths that run past the buffer) goes to
the compiled codec, which answers it exactly as it always did, errors included.
tests/unit/protocol/test_protocol_fast.py checks both against each other.
"""

from __future__ import annotations

import struct
import uuid

from loglake.protocol import types as t
from loglake.protocol.fast import (
    Irregular,
    Reader,
    Writer,
    compact_records_at,
    for_generic_writer,
    string_at,
    with_fallback,
    write_compact_count,
)
from loglake.protocol.types import Buffer

# FetchRequest: replica_id (v12-14 only), max_wait_ms, min_bytes, max_bytes, isolation_level,
# session_id, session_epoch.
_REQUEST_TOP_V12 = struct.Struct(">iiiibii")
_REQUEST_TOP_V15 = struct.Struct(">iiibii")
# A partition: partition, current_leader_epoch, fetch_offset, last_fetched_epoch,
# log_start_offset, partition_max_bytes.
_REQUEST_PARTITION = struct.Struct(">iiqiqi")
_INT32 = struct.Struct(">i")
# ReplicaState (tagged, v15+): replica_id, replica_epoch, then its own empty tag section.
_REPLICA_STATE = struct.Struct(">iqB")
_UVARINT_13 = bytes((_REPLICA_STATE.size,))  # its length, a one-byte varint
_NO_STATE: dict = {}  # a consumer's: the default, not sent
# FetchResponse: throttle_time_ms, error_code, session_id.
_RESPONSE_TOP = struct.Struct(">ihi")
# A partition: partition_index, error_code, high_watermark, last_stable_offset, log_start_offset.
_RESPONSE_PARTITION = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")

# Topic ids seen on the wire: a UUID object costs ~1 µs to build and a topic's id recurs in
# every fetch. Bounded: cleared when it grows past what any cluster's topic count needs.
_UUIDS: dict[bytes, uuid.UUID] = {bytes(16): t.ZERO_UUID}
_UUIDS_MAX = 65_536


def _uuid(buf: Buffer, pos: int) -> uuid.UUID:
    raw = bytes(buf[pos : pos + 16])
    value = _UUIDS.get(raw)
    if value is None:
        if len(raw) != 16:
            raise Irregular
        if len(_UUIDS) >= _UUIDS_MAX:
            _UUIDS.clear()
            _UUIDS[bytes(16)] = t.ZERO_UUID
        value = _UUIDS[raw] = uuid.UUID(bytes=raw)
    return value


def _count(buf: Buffer, pos: int) -> int:
    """A compact array's length at `pos` (one byte: fewer than 127 elements), else Irregular."""
    n = buf[pos] - 1
    if not 0 <= n < 0x7E:
        raise Irregular
    return n


def fetch_request_reader(version: int, generic: Reader) -> Reader:
    """FetchRequest v12+ (`generic`: the compiled reader, for what this one does not take)."""
    by_id = version >= 13
    top = _REQUEST_TOP_V15 if version >= 15 else _REQUEST_TOP_V12
    top_size = top.size
    partition_fixed = _REQUEST_PARTITION.unpack_from

    def read_topic_ref(buf: Buffer, pos: int, size: int) -> tuple[str, uuid.UUID, int]:
        if by_id:
            return "", _uuid(buf, pos), pos + 16
        n = _count(buf, pos)
        return string_at(buf, pos + 1, n, size), t.ZERO_UUID, pos + 1 + n

    def read(buf: Buffer, pos: int) -> tuple[dict, int]:
        size = len(buf)
        fixed = top.unpack_from(buf, pos)
        if version >= 15:
            replica_id = -1
            max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch = fixed
        else:
            replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch = fixed
        pos += top_size
        topics = []
        n_topics = _count(buf, pos)
        pos += 1
        for _ in range(n_topics):
            name, topic_id, pos = read_topic_ref(buf, pos, size)
            partitions = []
            n_partitions = _count(buf, pos)
            pos += 1
            for _ in range(n_partitions):
                index, leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, max_partition_bytes = (
                    partition_fixed(buf, pos)
                )
                pos += 32
                if buf[pos]:  # replica_directory_id (v17): not sent by followers without JBOD ids
                    raise Irregular
                pos += 1
                partitions.append(
                    {
                        "partition": index,
                        "current_leader_epoch": leader_epoch,
                        "fetch_offset": fetch_offset,
                        "last_fetched_epoch": last_fetched_epoch,
                        "log_start_offset": log_start_offset,
                        "partition_max_bytes": max_partition_bytes,
                        "replica_directory_id": t.ZERO_UUID,
                    }
                )
            if buf[pos]:
                raise Irregular
            pos += 1
            topics.append({"topic": name, "topic_id": topic_id, "partitions": partitions})
        forgotten = []
        n_forgotten = _count(buf, pos)
        pos += 1
        for _ in range(n_forgotten):
            name, topic_id, pos = read_topic_ref(buf, pos, size)
            n = _count(buf, pos)
            pos += 1
            indexes = [_INT32.unpack_from(buf, pos + 4 * i)[0] for i in range(n)]
            pos += 4 * n
            if buf[pos]:
                raise Irregular
            pos += 1
            forgotten.append({"topic": name, "topic_id": topic_id, "partitions": indexes})
        n = _count(buf, pos)
        rack_id = string_at(buf, pos + 1, n, size)
        pos += 1 + n
        cluster_id = None
        replica_state = {"replica_id": -1, "replica_epoch": -1}
        if not buf[pos]:
            pos += 1
        elif version >= 15 and buf[pos] == 1 and buf[pos + 1] == 1 and buf[pos + 2] == _REPLICA_STATE.size:
            # A follower's request: its replica state is the one tagged field.
            state_id, state_epoch, tags = _REPLICA_STATE.unpack_from(buf, pos + 3)
            if tags:
                raise Irregular
            replica_state = {"replica_id": state_id, "replica_epoch": state_epoch}
            pos += 3 + _REPLICA_STATE.size
        else:
            tagged, pos = t.read_tagged_fields(buf, pos)
            for tag, raw in tagged:
                if tag == 0:  # cluster_id
                    cluster_id, end = t.read_compact_nullable_string(raw, 0)
                    if end != len(raw):
                        raise Irregular
                elif tag == 1 and version >= 15 and len(raw) == _REPLICA_STATE.size:
                    state_id, state_epoch, tags = _REPLICA_STATE.unpack_from(raw)
                    if tags:
                        raise Irregular
                    replica_state = {"replica_id": state_id, "replica_epoch": state_epoch}
                else:
                    raise Irregular
        if pos > size:
            raise Irregular
        return {
            "cluster_id": cluster_id,
            "replica_id": replica_id,
            "replica_state": replica_state,
            "max_wait_ms": max_wait_ms,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "isolation_level": isolation_level,
            "session_id": session_id,
            "session_epoch": session_epoch,
            "topics": topics,
            "forgotten_topics_data": forgotten,
            "rack_id": rack_id,
        }, pos

    return with_fallback(read, generic)


def _write_topic_ref(out: list, topic: dict, by_id: bool) -> None:
    """A topic by id (v13+) or by name."""
    if by_id:
        out.append(topic.get("topic_id", t.ZERO_UUID).bytes)
    else:
        t.write_compact_string(out, topic.get("topic", ""))


def fetch_request_writer(version: int, generic: Writer) -> Writer:
    """FetchRequest v12+ (`generic`: the compiled writer, for a cluster id or a replica
    directory id, which followers and consumers here do not send)."""
    by_id = version >= 13
    top = _REQUEST_TOP_V15 if version >= 15 else _REQUEST_TOP_V12
    partition_fixed = _REQUEST_PARTITION.pack
    count = write_compact_count

    def write(out: list, body: dict) -> None:
        if body.get("cluster_id") is not None or any(
            p.get("replica_directory_id", t.ZERO_UUID) != t.ZERO_UUID
            for topic in body.get("topics", ())
            for p in topic.get("partitions", ())
        ):
            generic(out, body)
            return
        get = body.get
        fixed = (
            get("max_wait_ms", 0),
            get("min_bytes", 0),
            get("max_bytes", 0x7FFFFFFF),
            get("isolation_level", 0),
            get("session_id", 0),
            get("session_epoch", -1),
        )
        out.append(top.pack(*fixed) if version >= 15 else top.pack(get("replica_id", -1), *fixed))
        topics = get("topics", ())
        count(out, len(topics))
        for topic in topics:
            _write_topic_ref(out, topic, by_id)
            partitions = topic.get("partitions", ())
            count(out, len(partitions))
            for p in partitions:
                pget = p.get
                out.append(
                    partition_fixed(
                        pget("partition", 0),
                        pget("current_leader_epoch", -1),
                        pget("fetch_offset", 0),
                        pget("last_fetched_epoch", -1),
                        pget("log_start_offset", -1),
                        pget("partition_max_bytes", 0),
                    )
                )
                out.append(b"\x00")
            out.append(b"\x00")
        forgotten = get("forgotten_topics_data", ())
        count(out, len(forgotten))
        for topic in forgotten:
            _write_topic_ref(out, topic, by_id)
            indexes = topic.get("partitions", ())
            count(out, len(indexes))
            out.extend([_INT32.pack(i) for i in indexes])
            out.append(b"\x00")
        t.write_compact_string(out, get("rack_id", ""))
        state = get("replica_state", _NO_STATE) if version >= 15 else _NO_STATE
        replica_id, replica_epoch = state.get("replica_id", -1), state.get("replica_epoch", -1)
        if replica_id == -1 and replica_epoch == -1:
            out.append(b"\x00")  # the default: not sent
        else:
            out.append(b"\x01\x01" + _UVARINT_13 + _REPLICA_STATE.pack(replica_id, replica_epoch, 0))

    return write


def fetch_response_reader(version: int, generic: Reader) -> Reader:
    """FetchResponse v12+ (`generic`: the compiled reader, for what this one does not take)."""
    by_id = version >= 13
    partition_fixed = _RESPONSE_PARTITION.unpack_from

    def read(buf: Buffer, pos: int) -> tuple[dict, int]:
        size = len(buf)
        throttle_time_ms, error_code, session_id = _RESPONSE_TOP.unpack_from(buf, pos)
        pos += 10
        responses = []
        n_topics = _count(buf, pos)
        pos += 1
        for _ in range(n_topics):
            if by_id:
                name, topic_id = "", _uuid(buf, pos)
                pos += 16
            else:
                n = _count(buf, pos)
                name, topic_id = string_at(buf, pos + 1, n, size), t.ZERO_UUID
                pos += 1 + n
            partitions = []
            n_partitions = _count(buf, pos)
            pos += 1
            for _ in range(n_partitions):
                index, code, high_watermark, last_stable_offset, log_start_offset = partition_fixed(buf, pos)
                pos += 30
                n = buf[pos] - 1
                pos += 1
                aborted: list | None
                if n < 0:
                    aborted = None
                else:
                    if n >= 0x7E:
                        raise Irregular
                    aborted = []
                    for _ in range(n):
                        producer_id, first_offset = _ABORTED.unpack_from(buf, pos)
                        if buf[pos + 16]:
                            raise Irregular
                        pos += 17
                        aborted.append({"producer_id": producer_id, "first_offset": first_offset})
                preferred_read_replica = _INT32.unpack_from(buf, pos)[0]
                records, pos = compact_records_at(buf, pos + 4, size)
                if buf[pos]:  # a diverging epoch, current leader or snapshot id
                    raise Irregular
                pos += 1
                partitions.append(
                    {
                        "partition_index": index,
                        "error_code": code,
                        "high_watermark": high_watermark,
                        "last_stable_offset": last_stable_offset,
                        "log_start_offset": log_start_offset,
                        "diverging_epoch": {"epoch": -1, "end_offset": -1},
                        "current_leader": {"leader_id": -1, "leader_epoch": -1},
                        "snapshot_id": {"end_offset": -1, "epoch": -1},
                        "aborted_transactions": aborted,
                        "preferred_read_replica": preferred_read_replica,
                        "records": records,
                    }
                )
            if buf[pos]:
                raise Irregular
            pos += 1
            responses.append({"topic": name, "topic_id": topic_id, "partitions": partitions})
        if buf[pos]:  # node endpoints (v16+)
            raise Irregular
        return {
            "throttle_time_ms": throttle_time_ms,
            "error_code": error_code,
            "session_id": session_id,
            "responses": responses,
            "node_endpoints": [],
        }, pos + 1

    return with_fallback(read, generic)


def _has_tagged_fields(p: dict) -> bool:
    return "diverging_epoch" in p or "current_leader" in p or "snapshot_id" in p


def fetch_response_writer(version: int, generic: Writer) -> Writer:
    """FetchResponse v12+ (`generic`: the compiled writer, for responses with a partition's
    tagged fields or node endpoints)."""
    by_id = version >= 13
    partition_fixed = _RESPONSE_PARTITION.pack
    write_records = t.write_compact_records

    count = write_compact_count

    def write(out: list, body: dict) -> None:
        if for_generic_writer(body, "partitions", _has_tagged_fields):
            generic(out, body)
            return
        responses = body.get("responses", ())
        out.append(
            _RESPONSE_TOP.pack(body.get("throttle_time_ms", 0), body.get("error_code", 0), body.get("session_id", 0))
        )
        count(out, len(responses))
        for topic in responses:
            _write_topic_ref(out, topic, by_id)
            partitions = topic.get("partitions", ())
            count(out, len(partitions))
            for p in partitions:
                get = p.get
                out.append(
                    partition_fixed(
                        get("partition_index", 0),
                        get("error_code", 0),
                        get("high_watermark", 0),
                        get("last_stable_offset", -1),
                        get("log_start_offset", -1),
                    )
                )
                aborted = get("aborted_transactions", ())
                if aborted is None:
                    out.append(b"\x00")
                else:
                    count(out, len(aborted))
                    for a in aborted:
                        out.append(_ABORTED.pack(a.get("producer_id", 0), a.get("first_offset", 0)))
                        out.append(b"\x00")
                out.append(_INT32.pack(get("preferred_read_replica", -1)))
                write_records(out, get("records"))
                out.append(b"\x00")
            out.append(b"\x00")
        out.append(b"\x00")

    return write
