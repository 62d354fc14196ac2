"""What metrics cost the produce path: confluent-kafka produce throughput to a broker with
metrics on vs one with `metrics.enabled=false`, in the same run.

Both brokers run at once; rounds alternate between them (off, on, off, on, ...), so a
change of the machine's load hits both alike. Two producer profiles: large batches (as
bench/kafka_produce.py: few requests, the usual case) and small requests (linger.ms=0,
16 KB batches: many requests per record, where per-request metrics weigh most). Prints
per profile the median records/s of each broker, the median of the rounds' on/off ratios
(target >= 0.97), and
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
    parser.add_argument("--rounds", type=int, default=7, help="rounds per broker and profile")
    args = parser.parse_args()
    rates: dict[tuple[str, str], list[float]] = defaultdict(list)
    cpu: dict[tuple[str, str], float] = defaultdict(float)
    with loglake_broker() as on, loglake_broker({"metrics.enabled": "false"}) as off:
        for profile, config in PROFILES.items():
            for n in range(args.rounds):
                # Which broker goes first alternates, so that neither always follows the other.
                order = (("off", off), ("on", on)) if n % 2 == 0 else (("on", on), ("off", off))
                for name, broker in order:
                    topic = f"bench-metrics-{profile.replace(' ', '-')}-{n}"
                    create_topic(broker.bootstrap, topic, PARTITIONS)
                    before = process_cpu_seconds(broker.proc.pid)  # type: ignore[union-attr]
                    seconds = produce(broker.bootstrap, topic, args.records, "1", **config)
                    cpu[(profile, name)] += process_cpu_seconds(broker.proc.pid) - before  # type: ignore[union-attr]
                    rates[(profile, name)].append(args.records / seconds)
    for profile in PROFILES:
        on_rates, off_rates = rates[(profile, "on")], rates[(profile, "off")]
        # Each round's two runs were back to back: their ratio sees the same machine load.
        paired = statistics.median(a / b for a, b in zip(on_rates, off_rates))
        per_million = {n: cpu[(profile, n)] / (args.records * args.rounds / 1e6) for n in ("on", "off")}
        for name, values in (("off", off_rates), ("on ", on_rates)):
            print(
                f"{profile:15}  metrics {name}: {statistics.median(values):10,.0f} records/s (median), "
                f"{per_million[name.strip()]:.2f} broker CPU s / M records"
            )
        print(
            f"{profile:15}  ratio on/off: {paired:.3f} (median of {args.rounds} paired rounds; target >= 0.97); "
            f"broker CPU on/off: {per_million['on'] / per_million['off']:.3f}"
        )


if __name__ == "__main__":
    main()
