"""HTTP produce throughput: the broker against a bare endpoint on the same stack.

1,000 records of 100 bytes per request, several concurrent clients, acks=1. Prints
records/s for both and the ratio broker / bare (target >= 0.5). With --profile, runs the
broker under pyinstrument and writes the profile to bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from harness.process import BrokerProcess, free_port

ROOT = Path(__file__).resolve().parent.parent
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
RECORDS_PER_REQUEST = 1000


def request_body() -> bytes:
    records = [
        {
            "key": base64.b64encode(f"key-{i % 100:04d}".encode()).decode(),
            "value": base64.b64encode(os.urandom(100)).decode(),
        }
        for i in range(RECORDS_PER_REQUEST)
    ]
    return orjson.dumps({"records": records})


async def drive(url: str, path: str, body: bytes, clients: int, seconds: float) -> float:
    """Requests per second over `seconds`, `clients` requests in flight."""
    done = 0
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=clients)) as client:
        headers = {"content-type": BINARY_V2}
        # Warm up connections and code paths.
        await asyncio.gather(*(client.post(path, content=body, headers=headers) for _ in range(clients)))
        deadline = time.perf_counter() + seconds
        start = time.perf_counter()

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                r = await client.post(path, content=body, headers=headers, params={"acks": "1"})
                r.raise_for_status()
                done += 1

        await asyncio.gather(*(worker() for _ in range(clients)))
        return done / (time.perf_counter() - start)


def wait_healthy(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise TimeoutError(url)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    body = request_body()

    port = free_port()
    bare = subprocess.Popen([sys.executable, str(ROOT / "bench/bare_endpoint.py"), str(port)])
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        bare_rps = asyncio.run(drive(f"http://127.0.0.1:{port}", "/topics/bench", body, args.clients, args.seconds))
    finally:
        bare.terminate()
        bare.wait()

    with tempfile.TemporaryDirectory(prefix="loglake-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "logs", config=ROOT / "conf/server.properties")
        if args.profile:
            (ROOT / "bench/results").mkdir(exist_ok=True)
            os.environ["LOGLAKE_PROFILE"] = str(ROOT / "bench/results/http_produce_profile.txt")
        with broker:
            httpx.post(f"{broker.http_url}/topics", json={"name": "bench", "partitions": 6}).raise_for_status()
            broker_rps = asyncio.run(drive(broker.http_url, "/topics/bench", body, args.clients, args.seconds))

    print(f"bare endpoint : {bare_rps * RECORDS_PER_REQUEST:12,.0f} records/s ({bare_rps:,.1f} requests/s)")
    print(f"loglake broker: {broker_rps * RECORDS_PER_REQUEST:12,.0f} records/s ({broker_rps:,.1f} requests/s)")
    print(f"ratio broker/bare: {broker_rps / bare_rps:.2f} (target >= 0.5)")


if __name__ == "__main__":
    main()
