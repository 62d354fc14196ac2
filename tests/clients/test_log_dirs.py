"""A broker with two log dirs: DescribeLogDirs and AlterReplicaLogDirs through kafka-python and
raw requests at every advertised version, and a partition moved while a confluent-kafka producer
writes with acks=all."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import TopicPartitionReplica
from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaStorageError, LogDirNotFoundError, NoError, ReplicaNotAvailableError

from client_helpers import create_topic, make_broker, produce_values, raw_request, read_all, serve
from harness.process import BrokerProcess
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from kafka_release import release_versions

# Batches well under segment.bytes (librdkafka's default batch is up to 1 MB).
SMALL_BATCHES = {"batch.size": 16384}


@pytest.fixture(scope="module")
def log_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("two-dirs")
    offline = root / "offline"
    offline.write_text("a file where a log dir should be: the dir is offline\n")
    return [root / "logs-a", root / "logs-b", offline]


@pytest.fixture(scope="module")
def broker(log_dirs: list[Path]) -> Iterator[BrokerProcess]:
    # Small copy chunks: a move takes many, with appends in between.
    overrides = {"log.dirs": ",".join(str(d) for d in log_dirs), "replica.fetch.max.bytes": "16384"}
    yield from serve(make_broker(log_dirs[0], **overrides))


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=(3, 9))
    yield client
    client.close()


def describe(broker: BrokerProcess, version: int, topics: list[dict] | None = None) -> dict[str, dict]:
    """DescribeLogDirs at `version`, by log dir path."""
    response = raw_request(broker.bootstrap, ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": topics})
    return {r["log_dir"]: r for r in response["results"]}


def partitions_in(result: dict, topic: str) -> dict[int, dict]:
    return {p["partition_index"]: p for t in result["topics"] if t["name"] == topic for p in t["partitions"]}


def dir_of(broker: BrokerProcess, topic: str, partition: int = 0) -> tuple[str, dict]:
    """The log dir holding the current (not future) log of a partition, and its entry."""
    for path, result in describe(broker, 4).items():
        entry = partitions_in(result, topic).get(partition)
        if entry is not None and not entry["is_future_key"]:
            return path, entry
    raise AssertionError(f"{topic}-{partition} is in no log dir")


def wait_until(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def test_versions_advertised_are_the_release_ones(broker: BrokerProcess) -> None:
    response = raw_request(broker.bootstrap, ApiKey.API_VERSIONS, 3, {})
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in response["api_keys"]}
    for key in (ApiKey.DESCRIBE_LOG_DIRS, ApiKey.ALTER_REPLICA_LOG_DIRS):
        assert ranges[key] == release_versions(key)


def test_describe_log_dirs_at_every_version(broker: BrokerProcess, log_dirs: list[Path], topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=4)
    produce_values(broker.bootstrap, topic, [b"x" * 100] * 20, partition=0)
    lo, hi = release_versions(ApiKey.DESCRIBE_LOG_DIRS)
    for version in range(lo, hi + 1):
        results = describe(broker, version)
        assert set(results) == {str(d) for d in log_dirs}
        assert results[str(log_dirs[2])]["error_code"] == ErrorCode.KAFKA_STORAGE_ERROR
        online = [results[str(d)] for d in log_dirs[:2]]
        assert all(r["error_code"] == ErrorCode.NONE for r in online)
        # New partitions go to the dir with the fewest partitions: two and two here.
        counts = [len(partitions_in(r, topic)) for r in online]
        assert counts == [2, 2], counts
        (p0,) = [partitions_in(r, topic)[0] for r in online if 0 in partitions_in(r, topic)]
        assert p0["partition_size"] > 2000 and p0["offset_lag"] == 0 and not p0["is_future_key"]
        if version >= 4:
            assert all(0 < r["usable_bytes"] <= r["total_bytes"] for r in online)
            assert results[str(log_dirs[2])]["total_bytes"] == -1
    # Only the partitions asked for.
    results = describe(broker, 2, [{"topic": topic, "partitions": [1]}])
    assert sorted(p for r in results.values() for p in partitions_in(r, topic)) == [1]


def test_describe_log_dirs_with_kafka_python(broker: BrokerProcess, admin: KafkaAdminClient, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    (answer,) = admin.describe_log_dirs()
    topics = {t["name"] for d in answer["log_dirs"] for t in d["topics"]}
    assert topic in topics


def test_alter_replica_log_dirs_errors(
    broker: BrokerProcess, admin: KafkaAdminClient, log_dirs: list[Path], topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    source, _ = dir_of(broker, topic)
    target = next(str(d) for d in log_dirs[:2] if str(d) != source)
    errors = admin.alter_replica_log_dirs(
        {
            TopicPartitionReplica(topic, 0, 0): "/no/such/dir",
            TopicPartitionReplica(topic, 7, 0): target,
            TopicPartitionReplica(f"{topic}-unknown", 0, 0): str(log_dirs[2]),
        }
    )
    assert errors[TopicPartitionReplica(topic, 0, 0)] is LogDirNotFoundError
    assert errors[TopicPartitionReplica(topic, 7, 0)] is ReplicaNotAvailableError
    assert errors[TopicPartitionReplica(f"{topic}-unknown", 0, 0)] is KafkaStorageError
    # Moving to the dir it is in already is a no-op.
    assert admin.alter_replica_log_dirs({TopicPartitionReplica(topic, 0, 0): source}) == {
        TopicPartitionReplica(topic, 0, 0): NoError
    }
    assert dir_of(broker, topic)[0] == source


def test_a_partition_not_yet_created_goes_to_the_preferred_dir(broker: BrokerProcess, log_dirs: list[Path]) -> None:
    """Kafka's rule: REPLICA_NOT_AVAILABLE, but the partition is created in that dir later."""
    topic = f"preferred-{time.monotonic_ns()}"
    lo, hi = release_versions(ApiKey.ALTER_REPLICA_LOG_DIRS)
    for version in range(lo, hi + 1):
        body = {"dirs": [{"path": str(log_dirs[1]), "topics": [{"name": topic, "partitions": [0]}]}]}
        response = raw_request(broker.bootstrap, ApiKey.ALTER_REPLICA_LOG_DIRS, version, body)
        assert response["results"] == [
            {"topic_name": topic, "partitions": [{"partition_index": 0, "error_code": ErrorCode.REPLICA_NOT_AVAILABLE}]}
        ]
    create_topic(broker.bootstrap, topic)
    assert dir_of(broker, topic)[0] == str(log_dirs[1])


@pytest.mark.parametrize("version", range(release_versions(ApiKey.ALTER_REPLICA_LOG_DIRS)[1] + 1))
def test_move_while_producing_with_acks_all(
    broker: BrokerProcess, log_dirs: list[Path], topic: str, version: int
) -> None:
    create_topic(broker.bootstrap, topic, config={"segment.bytes": "100000"})
    before_values = [f"before-{i}".encode().ljust(200, b".") for i in range(2000)]
    produce_values(broker.bootstrap, topic, before_values, partition=0, **SMALL_BATCHES)
    source, before = dir_of(broker, topic)
    target = next(str(d) for d in log_dirs[:2] if str(d) != source)

    stop = threading.Event()
    produced: list[list[tuple[int, int]]] = []

    def keep_producing() -> None:
        batch = 0
        while not stop.is_set():
            values = [f"during-{batch}-{i}".encode() for i in range(200)]
            produced.append(produce_values(broker.bootstrap, topic, values, partition=0, **SMALL_BATCHES))
            batch += 1

    writer = threading.Thread(target=keep_producing)
    writer.start()
    try:
        wait_until(lambda: len(produced) >= 1, what="producing")
        body = {"dirs": [{"path": target, "topics": [{"name": topic, "partitions": [0]}]}]}
        response = raw_request(broker.bootstrap, ApiKey.ALTER_REPLICA_LOG_DIRS, version, body)
        assert response["results"][0]["partitions"] == [{"partition_index": 0, "error_code": 0}]
        wait_until(lambda: dir_of(broker, topic)[0] == target, what=f"{topic} moving to {target}")
        count = len(produced)
        wait_until(lambda: len(produced) >= count + 2, what="producing after the move")
    finally:
        stop.set()
        writer.join(60)
    after = dir_of(broker, topic)[1]
    assert after["partition_size"] > before["partition_size"]
    assert not list(Path(source).glob(f"{topic}-0*")), "the old copy is deleted"
    records = read_all(broker.bootstrap, topic)
    offsets = [offset for _, offset, _, _ in records]
    assert offsets == list(range(len(records)))
    values = [value for _, _, _, value in records]
    expected = before_values + [f"during-{b}-{i}".encode() for b in range(len(produced)) for i in range(200)]
    assert values == expected
    assert [o for batch in produced for _, o in batch] == list(range(2000, len(records)))


@pytest.mark.parametrize("kill_after_s", [0.0, 0.05, 0.2])
def test_kill_9_during_a_move_then_restart_keeps_one_copy_of_everything(tmp_path: Path, kill_after_s: float) -> None:
    """Wherever the kill lands (copying, swapping, done), the restarted broker ends with the
    partition in the target dir once, every acknowledged record in it, and no leftovers."""
    dirs = [tmp_path / "logs-a", tmp_path / "logs-b"]
    b = make_broker(dirs[0], **{"log.dirs": ",".join(map(str, dirs)), "replica.fetch.max.bytes": "16384"})
    with b:
        topic = "killed-mid-move"
        create_topic(b.bootstrap, topic, config={"segment.bytes": "100000"})
        values = [f"{i}".encode().ljust(300, b".") for i in range(6000)]
        produce_values(b.bootstrap, topic, values, partition=0, **SMALL_BATCHES)
        source, _ = dir_of(b, topic)
        target = next(str(d) for d in dirs if str(d) != source)
        body = {"dirs": [{"path": target, "topics": [{"name": topic, "partitions": [0]}]}]}
        response = raw_request(b.bootstrap, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, body)
        assert response["results"][0]["partitions"][0]["error_code"] == 0
        time.sleep(kill_after_s)
        b.kill()
        b.start()
        wait_until(lambda: dir_of(b, topic)[0] == target, what=f"{topic} in {target} after the restart")
        assert [v for _, _, _, v in read_all(b.bootstrap, topic)] == values
        leftovers = [p.name for d in dirs for p in d.iterdir() if p.name.startswith(topic)]
        assert leftovers == [f"{topic}-0"], leftovers
