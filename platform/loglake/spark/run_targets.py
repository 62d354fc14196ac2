"""Where a consumer group's run writes its output, and how each target keeps a run from being
written twice when a process dies between writing and committing (see `group_runs`).

- `DeltaTarget`: the run is one Delta commit carrying the app transaction (txnAppId = the
  group's app id, txnVersion = the run id); a run the table records is not written again.
- `TopicTarget`: each record produced carries its run (`loglake.run` = "<group>:<run id>") and
  its place in the run's output (`loglake.seq`); the output is numbered in a canonical order, so
  a resumed run recomputes the same numbers, reads the target past where it ended when the run
  was planned, and produces only the numbers not there.
- `ParquetTarget`: appends; a run resumed after a crash between writing and committing is
  written again (at-least-once).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from loglake.spark.delta_sink import HEADERS_TYPE_DDL, DeltaWriter, committed_version
from loglake.spark.faults import fault_point
from loglake.spark.group_runs import Run
from loglake.spark.offset_ranges import discover_partitions, list_offsets
from loglake.spark.options import TopicSelection
from loglake.spark.protocol_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from loglake.spark.sink import parse_write_options, produce_batches

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from loglake.spark.job_cluster import ClusterAccess

RUN_HEADER = "loglake.run"
SEQ_HEADER = "loglake.seq"
# LOGLAKE_FAULT=mid-topic-write[:<run id>]: exit once half of a run's records are produced
# (and acknowledged), so that the crash tests leave a run partly written every time.
FAULT_MID_TOPIC_WRITE = "mid-topic-write"
_SEQ = "__loglake_seq"
_SINK_COLUMNS = ("key", "value", "partition", "headers")

log = logging.getLogger(__name__)


class RunTarget(Protocol):
    def last_run_id(self) -> int:
        """The highest run id the target records (0: none, or it records none)."""
        ...

    def prepare(self) -> dict[int, int]:
        """Positions of the target to record in a run's plan before it writes."""
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

    def prepare(self) -> dict[int, int]:
        return {}

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

    def prepare(self) -> dict[int, int]:
        return {}

    def write(self, run: Run, output: DataFrame) -> int | None:
        output.write.mode("append").parquet(self.path)
        return None


@dataclass
class TopicTarget:
    spark: SparkSession
    cluster: ClusterAccess
    topic: str
    group_id: str

    def last_run_id(self) -> int:
        return 0  # a run's records are found from the target offsets in its plan

    def _end_offsets(self, timestamp: int) -> dict[int, int]:
        with self.cluster.client() as client:
            partitions = discover_partitions(client, TopicSelection("topic", topics=(self.topic,)))
            return {tp.partition: o for tp, o in list_offsets(client, dict.fromkeys(partitions, timestamp)).items()}

    def prepare(self) -> dict[int, int]:
        return self._end_offsets(LATEST_TIMESTAMP)

    def write(self, run: Run, output: DataFrame) -> int:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        options = parse_write_options(
            {**self.cluster.source_options(), "topic": self.topic}, output.schema, streaming=False
        )
        columns = [c for c in _SINK_COLUMNS if c in output.columns]
        # Numbered in the order of all the columns: the same input gives the same numbers
        # (identical rows are interchangeable). A window without partitions sorts in one task.
        numbered = output.select(*columns).withColumn(_SEQ, F.row_number().over(Window.orderBy(*columns)) - 1)
        if run.resumed:
            numbered = numbered.join(self._written(run), _SEQ, "left_anti")
        tag = f"{self.group_id}:{run.run_id}".encode()
        headers = F.col("headers").cast(HEADERS_TYPE_DDL) if "headers" in columns else F.array()
        ours = F.array(
            F.struct(F.lit(RUN_HEADER).alias("key"), F.lit(tag).alias("value")),
            F.struct(F.lit(SEQ_HEADER).alias("key"), F.col(_SEQ).cast("string").cast("binary").alias("value")),
        )
        tagged = numbered.withColumn("headers", F.concat(F.coalesce(headers, F.array()), ours)).drop(_SEQ)
        data = tagged.toArrow()
        half = data.num_rows // 2
        produce_batches(options, iter(data.slice(0, half).to_batches()))
        fault_point(FAULT_MID_TOPIC_WRITE, run.run_id)
        produce_batches(options, iter(data.slice(half).to_batches()))
        return data.num_rows

    def _written(self, run: Run) -> DataFrame:
        """The numbers of the run's records in the target, past where it ended when planned."""
        from pyspark.sql import functions as F

        partitions = self._end_offsets(EARLIEST_TIMESTAMP)  # partitions added since: from the start
        starts = {str(p): run.target_starts.get(p, EARLIEST_TIMESTAMP) for p in partitions}
        records = (
            self.spark.read.format("loglake")
            .options(**self.cluster.source_options())
            .option("subscribe", self.topic)
            .option("startingOffsets", json.dumps({self.topic: starts}))
            .option("includeHeaders", "true")
            .load()
        )

        def header(name: str) -> Column:
            return F.filter("headers", lambda h: h["key"] == name)[0]["value"]

        tag = f"{self.group_id}:{run.run_id}".encode()
        return (
            records.where(header(RUN_HEADER) == F.lit(tag))
            .select(header(SEQ_HEADER).cast("string").cast("bigint").alias(_SEQ))
            .distinct()
        )
