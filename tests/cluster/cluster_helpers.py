"""What the cluster tests share."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from ingest_gateway.kafka_client import KafkaClient
from loglake.protocol import ApiKey

# Settings that make failures show within seconds: short ZooKeeper sessions and ISR lag,
# no initial rebalance delay, few offsets partitions, no background leader moves.
FAST = {
    "zookeeper.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "2000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "auto.leader.rebalance.enable": "false",
}


def serving(method: str, url: str, timeout: float = 30.0, **kwargs: Any) -> httpx.Response:
    """Send until the broker answers other than "not (yet) the leader": a broker the
    controller just made leader may not have received its LeaderAndIsr yet."""
    deadline = time.monotonic() + timeout
    while True:
        r = httpx.request(method, url, timeout=10, **kwargs)
        if r.status_code not in (404, 503) or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def serving_get(url: str, **kwargs: Any) -> Any:
    """`serving` GET that must succeed; returns the JSON."""
    r = serving("GET", url, **kwargs)
    r.raise_for_status()
    return r.json()


def call(bootstrap: str, api_key: ApiKey, version: int, body: dict) -> dict:
    """One Kafka protocol request to one broker ("host:port"); the decoded response body."""
    host, port = bootstrap.split(":")

    async def go() -> dict:
        client = KafkaClient(host, int(port))
        try:
            return await client.request(api_key, version, body)
        finally:
            await client.close()

    return asyncio.run(go())
