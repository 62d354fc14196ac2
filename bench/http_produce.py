"""HTTP produce throughput: the broker against a bare endpoint on the same stack.

1,000 records of 100 bytes per request, several concurrent clients, acks=1. Prints, for
each of `--rounds` alternating rounds (bare endpoint, then broker), records/s for both, the
ratio broker / bare (target >= 0.8), and the CPU seconds the client (this process) and each
server process used while measuring, per request too: on a shared machine the wall-clock
ratio moves with the load, the CPU per request much less. With --floor, also the stack's
floor (an endpoint that parses the body and does nothing else). With --profile, runs the
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
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from bench.process_cpu import process_cpu_seconds
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


@dataclass(frozen=True)
class Measured:
    """One side of a round: requests/s, and the CPU seconds used while measuring."""

    requests_per_second: float
    requests: int
    client_cpu: float
    server_cpu: float

    def line(self, name: str) -> str:
        per_request = 1e6 / self.requests
        return (
            f"{name}: {self.requests_per_second * RECORDS_PER_REQUEST:10,.0f} records/s "
            f"({self.requests_per_second:6,.1f} requests/s); CPU s: client {self.client_cpu:5.2f}, "
            f"server {self.server_cpu:5.2f} ({self.client_cpu * per_request:5,.0f} / "
            f"{self.server_cpu * per_request:5,.0f} µs a request)"
        )


async def drive(url: str, path: str, body: bytes, clients: int, seconds: float, server_pid: int) -> Measured:
    """`clients` requests in flight for `seconds`, and the CPU this process and the server used."""
    done = 0
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=httpx.Limits(max_connections=clients)) as client:
        headers = {"content-type": BINARY_V2}
        # Warm up connections and code paths.
        await asyncio.gather(*(client.post(path, content=body, headers=headers) for _ in range(clients)))
        client_cpu, server_cpu = time.process_time(), process_cpu_seconds(server_pid)
        deadline = time.perf_counter() + seconds
        start = time.perf_counter()

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                r = await client.post(path, content=body, headers=headers, params={"acks": "1"})
                r.raise_for_status()
                done += 1

        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - start
        return Measured(
            done / elapsed,
            done,
            time.process_time() - client_cpu,
            process_cpu_seconds(server_pid) - server_cpu,
        )


def wait_healthy(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise TimeoutError(url)


def measure_bare(body: bytes, clients: int, seconds: float, *mode: str) -> Measured:
    port = free_port()
    bare = subprocess.Popen([sys.executable, str(ROOT / "bench/bare_endpoint.py"), str(port), *mode])
    try:
        wait_healthy(f"http://127.0.0.1:{port}")
        return asyncio.run(drive(f"http://127.0.0.1:{port}", "/topics/bench", body, clients, seconds, bare.pid))
    finally:
        bare.terminate()
        bare.wait()


def measure_broker(body: bytes, clients: int, seconds: float, profile: bool) -> Measured:
    with tempfile.TemporaryDirectory(prefix="loglake-bench-") as tmp:
        broker = BrokerProcess(Path(tmp) / "logs", config=ROOT / "conf/server.properties")
        if profile:
            (ROOT / "bench/results").mkdir(exist_ok=True)
            os.environ["LOGLAKE_PROFILE"] = str(ROOT / "bench/results/http_produce_profile.txt")
        with broker:
            assert broker.proc is not None
            httpx.post(f"{broker.http_url}/topics", json={"name": "bench", "partitions": 6}).raise_for_status()
            return asyncio.run(drive(broker.http_url, "/topics/bench", body, clients, seconds, broker.proc.pid))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds: bare endpoint, then broker")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--floor", action="store_true", help="also measure the stack's floor: the body parsed, nothing else done"
    )
    args = parser.parse_args()
    body = request_body()
    print(f"HTTP produce: {RECORDS_PER_REQUEST:,} records of 100 bytes a request, {args.clients} clients, acks=1")
    for round_ in range(1, args.rounds + 1):
        load = os.getloadavg()[0]
        bare = measure_bare(body, args.clients, args.seconds)
        broker = measure_broker(body, args.clients, args.seconds, args.profile)
        ratio = broker.requests_per_second / bare.requests_per_second
        print(f"round {round_} (load {load:.1f} at its start, {os.getloadavg()[0]:.1f} at its end)")
        print("  " + bare.line("bare endpoint "))
        print("  " + broker.line("loglake broker"))
        print(f"  ratio broker/bare: {ratio:.2f} (target >= 0.8)")
        if args.floor:
            floor = measure_bare(body, args.clients, args.seconds, "floor")
            print("  " + floor.line("stack floor   "))
            print(f"  ratio broker/floor: {broker.requests_per_second / floor.requests_per_second:.2f}")


if __name__ == "__main__":
    main()
