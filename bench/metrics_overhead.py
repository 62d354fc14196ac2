"""What metrics cost the produce path: confluent-kafka produce throughput to a broker with
metrics on vs one with `metrics.enabled=false`, in the same run.

Both brokers run at once; rounds alternate between them (off, on, off, on, ...), so a
change of the machine's load hits both alike. Two producer profiles: large batches (as
bench/kafka_produce.py: few requests, the usual case) and small requests (linger.ms=0,
16 KB batches: many requests per record, where per-request metrics weigh most). Prints
per profile the median records/s of each broker, the ratio on/off (target >= 0.97), and
the brokers' CPU seconds per million records, which move less with the load than
wall-clock throughput does.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

from bench.kafka_common import create_topic, loglake_broker
from bench.kafka_produce import PARTITIONS, produce
from bench.process_cpu import process_cpu_seconds

PROFILES: dict[str, dict[str, object]] = {
    "large batches": {},
    "small requests": {"linger.ms": 0, "batch.size": 16384, "batch.num.messages": 10_000},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=300_000, help="records per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per broker and profile")
    args = parser.parse_args()
    rates: dict[tuple[str, str], list[float]] = defaultdict(list)
    cpu: dict[tuple[str, str], float] = defaultdict(float)
    with loglake_broker() as on, loglake_broker({"metrics.enabled": "false"}) as off:
        brokers = {"off": off, "on": on}
        for profile, config in PROFILES.items():
            for n in range(args.rounds):
                for name, broker in brokers.items():
                    topic = f"bench-metrics-{profile.replace(' ', '-')}-{n}"
                    create_topic(broker.bootstrap, topic, PARTITIONS)
                    before = process_cpu_seconds(broker.proc.pid)  # type: ignore[union-attr]
                    seconds = produce(broker.bootstrap, topic, args.records, "1", **config)
                    cpu[(profile, name)] += process_cpu_seconds(broker.proc.pid) - before  # type: ignore[union-attr]
                    rates[(profile, name)].append(args.records / seconds)
    for profile in PROFILES:
        on_rate, off_rate = (statistics.median(rates[(profile, n)]) for n in ("on", "off"))
        per_million = {n: cpu[(profile, n)] / (args.records * args.rounds / 1e6) for n in ("on", "off")}
        print(
            f"{profile:15}  metrics off: {off_rate:10,.0f} records/s  {per_million['off']:.2f} broker CPU s / M records"
        )
        print(
            f"{profile:15}  metrics on : {on_rate:10,.0f} records/s  {per_million['on']:.2f} broker CPU s / M records"
        )
        print(
            f"{profile:15}  ratio on/off: {on_rate / off_rate:.3f} (target >= 0.97); "
            f"CPU on/off: {per_million['on'] / per_million['off']:.3f}"
        )


if __name__ == "__main__":
    main()
