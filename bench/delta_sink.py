"""Records/s through the lake writer (`jobs/delta_sink.py`) vs a plain `deltalake` append of the same rows.

A topic of N event-shaped records (bench/events.py: unique ~100-byte JSON values, 12-byte keys,
6 partitions) is produced into a standalone broker. The lake writer's side is one
available-now run of the sink job in this process (Spark local[2]): planning from the table,
Spark tasks that fetch and decode their ranges and write Parquet, one Delta commit. The
baseline writes the same rows (the table's columns), already in Arrow in this process, with
`write_deltalake(mode="append")` in one commit. Ratio: the lake writer's records/s over the
baseline's (target >= 0.6), after a warm-up run on another topic (Spark's Python workers
started and the writer imported, as in a long-running job). Also: CPU seconds per kind of process during each, and the peak RSS
of the driver and of the largest Python worker during the lake writer's run.

    python -m bench.delta_sink [--records 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Mapping

import pyarrow as pa
from deltalake import write_deltalake

from bench.events import peak_rss, produce_events
from bench.kafka_common import create_topic, loglake_cluster
from bench.process_cpu import cpu_by_kind, jit_seconds

PARTITIONS = 6
TOPIC = "lake-bench"


def cpu_line(cpu: Mapping[str, float]) -> str:
    return ", ".join(f"{kind} {seconds:.1f}" for kind, seconds in sorted(cpu.items()) if seconds >= 0.05)


def arrow_rows(bootstrap: str, topic: str, layout, read) -> pa.Table:
    """The topic's records as the table's rows, decoded in this process (untimed)."""
    from loglake.spark.offset_ranges import OffsetRange, connect, list_offsets
    from loglake.spark.protocol_client import LATEST_TIMESTAMP, TopicPartition
    from loglake.spark.range_reader import read_range

    with connect(read) as client:
        ends = list_offsets(client, {TopicPartition(topic, p): LATEST_TIMESTAMP for p in range(PARTITIONS)})
    batches = [
        layout.rows(decoded.batch)
        for tp, end in sorted(ends.items())
        for decoded in read_range(read, OffsetRange(tp.topic, tp.partition, 0, end))
    ]
    return pa.concat_tables(batches)


def timed(run) -> tuple[float, dict[str, float]]:
    """Seconds `run` took and the CPU seconds of each kind of process meanwhile (`jvm` with
    `of which JVM JIT`: its compiler threads)."""
    before, jit_before = cpu_by_kind(), jit_seconds()
    started = time.perf_counter()
    run()
    elapsed = time.perf_counter() - started
    cpu: dict[str, float] = dict(cpu_by_kind() - before)
    cpu["of which JVM JIT"] = jit_seconds() - jit_before
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from loglake.spark.lake_writer import LAKE_WRITER_JAVA_OPTIONS
    from loglake.spark.session_settings import loglake_builder
    from pyspark.sql import SparkSession

    from jobs.delta_sink import parse_args, read_options, run, table_layout

    with loglake_cluster() as bootstrap, tempfile.TemporaryDirectory(prefix="bench-lake-") as tmp:
        create_topic(bootstrap, TOPIC, PARTITIONS)
        produced_s = produce_events(bootstrap, TOPIC, args.records, PARTITIONS)
        print(f"produced {args.records} records in {produced_s:.1f} s")
        spark = (
            loglake_builder(SparkSession.builder.master("local[2]"), LAKE_WRITER_JAVA_OPTIONS)
            .appName("bench-delta-sink")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        # Warm-up: Spark's Python workers start and import the writer once, as in a long-running job.
        create_topic(bootstrap, "warm-up", PARTITIONS)
        produce_events(bootstrap, "warm-up", 6000, PARTITIONS)
        run(spark, parse_args(["--bootstrap-servers", bootstrap, "--topics", "warm-up", "--table", f"{tmp}/warm-up"]))

        def job_args(table: str):
            return parse_args(["--bootstrap-servers", bootstrap, "--topics", TOPIC, "--table", table])

        layout, read = table_layout(job_args("-")), read_options(job_args("-"))
        rows = arrow_rows(bootstrap, TOPIC, layout, read)
        assert rows.num_rows == args.records, rows.num_rows
        n = args.records
        for i in range(args.rounds):
            baseline_s, baseline_cpu = timed(lambda i=i: write_deltalake(f"{tmp}/plain-{i}", rows, mode="append"))
            with peak_rss() as peaks:
                lake_s, lake_cpu = timed(lambda i=i: run(spark, job_args(f"{tmp}/lake-{i}")))
            print(f"round {i + 1}:")
            print(f"  plain deltalake append of Arrow rows: {n / baseline_s:,.0f} records/s ({baseline_s:.2f} s)")
            print(f"    CPU s: {cpu_line(baseline_cpu)}")
            print(f"  lake writer (fetch + decode + Parquet + commit): {n / lake_s:,.0f} records/s ({lake_s:.2f} s)")
            print(f"    CPU s: {cpu_line(lake_cpu)}")
            print(
                f"    peak RSS: driver {peaks['driver'] / 2**20:.0f} MiB, largest Python worker {peaks['worker'] / 2**20:.0f} MiB"
            )
            print(f"  ratio lake writer / plain append: {baseline_s / lake_s:.2f} (target >= 0.6)")
        spark.stop()


if __name__ == "__main__":
    main()
