"""Records/s through the exactly-once Delta writer vs a plain `deltalake` append of the same Arrow data.

Micro-batches of Kafka-shaped records (100-byte values, keys, null headers, 6 partitions) are
cached in Spark beforehand, one Spark partition per Kafka partition, as the loglake source
would hand them over. The writer's side is
`DeltaSink.write_batch` on each: the table's columns selected in the JVM, `toArrow()` to the
driver, the app-transaction check and the Delta commit with its txn action. The baseline
writes the same rows, already in Arrow on the driver, with `write_deltalake(mode="append")`,
one commit per micro-batch too. Also timed, for information: a batch-mode rerun (MERGE of a
range already in the table) and Spark's hand-off alone (`toArrow()` of the table's columns),
which is most of the sink's time. Target ratio >= 0.5.

    python -m bench.delta_sink [--records 1000000] [--batch-records 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import write_deltalake
from loglake.spark.delta_sink import DeltaSink, DeltaSinkOptions, table_frame

from bench.process_cpu import cpu_by_kind

PARTITIONS = 6
VALUE_BYTES = 100
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def kafka_batch(first: int, count: int, rng: np.random.Generator) -> pa.Table:
    """`count` records in Spark's Kafka source schema; record i goes to partition i % 6."""
    numbers = np.arange(first, first + count)
    values = rng.integers(0, 256, size=count * VALUE_BYTES, dtype=np.uint8).tobytes()
    value_offsets = pa.array(np.arange(0, (count + 1) * VALUE_BYTES, VALUE_BYTES, dtype=np.int32))
    return pa.table(
        {
            "key": pa.array([b"key-%09d" % n for n in numbers], pa.binary()),
            "value": pa.BinaryArray.from_buffers(
                pa.binary(), count, [None, value_offsets.buffers()[1], pa.py_buffer(values)]
            ),
            "topic": pa.array(["bench"] * count),
            "partition": pa.array(numbers % PARTITIONS, pa.int32()),
            "offset": pa.array(numbers // PARTITIONS, pa.int64()),
            "timestamp": pa.array(1_790_000_000_000_000 + numbers * 1000, pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array(np.zeros(count, dtype=np.int32)),
            "headers": pa.nulls(count, HEADERS_TYPE),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch-records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-delta-sink")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rng = np.random.default_rng(7)
    arrow_batches = [
        kafka_batch(first, min(args.batch_records, args.records - first), rng)
        for first in range(0, args.records, args.batch_records)
    ]
    # One Spark partition per Kafka partition, as the loglake source splits a micro-batch.
    frames = [spark.createDataFrame(batch).repartition(PARTITIONS, "partition").cache() for batch in arrow_batches]
    for frame in frames:
        frame.count()
    options = DeltaSinkOptions(table="")
    # The baseline appends exactly what the sink stores: the table's columns, as Arrow.
    table_batches = [table_frame(frame, options).toArrow() for frame in frames]
    records = sum(batch.num_rows for batch in arrow_batches)

    with tempfile.TemporaryDirectory(prefix="bench-delta-sink-") as scratch:
        for round_number in range(args.rounds):
            plain_path = Path(scratch) / f"plain-{round_number}"
            cpu = cpu_by_kind()
            start = time.perf_counter()
            for batch in table_batches:
                write_deltalake(str(plain_path), batch, mode="append")
            plain = records / (time.perf_counter() - start)
            plain_cpu = cpu_by_kind()
            plain_cpu.subtract(cpu)

            sink = DeltaSink(spark, DeltaSinkOptions(table=str(Path(scratch) / f"sink-{round_number}")))
            cpu = cpu_by_kind()
            start = time.perf_counter()
            for batch_id, frame in enumerate(frames):
                sink.write_batch(frame, batch_id, "bench-query")
            exactly_once = records / (time.perf_counter() - start)
            sink_cpu = cpu_by_kind()
            sink_cpu.subtract(cpu)

            start = time.perf_counter()
            for frame in frames:
                sink.write_rerun(frame)
            rerun = records / (time.perf_counter() - start)

            # Where the sink's time goes: Spark's hand-off of the rows to the driver as Arrow,
            # and within it, Spark computing the rows alone (the same plan into the noop sink).
            cpu = cpu_by_kind()
            start = time.perf_counter()
            for frame in frames:
                table_frame(frame, options).toArrow()
            hand_off = records / (time.perf_counter() - start)
            hand_off_cpu = cpu_by_kind()
            hand_off_cpu.subtract(cpu)
            cpu = cpu_by_kind()
            start = time.perf_counter()
            for frame in frames:
                table_frame(frame, options).write.format("noop").mode("overwrite").save()
            rows_alone = records / (time.perf_counter() - start)
            rows_cpu = cpu_by_kind()
            rows_cpu.subtract(cpu)
            print(
                f"round {round_number}: plain deltalake append {plain:,.0f} records/s "
                f"(driver CPU s {plain_cpu['driver']:.2f}), "
                f"exactly-once sink {exactly_once:,.0f} records/s, ratio {exactly_once / plain:.2f} "
                f"(CPU s: JVM {sink_cpu['jvm']:.2f}, driver {sink_cpu['driver']:.2f}); "
                f"Spark -> Arrow hand-off alone {hand_off:,.0f} records/s (CPU s: JVM {hand_off_cpu['jvm']:.2f}, "
                f"driver {hand_off_cpu['driver']:.2f}); the rows alone (noop sink) {rows_alone:,.0f} records/s "
                f"(JVM CPU s {rows_cpu['jvm']:.2f}); MERGE rerun of the same range {rerun:,.0f} records/s"
            )
    spark.stop()


if __name__ == "__main__":
    main()
