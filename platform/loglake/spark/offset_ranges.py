"""From options to offset ranges: which partitions, where each starts and ends, and how the
ranges are split into Spark input partitions. Runs on the driver, before any job."""

from __future__ import annotations

import itertools
import logging
import math
import re
import time
from dataclasses import dataclass
from typing import cast

from loglake.errors import ErrorCode
from loglake.spark.group_offsets import committed_offsets
from loglake.spark.lake import with_lake_starts
from loglake.spark.options import OffsetKind, OffsetSpec, OptionError, ReadOptions, TopicSelection
from loglake.spark.protocol_client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    RETRIABLE_PARTITION_ERRORS,
    BrokerUnavailable,
    ProtocolClient,
    TopicPartition,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class DataLossError(RuntimeError):
    """Offsets a query needs are no longer in the log, and failOnDataLoss is true."""


def report_data_loss(fail_on_data_loss: bool, message: str) -> None:
    """Spark's Kafka source rule: fail with `failOnDataLoss=true`, else warn and go on."""
    if fail_on_data_loss:
        raise DataLossError(
            f"{message}. Some data may have been lost because it is not in the log any more (retention, "
            'DeleteRecords or a deleted topic). To skip it and go on, set the source option "failOnDataLoss" '
            'to "false".'
        )
    log.warning("%s; skipped (failOnDataLoss=false)", message)


def connect(options: ReadOptions) -> ProtocolClient:
    """A client that has reached the cluster (OptionError naming kafka.bootstrap.servers if not)."""
    client = options.client()
    try:
        client.metadata([])
    except BrokerUnavailable as exc:
        client.close()
        raise OptionError(f"kafka.bootstrap.servers: {exc}") from None
    return client


def discover_partitions(client: ProtocolClient, selection: TopicSelection) -> list[TopicPartition]:
    """The partitions a selection names now (a pattern matches whole topic names, as Java's)."""
    if selection.pattern is not None:
        metadata = client.metadata(None)
        pattern = re.compile(selection.pattern)
        topics = [t for t in metadata.leaders if t not in metadata.internal_topics and pattern.fullmatch(t)]
    else:
        topics = sorted({tp.topic for tp in selection.partitions} or set(selection.topics))
        metadata = client.metadata(topics)
        for topic in topics:
            if topic not in metadata.leaders:
                error = metadata.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                raise OptionError(f"{selection.option}: topic {topic!r} is not known to the cluster ({error.name})")
    found = [TopicPartition(t, p) for t in topics for p in metadata.leaders[t]]
    if selection.partitions:
        missing = sorted(set(selection.partitions) - set(found))
        if missing:
            raise OptionError(f"assign: no such partition {', '.join(f'{tp.topic}-{tp.partition}' for tp in missing)}")
        return list(selection.partitions)
    return sorted(found)


def list_offsets(client: ProtocolClient, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """ListOffsets on each partition's leader, following leader moves until the request timeout."""
    deadline = time.monotonic() + client.timeout_s
    pending = dict(timestamps)
    out: dict[TopicPartition, int] = {}
    attempt = 0
    while pending:
        by_leader: dict[tuple[str, int], dict[TopicPartition, int]] = {}
        unknown = False
        for tp, ts in pending.items():
            address = client.leader_address(tp)
            if address is None:
                unknown = True
            else:
                by_leader.setdefault(address, {})[tp] = ts
        failure = ""
        for address, asked in by_leader.items():
            try:
                answers = client.list_offsets_from(address, asked)
            except BrokerUnavailable as exc:
                failure = str(exc)
                continue
            for tp, (error, offset) in answers.items():
                if error == ErrorCode.NONE:
                    out[tp] = offset
                    pending.pop(tp, None)
                elif error in RETRIABLE_PARTITION_ERRORS:
                    failure = f"{tp.topic}-{tp.partition}: {error.name}"
                else:
                    raise RuntimeError(f"ListOffsets of {tp.topic}-{tp.partition} failed: {error.name}")
        if not pending:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"no offsets for {sorted(pending)} within the request timeout ({failure})")
        attempt += 1
        if not unknown or attempt > 1:
            time.sleep(min(0.05 * attempt, 1.0))
        client.metadata(sorted({tp.topic for tp in pending}))
    return out


def resolve_offsets(
    client: ProtocolClient,
    partitions: list[TopicPartition],
    spec: OffsetSpec,
    *,
    starting: bool,
    fail_on_data_loss: bool,
    timestamp_strategy: str = "error",
) -> dict[TopicPartition, int]:
    """Concrete offsets for `partitions`, each within [log start, high watermark]."""
    if spec.per_partition:
        missing = sorted(set(partitions) - set(spec.per_partition))
        extra = sorted(set(spec.per_partition) - set(partitions))
        if missing or extra:
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing or extra)
            what = "must name every partition read; missing" if missing else "names partitions not read"
            raise OptionError(f"{spec.option} {what}: {names}")
    # A tiered partition's earliest is in its lake (Delta table), before the log start.
    earliest = with_lake_starts(client, list_offsets(client, dict.fromkeys(partitions, EARLIEST_TIMESTAMP)))
    latest = list_offsets(client, dict.fromkeys(partitions, LATEST_TIMESTAMP))
    if spec.kind is OffsetKind.EARLIEST:
        return earliest
    if spec.kind is OffsetKind.LATEST:
        return latest
    if spec.kind in (OffsetKind.TIMESTAMP, OffsetKind.TIMESTAMPS):
        # A TIMESTAMP spec carries its timestamp; a TIMESTAMPS one its per-partition map.
        wanted = spec.per_partition or dict.fromkeys(partitions, cast(int, spec.timestamp))
        found = list_offsets(client, wanted)
        out = {}
        for tp in partitions:
            if found[tp] >= 0:
                out[tp] = found[tp]
            elif not starting or timestamp_strategy == "latest":
                out[tp] = latest[tp]
            else:
                raise OptionError(
                    f"{spec.option}: no record of {tp.topic}-{tp.partition} has a timestamp at or after {wanted[tp]} "
                    "(startingOffsetsByTimestampStrategy=latest starts such partitions at the end)"
                )
        return out
    out = {}
    for tp in partitions:
        offset = spec.per_partition[tp]
        if offset == EARLIEST_TIMESTAMP:
            offset = earliest[tp]
        elif offset == LATEST_TIMESTAMP:
            offset = latest[tp]
        elif offset < earliest[tp]:
            report_data_loss(
                fail_on_data_loss,
                f"{spec.option}: offset {offset} of {tp.topic}-{tp.partition} is before the log start {earliest[tp]}",
            )
            offset = earliest[tp]
        elif offset > latest[tp]:
            if starting:
                raise OptionError(
                    f"{spec.option}: offset {offset} of {tp.topic}-{tp.partition} is past the end of the log "
                    f"({latest[tp]})"
                )
            offset = latest[tp]  # never read past the high watermark
        out[tp] = offset
    return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None, max_records: int) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: with fewer ranges than `minPartitions`, each range
    is cut into parts in proportion to its size; any part is also cut to `max_records`."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    out = []
    for r in ranges:
        parts = 1
        if min_partitions is not None and len(ranges) < min_partitions:
            parts = max(math.floor(r.size / total * min_partitions + 0.5), 1)  # Java's Math.round
        parts = max(parts, -(-r.size // max_records))
        step = r.size / parts
        bounds = [r.start + round(step * i) for i in range(parts)] + [r.end]
        out += [OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds) if b > a]
    return out


def pack_ranges(ranges: list[OffsetRange], slots: int, max_records: int) -> list[tuple[OffsetRange, ...]]:
    """Ranges (each at most `max_records`, as `split_ranges` leaves them) grouped into tasks:
    as many tasks as `slots` (the cores that run them at once) or as `max_records` a task
    calls for, whichever is more, and never more than the ranges. Largest first, each range
    goes to the task with the fewest records so far, or to a task of its own where that one
    would pass `max_records`. Few small partitions on few cores then run in one wave of
    tasks instead of several: a Spark task costs its scheduling and a Python worker's
    round trip whatever it reads."""
    ranges = [r for r in ranges if r.size > 0]
    if not ranges:
        return []
    total = sum(r.size for r in ranges)
    wanted = min(len(ranges), max(slots, -(-total // max_records)))
    tasks: list[list[OffsetRange]] = [[] for _ in range(wanted)]
    sizes = [0] * wanted
    for r in sorted(ranges, key=lambda r: r.size, reverse=True):
        i = min(range(len(tasks)), key=sizes.__getitem__)
        if sizes[i] and sizes[i] + r.size > max_records:
            tasks.append([])
            sizes.append(0)
            i = len(tasks) - 1
        tasks[i].append(r)
        sizes[i] += r.size
    return sorted(tuple(sorted(task)) for task in tasks if task)


def starting_offsets(
    client: ProtocolClient, partitions: list[TopicPartition], options: ReadOptions, *, from_group: bool
) -> dict[TopicPartition, int]:
    """Where reading starts: startingOffsets (and its timestamp forms), overridden with
    `from_group` by the group's committed offsets where it has some."""
    starts = resolve_offsets(
        client,
        partitions,
        options.starting,
        starting=True,
        fail_on_data_loss=options.fail_on_data_loss,
        timestamp_strategy=options.timestamp_strategy,
    )
    if from_group:
        assert options.group_id is not None
        starts.update(committed_offsets(client, options.group_id, partitions))
    return starts


def plan_batch(options: ReadOptions) -> list[OffsetRange]:
    """The offset ranges of a batch read, resolved now against the cluster.

    With commitOffsets, reading starts at the group's committed offsets and each partition
    is one range, so that the task that read it can commit its end."""
    with connect(options) as client:
        partitions = discover_partitions(client, options.selection)
        if not partitions:
            return []
        starts = starting_offsets(client, partitions, options, from_group=options.commit_offsets)
        ends = resolve_offsets(
            client, partitions, options.ending, starting=False, fail_on_data_loss=options.fail_on_data_loss
        )
    ranges = []
    for tp in partitions:
        if ends[tp] < starts[tp]:
            raise OptionError(
                f"{options.ending.option}: {tp.topic}-{tp.partition} ends at {ends[tp]}, before its start {starts[tp]}"
            )
        ranges.append(OffsetRange(tp.topic, tp.partition, starts[tp], ends[tp]))
    if options.commit_offsets:
        return [r for r in ranges if r.size > 0]
    return split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
