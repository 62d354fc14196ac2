"""Kafka's default partitioner: murmur2 of the key as the Java client computes it.

Keyed records land where every Kafka client would put them, so HTTP and Kafka producers
writing the same keys agree on partitions. Null keys go to a sticky partition that
changes per batch (KIP-480), as the Java client does.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import numpy as np

from loglake.record.native_encode import NATIVE

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


# Keys longer than this go through the scalar hash: the vector form pads every key to
# the longest, so one huge key would cost rows x length memory.
_VECTOR_MAX_KEY = 256


def murmur2_many(keys: Sequence[bytes]) -> np.ndarray:
    """`murmur2` of every key at once (uint32): in C when the native library is built
    (`loglake.record.native_encode`), else `numpy_murmur2_many`.

    Hashing a thousand keys one by one in Python costs milliseconds; a produce request
    carries that many.
    """
    if NATIVE is not None:
        return NATIVE.murmur2_many(keys)
    return numpy_murmur2_many(keys)


def numpy_murmur2_many(keys: Sequence[bytes]) -> np.ndarray:
    """`murmur2` of every key at once (uint32), a handful of numpy operations per key word.
    Keys are laid out in a zero-padded matrix and each 4-byte word column is mixed in only
    for the keys that are long enough."""
    n = len(keys)
    lengths = np.fromiter((len(k) for k in keys), dtype=np.int64, count=n)
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    width = int(lengths.max())
    if width > _VECTOR_MAX_KEY:
        return np.array([murmur2(k) & _MASK for k in keys], dtype=np.uint32)
    width = (width + 3) & ~3 or 4
    flat = np.frombuffer(b"".join(keys), dtype=np.uint8)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    cols = np.arange(width)
    inside = cols[None, :] < lengths[:, None]
    index = np.where(inside, starts[:, None] + cols[None, :], 0)
    matrix = np.where(inside, flat[index] if flat.size else 0, 0).astype(np.uint32)
    words = matrix[:, 0::4] | (matrix[:, 1::4] << 8) | (matrix[:, 2::4] << 16) | (matrix[:, 3::4] << 24)
    m = np.uint32(_M)
    h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
    whole_words = lengths >> 2
    with np.errstate(over="ignore"):
        for j in range(words.shape[1]):
            k = words[:, j] * m
            k ^= k >> np.uint32(24)
            k *= m
            h = np.where(j < whole_words, (h * m) ^ k, h)
        # The tail bytes sit in the first word not mixed in above, zero-padded.
        tail = lengths & 3
        tail_word = words[np.arange(n), np.minimum(whole_words, words.shape[1] - 1)]
        tail_word = np.where(tail > 0, tail_word, np.uint32(0))
        h = np.where(tail > 0, (h ^ tail_word) * m, h)
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
    return h.astype(np.uint32)


def partitions_for_keys(keys: Sequence[bytes], num_partitions: int) -> list[int]:
    """`partition_for_key` of every key, vectorised."""
    return ((murmur2_many(keys) & np.uint32(0x7FFFFFFF)) % np.uint32(num_partitions)).tolist()


class StickyPartitioner:
    """Picks one partition for all null-key records of a batch, then moves on."""

    def __init__(self) -> None:
        self._counter = itertools.count(random.randrange(1 << 16))

    def next_partition(self, num_partitions: int) -> int:
        return next(self._counter) % num_partitions
