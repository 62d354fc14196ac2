"""The controller's channel to a broker that is not serving yet, or restarts: requests wait
(in order) until the broker listens, and are dropped only while it is not registered."""

from __future__ import annotations

import asyncio
import uuid

from loglake.coordination.model import BrokerEndpoint, LeaderAndIsrPartition, PartitionState
from loglake.protocol import ApiKey, decode_request, encode_response
from loglake.security.client import PLAINTEXT

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
