"""Produce throughput while retention deletes segments, against the same produce without
retention, on one broker process in the same run.

Both topics get the same records (100-byte values, confluent-kafka, acks=1, 6
partitions, 4 MB segments); one has retention.bytes=8 MB per partition, so once a
partition holds more, the retention task (every 200 ms) deletes its oldest segments
while the producer runs (file.delete.delay.ms=1000). The two runs alternate, twice
each; the best of each is compared. Prints both rates, the segments the retained topic
lost (its log start offsets) and the ratio retention / none (target >= 0.9).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_common import ROOT
from bench.kafka_produce import VALUE_BYTES, produce
from harness.process import BrokerProcess

PARTITIONS = 6
SEGMENT_BYTES = 4 * 1024 * 1024
RETENTION_BYTES = 8 * 1024 * 1024


def create(bootstrap: str, name: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1, config=config)])[name].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name} did not appear")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_500_000)
    args = parser.parse_args()
    overrides = {"log.retention.check.interval.ms": "200", "file.delete.delay.ms": "1000"}
    rates: dict[str, list[float]] = {"none": [], "retention": []}
    with tempfile.TemporaryDirectory(prefix="loglake-bench-") as tmp:
        logs = Path(tmp) / "logs"
        with BrokerProcess(logs, config=ROOT / "conf/server.properties", overrides=overrides) as broker:
            for round_ in range(2):
                for mode in ("none", "retention"):
                    topic = f"bench-retention-{mode}-{round_}"
                    config = {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
                    config["retention.bytes"] = str(RETENTION_BYTES) if mode == "retention" else "-1"
                    create(broker.bootstrap, topic, config)
                    rates[mode].append(args.records / produce(broker.bootstrap, topic, args.records, "1"))
                    if mode == "retention":
                        partitions = httpx.get(f"{broker.http_url}/topics/{topic}", timeout=10).json()["partitions"]
                        starts = [p["log_start_offset"] for p in partitions]
                        sizes = [p["size"] for p in partitions]
                        print(f"  retained topic: log start offsets {starts}, sizes {sizes}")
                        if not any(starts):
                            raise RuntimeError("retention deleted nothing while producing; the run measures nothing")
    mb = VALUE_BYTES / 1e6
    none, retained = max(rates["none"]), max(rates["retention"])
    print(f"without retention: {none:12,.0f} records/s {none * mb:7.1f} MB/s  (runs {rates['none']})")
    print(f"with retention   : {retained:12,.0f} records/s {retained * mb:7.1f} MB/s  (runs {rates['retention']})")
    print(f"ratio retention/none: {retained / none:.2f} (target >= 0.9)")


if __name__ == "__main__":
    main()
