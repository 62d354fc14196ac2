"""Shared fixtures: temporary log dirs, an in-process broker, a broker subprocess."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Spark's Python workers must run this interpreter (it has pyarrow and loglake).
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# Every JVM Spark starts here (this session's, the jobs' and spark-submit's) is short-lived:
# the C1 compiler alone and the serial collector start them a third to a half faster on a
# 2-core machine. Production jobs keep the JVM's defaults.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    return d


# One local[2] SparkSession for the whole test session (starting one costs seconds), for
# tests/spark and the cluster tests that run Spark jobs.
@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    from loglake.spark.session_settings import loglake_builder

    session = (
        loglake_builder(SparkSession.builder.master("local[2]"))
        .appName("loglake-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A Spark standalone master and two one-core workers on loopback for the whole session
    (harness/standalone_cluster.py), shared by tests/spark and the Airflow tests; stopped at
    its end (and when starting fails)."""
    from harness.standalone_cluster import standalone_cluster

    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


@pytest.fixture
def loglake_spark(spark: object) -> object:
    """The session, with the `loglake` format registered."""
    import loglake.spark

    loglake.spark.register(spark)
    return spark
