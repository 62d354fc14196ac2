"""Records/s through tiering (`jobs/tier.py` on the lake writer) vs a plain `deltalake` append of the same rows.

A topic with remote.storage.enable and N event-shaped records (bench/events.py: unique
~100-byte JSON values, 12-byte keys, 6 partitions, 4 MB segments) is produced into a
standalone broker whose lake root is a temporary directory. Tiering's side is `tier_topic`
in this process (Spark local[2]): planning from the leaders' tiering state, Spark tasks that
fetch their ranges read_committed, decode them with the aborted flag and write Parquet, one
Delta commit, the tiered offsets told to the leaders. The baseline appends the same rows (the
table's columns, partitioned by partition and date as the lake is), already in Arrow in this
process, with `write_deltalake` in one commit. Ratio: tiering's records/s over the baseline's
(target >= 0.6), after a warm-up run on another topic (Spark's Python workers started
and the writer imported, as in a long-running job); a new topic each round. CPU seconds
per kind of process as in the other benchmarks.

    python -m bench.tier [--records 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from bench.delta_sink import cpu_line, timed
from bench.events import peak_rss, produce_events
from bench.kafka_common import loglake_broker

PARTITIONS = 6
TOPIC = "tier-bench"
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(4 << 20), "retention.ms": "-1"}


def tierable_rows(cluster, topic: str, layout, read) -> pa.Table:
    """What a tier run copies now, as the table's rows, decoded in this process (untimed)."""
    from loglake.spark.offset_ranges import OffsetRange
    from loglake.spark.range_reader import read_range

    from jobs.tier import leaders_http, tiering_state

    batches = []
    for partition, http in leaders_http(cluster, topic).items():
        end = tiering_state(cluster, http, topic, partition)["tierable_end"]
        for decoded in read_range(read, OffsetRange(topic, partition, 0, end), flag_aborted=True):
            batches.append(layout.rows(decoded.batch))
    return pa.concat_tables(batches)


def tier_round(spark, cluster, bootstrap: str, table: Path, plain: Path, records: int) -> None:
    """One round on a topic named as its table: the baseline's append, then tiering's run."""
    from loglake.spark.options import parse_read_options

    from jobs.tier import tier_table, tier_topic

    topic = table.name
    read = parse_read_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "includeHeaders": "true"}, streaming=False
    )
    layout = tier_table(str(table)).layout
    rows = tierable_rows(cluster, topic, layout, read)
    baseline_s, baseline_cpu = timed(
        lambda: write_deltalake(str(plain), rows, mode="append", partition_by=list(layout.partition_by))
    )
    tiered: list[int] = []
    with peak_rss() as peaks:
        tier_s, tier_cpu = timed(lambda: tiered.append(tier_topic(spark, cluster, topic, str(table))))
    n = rows.num_rows
    assert tiered[0] == n, (tiered, n)
    print(f"  {n} of {records} records tierable (rolled segments)")
    print(f"  plain deltalake append of Arrow rows: {n / baseline_s:,.0f} records/s ({baseline_s:.2f} s)")
    print(f"    CPU s: {cpu_line(baseline_cpu)}")
    print(f"  tiering (fetch + decode + aborted flag + Parquet + commit): {n / tier_s:,.0f} records/s ({tier_s:.2f} s)")
    print(f"    CPU s: {cpu_line(tier_cpu)}")
    print(
        f"    peak RSS: driver {peaks['driver'] / 2**20:.0f} MiB, largest Python worker {peaks['worker'] / 2**20:.0f} MiB"
    )
    print(f"  ratio tiering / plain append: {baseline_s / tier_s:.2f} (target >= 0.6)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from loglake.spark.job_cluster import ClusterAccess
    from loglake.spark.lake_writer import LAKE_WRITER_JAVA_OPTIONS
    from loglake.spark.session_settings import loglake_builder
    from pyspark.sql import SparkSession

    from jobs.tier import tier_topic

    # One topic a round: a tier run copies what is tierable once.
    topics = [f"{TOPIC}-{i + 1}" for i in range(args.rounds)]
    with tempfile.TemporaryDirectory(prefix="bench-tier-") as tmp:
        lake = Path(tmp) / "lake"
        with loglake_broker({"rsm.config.lake.root": str(lake)}) as broker:
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            # The warm-up topic's segments (1 MiB: a producer batch, at most 1,000,000 bytes,
            # fits) roll, so that its run starts Spark's Python workers.
            for name, config in [("warm-up", TIERED | {"segment.bytes": str(1 << 20)})] + [(t, TIERED) for t in topics]:
                admin.create_topics([NewTopic(name, PARTITIONS, 1, config=config)])[name].result(30)
            produce_events(broker.bootstrap, "warm-up", 120_000, PARTITIONS)
            for topic in topics:
                produce_events(broker.bootstrap, topic, args.records, PARTITIONS)
            spark = (
                loglake_builder(SparkSession.builder.master("local[2]"), LAKE_WRITER_JAVA_OPTIONS)
                .appName("bench-tier")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            with ClusterAccess(broker.bootstrap).connect("bench-tier") as cluster:
                warm_s, warm_cpu = timed(lambda: tier_topic(spark, cluster, "warm-up", str(lake / "warm-up")))
                assert warm_cpu["python workers"] > 0, "the warm-up run started no Python worker"
                print(f"warm-up run (Spark's Python workers start): {warm_s:.2f} s, CPU s: {cpu_line(warm_cpu)}")
                for i, topic in enumerate(topics):
                    print(f"round {i + 1}:")
                    tier_round(spark, cluster, broker.bootstrap, lake / topic, Path(tmp) / f"plain-{i}", args.records)
            spark.stop()


if __name__ == "__main__":
    main()
