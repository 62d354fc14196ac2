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


def __getattr__(name: str) -> object:
    # read_topic imports pyspark, pyarrow and deltalake: only when asked for.
    if name == "read_topic":
        from loglake.spark.topic_reader import read_topic

        return read_topic
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark: SparkSession) -> None:
    """Register the `loglake` format with `spark`.

    Spark's Python workers must run an interpreter that has loglake, pyarrow and numpy:
    unless the user chose one (PYSPARK_PYTHON or spark.pyspark.python), they run this one.
    """
    from loglake.spark.source import LoglakeDataSource

    if type(spark).__module__.startswith("pyspark.sql.connect"):
        # A Spark Connect session: the server's Python workers run its own interpreter.
        spark.dataSource.register(LoglakeDataSource)
        return
    sc = spark.sparkContext
    if not os.environ.get("PYSPARK_PYTHON") and not sc.getConf().get("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        # The context read the variable when it started; the data source's function
        # carries the interpreter the context names now.
        sc.pythonExec = sys.executable
    spark.dataSource.register(LoglakeDataSource)


@contextmanager
def job_session(app_name: str) -> Iterator[SparkSession]:
    """The session of a job started by `python -m jobs.<name>` or `spark-submit`: INFO logs on
    stdout, Spark's Python workers running this interpreter, the `loglake` format registered;
    stopped at the end."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    # Set before the JVM starts, so the workers run this interpreter (it has pyarrow and loglake).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    try:
        register(spark)
        yield spark
    finally:
        spark.stop()
