"""The common frame of the Spark applications in jobs/: logging, the workers' Python, the session."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Args = TypeVar("Args")


def run_application(app_name: str, run: Callable[[SparkSession, Args], None], args: Args) -> None:
    """Run `run(spark, args)` in a session named `app_name` (spark-submit's master, else
    Spark's default) and stop the session however it ends."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stdout)
    # Spark's Python workers run this interpreter, which has pyarrow and loglake.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(app_name).getOrCreate()
    try:
        run(spark, args)
    finally:
        spark.stop()
