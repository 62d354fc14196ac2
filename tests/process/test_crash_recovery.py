"""The broker as a real process: kill -9, torn tails, restarts. No acknowledged record is lost."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from harness.process import BrokerProcess

JSON_V2 = "application/vnd.kafka.json.v2+json"


def produce(url: str, topic: str, values: list, partition: int = 0) -> list[int]:
    r = httpx.post(
        f"{url}/topics/{topic}/partitions/{partition}",
        json={"records": [{"value": v} for v in values]},
        headers={"content-type": JSON_V2},
        timeout=30,
    )
    r.raise_for_status()
    return [o["offset"] for o in r.json()["offsets"]]


def read_all(url: str, topic: str, partition: int = 0) -> list[tuple[int, object]]:
    out, offset = [], 0
    while True:
        r = httpx.get(
            f"{url}/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "max_bytes": 1 << 20},
            headers={"accept": JSON_V2},
            timeout=30,
        )
        r.raise_for_status()
        got = r.json()
        if not got:
            return out
        out += [(g["offset"], g["value"]) for g in got]
        offset = got[-1]["offset"] + 1


def create_topic(url: str, name: str, **configs: str) -> None:
    httpx.post(f"{url}/topics", json={"name": name, "partitions": 1, "configs": configs}, timeout=30).raise_for_status()


def test_clean_shutdown_writes_checkpoints_and_restarts(broker_process: BrokerProcess) -> None:
    broker_process.start()
    create_topic(broker_process.http_url, "c")
    produce(broker_process.http_url, "c", list(range(10)))
    assert broker_process.stop() == 0
    log_dir = broker_process.log_dir
    assert (log_dir / ".kafka_cleanshutdown").exists()
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint", "log-start-offset-checkpoint"):
        assert (log_dir / name).exists(), name
    assert "c 0 10" in (log_dir / "replication-offset-checkpoint").read_text()
    broker_process.start()
    assert [v for _, v in read_all(broker_process.http_url, "c")] == list(range(10))
    assert produce(broker_process.http_url, "c", ["next"]) == [10]


@pytest.mark.slow
def test_kill_9_during_writes_loses_no_acknowledged_record(broker_process: BrokerProcess) -> None:
    broker_process.start()
    create_topic(broker_process.http_url, "k", **{"segment.bytes": "65536"})
    acked: dict[int, object] = {}
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            values = [{"i": i + j, "pad": "p" * 100} for j in range(50)]
            try:
                offsets = produce(broker_process.http_url, "k", values)
            except httpx.HTTPError:
                return
            acked.update(zip(offsets, values))
            i += 50

    for round_ in range(3):
        t = threading.Thread(target=writer)
        stop.clear()
        t.start()
        time.sleep(1.0)
        broker_process.kill()
        stop.set()
        t.join()
        broker_process.start()
        stored = dict(read_all(broker_process.http_url, "k"))
        missing = [o for o in acked if stored.get(o) != acked[o]]
        assert not missing, f"round {round_}: {len(missing)} acknowledged records lost or changed"
        assert sorted(stored) == list(range(len(stored))), "offsets must stay contiguous"
    assert len(acked) > 100


def _active_segment(log_dir: Path, topic_dir: str) -> Path:
    return sorted((log_dir / topic_dir).glob("*.log"))[-1]


@pytest.mark.parametrize("tail", [b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01\x00garbage", b"\xff" * 7])
def test_torn_tail_is_truncated_on_restart(broker_process: BrokerProcess, tail: bytes) -> None:
    broker_process.start()
    create_topic(broker_process.http_url, "torn")
    produce(broker_process.http_url, "torn", list(range(20)))
    produce(broker_process.http_url, "torn", list(range(20, 25)))
    broker_process.kill()
    segment = _active_segment(broker_process.log_dir, "torn-0")
    good_size = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(tail)
    # Also lose the indexes: they must be rebuilt from the log.
    for index in segment.parent.glob("*index"):
        index.write_bytes(b"\x01" * 5)
    broker_process.start()
    assert [v for _, v in read_all(broker_process.http_url, "torn")] == list(range(25))
    assert segment.stat().st_size == good_size
    assert produce(broker_process.http_url, "torn", ["after"]) == [25]


def test_half_written_last_batch_is_dropped_and_earlier_batches_kept(broker_process: BrokerProcess) -> None:
    broker_process.start()
    create_topic(broker_process.http_url, "half")
    produce(broker_process.http_url, "half", ["a", "b"])
    produce(broker_process.http_url, "half", ["c" * 500])
    broker_process.kill()
    segment = _active_segment(broker_process.log_dir, "half-0")
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - 200])  # cut the last batch in the middle
    broker_process.start()
    assert read_all(broker_process.http_url, "half") == [(0, "a"), (1, "b")]
    assert produce(broker_process.http_url, "half", ["d"]) == [2]
