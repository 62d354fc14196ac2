"""The settings loglake starts a Spark session with: its jobs' (`job_session`), its tests' and its
benchmarks'. Two things:

- the class archive's JVM options and the job's own (`class_archive.with_archive`);
- Python workers that talk to their JVM over Unix domain sockets
  (`spark.python.unix.domain.socket.enabled`, Spark 4.1+), not loopback TCP.

Why the sockets: PySpark's TCP connection between an executor and its Python workers sets no
TCP_NODELAY. At the start of every task, a reused worker got its input (the data source's
partition) after a stall of ~40 ms: the JVM's second small write waited for the acknowledgement
of its first (Nagle's algorithm), which the worker's kernel delayed (delayed ACKs). A read task
of 1,000 records ran 72 ms (median) instead of 32; a query over six such tasks on two cores took
0.30-0.46 s instead of 0.19-0.25 s (docs/benchmarks.md). Unix domain sockets have neither
mechanism. Every Python data source task, every streaming micro-batch of the `loglake` source
and every `foreachBatch`/`mapInArrow` writer pays the stall without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loglake.spark.class_archive import with_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

WORKER_UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"


def loglake_builder(builder: SparkSession.Builder, java_options: str = "") -> SparkSession.Builder:
    """`builder` with loglake's session settings, and `java_options` for the JVMs this process
    starts (see `with_archive`)."""
    return with_archive(builder, java_options).config(WORKER_UNIX_SOCKETS, "true")
