"""Replication throttles: which replicas a config names, and the byte rate they share."""

from __future__ import annotations

import pytest
from loglake.broker_configs import DynamicBrokerConfig
from loglake.cluster.replication_quota import UNLIMITED, ReplicationQuota, throttled_partitions
from loglake.errors import KafkaError


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_throttled_replicas_name_partitions_of_this_broker() -> None:
    assert throttled_partitions("0:1,0:2,1:2, 3:1", 1) == {0, 3}
    assert throttled_partitions("0:1,0:2,1:2", 3) == frozenset()
    quota = ReplicationQuota(2)
    quota.update_rate(1000)
    assert quota.is_throttled(1, "0:1,1:2")
    assert not quota.is_throttled(0, "0:1,1:2")
    assert quota.is_throttled(7, "*")
    assert not quota.is_throttled(7, "")


def test_nothing_is_throttled_without_a_rate() -> None:
    quota = ReplicationQuota(1)
    assert quota.rate == UNLIMITED
    assert not quota.is_throttled(0, "*")
    quota.record(10**12)
    assert not quota.is_quota_exceeded()
    assert quota.seconds_until_allowed() == 0


def test_the_rate_allows_one_second_of_burst_then_the_throttle() -> None:
    clock = FakeClock()
    quota = ReplicationQuota(1, clock)
    quota.update_rate(1_000_000)
    clock.now += 5  # idle time does not accumulate more than one second of bytes
    assert not quota.is_quota_exceeded()
    quota.record(1_000_000)
    assert quota.is_quota_exceeded()
    # One fetch may take more than the bucket holds: the debt is waited out.
    quota.record(500_000)
    assert quota.seconds_until_allowed() == pytest.approx(0.5, abs=0.01)
    clock.now += 0.4
    assert quota.is_quota_exceeded()
    clock.now += 0.2
    assert not quota.is_quota_exceeded()
    # Over a long run, bytes let through follow the rate.
    sent = 0
    for _ in range(10_000):
        clock.now += 0.001
        if not quota.is_quota_exceeded():
            quota.record(64_000)
            sent += 64_000
    assert sent == pytest.approx(10 * 1_000_000, rel=0.02)
    assert quota.throttled_bytes == 1_500_000 + sent


def test_throttle_rates_are_dynamic_broker_configs() -> None:
    config = DynamicBrokerConfig(1, {"follower.replication.throttled.rate": "5000"})
    assert config.throttle_rates() == (UNLIMITED, 5000)
    config.validate({"leader.replication.throttled.rate": "100"})
    config.update({"1": {"leader.replication.throttled.rate": "100"}})
    assert config.throttle_rates() == (100, 5000)
    with pytest.raises(KafkaError, match="leader.replication.throttled.rate"):
        config.validate({"leader.replication.throttled.rate": "-1"})
    with pytest.raises(KafkaError, match="dynamically"):
        config.validate({"replica.selector.class": "x"})
