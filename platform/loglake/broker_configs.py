"""Broker configs: their definitions and the dynamic layers over server.properties.

Kafka resolves a broker config from four layers, highest first: the dynamic config of this
broker (/config/brokers/<id>), the dynamic cluster-wide default (/config/brokers/<default>),
the static server.properties (plus --override), and the built-in default. Only some configs
may change at run time; loglake takes dynamically the ones it can apply without a restart:
the broker-level defaults of topic configs (`log.retention.ms`, `log.segment.bytes`,
`message.max.bytes`, ...). The others are read-only, and an update of one is refused as
Kafka refuses it (INVALID_REQUEST, "Cannot update these configs dynamically").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from loglake.config import TOPIC_PROPERTIES, Listener, LogConfig, advertised_listeners
from loglake.config_defs import (
    LONG_MAX,
    ConfigKey,
    ConfigSource,
    ConfigType,
    ConfigValueError,
    at_least,
    one_of,
    to_config_string,
)
from loglake.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

# The entity names under /config/brokers: a broker id, or this for the cluster-wide default.
DEFAULT_ENTITY = "<default>"
# replica.selector.class values (Kafka's class names): consumers read from the leader, or
# from an in-sync replica in their rack (KIP-392).
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

_T = ConfigType
# The static broker configs loglake reads, with the defaults it applies.
_STATIC_KEYS = (
    ConfigKey("broker.id", _T.INT, -1, "This broker's id."),
    ConfigKey("broker.rack", _T.STRING, None, "This broker's rack: replicas of a partition go to different racks."),
    ConfigKey("log.dirs", _T.STRING, None, "Directories holding the log data."),
    ConfigKey("log.dir", _T.STRING, "/tmp/loglake-logs", "The log directory, if log.dirs is not set."),
    ConfigKey("listeners", _T.STRING, "PLAINTEXT://127.0.0.1:9092", "The Kafka protocol listeners."),
    ConfigKey("http.listeners", _T.STRING, "http://127.0.0.1:8082", "The REST (HTTP) listeners (loglake's own)."),
    ConfigKey(
        "rsm.config.lake.root",
        _T.STRING,
        None,
        "Tiered storage (remote.storage.enable): the lake's root path or URI; topic T's Delta table is <root>/T.",
    ),
    ConfigKey("zookeeper.connect", _T.STRING, None, "ZooKeeper connection string; none runs a standalone broker."),
    ConfigKey("zookeeper.session.timeout.ms", _T.INT, 18000, "ZooKeeper session timeout."),
    ConfigKey("num.partitions", _T.INT, 1, "Partitions of an auto-created topic.", at_least(1)),
    ConfigKey("default.replication.factor", _T.INT, 1, "Replication factor of an auto-created topic."),
    ConfigKey("auto.create.topics.enable", _T.BOOLEAN, True, "Create a topic on first metadata request for it."),
    ConfigKey("delete.topic.enable", _T.BOOLEAN, True, "Whether topics may be deleted."),
    ConfigKey("auto.leader.rebalance.enable", _T.BOOLEAN, True, "Move leadership back to preferred replicas."),
    ConfigKey("leader.imbalance.check.interval.seconds", _T.LONG, 300, "How often preferred leaders are checked."),
    ConfigKey("offsets.topic.num.partitions", _T.INT, 50, "Partitions of __consumer_offsets."),
    ConfigKey("offsets.topic.replication.factor", _T.SHORT, 1, "Replication factor of __consumer_offsets."),
    ConfigKey("offsets.retention.minutes", _T.INT, 10080, "How long committed offsets of empty groups are kept."),
    ConfigKey("offsets.retention.check.interval.ms", _T.LONG, 600000, "How often stale offsets are checked."),
    ConfigKey("offset.metadata.max.bytes", _T.INT, 4096, "Largest metadata string of an offset commit."),
    ConfigKey("group.initial.rebalance.delay.ms", _T.INT, 3000, "Wait for more members before a first rebalance."),
    ConfigKey("group.min.session.timeout.ms", _T.INT, 6000, "Smallest session timeout a member may ask for."),
    ConfigKey("group.max.session.timeout.ms", _T.INT, 1800000, "Largest session timeout a member may ask for."),
    ConfigKey("replica.lag.time.max.ms", _T.LONG, 30000, "A follower not caught up for this long leaves the ISR."),
    ConfigKey("replica.fetch.wait.max.ms", _T.INT, 500, "Longest wait of a follower's fetch."),
    ConfigKey("replica.fetch.min.bytes", _T.INT, 1, "Bytes a follower's fetch waits for."),
    ConfigKey("replica.fetch.max.bytes", _T.INT, 1048576, "Bytes a follower fetches per partition."),
    ConfigKey("replica.fetch.response.max.bytes", _T.INT, 10485760, "Bytes of a follower's fetch response."),
    ConfigKey("replica.fetch.backoff.ms", _T.INT, 1000, "Pause of a follower after a fetch error."),
    ConfigKey("replica.socket.timeout.ms", _T.INT, 30000, "Timeout of a follower's fetch requests."),
    ConfigKey(
        "leader.replication.throttled.rate",
        _T.LONG,
        LONG_MAX,
        "Bytes/s a leader sends to the followers of its throttled replicas (topic config "
        "leader.replication.throttled.replicas).",
        at_least(0),
    ),
    ConfigKey(
        "follower.replication.throttled.rate",
        _T.LONG,
        LONG_MAX,
        "Bytes/s a follower fetches for its throttled replicas (topic config follower.replication.throttled.replicas).",
        at_least(0),
    ),
    ConfigKey(
        "replica.selector.class",
        _T.STRING,
        None,
        "Which replica consumers read from (KIP-392): unset for the leader, or "
        "org.apache.kafka.common.replica.RackAwareReplicaSelector for an in-sync replica in the consumer's rack.",
        one_of(LEADER_SELECTOR, RACK_AWARE_REPLICA_SELECTOR),
    ),
    ConfigKey("log.flush.scheduler.interval.ms", _T.LONG, 1000, "How often logs are checked for a due flush."),
    ConfigKey("log.retention.check.interval.ms", _T.LONG, 300000, "How often logs are checked for deletion."),
    ConfigKey("socket.request.max.bytes", _T.INT, 104857600, "Largest request the broker reads."),
    # Security (docs/security.md). Passwords are PASSWORD: DescribeConfigs never shows them.
    ConfigKey("listener.security.protocol.map", _T.STRING, None, "Each listener name's security protocol."),
    ConfigKey("advertised.listeners", _T.STRING, None, "The listeners registered for clients (default: listeners)."),
    ConfigKey("inter.broker.listener.name", _T.STRING, None, "The listener brokers reach each other on."),
    ConfigKey("sasl.enabled.mechanisms", _T.LIST, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "SASL mechanisms offered."),
    ConfigKey(
        "sasl.mechanism.inter.broker.protocol", _T.STRING, None, "The SASL mechanism brokers use with each other."
    ),
    ConfigKey("sasl.jaas.config", _T.PASSWORD, None, "JAAS login: the inter-broker SASL username and password."),
    ConfigKey("connections.max.reauth.ms", _T.LONG, 0, "SASL session lifetime (0: no re-authentication)."),
    ConfigKey("ssl.keystore.type", _T.STRING, "PEM", "PEM only."),
    ConfigKey("ssl.keystore.location", _T.STRING, None, "PEM file with the certificate chain and private key."),
    ConfigKey("ssl.key.password", _T.PASSWORD, None, "The private key's password."),
    ConfigKey("ssl.truststore.type", _T.STRING, "PEM", "PEM only."),
    ConfigKey("ssl.truststore.location", _T.STRING, None, "PEM bundle of trusted CAs."),
    ConfigKey(
        "ssl.client.auth", _T.STRING, "none", "Ask for client certificates.", one_of("none", "requested", "required")
    ),
    ConfigKey("ssl.enabled.protocols", _T.LIST, "TLSv1.2,TLSv1.3", "TLS versions."),
    ConfigKey("ssl.cipher.suites", _T.LIST, None, "OpenSSL cipher names."),
    ConfigKey("ssl.endpoint.identification.algorithm", _T.STRING, "https", "Verify other brokers' host names."),
    ConfigKey("authorizer.class.name", _T.STRING, None, "Kafka's AclAuthorizer (or StandardAuthorizer) turns ACLs on."),
    ConfigKey("super.users", _T.STRING, None, "Principals allowed everything (User:a;User:b)."),
    ConfigKey("allow.everyone.if.no.acl.found", _T.BOOLEAN, False, "Allow resources no ACL matches."),
    ConfigKey("http.authentication.method", _T.STRING, "NONE", "HTTP API authentication.", one_of("NONE", "BASIC")),
    ConfigKey("http.authentication.realm", _T.STRING, "loglake", "The HTTP Basic realm."),
    ConfigKey("metrics.enabled", _T.BOOLEAN, True, "Record metrics and serve them at /metrics."),
    ConfigKey("metrics.per.partition.enabled", _T.BOOLEAN, True, "Export each partition's log size and offsets."),
    ConfigKey("request.logging.enable", _T.BOOLEAN, False, "Log every Kafka request with its times."),
    ConfigKey("log.format", _T.STRING, "text", "The broker's log lines: text or json.", one_of("text", "json")),
)

_BY_NAME_STATIC = {k.name: k for k in _STATIC_KEYS}

# Broker synonyms of topic configs whose default comes from another name of the same config
# (log.retention.ms defaults to log.retention.hours), as Kafka defines them without default.
_NO_DEFAULT = frozenset(
    {"log.roll.ms", "log.roll.jitter.ms", "log.retention.ms", "log.retention.minutes", "log.flush.interval.ms"}
)


def _log_keys() -> list[ConfigKey]:
    """The broker-level synonyms of topic configs, typed like their topic config."""
    keys = []
    for prop in TOPIC_PROPERTIES:
        for synonym in prop.synonyms:
            if synonym.name in _BY_NAME_STATIC:
                continue
            if synonym.unit_ms != 1:
                default = None if synonym.name in _NO_DEFAULT else prop.key.default // synonym.unit_ms
                keys.append(ConfigKey(synonym.name, _T.INT, default, prop.key.doc + " (in hours or minutes)"))
            else:
                default = None if synonym.name in _NO_DEFAULT else prop.key.default
                keys.append(ConfigKey(synonym.name, prop.key.type, default, prop.key.doc, prop.key.rule))
    return keys


BROKER_CONFIG_KEYS: dict[str, ConfigKey] = {**_BY_NAME_STATIC, **{k.name: k for k in _log_keys()}}

# What loglake applies at run time: the main broker synonym of every topic config (Kafka's
# DynamicLogConfig.ReconfigurableConfigs), message.format.version excepted as in Kafka, and
# the replication throttles.
REPLICATION_THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
# Dynamic configs a broker may only have for itself, never as the cluster-wide default
# (Kafka's DynamicBrokerConfig.PerBrokerConfigs): a broker's own addresses.
PER_BROKER_CONFIGS = frozenset({"advertised.listeners"})
DYNAMIC_CONFIGS = (
    frozenset(
        p.broker_name for p in TOPIC_PROPERTIES if p.broker_name and p.broker_name != "log.message.format.version"
    )
    | frozenset(REPLICATION_THROTTLE_RATES)
    | PER_BROKER_CONFIGS
)


def sensitive_broker_config(name: str) -> bool:
    """Whether a broker config's value is never shown: passwords, and any config loglake does
    not know (listener-prefixed ones such as `listener.name.x.ssl.key.password` included),
    which Kafka's DescribeConfigs also assumes sensitive."""
    key = BROKER_CONFIG_KEYS.get(name)
    return key is None or key.sensitive


def broker_synonyms(name: str) -> list[str]:
    """The names of one broker config, highest precedence first (Kafka's brokerConfigSynonyms)."""
    for group in (
        ("log.roll.ms", "log.roll.hours"),
        ("log.roll.jitter.ms", "log.roll.jitter.hours"),
        ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ):
        if name in group:
            return list(group)
    return [name]


@dataclass(frozen=True)
class Synonym:
    """One layer's value of a config, as DescribeConfigs lists synonyms."""

    name: str
    value: str | None
    source: ConfigSource


class DynamicBrokerConfig:
    """One broker's configs: static properties under the dynamic layers from the metadata store."""

    def __init__(self, broker_id: int, static: Mapping[str, str]) -> None:
        self.broker_id = broker_id
        self.static = dict(static)
        self.cluster_default: dict[str, str] = {}
        self.per_broker: dict[str, str] = {}

    @property
    def entity(self) -> str:
        return str(self.broker_id)

    def update(self, entities: Mapping[str, Mapping[str, str]]) -> bool:
        """Take the dynamic layers from the store's /config/brokers documents; True if they changed."""
        cluster_default = dict(entities.get(DEFAULT_ENTITY, {}))
        per_broker = dict(entities.get(self.entity, {}))
        changed = (cluster_default, per_broker) != (self.cluster_default, self.per_broker)
        self.cluster_default, self.per_broker = cluster_default, per_broker
        return changed

    def effective(self) -> dict[str, str]:
        return {**self.static, **self.cluster_default, **self.per_broker}

    def throttle_rates(self) -> tuple[int, int]:
        """(leader, follower) replication throttle rates in bytes/s."""
        effective = self.effective()
        leader, follower = (
            BROKER_CONFIG_KEYS[name].parse(effective[name]) if name in effective else LONG_MAX
            for name in REPLICATION_THROTTLE_RATES
        )
        return leader, follower

    def advertised(self) -> tuple[Listener, ...]:
        """The listeners this broker registers for clients, the dynamic layer applied."""
        return advertised_listeners(self.effective())

    def log_defaults(self) -> LogConfig:
        """The broker-wide topic defaults with the dynamic layers applied."""
        return LogConfig.from_broker_properties(self.effective())

    def synonyms(self, names: list[str]) -> list[Synonym]:
        """Every layer's value of these names, in Kafka's order: dynamic broker, dynamic
        default, static, built-in default (each layer by name precedence)."""
        out: list[Synonym] = []
        for layer, source in (
            (self.per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.cluster_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, ConfigSource.STATIC_BROKER_CONFIG),
        ):
            out.extend(Synonym(n, layer[n], source) for n in names if n in layer)
        for n in names:
            key = BROKER_CONFIG_KEYS.get(n)
            if key is not None and key.default is not None:
                out.append(Synonym(n, to_config_string(key.default), ConfigSource.DEFAULT_CONFIG))
        return out

    def validate(self, props: Mapping[str, str], per_broker: bool = True) -> None:
        """Check a dynamic broker config document, this broker's (`per_broker`) or the
        cluster-wide default (INVALID_REQUEST as Kafka: KAFKA-13609).

        Configs loglake does not know are accepted and stored, as Kafka accepts custom ones."""
        read_only = sorted(n for n in props if n in BROKER_CONFIG_KEYS and n not in DYNAMIC_CONFIGS)
        if read_only:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Cannot update these configs dynamically: {read_only}")
        own = sorted(n for n in props if n in PER_BROKER_CONFIGS)
        if own and not per_broker:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST,
                f"Cannot update these configs at default cluster level, broker id must be specified: {own}",
            )
        if own:
            try:
                advertised_listeners({**self.static, **props})
            except ValueError as exc:
                raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        for name, value in props.items():
            key = BROKER_CONFIG_KEYS.get(name)
            if key is None:
                continue
            try:
                key.parse(value)
            except ConfigValueError as exc:
                raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        try:
            LogConfig.from_broker_properties({**self.effective(), **props})
        except KafkaError as exc:
            raise KafkaError(ErrorCode.INVALID_REQUEST, exc.message) from None
