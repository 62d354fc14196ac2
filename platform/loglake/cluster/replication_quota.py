"""Replication throttles (Kafka's ReplicationQuotaManager, KIP-73).

A reassignment copies whole partitions onto new replicas; unthrottled, that copy takes
every byte of disk and network the brokers have and starves producers. Kafka bounds it
with two per-broker rates, `leader.replication.throttled.rate` (what a leader sends to
throttled followers) and `follower.replication.throttled.rate` (what a follower fetches
for throttled partitions), applied only to the replicas named in the topic configs
`leader.replication.throttled.replicas` and `follower.replication.throttled.replicas`
("*" or "partition:broker,..."). Replicas in sync are never throttled: the throttle slows
catching up, not keeping up.

Deviation from Kafka: the rate is a `TokenBucket` (loglake/token_bucket.py says why).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

from loglake.token_bucket import TokenBucket

UNLIMITED = 2**63 - 1  # Kafka's default rate: Long.MAX_VALUE
# The topic configs naming the throttled replicas, leader side then follower side.
THROTTLED_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")

# "*" in a throttled-replicas list: every replica of the topic.
_ALL = frozenset({-1})


@functools.lru_cache(maxsize=4096)
def throttled_partitions(replicas: str, broker_id: int) -> frozenset[int]:
    """The partitions a `*.replication.throttled.replicas` value throttles on `broker_id`
    (Kafka's parseThrottledPartitions); `_ALL` for "*"."""
    items = [i.strip() for i in replicas.split(",") if i.strip()]
    if items == ["*"]:
        return _ALL
    out = set()
    for item in items:
        partition, _, broker = item.partition(":")
        if broker.strip() == str(broker_id):
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuota:
    """One side's throttle on one broker: a byte rate shared by its throttled replicas."""

    def __init__(self, broker_id: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.broker_id = broker_id
        self.rate = UNLIMITED
        self._clock = clock
        self._bucket: TokenBucket | None = None  # None while unlimited
        self.throttled_bytes = 0  # bytes recorded against the quota, for metrics

    def update_rate(self, rate: int) -> None:
        if rate == self.rate:
            return
        self.rate = rate
        if rate >= UNLIMITED:
            self._bucket = None
        elif self._bucket is None:
            self._bucket = TokenBucket(rate, self._clock())
        else:
            self._bucket.set_rate(rate)

    @property
    def enabled(self) -> bool:
        return self._bucket is not None

    def is_throttled(self, partition: int, replicas: str) -> bool:
        """Whether `partition` of a topic whose throttled-replicas config is `replicas` is
        throttled on this broker."""
        if not self.enabled or not replicas:
            return False
        named = throttled_partitions(replicas, self.broker_id)
        return named is _ALL or partition in named

    def is_quota_exceeded(self) -> bool:
        return self._bucket is not None and self._bucket.refill(self._clock()) <= 0

    def record(self, nbytes: int) -> None:
        """Count bytes sent or fetched for throttled replicas (the balance may go negative:
        one fetch may take more than the bucket holds; the next waits for it)."""
        self.throttled_bytes += nbytes
        if self._bucket is not None:
            self._bucket.take(nbytes, self._clock())

    def seconds_until_allowed(self) -> float:
        """How long until the quota lets bytes through again (0 if it does now)."""
        if self._bucket is None:
            return 0.0
        tokens = self._bucket.refill(self._clock())
        return 0.0 if tokens > 0 else (-tokens + 1) / self.rate
