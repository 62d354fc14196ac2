"""A handler's failure is that request's error (Kafka's `KafkaApis.handleError`).

Every API the broker serves gets a handler that raises; each request, sent on one real
connection to an in-process broker's Kafka listener, must be answered with
UNKNOWN_SERVER_ERROR in its API's shape, logged once with its header, and the connection
must serve the next request.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey, decode_response, encode_request, read_frame_size
from loglake.protocol.api import api_name, parse_versions
from loglake.protocol.messages import MESSAGES

from ingest_gateway.apis.controller_apis import ControllerApis
from ingest_gateway.apis.request_router import RequestRouter
from ingest_gateway.network.kafka_server import KafkaServer
from ingest_gateway.server.broker import Broker

Body = dict[str, Any]
_SAMPLE_VALUES: dict[str, Any] = {"string": "t", "int8": 1, "int16": 1, "int32": 1, "int64": 1, "bool": False}


def _sample(fields: tuple[Mapping[str, Any], ...], version: int) -> Body:
    """A request body naming one of everything: one entry in each array, so that the error
    response has a topic, partition, group or resource to answer for."""
    body: Body = {}
    for field in fields:
        versions = parse_versions(field["versions"])
        if versions is None or not versions[0] <= version <= versions[1]:
            continue
        ftype = field["type"]
        if ftype.startswith("[]"):
            if "fields" in field:
                body[field["name"]] = [_sample(field["fields"], version)]
            elif ftype[2:] in _SAMPLE_VALUES:
                body[field["name"]] = [_SAMPLE_VALUES[ftype[2:]]]
        elif ftype in _SAMPLE_VALUES and "fields" not in field:
            body[field["name"]] = _SAMPLE_VALUES[ftype]
    return body


def _error_codes(value: Any) -> Iterator[int]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key.endswith("error_code"):
                yield item
            yield from _error_codes(item)
    elif isinstance(value, list):
        for item in value:
            yield from _error_codes(item)


class _Connection:
    """One blocking socket to the listener: a request out, its response in."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self._correlation = 0

    def exchange(self, api_key: int, version: int, body: Body) -> Body:
        self._correlation += 1
        self._sock.sendall(encode_request(api_key, version, self._correlation, "failures", body))
        size = read_frame_size(self._read(4))
        correlation_id, response = decode_response(api_key, version, self._read(size))
        assert correlation_id == self._correlation
        return response

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self._sock.recv(n - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data

    def close(self) -> None:
        self._sock.close()


def _fail_every_api(router: RequestRouter) -> list[tuple[int, int]]:
    """Replace every served API's handler with one that raises; (api key, max version) of each."""

    async def broken(*args: Any) -> Body:
        raise RuntimeError("a bug in the handler")

    served = []
    for entry in router.api_keys(inter_broker=True):
        key, versions = entry["api_key"], (entry["min_version"], entry["max_version"])
        router.register(ApiKey(key), versions, broken)
        served.append((key, versions[1]))
    return served


def test_every_api_answers_a_handler_failure_with_unknown_server_error(
    broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    # The controller-to-broker APIs too (a clustered broker serves them).
    broker.requests.register_module(
        ControllerApis(broker.store, broker.replica_manager, broker.metadata_cache, broker.metadata_thread, "PLAINTEXT")
    )
    served = _fail_every_api(broker.requests)
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.API_VERSIONS, ApiKey.LEADER_AND_ISR} <= {k for k, _ in served}

    async def main() -> None:
        server = KafkaServer("127.0.0.1", 0, broker.requests.handle, 1 << 20)
        await server.start()
        try:
            connection = await asyncio.to_thread(_Connection, server.port)
            try:
                for key, version in served:
                    body = _sample(MESSAGES[api_name(key) + "Request"]["fields"], version)
                    caplog.clear()
                    response = await asyncio.to_thread(connection.exchange, key, version, body)
                    codes = list(_error_codes(response))
                    assert ErrorCode.UNKNOWN_SERVER_ERROR in codes, (ApiKey(key).name, response)
                    assert set(codes) <= {ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.NONE}, (ApiKey(key).name, codes)
                    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
                    assert len(failures) == 1, [r.getMessage() for r in failures]
                    assert f"{ApiKey(key).name} v{version}" in failures[0].getMessage()
                    assert "correlation id" in failures[0].getMessage()
                # The connection still serves after the last failure: the first API once more.
                key, version = served[0]
                body = _sample(MESSAGES[api_name(key) + "Request"]["fields"], version)
                again = await asyncio.to_thread(connection.exchange, key, version, body)
                assert ErrorCode.UNKNOWN_SERVER_ERROR in _error_codes(again)
            finally:
                connection.close()
        finally:
            await server.stop()

    asyncio.run(main())


def test_a_failed_handler_keeps_the_partitions_it_was_asked_about(broker: Broker) -> None:
    """Produce's error response names each topic and partition of the request (Kafka's shape)."""
    _fail_every_api(broker.requests)

    async def main() -> None:
        server = KafkaServer("127.0.0.1", 0, broker.requests.handle, 1 << 20)
        await server.start()
        try:
            connection = await asyncio.to_thread(_Connection, server.port)
            body = {
                "acks": 1,
                "timeout_ms": 1000,
                "topic_data": [
                    {"name": "a", "partition_data": [{"index": 0, "records": None}, {"index": 2, "records": None}]},
                    {"name": "b", "partition_data": [{"index": 1, "records": None}]},
                ],
            }
            response = await asyncio.to_thread(connection.exchange, ApiKey.PRODUCE, 9, body)
            connection.close()
        finally:
            await server.stop()
        answered = {
            (t["name"], p["index"]): p["error_code"] for t in response["responses"] for p in t["partition_responses"]
        }
        assert answered == {("a", 0): -1, ("a", 2): -1, ("b", 1): -1}

    asyncio.run(main())


def test_a_failed_acks_0_produce_closes_the_connection(broker: Broker) -> None:
    """An acks=0 producer reads no answer: Kafka closes the connection instead."""
    _fail_every_api(broker.requests)

    async def main() -> bytes:
        server = KafkaServer("127.0.0.1", 0, broker.requests.handle, 1 << 20)
        await server.start()
        try:
            sock = await asyncio.to_thread(socket.create_connection, ("127.0.0.1", server.port), 30)
            body = {"acks": 0, "timeout_ms": 1000, "topic_data": [{"name": "a", "partition_data": [{"index": 0}]}]}
            await asyncio.to_thread(sock.sendall, encode_request(ApiKey.PRODUCE, 9, 1, "failures", body))
            closed = await asyncio.to_thread(sock.recv, 1)
            sock.close()
            return closed
        finally:
            await server.stop()

    assert asyncio.run(main()) == b""
