"""The Spark class archive (loglake/spark/class_archive.py): set-up builds it, and a driver JVM a
job starts maps it; options for a JVM that already runs are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from loglake.spark.class_archive import archive_path, java_options, with_archive

REPO = Path(__file__).resolve().parents[2]


def jvm_maps(spark) -> str:
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    return Path(f"/proc/{pid}/maps").read_text()


def test_the_tests_driver_jvm_starts_from_the_archive_setup_built(spark) -> None:
    assert archive_path().is_file(), "no Spark class archive: run `make setup` (scripts/setup.sh builds it)"
    assert str(archive_path()) in jvm_maps(spark)


def test_a_jobs_driver_jvm_starts_from_the_archive() -> None:
    script = (
        "from pathlib import Path\n"
        "from loglake.spark import job_session\n"
        "with job_session('archive-check') as spark:\n"
        "    pid = spark._jvm.java.lang.ProcessHandle.current().pid()\n"
        "    print('mapped', 'spark-classes' in Path(f'/proc/{pid}/maps').read_text())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "mapped True" in run.stdout


def test_no_archive_no_options_and_a_running_jvm_is_left_alone(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from pyspark.sql import SparkSession

    monkeypatch.setattr("loglake.spark.class_archive.archive_path", lambda: tmp_path / "missing.jsa")
    assert java_options() == ""
    monkeypatch.setattr("loglake.spark.class_archive.archive_path", lambda: Path(__file__))
    assert f"-XX:SharedArchiveFile={__file__}" in java_options()

    builder = SparkSession.builder
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")  # under spark-submit: the driver JVM runs already
    assert "spark.driver.defaultJavaOptions" not in with_archive(builder)._options


def test_a_jobs_own_java_options_follow_the_archives(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    from loglake.spark.lake_writer import LAKE_WRITER_JAVA_OPTIONS

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.setattr("loglake.spark.class_archive.archive_path", lambda: Path(__file__))
    options = with_archive(SparkSession.Builder(), LAKE_WRITER_JAVA_OPTIONS)._options
    for side in ("driver", "executor"):
        assert options[f"spark.{side}.defaultJavaOptions"] == f"{java_options()} {LAKE_WRITER_JAVA_OPTIONS}"
    # Without an archive the job's options still go to the JVMs.
    monkeypatch.setattr("loglake.spark.class_archive.archive_path", lambda: Path("/nonexistent.jsa"))
    options = with_archive(SparkSession.Builder(), LAKE_WRITER_JAVA_OPTIONS)._options
    assert options["spark.driver.defaultJavaOptions"] == LAKE_WRITER_JAVA_OPTIONS
