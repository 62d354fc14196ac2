"""Records/s through the loglake sink's exactly-once path vs its at-least-once path, same run.

The same DataFrame (keys, 100-byte values, cached in Spark beforehand, 4 Spark partitions) is
written with `df.write.format("loglake")` to a 6-partition topic, alternately with
`exactly.once=true` (each task's rows in a Kafka transaction through loglake's own client,
the job's commit ending them) and `exactly.once=false` (confluent-kafka's idempotent
producer, the baseline: Spark's Kafka sink's guarantee). Best of the rounds of each.

    python -m bench.spark_sink [--records 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from confluent_kafka.admin import AdminClient, NewTopic

from bench.kafka_common import loglake_cluster

PARTITIONS = 6
TASKS = 4
VALUE_BYTES = 100


def timed_write(df, bootstrap: str, topic: str, exactly_once: bool) -> float:
    start = time.perf_counter()
    (
        df.write.format("loglake")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("exactly.once", str(exactly_once).lower())
        .mode("append")
        .save()
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import loglake.spark
    from loglake.spark.session_settings import loglake_builder
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    with loglake_cluster() as bootstrap:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("sink-bench", PARTITIONS, 1)])["sink-bench"].result(30)
        spark = (
            loglake_builder(SparkSession.builder.master("local[2]")).config("spark.ui.enabled", "false").getOrCreate()
        )
        spark.sparkContext.setLogLevel("WARN")
        loglake.spark.register(spark)
        df = (
            spark.range(args.records, numPartitions=TASKS)
            .select(
                F.col("id").cast("string").cast("binary").alias("key"),
                F.expr("unhex(concat(sha2(cast(id AS string), 512), sha2(cast(-id AS string), 512)))")
                .substr(1, VALUE_BYTES)
                .alias("value"),
            )
            .cache()
        )
        df.count()
        # Warm-up of both paths (Python workers, producers, the transaction state topic).
        for exactly_once in (True, False):
            timed_write(df.limit(1000), bootstrap, "sink-bench", exactly_once)
        txn_s, plain_s = [], []
        for _ in range(args.rounds):
            txn_s.append(timed_write(df, bootstrap, "sink-bench", exactly_once=True))
            plain_s.append(timed_write(df, bootstrap, "sink-bench", exactly_once=False))
        spark.stop()

    for name, seconds in (("exactly once", txn_s), ("at least once", plain_s)):
        rounds = ", ".join(f"{s:.2f}" for s in seconds)
        print(f"{name + ':':15s} {args.records / min(seconds):,.0f} records/s ({rounds} s)")
    print(f"ratio (exactly once / at least once records/s): {min(plain_s) / min(txn_s):.2f}")


if __name__ == "__main__":
    main()
