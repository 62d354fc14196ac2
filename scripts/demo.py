"""`make demo`: a standalone broker, 100,000 keyed events over HTTP, all read back."""

from __future__ import annotations

import asyncio
import base64
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson

from ingest_gateway.process import BrokerProcess

TOPIC = "demo-events"
PARTITIONS = 3
EVENTS = 100_000
PER_REQUEST = 1_000
CONCURRENCY = 4
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
ROOT = Path(__file__).resolve().parent.parent


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


async def produce(url: str) -> Counter:
    per_partition: Counter = Counter()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for start in range(0, EVENTS, PER_REQUEST):
        queue.put_nowait(start)

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            start = queue.get_nowait()
            records = [
                {"key": _b64(f"user-{i % 997}"), "value": _b64(f'{{"event":{i},"kind":"click"}}')}
                for i in range(start, start + PER_REQUEST)
            ]
            resp = await client.post(
                f"/topics/{TOPIC}",
                content=orjson.dumps({"records": records}),
                headers={"content-type": BINARY_V2},
                params={"acks": "all"},
            )
            resp.raise_for_status()
            for o in resp.json()["offsets"]:
                per_partition[o["partition"]] += 1

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(CONCURRENCY)))
    return per_partition


def read_back(url: str) -> dict[int, tuple[int, int, int]]:
    """Per partition: (records read, first offset, last offset)."""
    out = {}
    with httpx.Client(base_url=url, timeout=60) as client:
        for p in range(PARTITIONS):
            offset, count, first, last = 0, 0, None, None
            while True:
                resp = client.get(
                    f"/topics/{TOPIC}/partitions/{p}/records",
                    params={"offset": offset, "max_bytes": 4 << 20},
                    headers={"accept": BINARY_V2},
                )
                resp.raise_for_status()
                records = resp.json()
                if not records:
                    break
                first = records[0]["offset"] if first is None else first
                last = records[-1]["offset"]
                count += len(records)
                offset = last + 1
            out[p] = (count, first, last)
    return out


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="loglake-demo-") as tmp:
        broker = BrokerProcess(Path(tmp) / "logs", config=ROOT / "conf/server.properties")
        print(f"starting a standalone broker (HTTP {broker.http_url}, data in {tmp}) ...")
        with broker:
            httpx.post(
                f"{broker.http_url}/topics", json={"name": TOPIC, "partitions": PARTITIONS}, timeout=30
            ).raise_for_status()
            print(f"created topic {TOPIC} with {PARTITIONS} partitions")
            t0 = time.perf_counter()
            produced = asyncio.run(produce(broker.http_url))
            t1 = time.perf_counter()
            print(f"produced {EVENTS:,} keyed events over HTTP in {t1 - t0:.2f}s ({EVENTS / (t1 - t0):,.0f}/s, acks=all)")
            summary = read_back(broker.http_url)
            t2 = time.perf_counter()
            total = sum(c for c, _, _ in summary.values())
            print(f"read {total:,} events back over HTTP in {t2 - t1:.2f}s")
            print(f"{'partition':>9} {'produced':>9} {'read':>9} {'first':>7} {'last':>7}")
            for p, (count, first, last) in summary.items():
                print(f"{p:>9} {produced[p]:>9} {count:>9} {first!s:>7} {last!s:>7}")
        print("broker stopped")
        if total != EVENTS or any(produced[p] != summary[p][0] for p in summary):
            print("MISMATCH: not every produced event was read back", file=sys.stderr)
            return 1
    print("every event read back")
    return 0


if __name__ == "__main__":
    sys.exit(main())
