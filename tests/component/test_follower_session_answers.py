"""What a leader answers a follower's incremental fetch session (KIP-227): an idle partition
(the follower at the log end, nothing new to tell) is left out, and is answered again the
moment something about it changes: records, the high watermark, the log start, an error.
The leader takes such partitions on a fast path (no read, no HW check) that must still
record the follower's fetch, or the ISR check would drop an idle follower."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from protocol_helpers import request_context

from ingest_gateway.apis.authorization import RequestAuthorization
from ingest_gateway.apis.fetch_apis import FetchApis
from ingest_gateway.metadata.metadata_cache import MetadataCache
from ingest_gateway.metadata.metadata_thread import MetadataThread
from ingest_gateway.replica.replica_manager import ReplicaManager
from loglake.cluster.metadata_image import MetadataImage
from loglake.config import BrokerConfig, LogConfig
from loglake.coordination.model import LeaderAndIsrPartition, PartitionState, TopicDescription
from loglake.errors import ErrorCode
from loglake.protocol import ApiKey
from loglake.record.batch import encode_batch
from loglake.security.quotas import CONSUMER_BYTE_RATE, ClientQuotaManager
from loglake.storage.log_manager import LogManager

TOPICS = [TopicDescription(f"t{i}", str(uuid.uuid4()), {0: (1, 2, 3)}) for i in range(3)]


class Follower:
    """Follower `replica_id`'s fetch session with the leader (broker 1)."""

    def __init__(self, apis: FetchApis, replica_id: int) -> None:
        self.apis = apis
        self.replica_id = replica_id
        self.session_id = 0
        self.epoch = 0
        self.leader_epoch = 0

    async def fetch(self, positions: dict[str, int]) -> dict[str, dict[str, Any]]:
        """A fetch naming `positions` (topic -> fetch offset; all of them in the first,
        full one): the partitions answered, by topic."""
        by_name = {t.name: t for t in TOPICS}
        body = {
            "replica_id": self.replica_id,
            "replica_state": {"replica_id": self.replica_id, "replica_epoch": -1},
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": self.session_id,
            "session_epoch": self.epoch,
            "rack_id": "",
            "topics": [
                {
                    "topic_id": uuid.UUID(by_name[name].topic_id),
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": self.leader_epoch,
                            "fetch_offset": offset,
                            "last_fetched_epoch": -1,
                            "log_start_offset": 0,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
                for name, offset in positions.items()
            ],
            "forgotten_topics_data": [],
        }
        response = await self.apis.fetch(request_context(ApiKey.FETCH, 17), body)
        assert response["error_code"] == ErrorCode.NONE
        self.session_id = response["session_id"]
        self.epoch += 1
        names = {uuid.UUID(t.topic_id): t.name for t in TOPICS}
        return {names[t["topic_id"]]: p for t in response["responses"] for p in t["partitions"]}


def test_idle_partitions_are_left_out_until_something_changes(tmp_path: Path) -> None:
    async def main() -> None:
        config = LogConfig()
        rm = ReplicaManager(1, LogManager([tmp_path], config), config)
        now = [1_000]
        rm.clock = lambda: now[0]
        state = PartitionState(1, 0, (1, 2, 3), 1)
        rm.become_leader_or_follower(
            1, [LeaderAndIsrPartition(t.name, t.topic_id, 0, (1, 2, 3), state) for t in TOPICS]
        )
        cache = MetadataCache(store=None, cluster_id="", metadata_thread=MetadataThread())  # type: ignore[arg-type]
        cache.image = MetadataImage(topics={t.name: t for t in TOPICS})
        broker = BrokerConfig(broker_id=1, auto_create_topics_enable=False)
        apis = FetchApis(broker, cache, rm, RequestAuthorization(None), ClientQuotaManager(CONSUMER_BYTE_RATE), None)
        two, three = Follower(apis, 2), Follower(apis, 3)
        everything = {t.name: 0 for t in TOPICS}
        assert set(await two.fetch(everything)) == set(everything)  # a full fetch answers all
        await three.fetch(everything)
        assert await two.fetch({}) == {}

        # Records: only their partition is answered.
        t0 = rm.partitions[("t0", 0)]
        t0.append_records_to_leader(encode_batch([(None, b"a", (), None), (None, b"b", (), None)], 0), required_acks=1)
        answered = await two.fetch({})
        assert list(answered) == ["t0"] and answered["t0"]["records"]
        # Follower 2 at the log end; the HW waits for follower 3: nothing new to tell.
        assert await two.fetch({"t0": 2}) == {}
        await three.fetch({"t0": 2})
        assert t0.high_watermark == 2
        # Idle again (at the log end, the HW there too), but the HW moved since follower 2
        # was last told: answered once, without records.
        answered = await two.fetch({})
        assert list(answered) == ["t0"] and answered["t0"]["high_watermark"] == 2 and not answered["t0"]["records"]
        assert await two.fetch({}) == {}

        # The idle fetches still count as fetches: follower 2 is caught up as of now.
        now[0] = 60_000
        assert await two.fetch({}) == {}
        assert rm.partitions[("t1", 0)].followers[2].last_caught_up_time_ms == 60_000
        assert t0.followers[2].last_caught_up_time_ms == 60_000

        # The log start moved (DeleteRecords): answered.
        t0.delete_records(1)
        answered = await two.fetch({})
        assert list(answered) == ["t0"] and answered["t0"]["log_start_offset"] == 1
        assert await two.fetch({}) == {}

        # An error (a new leader epoch the follower does not know yet): answered, every time.
        rm.become_leader_or_follower(
            1, [LeaderAndIsrPartition("t2", TOPICS[2].topic_id, 0, (1, 2, 3), PartitionState(1, 1, (1, 2, 3), 1))]
        )
        for _ in range(2):
            answered = await two.fetch({})
            assert list(answered) == ["t2"] and answered["t2"]["error_code"] == ErrorCode.FENCED_LEADER_EPOCH

    asyncio.run(main())
