"""A class-data-sharing archive of Spark's JVM (the JDK's dynamic CDS): a Spark JVM started with
it maps the classes that were loaded, parsed and verified once at set-up instead of reading
them from Spark's jars again. Measured on a driver's start and first job: 16-23 → 9-11 CPU-s
of the JVM (docs/benchmarks.md), on every job, test and executor start.

    python -m loglake.spark.class_archive     # scripts/setup.sh runs it; safe to run twice
    python -m loglake.spark.class_archive --java-options   # the options, for spark-submit

`java_options()` gives the JVM options that use the archive, or "" when there is none. A JVM
whose JDK or class path differs from the archive's (another machine, another pyspark) ignores
it silently (`-Xshare:auto`, CDS logging off) and starts as it would without.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# What the archive is built from: a session, SQL with a shuffle, Arrow both ways, a Python data
# source read in batch and streaming (the classes every loglake job loads).
_WORKLOAD = """
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

class Reader(DataSourceReader):
    def read(self, partition):
        import pyarrow as pa
        yield pa.record_batch({"n": list(range(100))})

class StreamReader(DataSourceStreamReader):
    def initialOffset(self):
        return {"n": 0}
    def latestOffset(self):
        return {"n": 1}
    def partitions(self, start, end):
        return [InputPartition(0)]
    def read(self, partition):
        import pyarrow as pa
        yield pa.record_batch({"n": list(range(100))})

class Source(DataSource):
    @classmethod
    def name(cls):
        return "archive_workload"
    def schema(self):
        return "n bigint"
    def reader(self, schema):
        return Reader()
    def streamReader(self, schema):
        return StreamReader()

spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
spark.dataSource.register(Source)
frame = spark.read.format("archive_workload").load()
frame.groupBy((frame.n % 3).alias("k")).count().toArrow()
spark.createDataFrame(frame.toArrow()).selectExpr("sum(n)").collect()
query = spark.readStream.format("archive_workload").load().writeStream.format("noop")
query.trigger(availableNow=True).start().awaitTermination()
print("jvm pid", spark._jvm.java.lang.ProcessHandle.current().pid())
spark.stop()
"""


def archive_path() -> Path:
    """Where the archive of this interpreter's pyspark lives (beside its environment)."""
    import pyspark

    return Path(sys.prefix) / "share" / "loglake" / f"spark-classes-{pyspark.__version__}.jsa"


def java_options() -> str:
    """JVM options that start a Spark JVM from the archive, or "" if it was not built."""
    path = archive_path()
    if not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off"


def with_archive(builder: SparkSession.Builder, extra: str = "") -> SparkSession.Builder:
    """The builder with the archive's options, and the JVM options `extra`, for the driver and
    the executors, if this process starts the driver JVM (not under spark-submit, whose JVM
    runs already). They go in the `defaultJavaOptions`, which Spark prepends to the user's
    `extraJavaOptions` (so that the user's own options win)."""
    options = " ".join(o for o in (java_options(), extra) if o)
    if not options or "PYSPARK_GATEWAY_PORT" in os.environ:
        return builder
    return builder.config("spark.driver.defaultJavaOptions", options).config(
        "spark.executor.defaultJavaOptions", options
    )


def build(path: Path, timeout_s: float = 300.0) -> None:
    """Run the workload in a driver JVM that dumps the classes it loaded into `path` at exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    dump = f"spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={partial} -Xlog:cds=error"
    submit_args = f"--conf {shlex.quote(dump)} pyspark-shell"
    env = os.environ | {"PYSPARK_PYTHON": sys.executable, "PYSPARK_SUBMIT_ARGS": submit_args}
    run = subprocess.run(
        [sys.executable, "-c", _WORKLOAD], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if run.returncode != 0:
        raise RuntimeError(f"the archive's workload failed: {run.stderr[-3000:]}")
    jvm = int(re.findall(r"^jvm pid (\d+)$", run.stdout, re.MULTILINE)[-1])
    # The JVM writes the archive as it exits, after the Python driver is gone.
    deadline = time.monotonic() + timeout_s
    while _running(jvm) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _running(jvm) or not partial.is_file():
        raise RuntimeError(f"the driver JVM wrote no archive to {partial}")
    partial.replace(path)


def _running(pid: int) -> bool:
    """Whether the process runs (an orphan may stay a zombie where nothing reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def main() -> None:
    if sys.argv[1:] == ["--java-options"]:  # for launchers outside Python, e.g. the Airflow DAGs
        print(java_options())
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    path = archive_path()
    if path.is_file():
        log.info("Spark class archive: %s (already built)", path)
        return
    started = time.monotonic()
    build(path)
    log.info("Spark class archive: %s (%.0f MB, %.0f s)", path, path.stat().st_size / 1e6, time.monotonic() - started)


if __name__ == "__main__":
    main()
