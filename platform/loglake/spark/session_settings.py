"""The settings loglake starts a Spark session with: its jobs' (`job_session`), its tests' and its
benchmarks'. Three things:

- the class archive's JVM options and the job's own (`class_archive.with_archive`);
- Python workers that talk to their JVM over Unix domain sockets
  (`spark.python.unix.domain.socket.enabled`, Spark 4.1+), not loopback TCP;
- a union compiled into the same whole-stage code as its children and its consumer
  (`spark.sql.codegen.wholeStage.union.enabled`, Spark 4.2+, off by default in 4.2 and on by
  default from 4.3).

Why the sockets: PySpark's TCP connection between an executor and its Python workers sets no
TCP_NODELAY. At the start of every task, a reused worker got its input (the data source's
partition) after a stall of ~40 ms: the JVM's second small write waited for the acknowledgement
of its first (Nagle's algorithm), which the worker's kernel delayed (delayed ACKs). A read task
of 1,000 records ran 72 ms (median) instead of 32; a query over six such tasks on two cores took
0.30-0.46 s instead of 0.19-0.25 s (docs/benchmarks.md). Unix domain sockets have neither
mechanism. Every Python data source task, every streaming micro-batch of the `loglake` source
and every `foreachBatch`/`mapInArrow` writer pays the stall without them.

Why the union: `read_topic` is a union of Spark's Parquet scan of the tiered files and the
`loglake` source's read of the tail. Without fusion, Spark ends the whole-stage code at the
union: each child copies its rows into UnsafeRows and the consumer (an aggregation, say)
reads them back, so the tiered rows, most of a topic, cost two copies more than a plain
Parquet scan of the same files (in the profile, the aggregation's `UnsafeRow.getBinary` alone
was 13 % of the JVM's samples). Fused, a query over a topic 80 % tiered took a median 1.10 s
instead of 1.32 s in the same JVM, against 0.86 s for Parquet (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loglake.spark.class_archive import with_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

WORKER_UNIX_SOCKETS = "spark.python.unix.domain.socket.enabled"
UNION_CODEGEN = "spark.sql.codegen.wholeStage.union.enabled"


def loglake_builder(builder: SparkSession.Builder, java_options: str = "") -> SparkSession.Builder:
    """`builder` with loglake's session settings, and `java_options` for the JVMs this process
    starts (see `with_archive`)."""
    return with_archive(builder, java_options).config(WORKER_UNIX_SOCKETS, "true").config(UNION_CODEGEN, "true")
