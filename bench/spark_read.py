"""Spark reading a topic with the loglake source vs Spark reading the same rows from Parquet.

A topic of N records (100-byte values, 12-byte keys, 6 partitions) is produced with
confluent-kafka into a standalone broker; Spark (local[2]) then runs
`groupBy("partition")` with a count and a sum of value lengths over
`spark.read.format("loglake")`, and the same query over a Parquet copy of the same rows
(same columns) written in the same run. The ratio is Parquet's time over loglake's
(records/s ratio; target ≥ 0.25).

Where the time goes: the CPU seconds each kind of process used during each query (Spark's
JVM, its Python workers, the broker; read from /proc, so Linux only), Fetch (wall, the
broker's part included) and decode (CPU) measured in this process on one partition, and the
same query over a Python data source that yields ready-made Arrow batches of the same shape
(what Spark's Python Data Source API costs with no fetch and no decode).

    python -m bench.spark_read [--records 5000000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from collections import Counter
from dataclasses import dataclass

from confluent_kafka import Producer

from bench.kafka_common import create_topic, loglake_cluster
from bench.process_cpu import cpu_by_kind

PARTITIONS = 6
VALUE_SIZE = 100
TOPIC = "spark-read-bench"


def produce(bootstrap: str, records: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "1",
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    pool = os.urandom(VALUE_SIZE * 1024)
    started = time.perf_counter()
    for i in range(records):
        at = (i % 1000) * VALUE_SIZE
        while True:
            try:
                producer.produce(TOPIC, value=pool[at : at + VALUE_SIZE], key=b"key-%08d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - started


@dataclass
class Timing:
    seconds: float
    cpu: Counter[str]  # CPU seconds by process kind (bench/process_cpu.py)
    rows: list


def timed_query(df) -> Timing:
    from pyspark.sql import functions as F

    cpu_before = cpu_by_kind()
    started = time.perf_counter()
    rows = df.groupBy("partition").agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("bytes")).collect()
    seconds = time.perf_counter() - started
    cpu = cpu_by_kind()
    cpu.subtract(cpu_before)
    return Timing(seconds, cpu, sorted(tuple(r) for r in rows))


def cpu_line(cpu: Counter[str]) -> str:
    kinds = ("jvm", "python workers", "broker", "driver")
    return f"CPU {sum(cpu[k] for k in kinds):.2f} s: " + ", ".join(f"{k} {cpu[k]:.2f}" for k in kinds)


def handoff_floor(spark, records: int) -> Timing:
    """Seconds of the same query over a Python data source whose tasks yield ready-made
    Arrow batches of the same shape: what Spark's Python Data Source API costs by itself
    (the batches cross to the JVM, where they become rows), with no fetch and no decode."""
    import pyarrow as pa
    from loglake.spark.arrow_decoder import arrow_schema
    from loglake.spark.source import kafka_schema
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    rows_per_batch = 32_768

    # Defined here so that cloudpickle ships them by value to the Python workers.
    class ReadyBatches(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ready_batches"

        def schema(self):
            return kafka_schema(False)

        def reader(self, schema):
            return ReadyBatchesReader()

    class ReadyBatchesReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(p) for p in range(PARTITIONS)]

        def read(self, partition):
            import numpy as np

            n = rows_per_batch
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array([b"key-00000000"] * n, pa.binary()),
                    pa.array([bytes(VALUE_SIZE)] * n, pa.binary()),
                    pa.repeat(pa.scalar(TOPIC), n),
                    pa.repeat(pa.scalar(partition.value, pa.int32()), n),
                    pa.array(np.arange(n), pa.int64()),
                    pa.array(np.arange(n) * 1000, pa.timestamp("us", tz="UTC")),
                    pa.repeat(pa.scalar(0, pa.int32()), n),
                ],
                schema=arrow_schema(False),
            )
            for _ in range(records // PARTITIONS // n):
                yield batch

    spark.dataSource.register(ReadyBatches)
    timing = timed_query(spark.read.format("ready_batches").load())
    scale = records / (records // PARTITIONS // rows_per_batch * rows_per_batch * PARTITIONS)
    timing.seconds *= scale
    for kind in timing.cpu:
        timing.cpu[kind] *= scale
    return timing


def where_the_time_goes(bootstrap: str) -> dict[str, float]:
    """Seconds per million records for fetching (wall: the broker's part included) and for
    decoding (CPU), over partition 0."""
    from loglake.spark.arrow_decoder import decode_fetch
    from loglake.spark.options import DEFAULT_MAX_PARTITION_FETCH_BYTES
    from loglake.spark.protocol_client import LATEST_TIMESTAMP, ProtocolClient, TopicPartition

    tp = TopicPartition(TOPIC, 0)
    fetch_s = decode_s = 0.0
    records = 0
    with ProtocolClient(bootstrap) as client:
        client.metadata([TOPIC])
        address = client.leader_address(tp)
        assert address is not None
        end = client.list_offsets_from(address, {tp: LATEST_TIMESTAMP})[tp][1]
        offset = 0
        while offset < end:
            t0 = time.perf_counter()
            fetched = client.fetch_from(address, tp, offset, DEFAULT_MAX_PARTITION_FETCH_BYTES)
            t1 = time.perf_counter()
            c1 = time.process_time()  # CPU time: the decode is all ours, the machine may be busy
            decoded = decode_fetch(fetched.records, tp.topic, tp.partition, offset, end, False)
            decode_s += time.process_time() - c1
            fetch_s += t1 - t0
            records += decoded.batch.num_rows
            offset = decoded.next_offset
    return {"fetch_s_per_M": fetch_s / records * 1e6, "decode_s_per_M": decode_s / records * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument(
        "--rounds", type=int, default=3, help="query rounds of each side, best kept (the JVM warms up over the first)"
    )
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import loglake.spark
    from pyspark.sql import SparkSession

    with loglake_cluster() as bootstrap, tempfile.TemporaryDirectory(prefix="spark-read-bench-") as tmp:
        create_topic(bootstrap, TOPIC, PARTITIONS)
        produce_s = produce(bootstrap, args.records)
        print(f"produced {args.records:,} records in {produce_s:.1f} s")
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("WARN")
        loglake.spark.register(spark)
        topic_df = (
            spark.read.format("loglake").option("kafka.bootstrap.servers", bootstrap).option("subscribe", TOPIC).load()
        )
        parquet = Path(tmp) / "rows.parquet"
        topic_df.write.parquet(str(parquet))
        parquet_df = spark.read.parquet(str(parquet))

        loglake_t, parquet_t = [], []
        for _ in range(args.rounds):
            loglake_t.append(timed_query(topic_df))
            parquet_t.append(timed_query(parquet_df))
            assert loglake_t[-1].rows == parquet_t[-1].rows, (loglake_t[-1].rows, parquet_t[-1].rows)
        assert sum(r[1] for r in loglake_t[-1].rows) == args.records
        breakdown = where_the_time_goes(bootstrap)
        handoff = min((handoff_floor(spark, args.records) for _ in range(args.rounds)), key=lambda t: t.seconds)
        spark.stop()
        shutil.rmtree(parquet, ignore_errors=True)

    best_loglake = min(loglake_t, key=lambda t: t.seconds)
    best_parquet = min(parquet_t, key=lambda t: t.seconds)
    for name, timings, best in (("loglake source", loglake_t, best_loglake), ("parquet", parquet_t, best_parquet)):
        print(
            f"{name + ':':15s} {args.records / best.seconds:,.0f} records/s "
            f"({', '.join(f'{t.seconds:.2f}' for t in timings)} s); best round {cpu_line(best.cpu)}"
        )
    print(f"ratio (loglake / parquet records/s): {best_parquet.seconds / best_loglake.seconds:.2f}  (target >= 0.25)")
    fetch = breakdown["fetch_s_per_M"] * args.records / 1e6
    decode = breakdown["decode_s_per_M"] * args.records / 1e6
    print(
        f"one process, all {args.records:,} records: fetch {fetch:.2f} s, decode {decode:.2f} s "
        f"(per million: fetch {breakdown['fetch_s_per_M']:.3f} s, decode {breakdown['decode_s_per_M']:.3f} s); "
        f"Spark's two workers share this: ~{(fetch + decode) / 2:.2f} s of the {best_loglake.seconds:.2f} s"
    )
    print(
        f"the same query over ready-made Arrow batches (Spark's Python data source alone, no fetch, no decode): "
        f"{handoff.seconds:.2f} s, ratio {best_parquet.seconds / handoff.seconds:.2f} against Parquet; "
        f"{cpu_line(handoff.cpu)}"
    )


if __name__ == "__main__":
    main()
