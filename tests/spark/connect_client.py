"""A Spark Connect client reading a topic with the loglake source (the cluster tests run it in
a process of its own: a classic session and a Connect session do not share a process).
Prints `RESULT <json>`: records and value bytes per partition.

    python tests/spark/connect_client.py sc://host:port <bootstrap> <topic>
"""

from __future__ import annotations

import json
import sys

import loglake.spark
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    url, bootstrap, topic = sys.argv[1:4]
    spark = SparkSession.builder.remote(url).getOrCreate()
    loglake.spark.register(spark)
    df = (
        spark.read.format("loglake")
        .schema("partition int, value binary")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    rows = df.groupBy("partition").agg(F.count("*"), F.sum(F.length("value"))).collect()
    print("RESULT " + json.dumps({str(r[0]): [r[1], r[2]] for r in rows}))
    spark.stop()


if __name__ == "__main__":
    main()
