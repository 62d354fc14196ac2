import pytest

from loglake.config import BrokerConfig, Listener, LogConfig, load_properties, validate_topic_name
from loglake.errors import ErrorCode, KafkaError


def test_kafka_defaults() -> None:
    c = LogConfig()
    assert c.segment_bytes == 1073741824
    assert c.index_interval_bytes == 4096
    assert c.retention_ms == 7 * 24 * 3600 * 1000
    assert c.max_message_bytes == 1048588
    assert c.cleanup_policy == "delete"
    assert c.unclean_leader_election_enable is False


def test_topic_overrides_fall_back_to_broker_names() -> None:
    broker = BrokerConfig.from_properties({"log.segment.bytes": "2048", "log.retention.hours": "1"})
    assert broker.log_defaults.segment_bytes == 2048
    assert broker.log_defaults.retention_ms == 3600_000
    topic = LogConfig.from_properties(
        {"segment.bytes": "4096", "cleanup.policy": "compact,delete"}, broker.log_defaults
    )
    assert topic.segment_bytes == 4096
    assert topic.retention_ms == 3600_000
    assert topic.compact and topic.delete
    assert topic.to_properties()["cleanup.policy"] == "compact,delete"


@pytest.mark.parametrize(
    "props",
    [{"segment.bytes": "abc"}, {"segment.bytes": "1"}, {"cleanup.policy": "shred"}, {"no.such.config": "1"}],
)
def test_bad_topic_config_is_invalid_config(props: dict[str, str]) -> None:
    with pytest.raises(KafkaError) as e:
        LogConfig.from_properties(props)
    assert e.value.code == ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize("name", ["events", "a.b_c-1", "x" * 249])
def test_valid_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "bad name", "slash/y", "ü"])
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(KafkaError) as e:
        validate_topic_name(name)
    assert e.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_properties_file_and_listeners(tmp_path) -> None:
    f = tmp_path / "server.properties"
    f.write_text("# comment\nbroker.id = 3\nlog.dirs=/a,/b\nlisteners=PLAINTEXT://127.0.0.1:19092\n! other\n")
    config = BrokerConfig.load(f, {"http.listeners": "http://127.0.0.1:18082"})
    assert config.broker_id == 3
    assert config.log_dirs == ("/a", "/b")
    assert config.listeners == (Listener("PLAINTEXT", "127.0.0.1", 19092),)
    assert config.http_listeners[0].port == 18082
    assert load_properties(f)["broker.id"] == "3"
