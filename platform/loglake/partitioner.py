"""Kafka's default partitioner: murmur2 of the key as the Java client computes it.

Keyed records land where every Kafka client would put them, so HTTP and Kafka producers
writing the same keys agree on partitions. Null keys go to a sticky partition that
changes per batch (KIP-480), as the Java client does.
"""

from __future__ import annotations

import itertools
import random

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """The 32-bit murmur2 hash of Kafka's `Utils.murmur2`, as a signed int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    body = length & ~3
    for i in range(0, body, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[body + 2] << 16
    if tail >= 2:
        h ^= data[body + 1] << 8
    if tail >= 1:
        h ^= data[body]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """`toPositive(murmur2(key)) % numPartitions`, the Java client's rule."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Picks one partition for all null-key records of a batch, then moves on."""

    def __init__(self) -> None:
        self._counter = itertools.count(random.randrange(1 << 16))

    def next_partition(self, num_partitions: int) -> int:
        return next(self._counter) % num_partitions
