"""Dynamic broker configs: the layers, what may change at run time, the embedded store's
documents and watch, and KIP-339's incremental operations."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest_gateway.apis.config_apis import AlterOp, apply_incremental, describe_topic_configs
from loglake.broker_configs import DEFAULT_ENTITY, DynamicBrokerConfig
from loglake.config import topic_property
from loglake.config_defs import ConfigSource
from loglake.coordination.embedded import EmbeddedMetadataStore
from loglake.errors import ErrorCode, KafkaError


def test_layers_resolve_per_broker_then_default_then_static() -> None:
    config = DynamicBrokerConfig(1, {"log.retention.hours": "1", "log.segment.bytes": "4096"})
    assert config.log_defaults().retention_ms == 3600_000
    assert config.update({DEFAULT_ENTITY: {"log.retention.ms": "5000", "log.segment.bytes": "8192"}})
    assert not config.update({DEFAULT_ENTITY: {"log.retention.ms": "5000", "log.segment.bytes": "8192"}})
    assert (config.log_defaults().retention_ms, config.log_defaults().segment_bytes) == (5000, 8192)
    config.update({DEFAULT_ENTITY: {"log.segment.bytes": "8192"}, "1": {"log.segment.bytes": "16384"}, "2": {}})
    assert config.log_defaults().segment_bytes == 16384
    assert [(s.value, s.source) for s in config.synonyms(["log.segment.bytes"])] == [
        ("16384", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("8192", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("4096", ConfigSource.STATIC_BROKER_CONFIG),
        ("1073741824", ConfigSource.DEFAULT_CONFIG),
    ]
    # A topic without an override takes the resolved default, with every layer as a synonym.
    (segment_bytes,) = [e for e in describe_topic_configs({}, config) if e.name == "segment.bytes"]
    assert segment_bytes.value == "16384" and segment_bytes.source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert len(segment_bytes.synonyms) == 4


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"broker.id": "2"}, "Cannot update these configs dynamically: ['broker.id']"),
        ({"log.retention.hours": "2"}, "log.retention.hours"),
        ({"log.segment.bytes": "10"}, "at least 14"),
        ({"log.cleanup.policy": "shred"}, "compact, delete"),
    ],
)
def test_validate_refuses_read_only_and_bad_values_as_invalid_request(props: dict, fragment: str) -> None:
    with pytest.raises(KafkaError) as exc:
        DynamicBrokerConfig(0, {}).validate(props)
    assert exc.value.code == ErrorCode.INVALID_REQUEST and fragment in exc.value.message


def test_advertised_listeners_is_per_broker_and_names_existing_listeners() -> None:
    config = DynamicBrokerConfig(
        1,
        {
            "listeners": "PLAINTEXT://127.0.0.1:9092,EXTERNAL://0.0.0.0:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
        },
    )
    wanted = {"advertised.listeners": "PLAINTEXT://127.0.0.1:9092,EXTERNAL://kafka1.example.com:9094"}
    config.validate(wanted)
    for props, per_broker, fragment in (
        (wanted, False, "broker id must be specified"),
        ({"advertised.listeners": "OTHER://h:1,PLAINTEXT://h:2"}, True, "not in listeners"),
        ({"advertised.listeners": "EXTERNAL://h:1"}, True, "inter-broker listener PLAINTEXT"),
    ):
        with pytest.raises(KafkaError, match=fragment) as refused:
            config.validate(props, per_broker)
        assert refused.value.code == ErrorCode.INVALID_REQUEST
    config.update({"1": wanted})
    assert [(a.scheme, a.host) for a in config.advertised()] == [
        ("PLAINTEXT", "127.0.0.1"),
        ("EXTERNAL", "kafka1.example.com"),
    ]


def test_custom_broker_configs_are_accepted_as_kafka_does() -> None:
    DynamicBrokerConfig(0, {}).validate({"some.plugin.setting": "x", "log.retention.ms": "1000"})


def test_embedded_store_keeps_broker_configs_and_notifies(tmp_path: Path) -> None:
    store = EmbeddedMetadataStore(tmp_path)
    seen: list[dict] = []
    store.watch_broker_configs(seen.append)
    store.set_broker_config(DEFAULT_ENTITY, {"log.retention.ms": "1000"})
    store.set_broker_config("0", {"message.max.bytes": "2000"})
    expected = {DEFAULT_ENTITY: {"log.retention.ms": "1000"}, "0": {"message.max.bytes": "2000"}}
    assert seen == [{}, {DEFAULT_ENTITY: {"log.retention.ms": "1000"}}, expected]
    assert EmbeddedMetadataStore(tmp_path).broker_configs() == expected  # survives a restart


def op(name: str, kind: AlterOp, value: str | None = None) -> dict:
    return {"name": name, "config_operation": kind, "value": value}


def key_of(name: str):
    prop = topic_property(name)
    return prop.key if prop is not None else None


def test_incremental_operations() -> None:
    current = {"cleanup.policy": "compact", "retention.ms": "5"}
    ops = [
        op("retention.ms", AlterOp.DELETE),
        op("segment.ms", AlterOp.SET, "7"),
        op("cleanup.policy", AlterOp.APPEND, "delete,compact"),  # already there: not twice
        op("leader.replication.throttled.replicas", AlterOp.APPEND, "0:1,1:1"),  # onto the default, empty
    ]
    assert apply_incremental(current, ops, key_of) == {
        "cleanup.policy": "compact,delete",
        "segment.ms": "7",
        "leader.replication.throttled.replicas": "0:1,1:1",
    }
    assert apply_incremental({}, [op("cleanup.policy", AlterOp.SUBTRACT, "delete")], key_of) == {"cleanup.policy": ""}
    for bad, code in (
        (op("segment.ms", AlterOp.APPEND, "1"), ErrorCode.INVALID_CONFIG),
        (op("no.such", AlterOp.SUBTRACT, "1"), ErrorCode.INVALID_CONFIG),
        ({"name": "segment.ms", "config_operation": 7, "value": "1"}, ErrorCode.INVALID_REQUEST),
    ):
        with pytest.raises(KafkaError) as exc:
            apply_incremental({}, [bad], key_of)
        assert exc.value.code == code


def test_a_broker_config_change_is_made_on_the_stored_document_or_not_at_all(tmp_path) -> None:
    from loglake.coordination.embedded import EmbeddedMetadataStore

    store = EmbeddedMetadataStore(tmp_path)
    store.set_broker_config("<default>", {"log.retention.ms": "1000"})
    stored = store.update_broker_config("<default>", lambda current: {**current, "message.max.bytes": "2000"})
    assert stored == store.broker_configs()["<default>"] == {"log.retention.ms": "1000", "message.max.bytes": "2000"}

    def refuse(current: dict[str, str]) -> dict[str, str]:
        raise ValueError("invalid")

    try:
        store.update_broker_config("<default>", refuse)
    except ValueError:
        pass
    assert store.broker_configs()["<default>"] == stored
