"""Records/s of the lake writer (`jobs/delta_sink.py`) on a Spark standalone cluster, with one
worker's executor and with two.

A topic of N event-shaped records (bench/events.py: unique ~100-byte JSON values, 12-byte keys,
6 partitions) is produced into a standalone broker. A standalone master and two one-core
workers (harness/standalone_cluster.py: pyspark's own launcher, loopback) run the job's tasks;
its driver is this process (client mode). Per round, for 1 and then 2 executors
(`spark.cores.max`), a new application: a warm-up run on another topic (executors and their
Python workers started, as in a long-running job), then one timed available-now run of the
sink into a new table. Ratio: 2 executors' records/s over 1 executor's (the baseline, measured
in the same round). Also CPU seconds per kind of process during each timed run (`jvm`: the
driver's JVM, the cluster's daemons and executors; `python workers`: the executors' Python).

    python -m bench.delta_sink_cluster [--records 1000000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench.delta_sink import PARTITIONS, TOPIC, cpu_line, timed
from bench.events import produce_events
from bench.kafka_common import create_topic, loglake_cluster
from harness.standalone_cluster import DAEMON_JAVA_OPTS, EXECUTOR_MEMORY, standalone_cluster


def sink_seconds(master: str, executors: int, bootstrap: str, tmp: str, name: str) -> tuple[float, dict[str, float]]:
    """Warm-up, then one timed run of the sink on `executors` one-core executors."""
    from loglake.spark.lake_writer import LAKE_WRITER_JAVA_OPTIONS
    from loglake.spark.session_settings import loglake_builder
    from pyspark.sql import SparkSession

    from jobs.delta_sink import parse_args, run

    # The JVM options jobs/delta_sink.py runs with (job_session), on this cluster's master.
    spark = (
        loglake_builder(SparkSession.builder.master(master), LAKE_WRITER_JAVA_OPTIONS)
        .appName(f"bench-delta-sink-{executors}")
        .config("spark.cores.max", str(executors))
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", EXECUTOR_MEMORY)
        .config("spark.executor.extraJavaOptions", DAEMON_JAVA_OPTS)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:

        def sink(topic: str, table: str) -> None:
            run(spark, parse_args(["--bootstrap-servers", bootstrap, "--topics", topic, "--table", table]))

        sink("warm-up", f"{tmp}/warm-up-{name}")
        return timed(lambda: sink(TOPIC, f"{tmp}/lake-{name}"))
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    n = args.records
    with (
        loglake_cluster() as bootstrap,
        tempfile.TemporaryDirectory(prefix="bench-lake-cluster-") as tmp,
        standalone_cluster(Path(tmp)) as cluster,
    ):
        create_topic(bootstrap, TOPIC, PARTITIONS)
        print(f"produced {n} records in {produce_events(bootstrap, TOPIC, n, PARTITIONS):.1f} s")
        create_topic(bootstrap, "warm-up", PARTITIONS)
        produce_events(bootstrap, "warm-up", 6000, PARTITIONS)
        for i in range(args.rounds):
            print(f"round {i + 1}:")
            seconds = {}
            for executors in (1, 2):
                s, cpu = sink_seconds(cluster.master_url, executors, bootstrap, tmp, f"{i}-{executors}")
                seconds[executors] = s
                print(f"  {executors} worker(s): {n / s:,.0f} records/s ({s:.2f} s)")
                print(f"    CPU s: {cpu_line(cpu)}")
            print(f"  ratio 2 workers / 1 worker: {seconds[1] / seconds[2]:.2f}")


if __name__ == "__main__":
    main()
