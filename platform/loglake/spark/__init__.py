"""Spark integration: the `loglake` data source (Spark 4 Python Data Source API).

    import loglake.spark
    loglake.spark.register(spark)
    spark.read.format("loglake").option("kafka.bootstrap.servers", ...).option("subscribe", ...).load()
    loglake.spark.read_topic(spark, "orders", **{"kafka.bootstrap.servers": ...})  # tiered part as Parquet

Only this package imports pyspark.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

__all__ = ["job_session", "read_topic", "register"]

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from loglake.spark.topic_reader import read_topic


from loglake.spark.registration import register


def __getattr__(name: str) -> object:
    # read_topic imports pyspark, pyarrow and deltalake: only when asked for.
    if name == "read_topic":
        from loglake.spark.topic_reader import read_topic

        return read_topic
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextmanager
def job_session(app_name: str, java_options: str = "") -> Iterator[SparkSession]:
    """The session of a job started by `python -m jobs.<name>` or `spark-submit`: INFO logs on
    stdout, Spark's Python workers running this interpreter, the `loglake` format registered,
    the JVMs started with `java_options` (where this process starts them), loglake's session
    settings (`session_settings`: Python workers on Unix sockets, fused unions); stopped at the end."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    # Set before the JVM starts, so the workers run this interpreter (it has pyarrow and loglake).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from loglake.spark.session_settings import loglake_builder

    spark = loglake_builder(SparkSession.builder.appName(app_name), java_options).getOrCreate()
    try:
        register(spark)
        yield spark
    finally:
        spark.stop()
