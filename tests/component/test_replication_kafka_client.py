"""The inter-broker Kafka client: pipelined requests on one connection, reconnecting
after the broker goes away, and timeouts that close the connection."""

from __future__ import annotations

import asyncio

import pytest

from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.network.kafka_client import KafkaClient, KafkaConnectionError, RequestTimedOut
from ingest_gateway.network.kafka_server import KafkaServer
from ingest_gateway.apis.request_router import RequestRouter
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from loglake.protocol.framing import decode_request_header, encode_response

API_VERSIONS = {"client_software_name": "test", "client_software_version": "1"}


async def serve(port: int = 0) -> KafkaServer:
    # A router serves ApiVersions by itself; no authorizer, no metrics.
    router = RequestRouter(RequestAuthorization(None), None, "PLAINTEXT")
    server = KafkaServer("127.0.0.1", port, router.handle, 1 << 20)
    await server.start()
    return server


def test_concurrent_requests_share_one_connection_and_reconnect() -> None:
    async def main() -> None:
        server = await serve()
        client = KafkaClient("127.0.0.1", server.port)
        try:
            answers = await asyncio.gather(
                *(client.request(ApiKey.API_VERSIONS, v, API_VERSIONS) for v in (0, 1, 2, 3) * 5)
            )
            assert all(a["error_code"] == 0 and a["api_keys"] for a in answers)
            port = server.port
            await server.stop()
            with pytest.raises(KafkaConnectionError):
                await client.request(ApiKey.API_VERSIONS, 3, API_VERSIONS)
            assert not client.connected
            server = await serve(port)
            answer = await client.request(ApiKey.API_VERSIONS, 3, API_VERSIONS)
            assert answer["error_code"] == 0 and client.connected
        finally:
            await client.close()
            await server.stop()
        with pytest.raises(KafkaConnectionError):
            await client.request(ApiKey.API_VERSIONS, 3, API_VERSIONS)

    asyncio.run(main())


def test_a_cancelled_request_leaves_the_connection_to_the_next() -> None:
    """A caller that gives up (cancelled) leaves nothing waiting: the answer to its request
    comes later and is skipped, and the next request on the connection gets its own."""

    async def main() -> None:
        router = RequestRouter(RequestAuthorization(None), None, "PLAINTEXT")
        arrived, release = asyncio.Event(), asyncio.Event()

        async def handler(connection, payload):  # type: ignore[no-untyped-def]
            if arrived.is_set():
                return await router.handle(connection, payload)
            arrived.set()
            await release.wait()
            # The first request's answer, late, and told apart by its error code.
            header, _ = decode_request_header(payload)
            return encode_response(
                ApiKey.API_VERSIONS, 3, header.correlation_id, {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR}
            )

        server = KafkaServer("127.0.0.1", 0, handler, 1 << 20)
        await server.start()
        client = KafkaClient("127.0.0.1", server.port, request_timeout_ms=30_000)
        try:
            first = asyncio.create_task(client.request(ApiKey.API_VERSIONS, 3, API_VERSIONS))
            await arrived.wait()
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            second = asyncio.create_task(client.request(ApiKey.API_VERSIONS, 0, {}))
            release.set()
            assert (await second)["error_code"] == ErrorCode.NONE
            assert client.connected and not client._pending
        finally:
            await client.close()
            await server.stop()

    asyncio.run(main())


def test_timeout_closes_the_connection() -> None:
    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # never answers
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = KafkaClient("127.0.0.1", port, request_timeout_ms=200)
        try:
            with pytest.raises(RequestTimedOut) as e:
                await client.request(ApiKey.API_VERSIONS, 3, API_VERSIONS)
            assert isinstance(e.value, TimeoutError)
            assert not client.connected
        finally:
            await client.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())


def test_unreachable_broker() -> None:
    async def main() -> None:
        client = KafkaClient("127.0.0.1", 1, connect_timeout_ms=1000)
        with pytest.raises(KafkaConnectionError):
            await client.request(ApiKey.API_VERSIONS, 3, API_VERSIONS)
        await client.close()

    asyncio.run(main())
