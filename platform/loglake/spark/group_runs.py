"""Runs of a consumer group's batch job, each planned in the group before it writes.

A run reads every partition from the group's committed offset up to the high watermark seen
when it was planned, writes its output, then commits its ends. Between planning and writing,
the plan is committed to the group: each partition's offset stays where it is and carries, as
its commit metadata string, the run's id and end offset. A process that dies after writing and
before committing leaves that plan behind; the next process finds it and finishes the same run
(same id, same offsets) before planning a new one, and the target tells by the run id whether,
or how much of, the run it holds already. A finished run leaves `{"run": <id>}` as metadata, so
run ids keep growing across processes.

The group's offsets stay the position a reader of the group sees (`loglake groups describe`):
a planned run moves nothing until it is committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from loglake.spark.group_offsets import commit_offsets, committed_with_metadata
from loglake.spark.offset_ranges import OffsetRange
from loglake.spark.protocol_client import ProtocolClient, TopicPartition


@dataclass(frozen=True)
class Run:
    """One run: its id, the offset ranges it reads, and, for a topic target, the number of
    tasks (each a Kafka transaction of its own) that write its output: a resumed run writes
    with as many, so that each task has the same rows as before (0: the target's choice)."""

    run_id: int
    ranges: tuple[OffsetRange, ...]
    target_tasks: int = 0
    # A plan found in the group: an earlier process planned it and may have written part of it.
    resumed: bool = False

    def source_options(self) -> dict[str, str]:
        """The `loglake` read options of exactly this run's ranges (assign, starting/endingOffsets)."""
        assign: dict[str, list[int]] = {}
        starts: dict[str, dict[str, int]] = {}
        ends: dict[str, dict[str, int]] = {}
        for r in self.ranges:
            assign.setdefault(r.topic, []).append(r.partition)
            starts.setdefault(r.topic, {})[str(r.partition)] = r.start
            ends.setdefault(r.topic, {})[str(r.partition)] = r.end
        return {
            "assign": json.dumps(assign),
            "startingOffsets": json.dumps(starts),
            "endingOffsets": json.dumps(ends),
        }


@dataclass(frozen=True)
class GroupPositions:
    """What the group records for the partitions a job reads: offsets and run markers."""

    offsets: dict[TopicPartition, int]
    # The decoded metadata of partitions whose commit a run made (others' commits carry none).
    markers: dict[TopicPartition, dict]

    @property
    def last_run_id(self) -> int:
        """The highest run id the group records (0: none)."""
        return max((m["run"] for m in self.markers.values()), default=0)

    def pending_run(self) -> Run | None:
        """The run planned and not committed, if a process died in between (the latest one, if
        markers of several are left: only the latest can have been written after them)."""
        pending = {tp: m for tp, m in self.markers.items() if m.get("end") is not None}
        if not pending:
            return None
        run_id = max(m["run"] for m in pending.values())
        mine = sorted(((tp, m) for tp, m in pending.items() if m["run"] == run_id), key=lambda item: item[0])
        ranges = tuple(OffsetRange(tp.topic, tp.partition, self.offsets[tp], m["end"]) for tp, m in mine)
        return Run(run_id, ranges, mine[0][1].get("tasks", 0), resumed=True)


def _decode(metadata: str) -> dict | None:
    """A run marker, or None for anything else (a commit of another kind of consumer)."""
    try:
        marker = json.loads(metadata)
    except ValueError:
        return None
    if not isinstance(marker, dict) or not isinstance(marker.get("run"), int):
        return None
    return marker


def group_positions(client: ProtocolClient, group_id: str, partitions: list[TopicPartition]) -> GroupPositions:
    committed = committed_with_metadata(client, group_id, partitions)
    markers = {tp: marker for tp, (_, metadata) in committed.items() if (marker := _decode(metadata)) is not None}
    return GroupPositions({tp: offset for tp, (offset, _) in committed.items()}, markers)


def commit_plan(client: ProtocolClient, group_id: str, run: Run) -> None:
    """Record the run in the group before it writes: offsets unchanged, the plan as metadata."""
    plan: dict[str, object] = {"run": run.run_id}
    if run.target_tasks:
        plan["tasks"] = run.target_tasks
    metadata = {r.topic_partition: json.dumps({**plan, "end": r.end}, separators=(",", ":")) for r in run.ranges}
    commit_offsets(client, group_id, {r.topic_partition: r.start for r in run.ranges}, metadata)


def commit_run(client: ProtocolClient, group_id: str, run: Run) -> None:
    """The run is written: commit its ends."""
    done = json.dumps({"run": run.run_id}, separators=(",", ":"))
    ends = {r.topic_partition: r.end for r in run.ranges}
    commit_offsets(client, group_id, ends, dict.fromkeys(ends, done))
