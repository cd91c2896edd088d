"""Which ``__consumer_offsets`` partition holds a group: Kafka's
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``, bit for bit, so a group lands
where a Kafka cluster would put it and the coordinator of a group is the owner of that partition.

Java's ``String.hashCode`` is ``s[0]*31^(n-1) + ... + s[n-1]`` over the string's UTF-16 code
units (a character outside the BMP counts as its two surrogates) in int32 arithmetic that wraps.
Kafka's ``Utils.abs`` maps Integer.MIN_VALUE, whose ``Math.abs`` is itself, to 0.
"""

from __future__ import annotations

__all__ = ["OFFSETS_TOPIC_PARTITIONS", "java_string_hash", "kafka_abs", "partition_for"]

# Kafka's offsets.topic.num.partitions default. It may never change once the topic exists: every
# group would move to another partition and lose its committed offsets.
OFFSETS_TOPIC_PARTITIONS = 50
_INT32_MIN = -(1 << 31)
_UINT32_MASK = 0xFFFFFFFF
_HASH_MULTIPLIER = 31


def java_string_hash(text: str) -> int:
    """Java's ``text.hashCode()``, a signed int32."""
    units = text.encode("utf-16-be", "surrogatepass")  # lone surrogates are legal Java chars
    hash_ = 0
    for index in range(0, len(units), 2):
        hash_ = (hash_ * _HASH_MULTIPLIER + (units[index] << 8 | units[index + 1])) & _UINT32_MASK
    return hash_ - (1 << 32) if hash_ & 0x80000000 else hash_


def kafka_abs(value: int) -> int:
    """Kafka's ``Utils.abs``: the absolute value, except Integer.MIN_VALUE gives 0."""
    assert _INT32_MIN <= value < -_INT32_MIN, value
    return 0 if value == _INT32_MIN else abs(value)


def partition_for(group_id: str, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> int:
    if partitions <= 0:
        raise ValueError(f"the offsets topic needs at least one partition, found {partitions}")
    return kafka_abs(java_string_hash(group_id)) % partitions
