"""A partition this broker does not host: NOT_LEADER_OR_FOLLOWER when the metadata names it
(Kafka's ReplicaManager.getPartitionOrError: after a reassignment moved it away, clients
must refresh their metadata; librdkafka gives a partition up on UNKNOWN_TOPIC_OR_PARTITION),
UNKNOWN_TOPIC_OR_PARTITION when it does not exist."""

from __future__ import annotations

from pathlib import Path

import pytest
from loglake.config import LogConfig
from loglake.errors import ErrorCode, KafkaError
from loglake.storage.log_manager import LogManager

from ingest_gateway.replica.replica_manager import FollowerFetchPartition, ReplicaManager

CONFIG = LogConfig(segment_bytes=1 << 20)


@pytest.mark.parametrize(
    ("exists", "code"), [(True, ErrorCode.NOT_LEADER_OR_FOLLOWER), (False, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
)
def test_a_partition_not_hosted_here(tmp_path: Path, exists: bool, code: ErrorCode) -> None:
    replicas = ReplicaManager(0, LogManager([tmp_path], CONFIG), CONFIG, partition_exists=lambda t, p: exists)
    for lookup in (replicas.hosted_partition, replicas.leader_partition):
        with pytest.raises(KafkaError) as raised:
            lookup("moved", 0)
        assert raised.value.code == code
    results, _, _ = replicas._read_for_follower(1, [FollowerFetchPartition("moved", 0, 0)], 1 << 20)
    assert [r.error for r in results] == [code]
