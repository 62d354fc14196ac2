"""The settings loglake starts its Spark sessions with (loglake/spark/session_settings.py): the
class archive's options, Python workers on Unix domain sockets and unions fused into whole-stage
code, which the tests' own session (tests/conftest.py) is started with too."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from loglake.spark.class_archive import java_options
from loglake.spark.session_settings import UNION_CODEGEN, WORKER_UNIX_SOCKETS, loglake_builder


def test_the_builder_gets_unix_sockets_and_union_codegen_and_keeps_the_archives_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyspark.sql import SparkSession

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr("loglake.spark.class_archive.archive_path", lambda: Path(__file__))
    options = loglake_builder(SparkSession.Builder(), "-Dloglake.check=1")._options
    assert options[WORKER_UNIX_SOCKETS] == "true"
    assert options[UNION_CODEGEN] == "true"
    assert options["spark.executor.defaultJavaOptions"] == f"{java_options()} -Dloglake.check=1"


def test_a_python_task_talks_to_its_jvm_over_a_unix_socket(spark) -> None:
    def inspect(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Spark's word to the worker daemon, and the address families of the worker's sockets
        (defined here: the worker cannot import the test module)."""
        for _ in batches:
            pass
        families = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                if not stat.S_ISSOCK(os.fstat(int(fd)).st_mode):
                    continue
            except OSError:
                continue  # the listing's own descriptor, closed by now
            with socket.socket(fileno=os.dup(int(fd))) as probe:
                families.add(probe.family.name)
        yield pa.record_batch(
            {
                "uds": [os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED", "")],
                "families": [",".join(sorted(families))],
            }
        )

    [row] = spark.range(1, numPartitions=1).mapInArrow(inspect, "uds string, families string").collect()
    assert row.uds.lower() == "true"  # what Spark tells the worker daemon it started
    assert "AF_UNIX" in row.families.split(","), row.families
    assert spark.sparkContext.getConf().get(WORKER_UNIX_SOCKETS) == "true"
