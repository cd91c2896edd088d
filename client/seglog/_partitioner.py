"""Choosing a partition for a record, as Kafka's default partitioner does.

- An explicit partition wins.
- A key is hashed with Kafka's murmur2 (``Utils.murmur2``), so a key lands on the same partition
  as it would from a Java, librdkafka (``murmur2_random``) or kafka-python producer.
- A keyless record goes to a "sticky" partition that changes after about ``batch_size`` bytes, so
  keyless records fill whole batches instead of one small batch per partition (Kafka KIP-794).
"""

from __future__ import annotations

import random
import struct

__all__ = ["DefaultPartitioner", "murmur2", "partition_for_key"]

_MASK_32 = 0xFFFFFFFF
# Kafka's constants for murmur2 (seed 0x9747b28c, multiplier m, rotation r).
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of ``data``, as the signed int Java returns."""
    length = len(data)
    h = (_SEED ^ length) & _MASK_32
    whole_words = length // 4
    for (k,) in struct.iter_unpack("<I", data[: whole_words * 4]):
        k = (k * _M) & _MASK_32
        k ^= k >> _R
        k = (k * _M) & _MASK_32
        h = ((h * _M) & _MASK_32) ^ k
    tail = data[whole_words * 4 :]
    if tail:
        # Java's switch falls through: 3 tail bytes xor all three, then multiply once.
        for shift, byte in enumerate(tail):
            h ^= byte << (8 * shift)
        h = (h * _M) & _MASK_32
    h ^= h >> 13
    h = (h * _M) & _MASK_32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partition_count: int) -> int:
    """Kafka's ``toPositive(murmur2(key)) % numPartitions``."""
    assert partition_count > 0, partition_count
    return (murmur2(key) & 0x7FFFFFFF) % partition_count


class DefaultPartitioner:
    """Explicit partition, else murmur2 of the key, else a sticky partition per topic."""

    def __init__(self, sticky_bytes: int, rng: random.Random | None = None) -> None:
        assert sticky_bytes > 0, sticky_bytes
        self._sticky_bytes = sticky_bytes
        self._rng = rng or random.Random()
        # topic -> (current sticky partition, bytes sent to it since it was chosen)
        self._sticky: dict[str, tuple[int, int]] = {}
        # (key, partition count) -> partition: murmur2 in Python costs a few us per key, and
        # keys repeat (customers, devices...). Bounded: emptied when it reaches KEY_CACHE_SIZE.
        self._by_key: dict[tuple[bytes, int], int] = {}

    KEY_CACHE_SIZE = 1 << 16

    def partition(self, topic: str, key: bytes | None, partition_count: int, record_bytes: int) -> int:
        if partition_count == 1:  # nothing to choose: skip the hash (a few us per key in Python)
            return 0
        if key is not None:
            cached = self._by_key.get((key, partition_count))
            if cached is None:
                if len(self._by_key) >= self.KEY_CACHE_SIZE:
                    self._by_key.clear()
                cached = self._by_key[key, partition_count] = partition_for_key(key, partition_count)
            return cached
        return self._sticky_partition(topic, partition_count, record_bytes)

    def _sticky_partition(self, topic: str, partition_count: int, record_bytes: int) -> int:
        current = self._sticky.get(topic)
        if current is None or current[0] >= partition_count or current[1] >= self._sticky_bytes:
            previous = current[0] if current is not None else None
            chosen = self._rng.randrange(partition_count)
            if chosen == previous and partition_count > 1:
                chosen = (chosen + 1) % partition_count
            current = (chosen, 0)
        self._sticky[topic] = (current[0], current[1] + record_bytes)
        return current[0]
