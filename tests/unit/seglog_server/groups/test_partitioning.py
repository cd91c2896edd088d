"""A group's offsets partition is Kafka's: Utils.abs(groupId.hashCode()) % partitions, with Java's
String.hashCode over UTF-16 code units in wrapping int32 arithmetic. Golden values worked by hand:
h = 31*h + unit, from h = 0."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog_server.groups.partitioning import java_string_hash, kafka_abs, partition_for


@pytest.mark.parametrize("text, hash_", [
    ("", 0),
    ("a", 97),
    ("ab", 97 * 31 + 98),  # 3105
    ("hello", 99162322),  # 104*31^4 + 101*31^3 + 108*31^2 + 108*31 + 111
    ("é", 0xE9),  # U+00E9: one code unit, 233
    ("😀", 0xD83D * 31 + 0xDE00),  # U+1F600 is two surrogates: 55357*31 + 56832 = 1772899
    ("my-group", -1906497762),  # 2388469534 wraps past 2^31
])
def test_java_string_hash_golden_values(text, hash_):
    assert java_string_hash(text) == hash_


def test_a_string_whose_hash_is_int_min_lands_in_partition_0():
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE, whose Math.abs is itself (negative):
    # Kafka's Utils.abs makes it 0, so the group sits in partition 0, not at a negative index.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert kafka_abs(-(2**31)) == 0
    assert partition_for("polygenelubricants") == 0


@pytest.mark.parametrize("group, partition", [("hello", 22), ("a", 47), ("😀", 49), ("my-group", 12)])
def test_partition_for_golden_values_in_50_partitions(group, partition):
    assert partition_for(group) == partition


def test_the_partition_count_must_be_positive():
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for("g", 0)


def naive_java_hash(text: str) -> int:
    """The definition with Python's big integers, wrapped once at the end."""
    units = [int.from_bytes(text.encode("utf-16-be", "surrogatepass")[i:i + 2], "big")
             for i in range(0, len(text.encode("utf-16-be", "surrogatepass")), 2)]
    total = sum(unit * 31 ** (len(units) - 1 - i) for i, unit in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@given(text=st.text(max_size=40), partitions=st.integers(1, 1000))
def test_the_hash_and_partition_agree_with_the_definition(text, partitions):
    assert java_string_hash(text) == naive_java_hash(text)
    assert 0 <= partition_for(text, partitions) < partitions
