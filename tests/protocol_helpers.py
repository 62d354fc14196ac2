"""One Kafka protocol request from a test, with the broker's own client (imported as a module)."""

from __future__ import annotations

import asyncio

from loglake.protocol import ApiKey

from ingest_gateway.network.kafka_client import KafkaClient


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
