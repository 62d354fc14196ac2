"""The controller's channel to a broker that is not serving yet, or restarts: requests wait
(in order) until the broker listens, and are dropped only while it is not registered."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from loglake.coordination.model import (
    BrokerEndpoint,
    LeaderAndIsrPartition,
    MetadataUpdate,
    PartitionState,
    TopicDescription,
)
from loglake.protocol import ApiKey, decode_request, encode_response
from loglake.security.client import PLAINTEXT

from ingest_gateway.metadata import controller_channel
from ingest_gateway.metadata.controller_channel import ControllerChannelManager
from ingest_gateway.metadata.metadata_thread import MetadataThread
from ingest_gateway.network.kafka_server import KafkaServer
from ingest_gateway.network.request_context import ClientConnection
from harness.process import free_port

CONTROLLER, TARGET = 1, 2


class Registry:
    """What the channel reads of the store: the registered brokers."""

    def __init__(self, port: int) -> None:
        self.registered: dict[int, BrokerEndpoint] = {TARGET: BrokerEndpoint(TARGET, "127.0.0.1", port, "", -1)}

    def brokers(self) -> dict[int, BrokerEndpoint]:
        return dict(self.registered)


class RecordingBroker:
    """A Kafka listener answering LeaderAndIsr, remembering each request's leader epoch."""

    def __init__(self, port: int, seen: list[int]) -> None:
        self.server = KafkaServer("127.0.0.1", port, self.handle, 1 << 20)
        self.seen = seen

    async def handle(self, connection: ClientConnection, payload: memoryview):
        header, body = decode_request(payload)
        self.seen.append(body["topic_states"][0]["partition_states"][0]["leader_epoch"])
        response = {"error_code": 0, "topics": []}
        return encode_response(ApiKey.LEADER_AND_ISR, header.request_api_version, header.correlation_id, response)


def leader_and_isr(epoch: int) -> list[LeaderAndIsrPartition]:
    state = PartitionState(TARGET, epoch, (TARGET,), 1)
    return [LeaderAndIsrPartition("t", str(uuid.UUID(int=1)), 0, (TARGET,), state, {})]


async def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_requests_wait_for_a_broker_that_is_not_listening_yet_and_for_its_restart() -> None:
    async def scenario() -> None:
        port = free_port()
        fake = Registry(port)
        # Requests for other brokers only: no replica manager or cache is needed.
        metadata_thread = MetadataThread()
        channel = ControllerChannelManager(CONTROLLER, fake, None, None, PLAINTEXT, metadata_thread)  # type: ignore[arg-type]
        seen: list[int] = []
        try:
            channel.send_leader_and_isr(TARGET, 1, leader_and_isr(1))
            channel.send_leader_and_isr(TARGET, 1, leader_and_isr(2))
            await asyncio.sleep(0.3)  # refused connections meanwhile
            first = RecordingBroker(port, seen)
            await first.server.start()
            await wait_until(lambda: seen == [1, 2])
            await first.server.stop()  # the broker process dies...
            channel.send_leader_and_isr(TARGET, 1, leader_and_isr(3))
            await asyncio.sleep(0.3)
            second = RecordingBroker(port, seen)  # ...and its new process listens on the same port
            await second.server.start()
            await wait_until(lambda: seen == [1, 2, 3])
            # Not registered: what is queued for it is dropped (the controller tells its next
            # registration everything it hosts); registered again, requests flow.
            await second.server.stop()
            del fake.registered[TARGET]
            channel.send_leader_and_isr(TARGET, 1, leader_and_isr(4))
            await asyncio.sleep(1.0)
            fake.registered[TARGET] = BrokerEndpoint(TARGET, "127.0.0.1", port, "", -1)
            third = RecordingBroker(port, seen)
            await third.server.start()
            channel.send_leader_and_isr(TARGET, 1, leader_and_isr(5))
            await wait_until(lambda: seen[-1:] == [5])
            assert seen == [1, 2, 3, 5]
            await third.server.stop()
        finally:
            await channel.close()
            metadata_thread.shutdown()

    asyncio.run(scenario())


class ControlledBroker:
    """A Kafka listener that records the requests it gets; LeaderAndIsr answers wait for
    `release` (a broker slow to take up its partitions)."""

    def __init__(self, port: int, log: list[tuple[int, str]], broker_id: int) -> None:
        self.server = KafkaServer("127.0.0.1", port, self.handle, 1 << 20)
        self.log, self.broker_id = log, broker_id
        self.release = asyncio.Event()

    async def handle(self, connection: ClientConnection, payload: memoryview):
        header, _ = decode_request(payload)
        key = ApiKey(header.request_api_key)
        if key == ApiKey.LEADER_AND_ISR:
            self.log.append((self.broker_id, "LeaderAndIsr received"))
            await self.release.wait()
            self.log.append((self.broker_id, "LeaderAndIsr answered"))
            response: dict = {"error_code": 0, "topics": []}
        else:
            self.log.append((self.broker_id, key.name))
            response = {"error_code": 0}
        return encode_response(key, header.request_api_version, header.correlation_id, response)


class NoCache:
    def apply(self, update: MetadataUpdate) -> None:
        """The controller's own broker: not part of this test."""


def _update(brokers: dict[int, BrokerEndpoint]) -> MetadataUpdate:
    topic = TopicDescription("t", str(uuid.UUID(int=1)), {0: (TARGET,)})
    return MetadataUpdate(CONTROLLER, 1, brokers, {"t": topic}, {"t": {0: PartitionState(TARGET, 1, (TARGET,), 1)}})


def test_update_metadata_waits_for_the_leader_and_isr_before_it_at_most_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No broker learns of a leader before the leader has taken the role; a leader that
    does not answer holds the others back only up to the bound."""
    monkeypatch.setattr(controller_channel, "LEADER_AND_ISR_WAIT_S", 2.0)

    async def scenario() -> None:
        leader_port, other_port = free_port(), free_port()
        fake = Registry(leader_port)
        fake.registered[3] = BrokerEndpoint(3, "127.0.0.1", other_port, "", -1)
        metadata_thread = MetadataThread()
        metadata_thread.bind(asyncio.get_running_loop())
        channel = ControllerChannelManager(CONTROLLER, fake, None, NoCache(), PLAINTEXT, metadata_thread)  # type: ignore[arg-type]
        log: list[tuple[int, str]] = []
        leader, other = ControlledBroker(leader_port, log, TARGET), ControlledBroker(other_port, log, 3)
        other.release.set()
        await leader.server.start()
        await other.server.start()
        try:
            channel.send_leader_and_isr(TARGET, 1, leader_and_isr(1))
            channel.send_update_metadata(_update(fake.brokers()))
            await wait_until(lambda: (TARGET, "LeaderAndIsr received") in log)
            await asyncio.sleep(0.3)
            assert (3, "UPDATE_METADATA") not in log, "the other broker must not hear of the leader yet"
            leader.release.set()
            await wait_until(lambda: (3, "UPDATE_METADATA") in log and (TARGET, "UPDATE_METADATA") in log)
            assert log.index((TARGET, "LeaderAndIsr answered")) < log.index((3, "UPDATE_METADATA"))

            # A leader that never answers: the update reaches the others after the bound.
            leader.release.clear()
            log.clear()
            started = asyncio.get_running_loop().time()
            channel.send_leader_and_isr(TARGET, 1, leader_and_isr(2))
            channel.send_update_metadata(_update(fake.brokers()))
            channel.send_update_metadata(_update(fake.brokers()))
            await wait_until(lambda: log.count((3, "UPDATE_METADATA")) == 2)
            waited = asyncio.get_running_loop().time() - started
            # One bound for both (a bound each would be 4 s or more).
            assert 1.9 <= waited < 3.9, f"waited {waited:.2f} s"

            # A LeaderAndIsr that only makes the slow broker a follower holds nobody back
            # (queued behind the unanswered one).
            log.clear()
            as_follower = [
                LeaderAndIsrPartition("t", str(uuid.UUID(int=1)), 0, (3, TARGET), PartitionState(3, 5, (3,), 1), {})
            ]
            channel.send_leader_and_isr(TARGET, 1, as_follower)
            channel.send_update_metadata(_update(fake.brokers()))
            await wait_until(lambda: (3, "UPDATE_METADATA") in log, timeout=1.5)
            leader.release.set()
        finally:
            await channel.close()
            await leader.server.stop()
            await other.server.stop()
            metadata_thread.shutdown()

    asyncio.run(scenario())
