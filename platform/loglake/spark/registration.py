"""Registering the `loglake` format with a Spark session (classic or Spark Connect)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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
