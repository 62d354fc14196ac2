"""What TLS and SASL cost: confluent-kafka produce and consume throughput over SASL_SSL
(SCRAM-SHA-512) as a ratio against PLAINTEXT, on one broker with both listeners, in the
same run (target >= 0.6; Kafka's own TLS overhead is commonly quoted at 20-30 %).

Rounds alternate the listener that goes first; the ratio of each round's pair is taken
and the median printed, so the machine's changing load hits both sides alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.kafka_common import ROOT, create_topic
from bench.kafka_consume import consume
from bench.kafka_produce import PARTITIONS, produce
from bench.pki import make_pki
from harness.process import BrokerProcess, free_port

USER, PASSWORD, MECHANISM = "bench", "bench-secret", "SCRAM-SHA-512"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=300_000, help="records per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="loglake-bench-security-") as tmp:
        pki = make_pki(Path(tmp) / "pki")
        secure_port = free_port()
        broker = BrokerProcess(Path(tmp) / "logs", config=ROOT / "conf/server.properties")
        broker.overrides.update(
            {
                "listeners": broker.overrides["listeners"] + f",SASL_SSL://127.0.0.1:{secure_port}",
                "ssl.keystore.location": str(pki.server),
                "ssl.truststore.location": str(pki.ca),
            }
        )
        with broker:
            subprocess.run(
                [sys.executable, "-m", "loglake.cli", "users", "add", "--user", USER, "--password", PASSWORD,
                 "--mechanism", MECHANISM, "--bootstrap-http", broker.http_url],
                check=True, capture_output=True,
            )  # fmt: skip
            secure = {
                "security.protocol": "SASL_SSL",
                "sasl.mechanisms": MECHANISM,
                "sasl.username": USER,
                "sasl.password": PASSWORD,
                "ssl.ca.location": str(pki.ca),
            }
            sides = {
                "PLAINTEXT": (broker.bootstrap, {}),
                "SASL_SSL": (f"127.0.0.1:{secure_port}", secure),
            }
            rates: dict[tuple[str, str], list[float]] = {
                (op, side): [] for op in ("produce", "consume") for side in sides
            }
            for n in range(args.rounds):
                order = list(sides) if n % 2 == 0 else list(reversed(sides))
                for side in order:
                    bootstrap, config = sides[side]
                    topic = f"bench-security-{side}-{n}"
                    create_topic(broker.bootstrap, topic, PARTITIONS)
                    seconds = produce(bootstrap, topic, args.records, "1", **config)
                    rates[("produce", side)].append(args.records / seconds)
                    seconds = consume(bootstrap, topic, PARTITIONS, args.records, **config)
                    rates[("consume", side)].append(args.records / seconds)
    for op in ("produce", "consume"):
        plain, tls = rates[(op, "PLAINTEXT")], rates[(op, "SASL_SSL")]
        ratio = statistics.median(t / p for t, p in zip(tls, plain))
        print(
            f"{op:8} PLAINTEXT {statistics.median(plain):10,.0f} records/s, SASL_SSL {statistics.median(tls):10,.0f} "
            f"records/s: ratio {ratio:.2f} (median of {args.rounds} paired rounds; target >= 0.6)"
        )


if __name__ == "__main__":
    main()
