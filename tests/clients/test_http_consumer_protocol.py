"""REST Proxy consumer instances on KIP-848's consumer protocol (`"group.protocol": "consumer"`),
in one group with confluent-kafka members (group.protocol=consumer)."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from bench.rebalance import Member, SteadyProducer, wait_until
from client_helpers import CONSUMER_GROUP_OVERRIDES, create_topic, make_broker, serve, unique_name
from consumer_helpers import consumer_config
from harness.process import BrokerProcess

BINARY_V2 = "application/vnd.kafka.binary.v2+json"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from serve(make_broker(tmp_path_factory.mktemp("broker") / "logs", **CONSUMER_GROUP_OVERRIDES))


@pytest.fixture
def http(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.http_url, timeout=30) as client:
        yield client


class RestMember:
    """A REST Proxy consumer instance on the consumer protocol, polled by the test: each
    batch is counted once its offsets are committed (by an explicit commit, or with
    auto-commit by the next poll or the revocation)."""

    def __init__(self, http: httpx.Client, group: str, topic: str, auto_commit: bool = False) -> None:
        self.http = http
        self.auto_commit = auto_commit
        body = {
            "format": "binary",
            "auto.offset.reset": "earliest",
            "auto.commit.enable": str(auto_commit).lower(),
            "group.protocol": "consumer",
        }
        created = http.post(f"/consumers/{group}", json=body)
        created.raise_for_status()
        self.base = created.json()["base_uri"].removeprefix(str(http.base_url).rstrip("/"))
        http.post(f"{self.base}/subscription", json={"topics": [topic]}).raise_for_status()
        self.received: list[tuple[float, int, bytes]] = []  # (time, partition, value)
        self.assignments: list[frozenset[int]] = []  # as seen after each poll

    def poll(self) -> None:
        answer = self.http.get(f"{self.base}/records", params={"timeout": 100}, headers={"accept": BINARY_V2})
        answer.raise_for_status()
        records = answer.json()
        if records and not self.auto_commit:
            last: dict[tuple[str, int], int] = {}
            for r in records:
                last[(r["topic"], r["partition"])] = r["offset"]
            offsets = [{"topic": t, "partition": p, "offset": o} for (t, p), o in last.items()]
            self.http.post(f"{self.base}/offsets", json={"offsets": offsets}).raise_for_status()
        now = time.monotonic()
        self.received += [(now, r["partition"], base64.b64decode(r["value"])) for r in records]
        self.assignments.append(self.partitions())

    def partitions(self) -> frozenset[int]:
        answer = self.http.get(f"{self.base}/assignments")
        answer.raise_for_status()
        return frozenset(p["partition"] for p in answer.json()["partitions"])

    def polling_until(self, condition: Callable[[], bool], what: str) -> None:
        wait_until(lambda: self.poll() or condition(), what=what)

    def close(self) -> None:
        self.http.delete(self.base).raise_for_status()


def assert_exactly_once(producer: SteadyProducer, *members: Member | RestMember) -> None:
    values = sorted((v for m in members for _, _, v in m.received), key=int)
    assert values == [b"%d" % i for i in range(producer.sent)], f"{len(values)} consumed, {producer.sent} sent"


def test_http_and_kafka_members_share_the_partitions_and_delete_hands_them_over(
    broker: BrokerProcess, http: httpx.Client, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, partitions=4)
    group = unique_name("mixed")
    kafka = Member(consumer_config(broker.bootstrap, group), topic)
    kafka.start()
    producer = SteadyProducer(broker.bootstrap, topic, 4)
    try:
        wait_until(lambda: len(kafka.partitions()) == 4, what="the Kafka member owns every partition")
        producer.start()
        rest = RestMember(http, group, topic)
        rest.polling_until(
            lambda: len(rest.partitions()) == len(kafka.partitions()) == 2 and len(rest.received) > 20,
            "the REST instance consumes half of the partitions",
        )
        assert rest.partitions().isdisjoint(kafka.partitions())
        described = http.get(f"/groups/{group}").json()
        assert described["group_protocol"] == "consumer" and described["state"] == "Stable"
        assert sorted(m["client_id"].startswith("loglake-rest-") for m in described["members"]) == [False, True]

        # Every record it took is committed: closing it leaves the group (epoch -1), and its
        # partitions go to the Kafka member, which reads on from the committed offsets.
        rest.close()
        wait_until(lambda: len(kafka.partitions()) == 4, what="the Kafka member takes the partitions over")
        taken_over_at = time.monotonic()
        wait_until(
            lambda: {p for t, p, _ in kafka.received if t > taken_over_at} == {0, 1, 2, 3},
            what="the Kafka member consumes every partition",
        )
        producer.stop()
        wait_until(lambda: len(kafka.received) + len(rest.received) >= producer.sent, what="every record consumed")
    finally:
        producer.stop()
        kafka.stop()
    assert not kafka.errors
    assert_exactly_once(producer, kafka, rest)


def test_http_member_gives_up_only_the_partitions_that_move(
    broker: BrokerProcess, http: httpx.Client, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, partitions=4)
    group = unique_name("shrink")
    producer = SteadyProducer(broker.bootstrap, topic, 4)
    producer.start()
    rest = RestMember(http, group, topic, auto_commit=True)
    kafka = None
    try:
        rest.polling_until(
            lambda: len(rest.partitions()) == 4 and len(rest.received) > 20, "the REST instance owns all"
        )
        rest.assignments.clear()
        kafka = Member(consumer_config(broker.bootstrap, group), topic)
        joined_at = time.monotonic()
        kafka.start()
        rest.polling_until(
            lambda: (
                len(kafka.partitions()) == 2
                and {p for t, p, _ in kafka.received if t > joined_at} == kafka.partitions()
            ),
            "the Kafka member consumes the two partitions it was given",
        )
        kept = rest.partitions()
        assert len(kept) == 2 and kept.isdisjoint(kafka.partitions())
        # Revoked and handed over without stopping the two it keeps: seen after every poll,
        # its assignment only ever shrank to them, and their records kept coming.
        assert all(kept <= a for a in rest.assignments), rest.assignments
        times = [t for t, p, _ in rest.received if p in kept and t >= joined_at]
        assert times and max(b - a for a, b in zip([joined_at, *times], times)) < 2.0
        producer.stop()
        # Auto-commit: the last records it returned are committed by its next poll.
        rest.polling_until(lambda: len(kafka.received) + len(rest.received) >= producer.sent, "every record consumed")
        rest.poll()
        rest.close()
    finally:
        producer.stop()
        if kafka is not None:
            kafka.stop()
    assert kafka is not None and not kafka.errors
    assert_exactly_once(producer, kafka, rest)


def test_consumer_protocol_options_and_their_errors(broker: BrokerProcess, http: httpx.Client, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    group = unique_name("options")
    for body, message in [
        ({"group.protocol": "eager"}, "group.protocol must be"),
        ({"group.protocol": 2}, "group.protocol must be"),
        ({"group.remote.assignor": "range"}, "only taken with group.protocol 'consumer'"),
        ({"group.protocol": "consumer", "group.remote.assignor": "sticky"}, "must be one of uniform, range"),
    ]:
        answer = http.post(f"/consumers/{group}", json=body)
        assert answer.status_code == 422 and answer.json()["error_code"] == 42202, answer.text
        assert message in answer.json()["message"]
    assert http.post(f"/consumers/{group}", content=b"{").status_code == 400

    # Case as Kafka's consumers take it; the member asks for the range assignor.
    created = http.post(f"/consumers/{group}", json={"group.protocol": "Consumer", "group.remote.assignor": "range"})
    created.raise_for_status()
    base = created.json()["base_uri"].removeprefix(str(http.base_url).rstrip("/"))
    http.post(f"{base}/subscription", json={"topics": [topic]}).raise_for_status()
    wait_until(lambda: len(http.get(f"{base}/assignments").json()["partitions"]) == 2, what="assigned")
    described = http.get(f"/groups/{group}").json()
    assert described["group_protocol"] == "consumer" and described["protocol"] == "range"
    # Offsets of a group with members stay as they are.
    reset = http.post(f"/groups/{group}/reset-offsets", json={"topic": topic, "to": "earliest"})
    assert reset.status_code == 409 and "active members" in reset.json()["message"]
    http.delete(base).raise_for_status()
    wait_until(lambda: http.get(f"/groups/{group}").json()["state"] == "Empty", what="the member left")
    http.post(f"/groups/{group}/reset-offsets", json={"topic": topic, "to": "earliest"}).raise_for_status()
