"""One Kafka protocol request from a test, with the broker's own client (imported as a module)."""

from __future__ import annotations

import asyncio

from loglake.protocol import ApiKey, RequestHeader
from loglake.security.listeners import SecurityProtocol

from ingest_gateway.network.kafka_client import KafkaClient
from ingest_gateway.network.request_context import ClientConnection, RequestContext


def call(bootstrap: str, api_key: ApiKey, version: int, body: dict) -> dict:
    """One Kafka protocol request to one broker ("host:port"), on a connection of its own;
    the decoded response body."""
    host, port = bootstrap.split(":")

    async def go() -> dict:
        client = KafkaClient(host, int(port))
        try:
            return await client.request(api_key, version, body)
        finally:
            await client.close()

    return asyncio.run(go())


def plaintext_connection(listener: str = "PLAINTEXT") -> ClientConnection:
    """An anonymous client's connection on a PLAINTEXT listener, for a test that hands a
    request to the router or a handler itself."""
    return ClientConnection("127.0.0.1:9092-127.0.0.1:50000-0", listener, SecurityProtocol.PLAINTEXT, "127.0.0.1:50000")


def request_context(api_key: ApiKey, version: int) -> RequestContext:
    """The context of one request of an anonymous PLAINTEXT client."""
    return RequestContext(RequestHeader(api_key, version, 1, "test"), plaintext_connection())
