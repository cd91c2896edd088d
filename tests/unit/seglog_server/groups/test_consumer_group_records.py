"""KIP-848's consumer group records in ``__consumer_offsets`` (group-coordinator's
ConsumerGroup*Key/Value, keys of types 3 to 8, values version 0 and flexible): golden vectors
written by hand from Kafka's schemas, round trips, and hostile bytes raising the one error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.groups.errors import CorruptGroupRecordError, UnknownGroupRecordError
from seglog_server.groups.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    TopicMetadata,
    TopicPartitions,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

H = bytes.fromhex
TOPIC_ID = bytes(range(16))
ID = TOPIC_ID.hex()

GOLDEN = [
    # key bytes: type, then each string as int16 length + UTF-8
    (ConsumerGroupMetadataKey("g"), "0003" "0001" "67",
     ConsumerGroupMetadataValue(5), "0000" "00000005" "00"),
    (ConsumerGroupPartitionMetadataKey("g"), "0004" "0001" "67",
     ConsumerGroupPartitionMetadataValue((TopicMetadata(TOPIC_ID, "t", 6),)),
     # version, 1 topic (compact 2), id, compact "t", numPartitions, no racks, tags; value's tags
     "0000" "02" + ID + "0274" "00000006" "01" "00" "00"),
    (ConsumerGroupMemberMetadataKey("g", "m"), "0005" "0001" "67" "0001" "6d",
     ConsumerGroupMemberMetadataValue("i", None, "c", "/h", ("t",), None, 300000, None),
     # instanceId, null rackId, clientId, clientHost, topics ["t"], null regex, rebalance, null assignor, tags
     "0000" "0269" "00" "0263" "032f68" "02" "0274" "00" "000493e0" "00" "00"),
    (ConsumerGroupTargetAssignmentMetadataKey("g"), "0006" "0001" "67",
     ConsumerGroupTargetAssignmentMetadataValue(7), "0000" "00000007" "00"),
    (ConsumerGroupTargetAssignmentMemberKey("g", "m"), "0007" "0001" "67" "0001" "6d",
     ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(TOPIC_ID, (4,)),)),
     "0000" "02" + ID + "02" "00000004" "00" "00"),
    (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), "0008" "0001" "67" "0001" "6d",
     ConsumerGroupCurrentMemberAssignmentValue(3, 2, 1, (TopicPartitions(TOPIC_ID, (1, 2)),), ()),
     # epoch, previous epoch, state, assigned [id, [1, 2], tags], pending [], tags
     "0000" "00000003" "00000002" "01" "02" + ID + "03" "00000001" "00000002" "00" "01" "00"),
]


@pytest.mark.parametrize("key, key_hex, value, value_hex", GOLDEN, ids=lambda x: type(x).__name__)
def test_each_record_is_kafkas_bytes(key, key_hex, value, value_hex):
    assert encode_key(key) == H(key_hex) and decode_key(H(key_hex)) == key
    assert encode_value(value) == H(value_hex) and decode_value(key, H(value_hex)) == value


def test_a_key_of_one_type_is_not_equal_in_meaning_to_another_with_the_same_fields():
    assert encode_key(ConsumerGroupMetadataKey("g")) != encode_key(GroupMetadataKey("g"))
    assert type(decode_key(encode_key(ConsumerGroupTargetAssignmentMetadataKey("g")))) is \
        ConsumerGroupTargetAssignmentMetadataKey


@pytest.mark.parametrize("key, key_hex, value, value_hex", GOLDEN, ids=lambda x: type(x).__name__)
def test_every_truncation_and_any_trailing_byte_is_corrupt(key, key_hex, value, value_hex):
    for decode, data in ((decode_key, H(key_hex)), (lambda raw: decode_value(key, raw), H(value_hex))):
        for length in range(len(data)):
            with pytest.raises(CorruptGroupRecordError):
                decode(data[:length])
        with pytest.raises(CorruptGroupRecordError, match="1 bytes after the last field"):
            decode(data + b"\x00")


def test_a_value_version_past_0_is_unknown():
    with pytest.raises(UnknownGroupRecordError, match="value version 1"):
        decode_value(ConsumerGroupMetadataKey("g"), H("0001" "00000005" "00"))


def test_tagged_fields_are_skipped_so_kafkas_classic_member_metadata_reads():
    key, _, value, value_hex = GOLDEN[2]
    tagged = H(value_hex)[:-1] + H("01" "00" "03" "aabbcc")  # one tagged field: tag 0, 3 bytes
    assert decode_value(key, tagged) == value


text = st.text(max_size=8)
int32 = st.integers(-(2**31), 2**31 - 1)
ids = st.binary(min_size=16, max_size=16)
topic_partitions = st.lists(st.builds(TopicPartitions, ids, st.lists(int32, max_size=3).map(tuple)),
                            max_size=3).map(tuple)
values = st.one_of(
    st.tuples(st.builds(ConsumerGroupMetadataKey, text), st.builds(ConsumerGroupMetadataValue, int32)),
    st.tuples(st.builds(ConsumerGroupPartitionMetadataKey, text), st.builds(
        ConsumerGroupPartitionMetadataValue,
        st.lists(st.builds(TopicMetadata, ids, text, int32), max_size=3).map(tuple))),
    st.tuples(st.builds(ConsumerGroupMemberMetadataKey, text, text), st.builds(
        ConsumerGroupMemberMetadataValue, st.none() | text, st.none() | text, text, text,
        st.lists(text, max_size=3).map(tuple), st.none() | text, int32, st.none() | text)),
    st.tuples(st.builds(ConsumerGroupTargetAssignmentMetadataKey, text),
              st.builds(ConsumerGroupTargetAssignmentMetadataValue, int32)),
    st.tuples(st.builds(ConsumerGroupTargetAssignmentMemberKey, text, text),
              st.builds(ConsumerGroupTargetAssignmentMemberValue, topic_partitions)),
    st.tuples(st.builds(ConsumerGroupCurrentMemberAssignmentKey, text, text), st.builds(
        ConsumerGroupCurrentMemberAssignmentValue, int32, int32, st.integers(-128, 127),
        topic_partitions, topic_partitions)),
)


@given(record=values)
def test_records_round_trip(record):
    key, value = record
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value


@settings(max_examples=300)
@given(data=st.binary(max_size=64), key=st.sampled_from([key for key, *_ in GOLDEN]))
def test_any_bytes_decode_or_raise_the_one_error(data, key):
    try:
        decode_value(key, data)
    except CorruptGroupRecordError:
        pass
