"""Spark reading a topic with the loglake source vs Spark reading the same rows from Parquet.

A topic of N records shaped like real events (unique ~100-byte JSON values: a unique id, one
of 100,000 users, a timestamp, an amount; 12-byte keys; 6 partitions) is produced with
confluent-kafka into a standalone broker; the Parquet baseline is the same rows written by
Spark with default settings. Spark (local[2]) runs `groupBy("partition")` with a count and a
sum of value lengths over:

- `spark.read.format("loglake")` with the Kafka source's schema (target >= 0.5 x Parquet),
- the same with a two-column schema, `partition int, value binary` (target >= 0.6),
- `loglake.spark.read_topic` once 80 % of every partition is tiered into the topic's Delta
  table (the table tiering writes, made here directly from the topic's records) (>= 0.7).

Ratios are Parquet's seconds over the other side's (records/s ratio), best of `--rounds`, each
side against the Parquet rounds run alternately with it: the JVM keeps warming over the whole run
(its JIT still compiles after the first rounds), so Parquet rounds run later, alongside
`read_topic`, are faster for that alone and are not the untiered reads' baseline.

Where the time goes: the CPU seconds each kind of process used during each query (Spark's
JVM, its Python workers, the broker; read from /proc, so Linux only), Fetch (wall, the
broker's part included) and decode (CPU) measured in this process on one partition, and the
same query over a Python data source that yields ready-made Arrow batches of the same shape
(what Spark's Python Data Source API costs with no fetch and no decode), with both schemas.

    python -m bench.spark_read [--records 5000000]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_common import loglake_cluster
from bench.process_cpu import cpu_by_kind

PARTITIONS = 6
USERS = 100_000
TOPIC = "spark-read-bench"
TIERED_SHARE = 0.8
TWO_COLUMNS = "partition int, value binary"
TARGETS = {"kafka schema": 0.5, "two columns": 0.6, "read_topic, 80 % tiered": 0.7}
# The Parquet rounds each side alternated with.
BASELINE = {"kafka schema": "parquet", "two columns": "parquet", "read_topic, 80 % tiered": "parquet, with read_topic"}


def event(i: int, rng: random.Random) -> bytes:
    """One event's JSON (~100 bytes): a unique id, one of USERS users, a timestamp, an amount."""
    return b'{"id":"%s","user":"user-%05d","ts":%d,"amount":%d.%02d,"currency":"EUR"}' % (
        rng.randbytes(12).hex().encode(),
        rng.randrange(USERS),
        1_764_000_000_000 + i * 7,
        rng.randrange(10_000),
        rng.randrange(100),
    )


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
    rng = random.Random(21)
    started = time.perf_counter()
    for i in range(records):
        value = event(i, rng)
        while True:
            try:
                producer.produce(TOPIC, value=value, key=b"key-%08d" % i, partition=i % PARTITIONS)
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


def handoff_floor(spark, records: int, two_columns: bool = False) -> Timing:
    """Seconds of the same query over a Python data source whose tasks yield ready-made
    Arrow batches of the same shape (the Kafka schema's, or with `two_columns` those of
    TWO_COLUMNS): what Spark's Python Data Source API costs by itself (the batches cross to
    the JVM, where they become rows), with no fetch and no decode."""
    import pyarrow as pa
    from loglake.spark.kafka_columns import arrow_schema, default_columns
    from loglake.spark.source import kafka_schema
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    rows_per_batch = 32_768

    # Defined here so that cloudpickle ships them by value to the Python workers.
    class ReadyBatches(DataSource):
        @classmethod
        def name(cls) -> str:
            return "ready_batches"

        def schema(self):
            return TWO_COLUMNS if two_columns else kafka_schema(False)

        def reader(self, schema):
            return ReadyBatchesReader()

    class ReadyBatchesReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(p) for p in range(PARTITIONS)]

        def read(self, partition):
            import numpy as np

            n = rows_per_batch
            if two_columns:
                batch = pa.RecordBatch.from_arrays(
                    [pa.repeat(pa.scalar(partition.value, pa.int32()), n), pa.array([bytes(100)] * n, pa.binary())],
                    names=["partition", "value"],
                )
                for _ in range(records // PARTITIONS // n):
                    yield batch
                return
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array([b"key-00000000"] * n, pa.binary()),
                    pa.array([bytes(100)] * n, pa.binary()),
                    pa.repeat(pa.scalar(TOPIC), n),
                    pa.repeat(pa.scalar(partition.value, pa.int32()), n),
                    pa.array(np.arange(n), pa.int64()),
                    pa.array(np.arange(n) * 1000, pa.timestamp("us", tz="UTC")),
                    pa.repeat(pa.scalar(0, pa.int32()), n),
                ],
                schema=arrow_schema(default_columns(False)),
            )
            for _ in range(records // PARTITIONS // n):
                yield batch

    spark.dataSource.register(ReadyBatches)
    timing = timed_query(spark.read.format("ready_batches").load())
    scale = records / (records // PARTITIONS // rows_per_batch * rows_per_batch * PARTITIONS)
    timing.seconds *= scale
    for kind in timing.cpu:
        timing.cpu[kind] *= scale  # type: ignore[assignment]  # the Counter holds float seconds; typeshed types counts as int
    return timing


def where_the_time_goes(bootstrap: str) -> dict[str, float]:
    """Seconds per million records for fetching (wall: the broker's part included) and for
    decoding (CPU) the Kafka schema's columns and the two columns, over partition 0."""
    from loglake.spark.arrow_decoder import decode_fetch
    from loglake.spark.kafka_columns import default_columns
    from loglake.spark.options import DEFAULT_MAX_PARTITION_FETCH_BYTES
    from loglake.spark.protocol_client import LATEST_TIMESTAMP, ProtocolClient, TopicPartition

    tp = TopicPartition(TOPIC, 0)
    fetch_s = decode_s = decode_two_s = 0.0
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
            decoded = decode_fetch(fetched.records, tp.topic, tp.partition, offset, end, default_columns(False))
            c2 = time.process_time()
            decode_fetch(fetched.records, tp.topic, tp.partition, offset, end, ("partition", "value"))
            decode_two_s += time.process_time() - c2
            decode_s += c2 - c1
            fetch_s += t1 - t0
            records += decoded.batch.num_rows
            offset = decoded.next_offset
    return {
        "fetch_s_per_M": fetch_s / records * 1e6,
        "decode_s_per_M": decode_s / records * 1e6,
        "decode_two_s_per_M": decode_two_s / records * 1e6,
    }


def tier(bootstrap: str, lake_root: str) -> int:
    """The first TIERED_SHARE of every partition into the topic's Delta table, laid out as
    jobs/tier.py lays it out (the source's columns with headers, `aborted`, `date`; partitioned
    by partition and date; each partition's end as its app transaction), decoded here in one
    process so that the benchmark does not depend on the tier job's speed. Rows written."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import CommitProperties, Transaction, write_deltalake
    from loglake.spark.arrow_decoder import decode_fetch
    from loglake.spark.kafka_columns import KAFKA_COLUMNS
    from loglake.spark.lake import ABORTED_COLUMN, DATE_COLUMN, PARTITION_COLUMNS, table_path, tier_app_id
    from loglake.spark.options import DEFAULT_MAX_PARTITION_FETCH_BYTES
    from loglake.spark.protocol_client import LATEST_TIMESTAMP, ProtocolClient, TopicPartition

    written = 0
    with ProtocolClient(bootstrap) as client:
        client.metadata([TOPIC])
        for p in range(PARTITIONS):
            tp = TopicPartition(TOPIC, p)
            address = client.leader_address(tp)
            assert address is not None
            cut = int(client.list_offsets_from(address, {tp: LATEST_TIMESTAMP})[tp][1] * TIERED_SHARE)
            batches, offset = [], 0
            while offset < cut:
                fetched = client.fetch_from(address, tp, offset, DEFAULT_MAX_PARTITION_FETCH_BYTES)
                decoded = decode_fetch(fetched.records, TOPIC, p, offset, cut, KAFKA_COLUMNS.names)
                batches.append(decoded.batch)
                offset = decoded.next_offset
            rows = pa.Table.from_batches(batches, schema=KAFKA_COLUMNS)
            rows = rows.append_column(ABORTED_COLUMN, pa.repeat(pa.scalar(False), rows.num_rows))
            rows = rows.append_column(DATE_COLUMN, pc.cast(rows["timestamp"], pa.date32()))
            write_deltalake(
                table_path(lake_root, TOPIC),
                rows,
                mode="append",
                partition_by=PARTITION_COLUMNS,
                commit_properties=CommitProperties(app_transactions=[Transaction(tier_app_id(TOPIC, p), cut)]),
            )
            written += rows.num_rows
    return written


def read_tiered(
    spark, bootstrap: str, lake: str, records: int, rounds: int, sides: dict[str, list[Timing]], parquet_df
) -> None:
    """Tier TIERED_SHARE of the topic, then time `read_topic` over it, alternating with Parquet."""
    import loglake.spark

    tier_started = time.perf_counter()
    tiered = tier(bootstrap, lake)
    print(f"tiered {tiered:,} records ({tiered / records:.0%}) in {time.perf_counter() - tier_started:.1f} s")
    topic_df = loglake.spark.read_topic(spark, TOPIC, **{"kafka.bootstrap.servers": bootstrap})
    sides["read_topic, 80 % tiered"], sides["parquet, with read_topic"] = [], []
    for _ in range(rounds):
        sides["read_topic, 80 % tiered"].append(timed_query(topic_df))
        sides["parquet, with read_topic"].append(timed_query(parquet_df))
        assert sides["read_topic, 80 % tiered"][-1].rows == sides["parquet, with read_topic"][-1].rows


def best(timings: list[Timing]) -> Timing:
    return min(timings, key=lambda t: t.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument(
        "--rounds", type=int, default=3, help="query rounds of each side, best kept (the JVM warms up over the first)"
    )
    parser.add_argument(
        "--untiered-only",
        action="store_true",
        help="skip the tiering and read_topic (quicker loops on the source's own read path)",
    )
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import loglake.spark
    from loglake.spark.session_settings import loglake_builder
    from pyspark.sql import SparkSession

    with tempfile.TemporaryDirectory(prefix="spark-read-bench-") as tmp:
        lake = Path(tmp) / "lake"
        with loglake_cluster({"rsm.config.lake.root": str(lake)}) as bootstrap:
            # Remote storage on, no table yet: the topic reads untiered until tier() writes it.
            admin = AdminClient({"bootstrap.servers": bootstrap})
            new = NewTopic(TOPIC, PARTITIONS, 1, config={"remote.storage.enable": "true"})
            admin.create_topics([new])[TOPIC].result(30)
            produce_s = produce(bootstrap, args.records)
            print(f"produced {args.records:,} records in {produce_s:.1f} s")
            # The session loglake's jobs start (session_settings): Python workers on Unix sockets, fused unions.
            spark = (
                loglake_builder(SparkSession.builder.master("local[2]"))
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("WARN")
            loglake.spark.register(spark)
            source = (
                spark.read.format("loglake").option("kafka.bootstrap.servers", bootstrap).option("subscribe", TOPIC)
            )
            kafka_df, two_df = source.load(), source.schema(TWO_COLUMNS).load()
            parquet = Path(tmp) / "rows.parquet"
            kafka_df.write.parquet(str(parquet))
            parquet_df = spark.read.parquet(str(parquet))

            sides: dict[str, list[Timing]] = {"kafka schema": [], "two columns": [], "parquet": []}
            for _ in range(args.rounds):
                for name, df in (("kafka schema", kafka_df), ("two columns", two_df), ("parquet", parquet_df)):
                    sides[name].append(timed_query(df))
                assert sides["kafka schema"][-1].rows == sides["two columns"][-1].rows == sides["parquet"][-1].rows
            assert sum(r[1] for r in sides["parquet"][-1].rows) == args.records
            breakdown = where_the_time_goes(bootstrap)
            handoff = best([handoff_floor(spark, args.records) for _ in range(args.rounds)])
            handoff_two = best([handoff_floor(spark, args.records, two_columns=True) for _ in range(args.rounds)])

            if not args.untiered_only:
                read_tiered(spark, bootstrap, str(lake), args.records, args.rounds, sides, parquet_df)
            spark.stop()

    parquet_best = best(sides["parquet"])
    for name, timings in sides.items():
        b = best(timings)
        print(
            f"{name + ':':26s} {args.records / b.seconds:,.0f} records/s "
            f"({', '.join(f'{t.seconds:.2f}' for t in timings)} s); best round {cpu_line(b.cpu)}"
        )
    for name, target in TARGETS.items():
        if name not in sides:
            continue
        ratio = best(sides[BASELINE[name]]).seconds / best(sides[name]).seconds
        print(f"ratio {name} / {BASELINE[name]} (records/s): {ratio:.2f}  (target >= {target})")
    per_m = {k: v * args.records / 1e6 for k, v in breakdown.items()}
    print(
        f"one process, all {args.records:,} records: fetch {per_m['fetch_s_per_M']:.2f} s, decode "
        f"{per_m['decode_s_per_M']:.2f} s (two columns: {per_m['decode_two_s_per_M']:.2f} s); per million: "
        f"fetch {breakdown['fetch_s_per_M']:.3f} s, decode {breakdown['decode_s_per_M']:.3f} s "
        f"({breakdown['decode_two_s_per_M']:.3f} s); Spark's two workers share this"
    )
    print(
        f"the same query over ready-made Arrow batches (Spark's Python data source alone, no fetch, no decode): "
        f"{handoff.seconds:.2f} s, ratio {parquet_best.seconds / handoff.seconds:.2f} against Parquet; "
        f"{cpu_line(handoff.cpu)}"
    )
    print(
        f"the same over ready-made batches of the two columns: {handoff_two.seconds:.2f} s, ratio "
        f"{parquet_best.seconds / handoff_two.seconds:.2f} against Parquet; {cpu_line(handoff_two.cpu)}"
    )


if __name__ == "__main__":
    main()
