"""The HTTP API (FastAPI): produce and fetch in Confluent REST Proxy v2 shapes, topic admin.

Produce turns a request's JSON records into one record batch per partition (encoded once)
and hands it to the same per-batch append path as the Kafka listener. Fetch reads whole
batches up to the high watermark and decodes them for the response.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
from fastapi import FastAPI, Request, Response
from loglake.errors import ErrorCode, KafkaError
from loglake.partitioner import StickyPartitioner
from prometheus_client import CONTENT_TYPE_LATEST

from ingest_gateway.http.console import console_routes
from ingest_gateway.http.acls import acl_routes
from ingest_gateway.http.broker_configs import broker_config_routes
from ingest_gateway.http.errors import (
    RETRIABLE,
    BadRequest,
    JSONBytesResponse,
    error_response,
    json_object,
    kafka_error_response,
)
from ingest_gateway.http.groups import group_routes
from ingest_gateway.http.reassignments import reassignment_routes
from ingest_gateway.http.replication_throttles import replication_throttle_routes
from ingest_gateway.http.security import HttpSecurity
from ingest_gateway.http.tiering import tiering_routes
from ingest_gateway.http.transactions import transaction_routes
from ingest_gateway.http.users import user_routes
from ingest_gateway.server.listener_security import http_authenticator
from ingest_gateway.http.rest_records import (
    BINARY_V2,
    JSON_V2,
    accept_format,
    embedded_format,
    parse_isolation,
    parse_records,
    partition_records,
    read_records,
    render_records,
    visible_end,
)

if TYPE_CHECKING:
    from ingest_gateway.server.broker import Broker

log = logging.getLogger(__name__)


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


def create_app(broker: Broker) -> FastAPI:
    app = FastAPI(
        title="loglake",
        description="Kafka-compatible streaming platform: produce, fetch and administer topics over HTTP.",
        version="0.1.0",
        default_response_class=JSONBytesResponse,
    )
    sticky = StickyPartitioner()
    app.add_middleware(
        HttpSecurity,
        authorization=broker.authorization,
        authenticator=http_authenticator(broker.config, broker.store),
        realm=broker.config.raw.get("http.authentication.realm") or "loglake",
    )

    @app.exception_handler(KafkaError)
    async def _kafka_error(request: Request, exc: KafkaError) -> Response:
        return kafka_error_response(exc)

    @app.exception_handler(BadRequest)
    async def _bad_request(request: Request, exc: BadRequest) -> Response:
        return error_response(exc.status, exc.message, sub=exc.sub)

    app.include_router(
        group_routes(
            broker_id=broker.config.broker_id,
            coordinator=broker.group_coordinator,
            consumers=broker.consumer_manager,
            locator=broker.coordinators,
            authorization=broker.authorization,
            cache=broker.metadata_cache,
            replica_manager=broker.replica_manager,
        )
    )
    app.include_router(tiering_routes(broker.replica_manager, broker.store))
    app.include_router(
        transaction_routes(
            broker.config.broker_id, broker.transaction_coordinator, broker.replica_manager, broker.marker_writer
        )
    )
    app.include_router(reassignment_routes(broker.admin))
    app.include_router(replication_throttle_routes(broker.replica_manager, broker.metadata_cache))
    app.include_router(broker_config_routes(broker.dynamic_config, broker.metadata_cache, broker.store))
    app.include_router(user_routes(broker.store))
    app.include_router(acl_routes(broker.acl_apis, broker.authorization))
    app.include_router(
        console_routes(broker.config, broker.admin, broker.metadata_cache, broker.metrics, broker.cluster_status)
    )

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "broker_id": broker.config.broker_id}

    @app.get("/metrics")
    async def metrics() -> Response:
        """Prometheus text exposition of this broker's metrics (docs/operations.md)."""
        if broker.metrics is None:
            return error_response(404, "metrics are disabled on this broker (metrics.enabled=false)")
        return Response(broker.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/cluster")
    async def cluster_status() -> dict[str, Any]:
        """Brokers, controller and epoch, leaders/replicas/ISR, under-replicated and offline partitions."""
        return broker.cluster_status()

    @app.get("/topics")
    async def list_topics() -> list[str]:
        return sorted(t for t in broker.image.topics if not t.startswith("__"))

    @app.post("/topics", status_code=201)
    async def create_topic(request: Request) -> dict[str, Any]:
        doc = await json_object(request)
        name = doc.get("name", doc.get("topic_name"))
        if not isinstance(name, str):
            raise BadRequest(422, "'name' (the topic name) is required", 2)
        partitions = doc.get("partitions", doc.get("partitions_count", broker.config.num_partitions))
        rf = doc.get("replication_factor", broker.config.default_replication_factor)
        if not isinstance(partitions, int) or not isinstance(rf, int):
            raise BadRequest(422, "'partitions' and 'replication_factor' must be integers", 2)
        broker.admin.create_topic(name, partitions, rf, _configs(doc.get("configs")))
        return broker.describe_topic(name)

    @app.get("/topics/{topic}")
    async def describe_topic(topic: str) -> dict[str, Any]:
        return broker.describe_topic(topic)

    @app.patch("/topics/{topic}")
    async def alter_topic(topic: str, request: Request) -> dict[str, Any]:
        doc = await json_object(request)
        broker.image.topic(topic)
        if "configs" in doc:
            await broker.admin.alter_topic_config(topic, _configs(doc["configs"]))
        partitions = doc.get("partitions", doc.get("partitions_count"))
        if partitions is not None:
            if not isinstance(partitions, int):
                raise BadRequest(422, "'partitions' must be an integer", 2)
            await broker.admin.create_partitions(topic, partitions)
        return broker.describe_topic(topic)

    @app.delete("/topics/{topic}", status_code=204)
    async def delete_topic(topic: str) -> Response:
        broker.admin.delete_topic(topic)
        return Response(status_code=204)

    @app.post("/admin/compaction/{topic}/{partition}")
    async def apply_compaction_plan(
        topic: str, partition: int, request: Request, end_offset: int, now_ms: int
    ) -> dict[str, Any]:
        """The Spark executor's plan for one partition (jobs/compact.py): an Arrow IPC
        stream of (key binary, offset int64), each key's latest offset below `end_offset`;
        this replica rewrites its own segments with it (`now_ms` dates delete horizons)."""
        try:
            plan = pa.ipc.open_stream(await request.body()).read_all()
            keys, offsets = plan.column("key").combine_chunks(), plan.column("offset").to_numpy()
        except (pa.ArrowException, KeyError) as exc:
            raise BadRequest(422, f"the body is not an Arrow stream of (key, offset): {exc}", 2) from exc
        return await broker.apply_compaction_plan(topic, partition, keys, offsets, end_offset, now_ms)

    @app.get("/topics/{topic}/partitions")
    async def list_partitions(topic: str) -> list[dict[str, Any]]:
        return broker.describe_topic(topic)["partitions"]

    @app.get("/topics/{topic}/partitions/{partition}")
    async def describe_partition(topic: str, partition: int) -> dict[str, Any]:
        broker.image.partition_state(topic, partition)
        return broker.describe_topic(topic)["partitions"][partition]

    @app.get("/topics/{topic}/partitions/{partition}/offsets")
    async def partition_offsets(topic: str, partition: int, timestamp: int | None = None) -> dict[str, Any]:
        """Beginning and end offsets (the end is the high watermark, where consumers stop;
        `log_end_offset` also counts records the leader has that are not yet replicated to
        the whole ISR); with `timestamp` (ms), the first offset at or after it. Only the
        leader answers: another replica's view may be stale (NOT_LEADER_OR_FOLLOWER, 503)."""
        p = broker.replica_manager.leader_partition(topic, partition)
        if timestamp is None:
            return {
                "beginning_offset": p.log_start_offset,
                "end_offset": p.high_watermark,
                "log_end_offset": p.log_end_offset,
            }
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
        fmt = embedded_format(request.headers.get("content-type"))
        max_request = broker.config.socket_request_max_bytes
        if int(request.headers.get("content-length") or 0) > max_request:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"request is larger than {max_request} bytes")
        body = await request.body()
        if len(body) > max_request:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE, f"request is larger than {max_request} bytes")
        rows, explicit_partitions = parse_records(body, fmt)
        if broker.topic_config(topic).compact and any(row[0] is None for row in rows):
            raise KafkaError(ErrorCode.INVALID_RECORD, f"Compacted topic {topic} cannot accept a record without key")
        placed = partition_records(
            rows,
            explicit_partitions,
            topic,
            broker.image.partition_count(topic),
            forced_partition,
            sticky,
            int(time.time() * 1000),
            broker.topic_config(topic).max_message_bytes,
        )
        entries = {(topic, p): b"".join(batches) for p, batches in placed.batches.items()}
        placements = placed.placements
        if acks == 0:
            task = asyncio.create_task(broker.replica_manager.append_records(entries, 1, timeout_ms))
            broker.track_background(task)
            offsets = [{"partition": p, "offset": None, "error_code": None, "error": None} for p, _ in placements]
            return JSONBytesResponse({"offsets": offsets, "key_schema_id": None, "value_schema_id": None}, 202)
        results = await broker.replica_manager.append_records(entries, acks, timeout_ms)
        failed = {p: r.error for (_, p), r in results.items() if r.error is not None}
        if not failed:
            bases = {p: r.base_offset for (_, p), r in results.items()}
            offsets = [
                {"partition": p, "offset": bases[p] + i, "error_code": None, "error": None} for p, i in placements
            ]
            return JSONBytesResponse({"offsets": offsets, "key_schema_id": None, "value_schema_id": None})
        offsets = []
        errors = []
        for partition, index in placements:
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

    @app.get("/topics/{topic}/partitions/{partition}/records")
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
        p = broker.replica_manager.leader_partition(topic, partition)
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
            await broker.replica_manager.wait_for_change([(topic, partition)], remaining)
        if visible_end(p, read_committed) <= offset:
            return JSONBytesResponse([])
        records, size = read_records(p, offset, max_bytes, read_committed)
        records = records[:max_records]
        if broker.metrics is not None:
            broker.metrics.record_bytes_out(topic, size)
        out = render_records(topic, partition, records, fmt)
        return JSONBytesResponse(out, media_type=JSON_V2 if fmt == "json" else BINARY_V2)

    return app


def _configs(raw: Any) -> dict[str, str]:
    """Configs as {"k": "v"} or REST Proxy v3's [{"name": k, "value": v}]."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items()}
    if isinstance(raw, list) and all(isinstance(c, dict) and "name" in c for c in raw):
        return {str(c["name"]): str(c.get("value", "")) for c in raw}
    raise BadRequest(422, "'configs' must be an object of name: value", 2)
