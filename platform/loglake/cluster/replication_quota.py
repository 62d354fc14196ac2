"""Replication throttles (Kafka's ReplicationQuotaManager, KIP-73).

A reassignment copies whole partitions onto new replicas; unthrottled, that copy takes
every byte of disk and network the brokers have and starves producers. Kafka bounds it
with two per-broker rates, `leader.replication.throttled.rate` (what a leader sends to
throttled followers) and `follower.replication.throttled.rate` (what a follower fetches
for throttled partitions), applied only to the replicas named in the topic configs
`leader.replication.throttled.replicas` and `follower.replication.throttled.replicas`
("*" or "partition:broker,..."). Replicas in sync are never throttled: the throttle slows
catching up, not keeping up.

Deviation from Kafka: the rate is a token bucket holding at most one second of bytes.
Kafka measures the rate over 11 one-second windows and pads a short history to ten
seconds, which lets a fresh move burst ten seconds' worth at once and then pause; a
bucket keeps a move within a second's burst of the throttle all along.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

UNLIMITED = 2**63 - 1  # Kafka's default rate: Long.MAX_VALUE
BURST_SECONDS = 1.0

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
        self._tokens = 0.0
        self._updated = clock()
        self.throttled_bytes = 0  # bytes recorded against the quota, for metrics

    def update_rate(self, rate: int) -> None:
        if rate != self.rate:
            self.rate = rate
            self._tokens = min(self._tokens, rate * BURST_SECONDS)

    @property
    def enabled(self) -> bool:
        return self.rate < UNLIMITED

    def is_throttled(self, partition: int, replicas: str) -> bool:
        """Whether `partition` of a topic whose throttled-replicas config is `replicas` is
        throttled on this broker."""
        if not self.enabled or not replicas:
            return False
        named = throttled_partitions(replicas, self.broker_id)
        return named is _ALL or partition in named

    def _refill(self) -> float:
        now = self._clock()
        self._tokens = min(self.rate * BURST_SECONDS, self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        return self._tokens

    def is_quota_exceeded(self) -> bool:
        return self.enabled and self._refill() <= 0

    def record(self, nbytes: int) -> None:
        """Count bytes sent or fetched for throttled replicas (the balance may go negative:
        one fetch may take more than the bucket holds; the next waits for it)."""
        self.throttled_bytes += nbytes
        if self.enabled:
            self._refill()
            self._tokens -= nbytes

    def seconds_until_allowed(self) -> float:
        """How long until the quota lets bytes through again (0 if it does now)."""
        if not self.enabled:
            return 0.0
        tokens = self._refill()
        return 0.0 if tokens > 0 else (-tokens + 1) / self.rate
