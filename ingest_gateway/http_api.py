"""The HTTP API (FastAPI): produce and fetch in Confluent REST Proxy v2 shapes, topic admin.

Produce turns a request's JSON records into one record batch per partition (encoded once)
and hands it to the same per-batch append path as the Kafka listener. Fetch reads whole
batches up to the high watermark and decodes them for the response.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.responses import ORJSONResponse

from ingest_gateway.http_errors import RETRIABLE, error_response, kafka_error_response
from loglake.errors import ErrorCode, KafkaError
from loglake.partitioner import StickyPartitioner, partition_for_key
from loglake.record.batch import decode_batches, encode_batch
from loglake.record.header import HEADER_SIZE

if TYPE_CHECKING:
    from ingest_gateway.broker import Broker

log = logging.getLogger(__name__)

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
# Bytes a record adds to a batch beyond its key, value and header bytes (varints, attributes).
RECORD_OVERHEAD = 24

_PRODUCE_BODY = {
    "content": {
        fmt: {
            "schema": {
                "type": "object",
                "required": ["records"],
                "properties": {
                    "records": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "key": {},
                                "value": {},
                                "partition": {"type": "integer"},
                                "timestamp": {"type": "integer"},
                                "headers": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "properties": {"key": {"type": "string"}, "value": {"type": "string"}},
                                    },
                                },
                            },
                        },
                    }
                },
            }
        }
        for fmt in (JSON_V2, BINARY_V2)
    },
    "required": True,
}


class BadRequest(Exception):
    def __init__(self, status: int, message: str, sub: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.sub = sub


def _embedded_format(content_type: str | None) -> str:
    ct = (content_type or "").split(";")[0].strip().lower()
    if ct in (JSON_V2, "application/json"):
        return "json"
    if ct == BINARY_V2:
        return "binary"
    raise BadRequest(415, f"unsupported Content-Type {ct or '(none)'!r}; use {JSON_V2} or {BINARY_V2}")


def _accept_format(accept: str | None) -> str:
    accept = (accept or "").lower()
    return "json" if JSON_V2 in accept else "binary"


def _b64decode(value: Any, what: str, index: int) -> bytes:
    if not isinstance(value, str):
        raise BadRequest(422, f"records[{index}].{what} must be a base64 string in binary format", 2)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(422, f"records[{index}].{what} is not valid base64", 2) from None


def _headers(raw: Any, index: int) -> list[tuple[str, bytes | None]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadRequest(422, f"records[{index}].headers must be a list of {{key, value}} objects", 2)
    out = []
    for h in raw:
        name = h.get("key", h.get("name")) if isinstance(h, dict) else None
        if not isinstance(name, str):
            raise BadRequest(422, f"records[{index}].headers entries need a string 'key'", 2)
        value = h.get("value")
        out.append((name, None if value is None else _b64decode(value, f"headers[{name!r}]", index)))
    return out


def _parse_records(body: bytes, fmt: str) -> list[tuple[bytes | None, bytes | None, list, int | None, int | None]]:
    """(key, value, headers, partition, timestamp) per record, validated."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
    records = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(records, list) or not records:
        raise BadRequest(422, "request body must be an object with a non-empty 'records' list", 2)
    parsed = []
    for i, r in enumerate(records):
        if not isinstance(r, dict):
            raise BadRequest(422, f"records[{i}] must be an object", 2)
        key = r.get("key")
        value = r.get("value")
        if fmt == "json":
            key = None if key is None else orjson.dumps(key)
            value = None if value is None else orjson.dumps(value)
        else:
            key = None if key is None else _b64decode(key, "key", i)
            value = None if value is None else _b64decode(value, "value", i)
        partition = r.get("partition")
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool)):
            raise BadRequest(422, f"records[{i}].partition must be an integer", 2)
        timestamp = r.get("timestamp")
        if timestamp is not None and (not isinstance(timestamp, int) or timestamp < 0):
            raise BadRequest(422, f"records[{i}].timestamp must be a non-negative integer (ms)", 2)
        parsed.append((key, value, _headers(r.get("headers"), i), partition, timestamp))
    return parsed


def _record_size(key: bytes | None, value: bytes | None, headers: list) -> int:
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, hv in headers:
        size += len(name) + (len(hv) if hv else 0) + 4
    return size


def _split_batches(rows: list, max_batch_bytes: int) -> list[list]:
    """Cut one partition's records into batches that each fit `max.message.bytes`."""
    batches: list[list] = [[]]
    size = HEADER_SIZE
    for row in rows:
        rs = _record_size(row[0], row[1], row[2])
        if HEADER_SIZE + rs > max_batch_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"a record of about {rs} bytes cannot fit in a batch of max.message.bytes={max_batch_bytes}",
            )
        if batches[-1] and size + rs > max_batch_bytes:
            batches.append([])
            size = HEADER_SIZE
        batches[-1].append(row)
        size += rs
    return batches


def _record_json(topic: str, partition: int, rec, fmt: str) -> dict[str, Any]:
    if fmt == "json":
        key = None if rec.key is None else orjson.loads(rec.key)
        value = None if rec.value is None else orjson.loads(rec.value)
    else:
        key = None if rec.key is None else base64.b64encode(rec.key).decode()
        value = None if rec.value is None else base64.b64encode(rec.value).decode()
    return {
        "topic": topic,
        "partition": partition,
        "offset": rec.offset,
        "timestamp": rec.timestamp,
        "key": key,
        "value": value,
        "headers": [
            {"key": k, "value": None if v is None else base64.b64encode(v).decode()} for k, v in rec.headers
        ],
    }


def create_app(broker: Broker) -> FastAPI:
    app = FastAPI(
        title="loglake",
        description="Kafka-compatible streaming platform: produce, fetch and administer topics over HTTP.",
        version="0.1.0",
        default_response_class=ORJSONResponse,
    )
    sticky = StickyPartitioner()

    @app.exception_handler(KafkaError)
    async def _kafka_error(request: Request, exc: KafkaError) -> Response:
        return kafka_error_response(exc)

    @app.exception_handler(BadRequest)
    async def _bad_request(request: Request, exc: BadRequest) -> Response:
        return error_response(exc.status, exc.message, sub=exc.sub)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "broker_id": broker.config.broker_id}

    @app.get("/topics")
    async def list_topics() -> list[str]:
        return sorted(t for t in broker.image.topics if not t.startswith("__"))

    @app.post("/topics", status_code=201)
    async def create_topic(request: Request) -> dict[str, Any]:
        doc = await _json_body(request)
        name = doc.get("name", doc.get("topic_name"))
        if not isinstance(name, str):
            raise BadRequest(422, "'name' (the topic name) is required", 2)
        partitions = doc.get("partitions", doc.get("partitions_count", broker.config.num_partitions))
        rf = doc.get("replication_factor", broker.config.default_replication_factor)
        if not isinstance(partitions, int) or not isinstance(rf, int):
            raise BadRequest(422, "'partitions' and 'replication_factor' must be integers", 2)
        broker.controller.create_topic(name, partitions, rf, _configs(doc.get("configs")))
        return broker.describe_topic(name)

    @app.get("/topics/{topic}")
    async def describe_topic(topic: str) -> dict[str, Any]:
        return broker.describe_topic(topic)

    @app.patch("/topics/{topic}")
    async def alter_topic(topic: str, request: Request) -> dict[str, Any]:
        doc = await _json_body(request)
        broker.image.topic(topic)
        if "configs" in doc:
            broker.controller.alter_topic_config(topic, _configs(doc["configs"]))
        partitions = doc.get("partitions", doc.get("partitions_count"))
        if partitions is not None:
            if not isinstance(partitions, int):
                raise BadRequest(422, "'partitions' must be an integer", 2)
            broker.controller.create_partitions(topic, partitions)
        return broker.describe_topic(topic)

    @app.delete("/topics/{topic}", status_code=204)
    async def delete_topic(topic: str) -> Response:
        if not broker.config.delete_topic_enable:
            raise KafkaError(ErrorCode.TOPIC_DELETION_DISABLED, "delete.topic.enable is false on this broker")
        broker.controller.delete_topic(topic)
        return Response(status_code=204)

    @app.get("/topics/{topic}/partitions")
    async def list_partitions(topic: str) -> list[dict[str, Any]]:
        return broker.describe_topic(topic)["partitions"]

    @app.get("/topics/{topic}/partitions/{partition}")
    async def describe_partition(topic: str, partition: int) -> dict[str, Any]:
        broker.image.partition_state(topic, partition)
        return broker.describe_topic(topic)["partitions"][partition]

    @app.get("/topics/{topic}/partitions/{partition}/offsets")
    async def partition_offsets(topic: str, partition: int, timestamp: int | None = None) -> dict[str, Any]:
        """Beginning and end offsets; with `timestamp` (ms), the first offset at or after it."""
        p = broker.replica_manager.leader_partition(topic, partition)
        if timestamp is None:
            return {"beginning_offset": p.log_start_offset, "end_offset": p.high_watermark}
        found = p.offset_for_timestamp(timestamp)
        if found is None:
            return {"offset": None, "timestamp": None}
        return {"offset": found[0], "timestamp": found[1]}

    @app.post("/topics/{topic}", openapi_extra={"requestBody": _PRODUCE_BODY})
    async def produce(topic: str, request: Request, acks: str = "1", timeout_ms: int = 30000) -> Response:
        return await _produce(topic, None, request, acks, timeout_ms)

    @app.post("/topics/{topic}/partitions/{partition}", openapi_extra={"requestBody": _PRODUCE_BODY})
    async def produce_to_partition(
        topic: str, partition: int, request: Request, acks: str = "1", timeout_ms: int = 30000
    ) -> Response:
        return await _produce(topic, partition, request, acks, timeout_ms)

    async def _produce(
        topic: str, forced_partition: int | None, request: Request, acks_param: str, timeout_ms: int
    ) -> Response:
        acks = {"all": -1, "-1": -1, "0": 0, "1": 1}.get(acks_param)
        if acks is None:
            raise BadRequest(422, f"acks must be 0, 1 or all, not {acks_param!r}", 2)
        fmt = _embedded_format(request.headers.get("content-type"))
        max_request = broker.config.socket_request_max_bytes
        if int(request.headers.get("content-length") or 0) > max_request:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"request is larger than {max_request} bytes")
        body = await request.body()
        if len(body) > max_request:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"request is larger than {max_request} bytes")
        rows = _parse_records(body, fmt)
        num_partitions = broker.image.partition_count(topic)
        max_batch = broker.topic_config(topic).max_message_bytes
        null_key_partition = sticky.next_partition(num_partitions)
        by_partition: dict[int, list] = {}
        placements = []
        for key, value, headers, partition, ts in rows:
            if forced_partition is not None:
                partition = forced_partition
            elif partition is None:
                partition = null_key_partition if key is None else partition_for_key(key, num_partitions)
            if not 0 <= partition < num_partitions:
                raise KafkaError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    f"topic {topic!r} has no partition {partition} (it has {num_partitions})",
                )
            group = by_partition.setdefault(partition, [])
            placements.append((partition, len(group)))
            group.append((key, value, headers, ts))
        now_ms = int(time.time() * 1000)
        entries = {}
        for partition, group in by_partition.items():
            chunks = _split_batches(group, max_batch)
            entries[(topic, partition)] = b"".join(encode_batch(chunk, now_ms) for chunk in chunks)
        if acks == 0:
            task = asyncio.create_task(broker.replica_manager.append_records(entries, 1, timeout_ms))
            broker.track_background(task)
            offsets = [{"partition": p, "offset": None, "error_code": None, "error": None} for p, _ in placements]
            return ORJSONResponse({"offsets": offsets, "key_schema_id": None, "value_schema_id": None}, 202)
        results = await broker.replica_manager.append_records(entries, acks, timeout_ms)
        offsets = []
        errors = []
        for partition, index in placements:
            result = results[(topic, partition)]
            if result.error is None:
                offsets.append({"partition": partition, "offset": result.base_offset + index, "error_code": None, "error": None})
            else:
                errors.append(result.error)
                offsets.append(
                    {
                        "partition": partition,
                        "offset": None,
                        # REST Proxy's classification: 2 retriable, 1 not.
                        "error_code": 2 if result.error.code in RETRIABLE else 1,
                        "error": f"{result.error.code.name}: {result.error.message}",
                    }
                )
        if errors and len(errors) == len(offsets):
            response = kafka_error_response(errors[0])
            response.body = orjson.dumps({**orjson.loads(response.body), "offsets": offsets})
            response.headers["content-length"] = str(len(response.body))
            return response
        return ORJSONResponse({"offsets": offsets, "key_schema_id": None, "value_schema_id": None})

    @app.get("/topics/{topic}/partitions/{partition}/records")
    async def fetch(
        topic: str,
        partition: int,
        request: Request,
        offset: int | None = None,
        max_bytes: int = 1048576,
        timeout_ms: int = 0,
    ) -> Response:
        """Records from `offset` (default: the log start), never past the high watermark.

        When nothing is there yet, waits up to `timeout_ms` for new records.
        """
        if max_bytes <= 0:
            raise BadRequest(422, "max_bytes must be positive", 2)
        fmt = _accept_format(request.headers.get("accept"))
        p = broker.replica_manager.leader_partition(topic, partition)
        if offset is None:
            offset = p.log_start_offset
        if offset < p.log_start_offset or offset > p.log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{p.log_start_offset}, {p.log_end_offset}] for {topic}-{partition}",
            )
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        while p.high_watermark <= offset:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            await broker.replica_manager.wait_for_change([(topic, partition)], remaining)
        if p.high_watermark <= offset:
            return ORJSONResponse([])
        data = p.read(offset, max_bytes).read_bytes()
        out = []
        for header, records in decode_batches(data):
            if header.is_control:
                continue
            for rec in records:
                if rec.offset >= offset:
                    try:
                        out.append(_record_json(topic, partition, rec, fmt))
                    except orjson.JSONDecodeError:
                        raise BadRequest(
                            406,
                            f"record at offset {rec.offset} is not JSON; ask with Accept: {BINARY_V2}",
                        ) from None
        return ORJSONResponse(out, media_type=JSON_V2 if fmt == "json" else BINARY_V2)

    return app


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        doc = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadRequest(422, "request body must be a JSON object", 2)
    return doc


def _configs(raw: Any) -> dict[str, str]:
    """Configs as {"k": "v"} or REST Proxy v3's [{"name": k, "value": v}]."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items()}
    if isinstance(raw, list) and all(isinstance(c, dict) and "name" in c for c in raw):
        return {str(c["name"]): str(c.get("value", "")) for c in raw}
    raise BadRequest(422, "'configs' must be an object of name: value", 2)
