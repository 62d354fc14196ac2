"""HTTP consumer instances as group members, and `loglake groups`, against a broker process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from harness.process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
JSON_V2 = "application/vnd.kafka.json.v2+json"
GROUP_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "4"}


@pytest.fixture
def broker(tmp_path: Path):
    with BrokerProcess(tmp_path / "logs", config=ROOT / "conf/server.properties", overrides=GROUP_OVERRIDES) as b:
        yield b


def _produce(http: httpx.Client, topic: str, n: int) -> None:
    records = [{"key": f"k{i}", "value": {"i": i}} for i in range(n)]
    http.post(f"/topics/{topic}", json={"records": records}, headers={"content-type": JSON_V2}).raise_for_status()


def _consumer(http: httpx.Client, group: str, name: str) -> str:
    r = http.post(f"/consumers/{group}", json={"name": name, "format": "json", "auto.offset.reset": "earliest"})
    r.raise_for_status()
    base = r.json()["base_uri"].removeprefix(str(http.base_url).rstrip("/"))
    http.post(f"{base}/subscription", json={"topics": ["orders"]}).raise_for_status()
    return base


def _poll(http: httpx.Client, base: str) -> list[dict]:
    r = http.get(f"{base}/records", params={"timeout": 500}, headers={"accept": JSON_V2})
    r.raise_for_status()
    return r.json()


def _assigned(http: httpx.Client, base: str) -> set[int]:
    return {p["partition"] for p in http.get(f"{base}/assignments").json()["partitions"]}


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.2)


def loglake_cli(broker: BrokerProcess, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "loglake.cli", *args, "--bootstrap-http", broker.http_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.timeout(120)
def test_two_http_consumers_share_a_topic_then_one_takes_over(broker: BrokerProcess) -> None:
    with httpx.Client(base_url=broker.http_url, timeout=30) as http:
        http.post("/topics", json={"name": "orders", "partitions": 4}).raise_for_status()
        _produce(http, "orders", 200)
        a = _consumer(http, "billing", "a")
        b = _consumer(http, "billing", "b")
        _wait(lambda: bool(_assigned(http, a)) and bool(_assigned(http, b)))
        assert _assigned(http, a).isdisjoint(_assigned(http, b))
        assert _assigned(http, a) | _assigned(http, b) == {0, 1, 2, 3}

        seen: list[int] = []
        for _ in range(20):
            for base in (a, b):
                seen += [r["value"]["i"] for r in _poll(http, base)]
            if len(seen) >= 200:
                break
        assert sorted(seen) == list(range(200)), "every record exactly once across the group"

        # Commit what was read, then close one instance: the other gets every partition.
        for base in (a, b):
            http.post(f"{base}/offsets").raise_for_status()
        http.delete(a).raise_for_status()
        _wait(lambda: _poll(http, b) == [] and _assigned(http, b) == {0, 1, 2, 3})
        _produce(http, "orders", 10)
        late: list[int] = []
        _wait(lambda: late.extend(r["value"]["i"] for r in _poll(http, b)) or len(late) >= 10)
        assert sorted(late) == list(range(10)), "committed offsets hold across the rebalance: nothing re-read"
        http.post(f"{b}/offsets").raise_for_status()

        described = loglake_cli(broker, "groups", "describe", "--group", "billing")
        assert "Stable" in described and "LOG-END-OFFSET" in described
        lines = [line.split() for line in described.splitlines() if line.startswith("billing ")]
        assert len(lines) == 4 and all(cols[5] == "0" for cols in lines), described  # no lag

        http.delete(b).raise_for_status()
        assert loglake_cli(broker, "groups", "list").split() == ["billing"]
        loglake_cli(broker, "groups", "reset-offsets", "--group", "billing", "--topic", "orders", "--to-earliest")
        described = loglake_cli(broker, "groups", "describe", "--group", "billing")
        lags = sorted(int(line.split()[5]) for line in described.splitlines() if line.startswith("billing "))
        assert sum(lags) == 210, described
        loglake_cli(broker, "groups", "delete", "--group", "billing")
        assert loglake_cli(broker, "groups", "list").split() == []


def test_reset_offsets_of_an_active_group_is_refused(broker: BrokerProcess) -> None:
    with httpx.Client(base_url=broker.http_url, timeout=30) as http:
        http.post("/topics", json={"name": "orders", "partitions": 1}).raise_for_status()
        a = _consumer(http, "busy", "a")
        _wait(lambda: _assigned(http, a) == {0})
        r = http.post("/groups/busy/reset-offsets", json={"topic": "orders", "to": "earliest"})
        assert r.status_code == 409 and "active members" in r.json()["message"]
        assert http.delete("/groups/busy").status_code == 409
        assert http.get("/consumers/busy/instances/nope/records").status_code == 404
