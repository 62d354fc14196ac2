"""An application the cluster tests run with spark-submit on the standalone cluster: batch and
streaming reads of a topic, a two-column schema, read_topic, an exactly-once batch write
to another topic, and runs of jobs/consume_group.py into a Delta table (`<dir>/consumed`,
group `<group>`) and into the topic `<cg topic>` (group `<group>-topic`). Prints one line
`RESULT <json>` for the test to check.

    spark-submit --master spark://... tests/spark/cluster_app.py <bootstrap> <topic> <out topic> <dir> <group> <cg topic>
"""

from __future__ import annotations

import json
import sys
import time

import loglake.spark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs import consume_group


def per_partition(df) -> dict[str, list[int]]:
    rows = df.groupBy("partition").agg(F.count("*"), F.sum(F.length("value"))).collect()
    return {str(r[0]): [r[1], r[2]] for r in rows}


def main() -> None:
    bootstrap, topic, out_topic, work, group, cg_topic = sys.argv[1:7]
    spark = SparkSession.builder.appName("loglake-cluster-test").getOrCreate()
    loglake.spark.register(spark)
    source = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}
    batch = spark.read.format("loglake").options(**source).load()
    two_columns = spark.read.format("loglake").schema("partition int, value binary").options(**source).load()
    query = (
        spark.readStream.format("loglake")
        .options(**source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "750")
        .load()
        .writeStream.format("parquet")
        .option("path", f"{work}/stream")
        .option("checkpointLocation", f"{work}/checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    streamed = spark.read.parquet(f"{work}/stream")
    (
        batch.select("key", "value")
        .write.format("loglake")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out_topic)
        .option("exactly.once", "true")
        .mode("append")
        .save()
    )
    consume_group.run(
        spark,
        consume_group.parse_args(
            ["--bootstrap-servers", bootstrap, "--group", group, "--topics", topic]
            + ["--select", "key, length(value) AS size", "--delta", f"{work}/consumed"]
        ),
    )
    consume_group.run(
        spark,
        consume_group.parse_args(
            ["--bootstrap-servers", bootstrap, "--group", f"{group}-topic", "--topics", topic]
            + ["--select", "key, value", "--topic", cg_topic]
        ),
    )
    started = time.monotonic()
    result = {
        "batch": per_partition(batch),
        "two_columns": per_partition(two_columns),
        "streamed": per_partition(streamed),
        "stream_batches": sum(1 for p in query.recentProgress if p["numInputRows"]),
        "read_topic": per_partition(loglake.spark.read_topic(spark, topic, **{"kafka.bootstrap.servers": bootstrap})),
    }
    result["seconds"] = time.monotonic() - started
    print("RESULT " + json.dumps(result))
    spark.stop()


if __name__ == "__main__":
    main()
