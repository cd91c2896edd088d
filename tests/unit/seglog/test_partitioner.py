"""The default partitioner: Kafka's murmur2, key hashing and sticky keyless partitions."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from seglog._partitioner import DefaultPartitioner, murmur2, partition_for_key

# Kafka's own vectors (clients UtilsTest.testMurmur2): Java's signed 32-bit results.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafkas_golden_vectors():
    for data, expected in KAFKA_VECTORS.items():
        assert murmur2(data) == expected, data


@given(st.binary(max_size=200))
def test_murmur2_agrees_with_kafka_python_for_any_bytes(data):
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data) & 0xFFFFFFFF


@given(st.binary(min_size=0, max_size=64), st.integers(min_value=1, max_value=1000))
def test_partition_for_key_is_kafkas_positive_murmur2_modulo(key, partition_count):
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % partition_count
    assert partition_for_key(key, partition_count) == expected


def test_keyed_records_always_land_on_the_same_partition():
    partitioner = DefaultPartitioner(sticky_bytes=100, rng=random.Random(1))
    chosen = {partitioner.partition("t", b"customer-7", 12, 10) for _ in range(50)}
    assert chosen == {partition_for_key(b"customer-7", 12)}


def test_keyless_records_stick_to_one_partition_until_sticky_bytes_then_switch():
    partitioner = DefaultPartitioner(sticky_bytes=100, rng=random.Random(7))
    first = [partitioner.partition("t", None, 4, 30) for _ in range(4)]  # 0, 30, 60, 90 bytes before
    assert len(set(first)) == 1
    switched = partitioner.partition("t", None, 4, 30)  # 120 bytes sent to the first one
    assert switched != first[0]


def test_keyless_partitions_are_sticky_per_topic():
    partitioner = DefaultPartitioner(sticky_bytes=1000, rng=random.Random(3))
    a = {partitioner.partition("a", None, 50, 1) for _ in range(10)}
    b = {partitioner.partition("b", None, 50, 1) for _ in range(10)}
    assert len(a) == 1 and len(b) == 1


def test_keyless_partition_is_rechosen_when_the_topic_shrinks():
    partitioner = DefaultPartitioner(sticky_bytes=1000, rng=random.Random(5))
    for _ in range(20):
        partitioner.partition("t", None, 100, 1)
    assert partitioner.partition("t", None, 1, 1) == 0


def test_keyless_records_spread_over_every_partition_in_the_long_run():
    partitioner = DefaultPartitioner(sticky_bytes=10, rng=random.Random(11))
    seen = {partitioner.partition("t", None, 3, 10) for _ in range(200)}
    assert seen == {0, 1, 2}


@given(st.lists(st.tuples(st.binary(max_size=6), st.integers(1, 5)), max_size=200), st.integers(1, 8))
def test_cached_key_partitions_are_kafkas_whatever_the_cache_holds(keys, cache_size):
    """The key cache (tiny here, so it empties often) never changes where a key goes."""
    partitioner = DefaultPartitioner(sticky_bytes=100)
    partitioner.KEY_CACHE_SIZE = cache_size
    for key, count in keys:
        assert partitioner.partition("t", key, count, 10) == (0 if count == 1 else partition_for_key(key, count))
    assert len(partitioner._by_key) <= cache_size
