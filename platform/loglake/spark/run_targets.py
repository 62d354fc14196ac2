"""Where a consumer group's run writes its output, and how each target keeps a run from being
written twice when a process dies between writing and committing (see `group_runs`).

- `DeltaTarget`: the run is one Delta commit carrying the app transaction (txnAppId = the
  group's app id, txnVersion = the run id); a run the table records is not written again.
- `TopicTarget`: the loglake sink's exactly-once batch write, idempotent by run: each of the
  run's tasks writes its share of the output in a Kafka transaction of its own (transactional
  id `loglake-consume-group-<group>-<task>`) and records the run id in it; the driver commits
  the transactions. A resumed run gives each task the same rows, and a task whose transaction
  committed the run writes nothing (records carry `loglake.run` = "<group>:<run id>").
- `ParquetTarget`: appends; a run resumed after a crash between writing and committing is
  written again (at-least-once).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from loglake.spark.delta_sink import HEADERS_TYPE_DDL, DeltaWriter, committed_version
from loglake.spark.group_runs import Run
from loglake.spark.offset_ranges import discover_partitions
from loglake.spark.options import TopicSelection
from loglake.spark.transactional_producer import committed_progress

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from loglake.spark.job_cluster import ClusterAccess

RUN_HEADER = "loglake.run"
TRANSACTIONAL_ID_PREFIX = "loglake-consume-group"
_SINK_COLUMNS = ("key", "value", "partition", "headers")

log = logging.getLogger(__name__)


class RunTarget(Protocol):
    def last_run_id(self) -> int:
        """The highest run id the target records (0: none, or it records none)."""
        ...

    def prepare(self) -> int:
        """The number of tasks to record in a run's plan before it writes (0: none)."""
        ...

    def write(self, run: Run, output: DataFrame) -> int | None:
        """Write the run's output unless (or as far as) the target has it; the rows written
        (None: not counted)."""
        ...


@dataclass
class DeltaTarget:
    writer: DeltaWriter
    app_id: str

    def last_run_id(self) -> int:
        return committed_version(self.writer.table, self.app_id) or 0

    def prepare(self) -> int:
        return 0

    def write(self, run: Run, output: DataFrame) -> int:
        rows = self.writer.append_once(output, self.app_id, run.run_id)
        if rows is None:
            log.info("run %d is in %s already", run.run_id, self.writer.table)
            return 0
        return rows


@dataclass
class ParquetTarget:
    path: str

    def last_run_id(self) -> int:
        return 0

    def prepare(self) -> int:
        return 0

    def write(self, run: Run, output: DataFrame) -> int | None:
        output.write.mode("append").parquet(self.path)
        return None


@dataclass
class TopicTarget:
    spark: SparkSession
    cluster: ClusterAccess
    topic: str
    group_id: str

    def _tasks(self) -> int:
        """How many tasks write a new run: one per core Spark has."""
        return max(1, self.spark.sparkContext.defaultParallelism)

    def _transactional_id(self, task: int) -> str:
        """Task `task`'s transactional id, as the sink names it (`<prefix>-<txnAppId>-<partition id>`)."""
        return f"{TRANSACTIONAL_ID_PREFIX}-{self.group_id}-{task}"

    def last_run_id(self) -> int:
        """The highest run the tasks of a new run recorded: should the group lose its offsets
        (and its run markers), run ids still grow, as a task skips a run id it committed."""
        with self.cluster.client() as client:
            progress = [committed_progress(client, self._transactional_id(task)) for task in range(self._tasks())]
        return max((p.batch_id for p in progress if p is not None), default=0)

    def prepare(self) -> int:
        with self.cluster.client() as client:  # an unknown topic fails here, before the plan
            discover_partitions(client, TopicSelection("topic", topics=(self.topic,)))
        return self._tasks()

    def write(self, run: Run, output: DataFrame) -> None:
        from pyspark.sql import functions as F

        columns = [c for c in _SINK_COLUMNS if c in output.columns]
        tag = f"{self.group_id}:{run.run_id}".encode()
        headers = F.col("headers").cast(HEADERS_TYPE_DDL) if "headers" in columns else F.array()
        ours = F.array(F.struct(F.lit(RUN_HEADER).alias("key"), F.lit(tag).alias("value")))
        tagged = output.select(*columns).withColumn("headers", F.concat(F.coalesce(headers, F.array()), ours))
        # Hashed on every column into the planned number of tasks: a resumed run gives each
        # task the rows it had (identical rows are interchangeable), so a task that committed
        # the run skips it and the others write theirs again.
        tasks = run.target_tasks or self._tasks()
        (
            tagged.repartition(tasks, *tagged.columns)
            .write.format("loglake")
            .mode("append")
            .options(**self.cluster.source_options())
            .option("topic", self.topic)
            .option("transactional.id.prefix", TRANSACTIONAL_ID_PREFIX)
            .option("txnAppId", self.group_id)
            .option("txnVersion", str(run.run_id))
            .save()
        )
