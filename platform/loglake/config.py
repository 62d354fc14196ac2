"""Broker and topic configuration, with Kafka's property names and defaults.

A topic-level property (`segment.bytes`) falls back to its broker-level name
(`log.segment.bytes`) and then to Kafka's default, exactly as Kafka resolves them, so an
operator's existing server.properties and `--config k=v` habits carry over.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from loglake.errors import ErrorCode, KafkaError

LONG_MAX = 2**63 - 1


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"expected true or false, got {value!r}")


def _parse_choice(*choices: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        value = value.strip()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return parse


def _parse_policy(value: str) -> str:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"expected delete, compact or 'compact,delete', got {value!r}")
    return ",".join(sorted(set(parts)))


@dataclass(frozen=True)
class _TopicProperty:
    """One topic-level property: its broker-level fallback, Kafka's default, and its type."""

    name: str
    broker_name: str
    attr: str
    default: Any
    parse: Callable[[str], Any]
    minimum: int | None = None


TOPIC_PROPERTIES: tuple[_TopicProperty, ...] = (
    _TopicProperty("segment.bytes", "log.segment.bytes", "segment_bytes", 1073741824, int, 14),
    _TopicProperty("segment.ms", "log.roll.ms", "segment_ms", 604800000, int, 1),
    _TopicProperty("segment.index.bytes", "log.index.size.max.bytes", "segment_index_bytes", 10485760, int, 4),
    _TopicProperty("index.interval.bytes", "log.index.interval.bytes", "index_interval_bytes", 4096, int, 0),
    _TopicProperty("retention.ms", "log.retention.ms", "retention_ms", 604800000, int, -1),
    _TopicProperty("retention.bytes", "log.retention.bytes", "retention_bytes", -1, int, -1),
    _TopicProperty("cleanup.policy", "log.cleanup.policy", "cleanup_policy", "delete", _parse_policy),
    _TopicProperty("min.insync.replicas", "min.insync.replicas", "min_insync_replicas", 1, int, 1),
    _TopicProperty("max.message.bytes", "message.max.bytes", "max_message_bytes", 1048588, int, 0),
    _TopicProperty(
        "message.timestamp.type",
        "log.message.timestamp.type",
        "message_timestamp_type",
        "CreateTime",
        _parse_choice("CreateTime", "LogAppendTime"),
    ),
    _TopicProperty("flush.messages", "log.flush.interval.messages", "flush_messages", LONG_MAX, int, 1),
    _TopicProperty("flush.ms", "log.flush.interval.ms", "flush_ms", LONG_MAX, int, 0),
    _TopicProperty("delete.retention.ms", "log.cleaner.delete.retention.ms", "delete_retention_ms", 86400000, int, 0),
    _TopicProperty("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", "min_compaction_lag_ms", 0, int, 0),
    _TopicProperty("file.delete.delay.ms", "log.segment.delete.delay.ms", "file_delete_delay_ms", 60000, int, 0),
    _TopicProperty(
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
        "unclean_leader_election_enable",
        False,
        _parse_bool,
    ),
    _TopicProperty(
        "compression.type",
        "compression.type",
        "compression_type",
        "producer",
        _parse_choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
    ),
)
_BY_NAME = {p.name: p for p in TOPIC_PROPERTIES}


def _convert(prop: _TopicProperty, raw: Any) -> Any:
    try:
        value = prop.parse(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid value {raw!r} for {prop.name}: {exc}") from None
    if prop.minimum is not None and value < prop.minimum:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"invalid value {raw!r} for {prop.name}: must be >= {prop.minimum}")
    return value


@dataclass(frozen=True)
class LogConfig:
    """The effective configuration of one topic's logs (Kafka's LogConfig)."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    min_insync_replicas: int = 1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    file_delete_delay_ms: int = 60000
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"

    @classmethod
    def from_properties(cls, overrides: Mapping[str, str], defaults: LogConfig | None = None) -> LogConfig:
        """Apply topic-level properties (`segment.bytes=...`) on top of `defaults`."""
        base = defaults or cls()
        values = {f.name: getattr(base, f.name) for f in fields(cls)}
        for name, raw in overrides.items():
            prop = _BY_NAME.get(name)
            if prop is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"unknown topic config {name!r}")
            values[prop.attr] = _convert(prop, raw)
        return cls(**values)

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """The broker-wide defaults for topics, from `log.segment.bytes`-style names."""
        values: dict[str, Any] = {}
        for prop in TOPIC_PROPERTIES:
            raw = props.get(prop.broker_name)
            if raw is None and prop.name == "segment.ms" and "log.roll.hours" in props:
                raw = str(int(props["log.roll.hours"]) * 3600_000)
            if raw is None and prop.name == "retention.ms":
                if "log.retention.minutes" in props:
                    raw = str(int(props["log.retention.minutes"]) * 60_000)
                elif "log.retention.hours" in props:
                    raw = str(int(props["log.retention.hours"]) * 3600_000)
            if raw is not None:
                values[prop.attr] = _convert(prop, raw)
        return cls(**values)

    def to_properties(self) -> dict[str, str]:
        """Every topic-level property with its effective value, as Kafka's strings."""
        out = {}
        for prop in TOPIC_PROPERTIES:
            value = getattr(self, prop.attr)
            out[prop.name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")


def validate_topic_configs(overrides: Mapping[str, str]) -> dict[str, str]:
    """Check topic-level overrides by name and value; returns them as strings."""
    LogConfig.from_properties(overrides)
    return {k: str(v) for k, v in overrides.items()}


_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249


def validate_topic_name(name: str) -> None:
    """Kafka's rules: [a-zA-Z0-9._-], 1..249 characters, not '.' or '..'."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "topic name is empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name is {len(name)} characters; the limit is {MAX_TOPIC_NAME_LENGTH}",
        )
    if not _TOPIC_NAME.match(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} has characters outside [a-zA-Z0-9._-]",
        )


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a Java .properties file (key=value or key: value, # and ! comments)."""
    props: dict[str, str] = {}
    for raw in Path(path).read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"^([^=:\s]+)\s*[=:]\s*(.*)$", line)
        if not match:
            raise ValueError(f"{path}: cannot parse line {raw!r}")
        props[match.group(1)] = match.group(2).strip()
    return props


def parse_overrides(items: list[str]) -> dict[str, str]:
    """`key=value` strings (from --override / --config) to a dict."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"expected key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Listener:
    scheme: str
    host: str
    port: int

    @classmethod
    def parse(cls, spec: str) -> Listener:
        match = re.match(r"^([A-Za-z_]+)://([^:]*):(\d+)$", spec.strip())
        if not match:
            raise ValueError(f"cannot parse listener {spec!r}; expected SCHEME://host:port")
        return cls(match.group(1), match.group(2) or "0.0.0.0", int(match.group(3)))


@dataclass(frozen=True)
class BrokerConfig:
    """What a broker process needs, from server.properties plus --override."""

    broker_id: int = 0
    log_dirs: tuple[str, ...] = ("/tmp/loglake-logs",)
    listeners: tuple[Listener, ...] = (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    http_listeners: tuple[Listener, ...] = (Listener("http", "127.0.0.1", 8082),)
    zookeeper_connect: str = ""
    zookeeper_session_timeout_ms: int = 18000
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 1
    offsets_retention_minutes: int = 10080
    group_initial_rebalance_delay_ms: int = 3000
    replica_lag_time_max_ms: int = 30000
    log_flush_scheduler_interval_ms: int = 1000
    log_retention_check_interval_ms: int = 300000
    socket_request_max_bytes: int = 104857600
    log_defaults: LogConfig = field(default_factory=LogConfig)
    raw: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> BrokerConfig:
        def get(name: str, default: Any, parse: Callable[[str], Any] = int) -> Any:
            if name not in props:
                return default
            try:
                return parse(props[name])
            except ValueError as exc:
                raise ValueError(f"invalid value {props[name]!r} for {name}: {exc}") from None

        base = cls()
        log_dirs = props.get("log.dirs") or props.get("log.dir")
        return cls(
            broker_id=get("broker.id", base.broker_id),
            log_dirs=tuple(d.strip() for d in log_dirs.split(",") if d.strip()) if log_dirs else base.log_dirs,
            listeners=tuple(Listener.parse(s) for s in props["listeners"].split(",") if s.strip())
            if props.get("listeners")
            else base.listeners,
            http_listeners=tuple(Listener.parse(s) for s in props["http.listeners"].split(",") if s.strip())
            if props.get("http.listeners")
            else base.http_listeners,
            zookeeper_connect=props.get("zookeeper.connect", ""),
            zookeeper_session_timeout_ms=get("zookeeper.session.timeout.ms", base.zookeeper_session_timeout_ms),
            num_partitions=get("num.partitions", base.num_partitions),
            default_replication_factor=get("default.replication.factor", base.default_replication_factor),
            auto_create_topics_enable=get("auto.create.topics.enable", base.auto_create_topics_enable, _parse_bool),
            delete_topic_enable=get("delete.topic.enable", base.delete_topic_enable, _parse_bool),
            offsets_topic_num_partitions=get("offsets.topic.num.partitions", base.offsets_topic_num_partitions),
            offsets_topic_replication_factor=get(
                "offsets.topic.replication.factor", base.offsets_topic_replication_factor
            ),
            offsets_retention_minutes=get("offsets.retention.minutes", base.offsets_retention_minutes),
            group_initial_rebalance_delay_ms=get(
                "group.initial.rebalance.delay.ms", base.group_initial_rebalance_delay_ms
            ),
            replica_lag_time_max_ms=get("replica.lag.time.max.ms", base.replica_lag_time_max_ms),
            log_flush_scheduler_interval_ms=get(
                "log.flush.scheduler.interval.ms", base.log_flush_scheduler_interval_ms
            ),
            log_retention_check_interval_ms=get(
                "log.retention.check.interval.ms", base.log_retention_check_interval_ms
            ),
            socket_request_max_bytes=get("socket.request.max.bytes", base.socket_request_max_bytes),
            log_defaults=LogConfig.from_broker_properties(props),
            raw=dict(props),
        )

    @classmethod
    def load(cls, path: str | Path | None, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        props = load_properties(path) if path else {}
        props.update(overrides or {})
        return cls.from_properties(props)
