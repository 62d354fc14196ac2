"""Produce and fetch over HTTP, in Confluent REST Proxy v2 shapes.

Produce turns a request's JSON records into one record batch per partition (encoded once)
and hands it to the same per-batch append path as the Kafka listener. Fetch reads whole
batches up to the high watermark (or the last stable offset) and decodes them for the
response.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import APIRouter, Request, Response
from loglake.config import LogConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.partitioner import StickyPartitioner
from loglake.record.batch import encoded_batches

from ingest_gateway.http.errors import RETRIABLE, BadRequest, JSONBytesResponse, kafka_error_response
from ingest_gateway.http.rest_records import (
    BINARY_V2,
    JSON_V2,
    PartitionedRecords,
    accept_format,
    base64_fields,
    embedded_format,
    encode_base64_fields,
    load_records,
    parse_isolation,
    partition_records,
    read_records,
    render_records,
    rows_of,
    visible_end,
)

if TYPE_CHECKING:
    from ingest_gateway.metadata.metadata_cache import MetadataCache
    from ingest_gateway.observability.metrics import BrokerMetrics
    from ingest_gateway.replica.replica_manager import ReplicaManager


_CONFIGS_KEPT = 1000

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


def record_routes(
    max_request_bytes: int,
    cache: MetadataCache,
    log_defaults: Callable[[], LogConfig],
    replica_manager: ReplicaManager,
    metrics: BrokerMetrics | None,
    in_background: Callable[[asyncio.Task[Any]], None],
) -> APIRouter:
    """`log_defaults`: the broker's current topic defaults (dynamic broker configs change
    them); `in_background`: keeps an acks=0 append's task until it ends."""
    router = APIRouter()
    sticky = StickyPartitioner()

    # topic -> (its overrides, the defaults, the config they made): building a LogConfig
    # takes ~17 µs, a request to a topic whose config did not change reuses it.
    configs: dict[str, tuple[dict[str, str], LogConfig, LogConfig]] = {}

    def topic_config(topic: str) -> LogConfig:
        overrides = cache.image.topic(topic).config
        defaults = log_defaults()
        known = configs.get(topic)
        if known is not None and known[1] is defaults and known[0] == overrides:
            return known[2]
        config = LogConfig.from_properties(overrides, defaults)
        if topic not in configs and len(configs) >= _CONFIGS_KEPT:
            configs.clear()  # topics come and go: never more than this many kept
        configs[topic] = (dict(overrides), defaults, config)
        return config

    @router.post("/topics/{topic}", openapi_extra={"requestBody": _PRODUCE_BODY})
    async def produce(topic: str, request: Request, acks: str = "1", timeout_ms: int = 30000) -> Response:
        return await _produce(topic, None, request, acks, timeout_ms)

    @router.post("/topics/{topic}/partitions/{partition}", openapi_extra={"requestBody": _PRODUCE_BODY})
    async def produce_to_partition(
        topic: str, partition: int, request: Request, acks: str = "1", timeout_ms: int = 30000
    ) -> Response:
        return await _produce(topic, partition, request, acks, timeout_ms)

    def place_records(topic: str, forced_partition: int | None, records: list[Any], fmt: str) -> PartitionedRecords:
        """Each record's partition and the batches to append; raises what is wrong with a
        record first, then with the topic, as the Python path finds them."""
        now_ms = int(time.time() * 1000)
        # An unknown topic goes to the Python path: a bad record is reported before it.
        if fmt == "binary" and topic in cache.image.topics and (fields := base64_fields(records)) is not None:
            config = topic_config(topic)
            # Null keys on a compacted topic: the Python path refuses them.
            if fields[0] is not None or not config.compact:
                placed = encode_base64_fields(
                    fields,
                    cache.image.partition_count(topic),
                    forced_partition,
                    sticky,
                    now_ms,
                    config.max_message_bytes,
                )
                if placed is not None:
                    return placed
        rows, explicit_partitions = rows_of(records, fmt)
        config = topic_config(topic)
        if config.compact and any(row[0] is None for row in rows):
            raise KafkaError(ErrorCode.INVALID_RECORD, f"Compacted topic {topic} cannot accept a record without key")
        return partition_records(
            rows,
            explicit_partitions,
            topic,
            cache.image.partition_count(topic),
            forced_partition,
            sticky,
            now_ms,
            config.max_message_bytes,
        )

    async def _produce(
        topic: str, forced_partition: int | None, request: Request, acks_param: str, timeout_ms: int
    ) -> Response:
        acks = {"all": -1, "-1": -1, "0": 0, "1": 1}.get(acks_param)
        if acks is None:
            raise BadRequest(422, f"acks must be 0, 1 or all, not {acks_param!r}", 2)
        fmt = embedded_format(request.headers.get("content-type"))
        if int(request.headers.get("content-length") or 0) > max_request_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"request is larger than {max_request_bytes} bytes")
        body = await request.body()
        if len(body) > max_request_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"request is larger than {max_request_bytes} bytes")
        placed = place_records(topic, forced_partition, load_records(body), fmt)
        entries = {(topic, p): encoded_batches(batches) for p, batches in placed.batches.items()}
        if acks == 0:
            in_background(asyncio.create_task(replica_manager.append_records(entries, 1, timeout_ms)))
            offsets: list[dict[str, object]] = [
                {"partition": p, "offset": None, "error_code": None, "error": None} for p, _ in placed.placements()
            ]
            return JSONBytesResponse({"offsets": offsets, "key_schema_id": None, "value_schema_id": None}, 202)
        results = await replica_manager.append_records(entries, acks, timeout_ms)
        failed = {p: r.error for (_, p), r in results.items() if r.error is not None}
        if not failed:
            bases = {p: r.base_offset for (_, p), r in results.items()}
            return Response(placed.offsets_body(bases), media_type=JSONBytesResponse.media_type)
        offsets = []
        errors = []
        for partition, index in placed.placements():
            error = failed.get(partition)
            if error is None:
                offsets.append(
                    {
                        "partition": partition,
                        "offset": results[(topic, partition)].base_offset + index,
                        "error_code": None,
                        "error": None,
                    }
                )
            else:
                errors.append(error)
                offsets.append(
                    {
                        "partition": partition,
                        "offset": None,
                        # REST Proxy's classification: 2 retriable, 1 not.
                        "error_code": 2 if error.code in RETRIABLE else 1,
                        "error": f"{error.code.name}: {error.message}",
                    }
                )
        if errors and len(errors) == len(offsets):
            response = kafka_error_response(errors[0])
            response.body = orjson.dumps({**orjson.loads(response.body), "offsets": offsets})
            response.headers["content-length"] = str(len(response.body))
            return response
        return JSONBytesResponse({"offsets": offsets, "key_schema_id": None, "value_schema_id": None})

    @router.get("/topics/{topic}/partitions/{partition}/records")
    async def fetch(
        topic: str,
        partition: int,
        request: Request,
        offset: int | None = None,
        max_bytes: int = 1048576,
        timeout_ms: int = 0,
        isolation: str = "read_committed",
        max_records: int | None = None,
    ) -> Response:
        """Records from `offset` (default: the log start), at most `max_records` of them.
        `isolation=read_committed` (the default) reads up to the last stable offset and
        leaves out aborted transactions' records; `read_uncommitted` reads up to the high
        watermark.

        When nothing is there yet, waits up to `timeout_ms` for new records.
        """
        if max_bytes <= 0:
            raise BadRequest(422, "max_bytes must be positive", 2)
        if max_records is not None and max_records <= 0:
            raise BadRequest(422, "max_records must be positive", 2)
        read_committed = parse_isolation(isolation, "isolation")
        fmt = accept_format(request.headers.get("accept"))
        p = replica_manager.leader_partition(topic, partition)
        if offset is None:
            offset = p.log_start_offset
        if offset < p.log_start_offset or offset > p.log_end_offset:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"offset {offset} is outside [{p.log_start_offset}, {p.log_end_offset}] for {topic}-{partition}",
            )
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        while visible_end(p, read_committed) <= offset:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            await replica_manager.wait_for_change([(topic, partition)], remaining)
        if visible_end(p, read_committed) <= offset:
            return JSONBytesResponse([])
        records, size = read_records(p, offset, max_bytes, read_committed)
        records = records[:max_records]
        if metrics is not None:
            metrics.record_bytes_out(topic, size)
        out = render_records(topic, partition, records, fmt)
        return JSONBytesResponse(out, media_type=JSON_V2 if fmt == "json" else BINARY_V2)

    return router
