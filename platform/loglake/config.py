"""Broker and topic configuration, with Kafka's property names and defaults.

A topic-level property (`segment.bytes`) falls back to its broker-level name
(`log.segment.bytes`) and then to Kafka's default, exactly as Kafka resolves them, so an
operator's existing server.properties and `--config k=v` habits carry over.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from loglake.config_defs import (
    LONG_MAX,
    ConfigKey,
    ConfigType,
    ConfigValueError,
    Rule,
    at_least,
    between,
    items_of,
    one_of,
    to_config_string,
)
from loglake.errors import ErrorCode, KafkaError
from loglake.security.listeners import DEFAULT_PROTOCOL_MAP, SecurityProtocol, parse_protocol_map


def _parse_bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"expected true or false, got {value!r}")


# A broker process's --log-level choices (`python -m ingest_gateway`, `loglake broker start`).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

HOUR_MS = 3600_000
MINUTE_MS = 60_000
_ZSTD_MIN_LEVEL, _ZSTD_MAX_LEVEL = -131072, 22
_MESSAGE_FORMAT_VERSION = re.compile(r"^(0\.(8\.[0-2]|9\.0|10\.[0-2]|11\.0)|[12]\.[0-8]|3\.[0-9])(\.\d+)?(-IV\d+)?$")
_THROTTLED_REPLICA = re.compile(r"^\d+:\d+$")


def _gzip_level(level: int) -> str | None:
    return None if level == -1 or 1 <= level <= 9 else "Value must be -1 (the codec's default) or between 1 and 9"


def _message_format_version(version: str) -> str | None:
    # Kafka 3.x accepts any known release and ignores it (the log holds format v2 only).
    return None if _MESSAGE_FORMAT_VERSION.match(version) else "not a Kafka release version such as 3.0-IV1"


def _throttled_replicas(items: list[str]) -> str | None:
    if items == ["*"] or all(_THROTTLED_REPLICA.match(i) for i in items):
        return None
    return "must be the literal '*' or a list of replicas in the format [partitionId]:[brokerId],..."


@dataclass(frozen=True)
class LogConfig:
    """The effective configuration of one topic's logs (Kafka's LogConfig). Lists are kept
    as their comma-joined strings."""

    segment_bytes: int = 1073741824
    segment_ms: int = 7 * 24 * HOUR_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * HOUR_MS
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    min_insync_replicas: int = 1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    file_delete_delay_ms: int = 60000
    unclean_leader_election_enable: bool = False
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    preallocate: bool = False
    message_format_version: str = "3.0-IV1"
    message_downconversion_enable: bool = True
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False
    # Not Kafka's: who compacts the topic, the broker's cleaner or the Spark job (jobs/compact.py).
    loglake_compaction_executor: str = "broker"

    @classmethod
    def from_properties(cls, overrides: Mapping[str, str], defaults: LogConfig | None = None) -> LogConfig:
        """Apply topic-level properties (`segment.bytes=...`) on top of `defaults`."""
        base = defaults or cls()
        values = {f.name: getattr(base, f.name) for f in fields(cls)}
        for name, raw in overrides.items():
            prop = _BY_NAME.get(name)
            if prop is None:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
            values[prop.attr] = _convert(prop.key, raw)
        config = cls(**values)
        config._check_consistency()
        return config

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """The broker-wide defaults for topics, from `log.segment.bytes`-style names (the
        first synonym present wins: log.retention.ms, then .minutes, then .hours)."""
        values: dict[str, Any] = {}
        for prop in TOPIC_PROPERTIES:
            for synonym in prop.synonyms:
                if synonym.name in props:
                    values[prop.attr] = synonym.to_topic_value(prop.key, props[synonym.name])
                    break
        return cls(**values)

    def to_properties(self) -> dict[str, str]:
        """Every topic-level property with its effective value, as Kafka's strings."""
        return {prop.name: to_config_string(getattr(self, prop.attr)) or "" for prop in TOPIC_PROPERTIES}

    def _check_consistency(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise KafkaError(
                ErrorCode.INVALID_CONFIG,
                f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})",
            )

    # Cached: an append asks on every request (the cache lives in the instance's __dict__,
    # which a frozen dataclass leaves writable to cached_property).
    @cached_property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @cached_property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")


@dataclass(frozen=True)
class BrokerSynonym:
    """A broker-level name of a topic property; `unit_ms` scales hours/minutes to ms."""

    name: str
    unit_ms: int = 1

    def to_topic_value(self, key: ConfigKey, raw: str) -> Any:
        text = raw
        if self.unit_ms != 1:
            try:
                text = str(int(raw.strip()) * self.unit_ms)
            except ValueError:
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {self.name}: expected an int"
                ) from None
        return _convert(replace(key, name=self.name), text)


@dataclass(frozen=True)
class _TopicProperty:
    """One topic-level property: its definition, LogConfig field and broker-level synonyms
    (highest precedence first, as Kafka's ServerTopicConfigSynonyms)."""

    key: ConfigKey
    attr: str
    synonyms: tuple[BrokerSynonym, ...]

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def broker_name(self) -> str | None:
        """The main broker synonym (Kafka's TOPIC_CONFIG_SYNONYMS), None if there is none."""
        return self.synonyms[0].name if self.synonyms else None


def _prop(
    name: str, type_: ConfigType, doc: str, rule: Rule | None = None, *synonyms: str | BrokerSynonym
) -> _TopicProperty:
    attr = name.replace(".", "_")
    syns = tuple(s if isinstance(s, BrokerSynonym) else BrokerSynonym(s) for s in synonyms)
    return _TopicProperty(ConfigKey(name, type_, getattr(LogConfig, attr), doc, rule), attr, syns)


_T = ConfigType
TOPIC_PROPERTIES: tuple[_TopicProperty, ...] = (
    _prop(
        "loglake.compaction.executor",
        _T.STRING,
        "loglake's own: who compacts this topic when cleanup.policy has compact: broker (the broker's "
        "log cleaner threads) or spark (jobs/compact.py; the broker's cleaner skips the topic).",
        one_of("broker", "spark"),
    ),
    _prop(
        "cleanup.policy",
        _T.LIST,
        "delete and/or compact: what happens to old segments.",
        items_of("compact", "delete"),
        "log.cleanup.policy",
    ),
    _prop(
        "compression.type",
        _T.STRING,
        "Final compression of the topic's batches (stored; batches keep the producer's codec for now).",
        one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
        "compression.type",
    ),
    _prop("compression.gzip.level", _T.INT, "Compression level for gzip.", _gzip_level, "compression.gzip.level"),
    _prop("compression.lz4.level", _T.INT, "Compression level for lz4.", between(1, 17), "compression.lz4.level"),
    _prop(
        "compression.zstd.level",
        _T.INT,
        "Compression level for zstd.",
        between(_ZSTD_MIN_LEVEL, _ZSTD_MAX_LEVEL),
        "compression.zstd.level",
    ),
    _prop(
        "delete.retention.ms",
        _T.LONG,
        "How long delete tombstones are kept in compacted topics.",
        at_least(0),
        "log.cleaner.delete.retention.ms",
    ),
    _prop(
        "file.delete.delay.ms",
        _T.LONG,
        "Time to wait before deleting a file from the filesystem.",
        at_least(0),
        "log.segment.delete.delay.ms",
    ),
    _prop(
        "flush.messages",
        _T.LONG,
        "Messages written to a partition before its log is fsynced.",
        at_least(1),
        "log.flush.interval.messages",
    ),
    _prop(
        "flush.ms",
        _T.LONG,
        "Time after which a partition's log is fsynced.",
        at_least(0),
        "log.flush.interval.ms",
        "log.flush.scheduler.interval.ms",
    ),
    _prop(
        "follower.replication.throttled.replicas",
        _T.LIST,
        "Replicas (partition:broker, or *) whose follower fetches follower.replication.throttled.rate bounds.",
        _throttled_replicas,
    ),
    _prop(
        "index.interval.bytes",
        _T.INT,
        "Bytes between entries of the offset index.",
        at_least(0),
        "log.index.interval.bytes",
    ),
    _prop(
        "leader.replication.throttled.replicas",
        _T.LIST,
        "Replicas (partition:broker, or *) whose leader sends at most leader.replication.throttled.rate.",
        _throttled_replicas,
    ),
    _prop(
        "local.retention.bytes",
        _T.LONG,
        "Local bytes kept when tiered storage is on (-2: retention.bytes).",
        at_least(-2),
        "log.local.retention.bytes",
    ),
    _prop(
        "local.retention.ms",
        _T.LONG,
        "Local time kept when tiered storage is on (-2: retention.ms).",
        at_least(-2),
        "log.local.retention.ms",
    ),
    _prop(
        "max.compaction.lag.ms",
        _T.LONG,
        "Longest time a message stays uncompacted.",
        at_least(1),
        "log.cleaner.max.compaction.lag.ms",
    ),
    _prop("max.message.bytes", _T.INT, "Largest record batch size allowed.", at_least(0), "message.max.bytes"),
    _prop(
        "message.downconversion.enable",
        _T.BOOLEAN,
        "Whether old consumers get down-converted batches.",
        None,
        "log.message.downconversion.enable",
    ),
    _prop(
        "message.format.version",
        _T.STRING,
        "Ignored since Kafka 3.0 (the log holds format v2 only).",
        _message_format_version,
        "log.message.format.version",
    ),
    _prop(
        "message.timestamp.after.max.ms",
        _T.LONG,
        "How far a CreateTime may be ahead of the broker's clock.",
        at_least(0),
        "log.message.timestamp.after.max.ms",
    ),
    _prop(
        "message.timestamp.before.max.ms",
        _T.LONG,
        "How far a CreateTime may be behind the broker's clock.",
        at_least(0),
        "log.message.timestamp.before.max.ms",
    ),
    _prop(
        "message.timestamp.difference.max.ms",
        _T.LONG,
        "Deprecated: both bounds of a CreateTime's distance.",
        at_least(0),
        "log.message.timestamp.difference.max.ms",
    ),
    _prop(
        "message.timestamp.type",
        _T.STRING,
        "CreateTime or LogAppendTime.",
        one_of("CreateTime", "LogAppendTime"),
        "log.message.timestamp.type",
    ),
    _prop(
        "min.cleanable.dirty.ratio",
        _T.DOUBLE,
        "Dirty share of a log that makes it eligible for compaction.",
        between(0, 1),
        "log.cleaner.min.cleanable.ratio",
    ),
    _prop(
        "min.compaction.lag.ms",
        _T.LONG,
        "Shortest time a message stays uncompacted.",
        at_least(0),
        "log.cleaner.min.compaction.lag.ms",
    ),
    _prop(
        "min.insync.replicas", _T.INT, "In-sync replicas an acks=all write needs.", at_least(1), "min.insync.replicas"
    ),
    _prop("preallocate", _T.BOOLEAN, "Preallocate segment files.", None, "log.preallocate"),
    _prop("remote.log.copy.disable", _T.BOOLEAN, "Stop copying segments to tiered storage.", None),
    _prop("remote.log.delete.on.disable", _T.BOOLEAN, "Delete remote data when tiered storage is turned off.", None),
    _prop(
        "remote.storage.enable",
        _T.BOOLEAN,
        "Tiered storage for the topic: old segments go to its Delta table (jobs/tier.py).",
        None,
    ),
    _prop(
        "retention.bytes",
        _T.LONG,
        "Largest size of a partition's log before old segments go (-1: no limit).",
        None,
        "log.retention.bytes",
    ),
    _prop(
        "retention.ms",
        _T.LONG,
        "How long a log segment is kept (-1: no limit).",
        at_least(-1),
        "log.retention.ms",
        BrokerSynonym("log.retention.minutes", MINUTE_MS),
        BrokerSynonym("log.retention.hours", HOUR_MS),
    ),
    _prop("segment.bytes", _T.INT, "Size of a log segment file.", at_least(14), "log.segment.bytes"),
    _prop("segment.index.bytes", _T.INT, "Size of a segment's offset index.", at_least(4), "log.index.size.max.bytes"),
    _prop(
        "segment.jitter.ms",
        _T.LONG,
        "Random jitter subtracted from segment.ms.",
        at_least(0),
        "log.roll.jitter.ms",
        BrokerSynonym("log.roll.jitter.hours", HOUR_MS),
    ),
    _prop(
        "segment.ms",
        _T.LONG,
        "Time after which a segment is rolled even if not full.",
        at_least(1),
        "log.roll.ms",
        BrokerSynonym("log.roll.hours", HOUR_MS),
    ),
    _prop(
        "unclean.leader.election.enable",
        _T.BOOLEAN,
        "Whether an out-of-sync replica may become leader.",
        None,
        "unclean.leader.election.enable",
    ),
)
_BY_NAME = {p.name: p for p in TOPIC_PROPERTIES}


def topic_property(name: str) -> _TopicProperty | None:
    return _BY_NAME.get(name)


def _convert(key: ConfigKey, raw: Any) -> Any:
    if not isinstance(raw, str):
        raw = to_config_string(raw) or ""
    try:
        value = key.parse(raw)
    except ConfigValueError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    return ",".join(value) if key.type == ConfigType.LIST else value


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


def _parse_listeners(value: str) -> tuple[Listener, ...]:
    listeners = tuple(Listener.parse(s) for s in value.split(",") if s.strip())
    names = [listener.scheme for listener in listeners]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"each listener needs its own name; {', '.join(repeated)} repeats")
    return listeners


def _listener_security(props: Mapping[str, str], listeners: tuple[Listener, ...]) -> dict[str, Any]:
    """Kafka's checks of listener.security.protocol.map, advertised.listeners and
    inter.broker.listener.name."""
    protocol_map = parse_protocol_map(props.get("listener.security.protocol.map"))
    unmapped = [listener.scheme for listener in listeners if listener.scheme not in protocol_map]
    if unmapped:
        raise ValueError(f"listener.security.protocol.map has no security protocol for listener(s) {unmapped}")
    advertised = _parse_listeners(props["advertised.listeners"]) if props.get("advertised.listeners") else ()
    names = {listener.scheme for listener in listeners}
    strangers = [a.scheme for a in advertised if a.scheme not in names]
    if strangers:
        raise ValueError(f"advertised.listeners names listener(s) {strangers} that are not in listeners")
    default_inter = "PLAINTEXT" if "PLAINTEXT" in names else listeners[0].scheme
    inter = props.get("inter.broker.listener.name", default_inter)
    if inter not in names:
        raise ValueError(f"inter.broker.listener.name={inter} must be one of the listeners {sorted(names)}")
    if advertised and inter not in {a.scheme for a in advertised}:
        raise ValueError(f"advertised.listeners must include the inter-broker listener {inter}")
    return {"protocol_map": protocol_map, "advertised_listeners": advertised, "inter_broker_listener_name": inter}


def advertised_listeners(props: Mapping[str, str]) -> tuple[Listener, ...]:
    """What `props` advertise (advertised.listeners, else listeners), by Kafka's listener
    checks; ValueError if they fail (a dynamic advertised.listeners is checked so)."""
    listeners = _parse_listeners(props["listeners"]) if props.get("listeners") else BrokerConfig.listeners
    return _listener_security(props, listeners)["advertised_listeners"] or listeners


@dataclass(frozen=True)
class BrokerConfig:
    """What a broker process needs, from server.properties plus --override."""

    broker_id: int = 0
    rack: str | None = None
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
    # Security: each listener name's protocol, what is advertised, which listener brokers use.
    protocol_map: Mapping[str, SecurityProtocol] = field(default_factory=lambda: dict(DEFAULT_PROTOCOL_MAP))
    advertised_listeners: tuple[Listener, ...] = ()
    inter_broker_listener_name: str = "PLAINTEXT"

    def security_protocol(self, listener: Listener) -> SecurityProtocol:
        return self.protocol_map[listener.scheme]

    @property
    def advertised(self) -> tuple[Listener, ...]:
        """What clients are told: advertised.listeners, else the listeners themselves."""
        return self.advertised_listeners or self.listeners

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
        listeners = _parse_listeners(props["listeners"]) if props.get("listeners") else base.listeners
        return cls(
            broker_id=get("broker.id", base.broker_id),
            rack=props.get("broker.rack") or None,
            log_dirs=tuple(d.strip() for d in log_dirs.split(",") if d.strip()) if log_dirs else base.log_dirs,
            listeners=listeners,
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
            **_listener_security(props, listeners),
        )

    @classmethod
    def load(cls, path: str | Path | None, overrides: Mapping[str, str] | None = None) -> BrokerConfig:
        props = load_properties(path) if path else {}
        props.update(overrides or {})
        return cls.from_properties(props)
