"""The source's options, with the names and meanings of Spark's Kafka source, parsed and
checked before anything talks to a broker. Every error names the option at fault."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import overload

from loglake.protocol import IsolationLevel
from loglake.security.client import SECURITY_PROPERTIES, client_security
from loglake.spark.kafka_columns import default_columns
from loglake.spark.protocol_client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ProtocolClient,
    TopicPartition,
    parse_bootstrap_servers,
)

# Spark's Kafka source sets no such bound; a loglake default keeps any one input partition
# (one Python worker's task) to a few hundred megabytes at most.
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_MAX_PARTITION_FETCH_BYTES = 4 * 1024 * 1024


_ISOLATION_LEVELS = {
    "read_committed": IsolationLevel.READ_COMMITTED,
    "read_uncommitted": IsolationLevel.READ_UNCOMMITTED,
}


class OptionError(ValueError):
    """An option is missing, malformed or contradicts another (raised before any job)."""


class OffsetKind(Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    # per-partition offsets; -2 earliest, -1 latest
    SPECIFIC = "specific"
    # one timestamp for every partition
    TIMESTAMP = "timestamp"
    # per-partition timestamps
    TIMESTAMPS = "timestamps"


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends, before it is resolved against the log."""

    kind: OffsetKind
    option: str  # the option it came from, for error messages
    per_partition: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True)
class TopicSelection:
    """Exactly one of subscribe / subscribePattern / assign."""

    option: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True)
class ReadOptions:
    bootstrap_servers: str
    selection: TopicSelection
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    # the Kafka source's columns to build, in order (reader(schema) picks them)
    columns: tuple[str, ...]
    min_partitions: int | None
    max_records_per_partition: int
    max_partition_fetch_bytes: int
    request_timeout_ms: int
    # startingOffsetsByTimestampStrategy: "error" or "latest" when no offset has that timestamp
    timestamp_strategy: str
    max_offsets_per_trigger: int | None
    group_id: str | None
    commit_offsets: bool
    # kafka.isolation.level: read_committed by default
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED
    # kafka.security.protocol, kafka.sasl.*, kafka.ssl.* as Spark's Kafka source takes them
    # (kept as properties: options travel to executors pickled, SSL contexts do not).
    security: tuple[tuple[str, str], ...] = ()

    def client(self) -> ProtocolClient:
        """A protocol client for these options (bootstrap servers, timeout, isolation level, security)."""
        return ProtocolClient(
            self.bootstrap_servers,
            request_timeout_ms=self.request_timeout_ms,
            isolation_level=self.isolation_level,
            security=client_security(dict(self.security)),
        )


def security_options(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """kafka.security.protocol, kafka.sasl.mechanism, kafka.sasl.jaas.config, kafka.ssl.* (PEM),
    checked now so that a mistake fails the query before it starts."""
    lowered = {k.lower(): v for k, v in opts.items()}
    props = {p: lowered[f"kafka.{p}"] for p in SECURITY_PROPERTIES if f"kafka.{p}" in lowered}
    try:
        client_security(props)
    except ValueError as exc:
        raise OptionError(f"kafka.* security options: {exc}") from None
    return tuple(sorted(props.items()))


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    # Spark's options are case-insensitive.
    return {k.lower(): v for k, v in options.items()}


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise OptionError(f"{name} must be true or false, not {raw!r}")
    return raw.strip().lower() == "true"


@overload
def _positive_int(opts: dict[str, str], name: str, default: int) -> int: ...
@overload
def _positive_int(opts: dict[str, str], name: str, default: None) -> int | None: ...
def _positive_int(opts: dict[str, str], name: str, default: int | None) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"{name} must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise OptionError(f"{name} must be a positive integer, not {raw!r}")
    return value


def _json_object(name: str, raw: str) -> dict:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{name}: malformed JSON ({exc}): {raw!r}") from None
    if not isinstance(value, dict):
        raise OptionError(f"{name}: expected a JSON object, got {raw!r}")
    return value


def parse_partition_map(name: str, raw: str) -> dict[TopicPartition, int]:
    """Spark's per-partition JSON, {"topic": {"0": 23, "1": -1}}."""
    out: dict[TopicPartition, int] = {}
    for topic, partitions in _json_object(name, raw).items():
        if not isinstance(partitions, dict):
            raise OptionError(f'{name}: expected {{"{topic}": {{"<partition>": <number>}}}}, got {raw!r}')
        for partition, value in partitions.items():
            if not str(partition).lstrip("-").isdigit() or isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(f"{name}: partition {partition!r} of {topic!r} must map to an integer, got {raw!r}")
            out[TopicPartition(topic, int(partition))] = value
    return out


def _selection(opts: dict[str, str]) -> TopicSelection:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in opts]
    if len(given) != 1:
        what = "One" if not given else "Only one"
        raise OptionError(
            f"{what} of the options subscribe, subscribePattern, assign must be given"
            + (f" (got {', '.join(given)})" if given else "")
        )
    (name,) = given
    raw = opts[name.lower()]
    if name == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError("subscribe: no topic given")
        return TopicSelection(name, topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"subscribePattern: not a regular expression ({exc}): {raw!r}") from None
        return TopicSelection(name, pattern=raw)
    partitions = []
    for topic, numbers in _json_object("assign", raw).items():
        if not isinstance(numbers, list) or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers):
            raise OptionError(f'assign: expected {{"{topic}": [<partition>, ...]}}, got {raw!r}')
        partitions += [TopicPartition(topic, n) for n in numbers]
    if not partitions:
        raise OptionError(f"assign: no partition given: {raw!r}")
    return TopicSelection(name, partitions=tuple(sorted(set(partitions))))


def _timestamp(name: str, raw: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise OptionError(f"{name} must be milliseconds since the epoch, not {raw!r}") from None


def _offset_spec(opts: dict[str, str], prefix: str, default: OffsetKind, streaming: bool) -> OffsetSpec:
    """startingOffsets / endingOffsets and their timestamp forms; Spark's precedence:
    <prefix>Timestamp, then <prefix>OffsetsByTimestamp, then <prefix>Offsets."""
    name = f"{prefix}Timestamp"
    if name.lower() in opts:
        return OffsetSpec(OffsetKind.TIMESTAMP, name, timestamp=_timestamp(name, opts[name.lower()]))
    name = f"{prefix}OffsetsByTimestamp"
    if name.lower() in opts:
        return OffsetSpec(OffsetKind.TIMESTAMPS, name, per_partition=parse_partition_map(name, opts[name.lower()]))
    name = f"{prefix}Offsets"
    raw = opts.get(name.lower())
    if raw is None:
        return OffsetSpec(default, name)
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        kind = OffsetKind(word)
        if not streaming and prefix == "starting" and kind is OffsetKind.LATEST:
            raise OptionError("startingOffsets: latest is not allowed in batch queries")
        if prefix == "ending" and kind is OffsetKind.EARLIEST:
            raise OptionError("endingOffsets: earliest is not allowed")
        return OffsetSpec(kind, name)
    offsets = parse_partition_map(name, raw)
    # -1 (latest) cannot start a batch query, -2 (earliest) cannot end one.
    forbidden = {EARLIEST_TIMESTAMP} if prefix == "ending" else {LATEST_TIMESTAMP} if not streaming else set()
    for tp, offset in offsets.items():
        if offset in forbidden or offset < EARLIEST_TIMESTAMP:
            raise OptionError(f"{name}: offset {offset} for {tp.topic}-{tp.partition} is not allowed here")
    return OffsetSpec(OffsetKind.SPECIFIC, name, per_partition=offsets)


def parse_include_headers(options: Mapping[str, str]) -> bool:
    """includeHeaders alone: it decides the schema, which Spark asks for before the reader."""
    return _bool(_lower(options), "includeHeaders", False)


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check and parse a read's options; raises OptionError naming the option."""
    opts = _lower(options)
    servers = opts.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("kafka.bootstrap.servers must be given")
    try:
        parse_bootstrap_servers(servers)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    selection = _selection(opts)
    starting = _offset_spec(opts, "starting", OffsetKind.LATEST if streaming else OffsetKind.EARLIEST, streaming)
    if streaming and any(name in opts for name in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
        raise OptionError("endingOffsets / endingTimestamp are for batch queries only")
    ending = _offset_spec(opts, "ending", OffsetKind.LATEST, streaming)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError(f"startingOffsetsByTimestampStrategy must be error or latest, not {strategy!r}")
    group_id = opts.get("kafka.group.id") or None
    commit_offsets = _bool(opts, "commitOffsets", False)
    if commit_offsets and group_id is None:
        raise OptionError("commitOffsets=true needs kafka.group.id")
    isolation = opts.get("kafka.isolation.level", "read_committed").strip().lower()
    if isolation not in _ISOLATION_LEVELS:
        raise OptionError(f"kafka.isolation.level must be read_committed or read_uncommitted, not {isolation!r}")
    return ReadOptions(
        security=security_options(opts),
        bootstrap_servers=servers,
        selection=selection,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        columns=default_columns(parse_include_headers(opts)),
        min_partitions=_positive_int(opts, "minPartitions", None),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition", DEFAULT_MAX_RECORDS_PER_PARTITION),
        max_partition_fetch_bytes=_positive_int(
            opts, "kafka.max.partition.fetch.bytes", DEFAULT_MAX_PARTITION_FETCH_BYTES
        ),
        request_timeout_ms=_positive_int(opts, "kafka.request.timeout.ms", 30_000),
        timestamp_strategy=strategy,
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger", None),
        group_id=group_id,
        commit_offsets=commit_offsets,
        isolation_level=_ISOLATION_LEVELS[isolation],
    )
