import os

from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from loglake.partitioner import StickyPartitioner, murmur2, partition_for_key


def test_murmur2_matches_java_vectors() -> None:
    # Values from Kafka's UtilsTest / the Java client.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def test_murmur2_matches_kafka_python_on_random_keys() -> None:
    for n in range(64):
        data = os.urandom(n)
        assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(bytearray(data)) & 0xFFFFFFFF


def test_partition_for_key_is_positive_modulo() -> None:
    for n in (1, 3, 6, 50):
        for i in range(200):
            p = partition_for_key(f"key-{i}".encode(), n)
            assert 0 <= p < n
            assert p == (murmur2(f"key-{i}".encode()) & 0x7FFFFFFF) % n


def test_sticky_partitioner_moves_on() -> None:
    s = StickyPartitioner()
    seen = {s.next_partition(3) for _ in range(6)}
    assert seen == {0, 1, 2}


def test_vectorised_murmur2_matches_the_scalar_one() -> None:
    import os

    from loglake.partitioner import murmur2_many, partitions_for_keys

    keys = [b"", b"a", b"ab", b"abc", b"abcd"] + [os.urandom(n % 40) for n in range(500)] + [b"k" * 300]
    assert murmur2_many(keys).tolist() == [murmur2(k) & 0xFFFFFFFF for k in keys]
    assert murmur2_many(keys[:-1]).tolist() == [murmur2(k) & 0xFFFFFFFF for k in keys[:-1]]
    assert partitions_for_keys(keys, 6) == [partition_for_key(k, 6) for k in keys]
    assert partitions_for_keys([], 6) == []
