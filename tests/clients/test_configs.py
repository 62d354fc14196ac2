"""Configs as Kafka serves them: DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on
topics and brokers, through confluent-kafka's AdminClient, kafka-python's admin client and,
for what neither client can send (the cluster-wide default broker resource ""), raw requests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError as CKafkaError
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.admin import ResourceType

from client_helpers import create_topic, make_broker, raw_request
from loglake.protocol import ApiKey

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def set_cluster_default(bootstrap: str, ops: list[tuple[str, int, str | None]], validate_only: bool = False) -> dict:
    body = {
        "resources": [
            {
                "resource_type": BROKER,
                "resource_name": "",
                "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops],
            }
        ],
        "validate_only": validate_only,
    }
    return raw_request(bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body)["responses"][0]


def describe(admin: AdminClient, rtype: ResourceType, name: str) -> dict[str, ConfigEntry]:
    (future,) = admin.describe_configs([ConfigResource(rtype, name)], request_timeout=15).values()
    return future.result(timeout=30)


def incremental(admin: AdminClient, rtype: ResourceType, name: str, *entries: ConfigEntry, **kw) -> None:
    (future,) = admin.incremental_alter_configs(
        [ConfigResource(rtype, name, incremental_configs=list(entries))], **kw
    ).values()
    future.result(timeout=30)


def op(name: str, value: str | None, kind: AlterConfigOpType) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=kind)


def produce_error(bootstrap: str, topic: str, size: int) -> int | None:
    """Produce one record of `size` bytes; the broker's error code, None on success."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.max.bytes": 10_000_000})
    result: list[CKafkaError | None] = []
    producer.produce(topic, b"x" * size, on_delivery=lambda err, msg: result.append(err))
    producer.flush(30)
    assert result, "no delivery report"
    return None if result[0] is None else result[0].code()


@pytest.fixture
def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@contextlib.contextmanager
def cluster_default(bootstrap: str, name: str, value: str) -> Iterator[None]:
    """A dynamic cluster-wide default for the duration of a test (the broker is shared)."""
    assert set_cluster_default(bootstrap, [(name, SET, value)])["error_code"] == 0
    try:
        yield
    finally:
        assert set_cluster_default(bootstrap, [(name, DELETE, None)])["error_code"] == 0


def test_describe_topic_shows_sources_synonyms_types_and_docs(broker, admin, topic):
    create_topic(broker.bootstrap, topic, config={"retention.ms": "1000", "cleanup.policy": "compact"})
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert configs["retention.ms"].value == "1000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value  # server.properties
    assert "message.max.bytes" in configs["max.message.bytes"].synonyms
    assert configs["compression.type"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not configs["retention.ms"].is_read_only

    # v4 with synonyms and documentation, raw: the clients do not show config_type.
    body = {
        "resources": [{"resource_type": TOPIC, "resource_name": topic, "configuration_keys": None}],
        "include_synonyms": True,
        "include_documentation": True,
    }
    (result,) = raw_request(broker.bootstrap, ApiKey.DESCRIBE_CONFIGS, 4, body)["results"]
    by_name = {c["name"]: c for c in result["configs"]}
    assert by_name["retention.ms"]["config_type"] == 5  # LONG
    assert by_name["cleanup.policy"]["config_type"] == 7  # LIST
    assert by_name["min.cleanable.dirty.ratio"]["config_type"] == 6  # DOUBLE
    assert by_name["preallocate"]["config_type"] == 1  # BOOLEAN
    assert by_name["segment.bytes"]["documentation"]
    # Kafka's order: the topic override, then the broker's layers down to the default.
    assert [(s["name"], s["source"]) for s in by_name["max.message.bytes"]["synonyms"]] == [
        ("message.max.bytes", 4),
        ("message.max.bytes", 5),
    ]
    assert [(s["name"], s["value"], s["source"]) for s in by_name["cleanup.policy"]["synonyms"]] == [
        ("cleanup.policy", "compact", 1),
        ("log.cleanup.policy", "delete", 4),
        ("log.cleanup.policy", "delete", 5),
    ]
    # v0: is_default instead of a source; filtering by name.
    body = {"resources": [{"resource_type": TOPIC, "resource_name": topic, "configuration_keys": ["segment.ms"]}]}
    (result,) = raw_request(broker.bootstrap, ApiKey.DESCRIBE_CONFIGS, 0, body)["results"]
    assert [(c["name"], c["is_default"]) for c in result["configs"]] == [("segment.ms", True)]


def test_describe_errors(broker):
    body = {
        "resources": [
            {"resource_type": TOPIC, "resource_name": "no-such-topic", "configuration_keys": None},
            {"resource_type": TOPIC, "resource_name": "bad name", "configuration_keys": None},
            {"resource_type": BROKER, "resource_name": "7", "configuration_keys": None},
            {"resource_type": BROKER, "resource_name": "seven", "configuration_keys": None},
            {"resource_type": 99, "resource_name": "x", "configuration_keys": None},
        ]
    }
    results = raw_request(broker.bootstrap, ApiKey.DESCRIBE_CONFIGS, 4, body)["results"]
    assert [r["error_code"] for r in results] == [3, 17, 42, 42, 42]
    assert all(r["error_message"] for r in results)


def test_every_kafka_topic_config_is_accepted_and_described(broker, admin, topic):
    configs = {
        "cleanup.policy": "compact,delete",
        "compression.type": "zstd",
        "compression.gzip.level": "5",
        "compression.lz4.level": "10",
        "compression.zstd.level": "-5",
        "delete.retention.ms": "1000",
        "file.delete.delay.ms": "1000",
        "flush.messages": "100",
        "flush.ms": "1000",
        "follower.replication.throttled.replicas": "0:0,1:0",
        "index.interval.bytes": "1024",
        "leader.replication.throttled.replicas": "*",
        "local.retention.bytes": "-2",
        "local.retention.ms": "-2",
        "max.compaction.lag.ms": "100000",
        "max.message.bytes": "20000",
        "message.downconversion.enable": "false",
        "message.format.version": "2.8",
        "message.timestamp.after.max.ms": "1000",
        "message.timestamp.before.max.ms": "1000",
        "message.timestamp.difference.max.ms": "1000",
        "message.timestamp.type": "LogAppendTime",
        "min.cleanable.dirty.ratio": "0.25",
        "min.compaction.lag.ms": "10",
        "min.insync.replicas": "1",
        "preallocate": "true",
        "remote.storage.enable": "false",
        "retention.bytes": "1000000",
        "retention.ms": "100000",
        "segment.bytes": "100000",
        "segment.index.bytes": "4096",
        "segment.jitter.ms": "10",
        "segment.ms": "100000",
        "unclean.leader.election.enable": "true",
    }
    create_topic(broker.bootstrap, topic, config=configs)
    described = describe(admin, ResourceType.TOPIC, topic)
    assert {k: described[k].value for k in configs} == configs
    assert all(described[k].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value for k in configs)


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("segment.bytes", "13", "at least 14"),
        ("retention.ms", "-2", "at least -1"),
        ("min.cleanable.dirty.ratio", "1.5", "no more than 1"),
        ("cleanup.policy", "shred", "compact, delete"),
        ("compression.type", "brotli", "one of"),
        ("compression.gzip.level", "0", "-1"),
        ("compression.zstd.level", "23", "no more than 22"),
        ("preallocate", "yes", "true or false"),
        ("segment.ms", "soon", "Not a number of type LONG"),
        ("leader.replication.throttled.replicas", "0-1", "[partitionId]:[brokerId]"),
        ("remote.storage.enable", "maybe", "true or false"),
        ("no.such.config", "1", "Unknown"),
    ],
)
def test_bad_topic_config_is_invalid_config_naming_it(broker, admin, topic, name, value, rule):
    create_topic(broker.bootstrap, topic)
    with pytest.raises(KafkaException) as exc:
        incremental(admin, ResourceType.TOPIC, topic, op(name, value, AlterConfigOpType.SET))
    error = exc.value.args[0]
    assert error.code() == CKafkaError.INVALID_CONFIG
    assert rule in error.str() and name in error.str()


def test_incremental_alter_topic_set_delete_append_subtract(broker, admin, topic):
    create_topic(broker.bootstrap, topic, config={"retention.ms": "1000", "segment.ms": "5000"})
    incremental(
        admin,
        ResourceType.TOPIC,
        topic,
        op("retention.ms", None, AlterConfigOpType.DELETE),
        op("cleanup.policy", "compact", AlterConfigOpType.APPEND),  # appended to the default "delete"
        op("max.message.bytes", "3000", AlterConfigOpType.SET),
    )
    configs = describe(admin, ResourceType.TOPIC, topic)
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.ms"].value == "5000"  # untouched: incremental keeps the rest
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["max.message.bytes"].value == "3000"

    incremental(admin, ResourceType.TOPIC, topic, op("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    assert describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"].value == "compact"

    # validate_only checks and changes nothing.
    incremental(admin, ResourceType.TOPIC, topic, op("segment.ms", "9999", AlterConfigOpType.SET), validate_only=True)
    assert describe(admin, ResourceType.TOPIC, topic)["segment.ms"].value == "5000"

    # APPEND and SUBTRACT only on list configs.
    with pytest.raises(KafkaException) as exc:
        incremental(admin, ResourceType.TOPIC, topic, op("segment.ms", "1", AlterConfigOpType.APPEND))
    assert exc.value.args[0].code() == CKafkaError.INVALID_CONFIG
    assert "append is not allowed for config key: segment.ms" in exc.value.args[0].str()


def test_incremental_alter_raw_errors(broker, topic):
    create_topic(broker.bootstrap, topic)

    def alter(resources: list[dict]) -> list[tuple[int, str | None]]:
        body = {"resources": resources, "validate_only": False}
        return [
            (r["error_code"], r["error_message"])
            for r in raw_request(broker.bootstrap, ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body)["responses"]
        ]

    def resource(name: str, *configs: tuple[str, int, str | None], rtype: int = TOPIC) -> dict:
        return {
            "resource_type": rtype,
            "resource_name": name,
            "configs": [{"name": n, "config_operation": o, "value": v} for n, o, v in configs],
        }

    assert alter([resource(topic, ("segment.ms", 9, "1"))]) == [(42, "Unknown operations type 9")]
    assert alter([resource(topic, ("segment.ms", SET, None))]) == [(42, "Null value not supported for : segment.ms")]
    assert alter([resource(topic, ("segment.ms", SET, "1"), ("segment.ms", DELETE, None))]) == [
        (42, "Error due to duplicate config keys")
    ]
    assert [e for e, _ in alter([resource(topic, ("segment.ms", SET, "2"))] * 2)] == [42, 42]
    assert alter([resource("no-such-topic", ("segment.ms", SET, "1"))])[0][0] == 3
    assert alter([resource("", ("segment.ms", SET, "1"))]) == [(42, "Default topic resources are not allowed.")]
    assert alter([resource("1", ("log.retention.ms", SET, "1"), rtype=BROKER)])[0][0] == 42


def test_read_only_broker_configs_are_refused(broker, admin):
    for name, value in (
        ("broker.id", "5"),
        ("log.dirs", "/tmp/x"),
        ("listeners", "PLAINTEXT://127.0.0.1:1"),
        ("zookeeper.connect", "localhost:2181"),
        ("log.retention.hours", "1"),  # only the first synonym, log.retention.ms, is dynamic (as in Kafka)
    ):
        with pytest.raises(KafkaException) as exc:
            incremental(admin, ResourceType.BROKER, "0", op(name, value, AlterConfigOpType.SET))
        error = exc.value.args[0]
        assert error.code() == CKafkaError.INVALID_REQUEST
        assert "Cannot update these configs dynamically" in error.str() and name in error.str()
    assert set_cluster_default(broker.bootstrap, [("broker.id", SET, "5")])["error_code"] == 42
    # A bad value of a dynamic config: INVALID_REQUEST too, as Kafka (KAFKA-13609).
    response = set_cluster_default(broker.bootstrap, [("log.segment.bytes", SET, "1")])
    assert response["error_code"] == 42 and "log.segment.bytes" in response["error_message"]


def test_describe_broker_resources(broker, admin):
    configs = describe(admin, ResourceType.BROKER, "0")
    assert configs["broker.id"].value == "0" and configs["broker.id"].is_read_only
    assert configs["broker.id"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["num.partitions"].value == "1"
    assert configs["group.min.session.timeout.ms"].value == "1000"
    assert not configs["log.retention.ms"].is_read_only
    assert configs["log.retention.hours"].is_read_only
    assert configs["log.cleaner.min.cleanable.ratio"].source == ConfigSource.DEFAULT_CONFIG.value

    # Per broker: a dynamic log.retention.ms wins over the static log.retention.hours.
    incremental(admin, ResourceType.BROKER, "0", op("log.retention.ms", "5000", AlterConfigOpType.SET))
    try:
        configs = describe(admin, ResourceType.BROKER, "0")
        assert configs["log.retention.ms"].value == "5000"
        assert configs["log.retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
        assert list(configs["log.retention.ms"].synonyms) == ["log.retention.ms", "log.retention.hours"]
        assert described_default(broker.bootstrap) == {}  # the "" resource: dynamic defaults only
    finally:
        incremental(admin, ResourceType.BROKER, "0", op("log.retention.ms", None, AlterConfigOpType.DELETE))
    assert describe(admin, ResourceType.BROKER, "0")["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_dynamic_default_applies_at_once_to_topics_without_an_override(broker, admin, topic):
    plain, overridden = topic, f"{topic}-own"
    create_topic(broker.bootstrap, plain)
    create_topic(broker.bootstrap, overridden, config={"max.message.bytes": "100000"})
    assert produce_error(broker.bootstrap, plain, 5000) is None
    with cluster_default(broker.bootstrap, "message.max.bytes", "2000"):
        assert produce_error(broker.bootstrap, plain, 5000) == CKafkaError.MSG_SIZE_TOO_LARGE
        assert produce_error(broker.bootstrap, overridden, 5000) is None
        configs = describe(admin, ResourceType.TOPIC, plain)
        assert configs["max.message.bytes"].value == "2000"
        assert configs["max.message.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
        body = {"resources": [{"resource_type": BROKER, "resource_name": "", "configuration_keys": None}]}
        (result,) = raw_request(broker.bootstrap, ApiKey.DESCRIBE_CONFIGS, 2, body)["results"]
        assert [(c["name"], c["value"], c["config_source"]) for c in result["configs"]] == [
            ("message.max.bytes", "2000", 3)
        ]
    assert produce_error(broker.bootstrap, plain, 5000) is None


def test_legacy_alter_configs_on_a_broker_replaces_its_document(broker, admin):
    (future,) = admin.alter_configs(
        [ConfigResource(ResourceType.BROKER, "0", set_config={"log.roll.ms": "60000", "custom.thing": "x"})]
    ).values()
    future.result(timeout=30)
    try:
        configs = describe(admin, ResourceType.BROKER, "0")
        assert configs["log.roll.ms"].value == "60000"
        # A config Kafka does not know is stored and, as Kafka does, described as sensitive.
        assert configs["custom.thing"].is_sensitive and configs["custom.thing"].value is None
    finally:
        (future,) = admin.alter_configs([ConfigResource(ResourceType.BROKER, "0", set_config={})]).values()
        future.result(timeout=30)
    assert "custom.thing" not in describe(admin, ResourceType.BROKER, "0")


def test_kafka_python_describe_and_alter(broker, topic):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    create_topic(broker.bootstrap, topic)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=(3, 9))
    try:
        admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "4242"})])
        configs = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        entry = configs["topic"][topic]["retention.ms"]
        assert entry["value"] == "4242" and entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        brokers = admin.describe_configs([KConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
        assert brokers["broker"]["0"]["log.segment.bytes"]["config_source"] in (
            "STATIC_BROKER_CONFIG",
            "DEFAULT_CONFIG",
        )
    finally:
        admin.close()


def test_dynamic_configs_survive_a_restart_of_a_standalone_broker(tmp_path):
    own = make_broker(tmp_path / "logs")
    own.start()
    try:
        response = set_cluster_default(own.bootstrap, [("log.segment.bytes", SET, "65536")], validate_only=True)
        assert response["error_code"] == 0
        assert described_default(own.bootstrap) == {}  # validate_only changed nothing
        assert set_cluster_default(own.bootstrap, [("log.segment.bytes", SET, "65536")])["error_code"] == 0
        assert own.stop() == 0
        own.start()
        assert described_default(own.bootstrap) == {"log.segment.bytes": "65536"}
        admin = AdminClient({"bootstrap.servers": own.bootstrap})
        assert describe(admin, ResourceType.BROKER, "0")["log.segment.bytes"].value == "65536"
    finally:
        own.stop()


def described_default(bootstrap: str) -> dict[str, str | None]:
    body = {"resources": [{"resource_type": BROKER, "resource_name": "", "configuration_keys": None}]}
    (result,) = raw_request(bootstrap, ApiKey.DESCRIBE_CONFIGS, 1, body)["results"]
    return {c["name"]: c["value"] for c in result["configs"]}
