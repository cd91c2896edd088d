"""The offsets topic's keys and values, byte for byte as Kafka writes them: golden vectors built by
hand from the schemas (group-coordinator's OffsetCommitKey/Value, GroupMetadataKey/Value), a
cross-check against kafka-python's independent schema-driven encoder, round trips over every
version, and hostile bytes (every truncation, trailing bytes, lying lengths) that raise one error."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.groups.errors import CorruptGroupRecordError, UnknownGroupRecordError
from seglog_server.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

H = bytes.fromhex
OFFSET_KEY = OffsetCommitKey("g", "t", 3)
GROUP_KEY = GroupMetadataKey("g")
VALUE = OffsetCommitValue(offset=5, commit_timestamp_ms=7, metadata="m", leader_epoch=2)
MEMBER = MemberMetadata("m1", "c", "/h", session_timeout_ms=45000, rebalance_timeout_ms=300000,
                        group_instance_id="i", subscription=b"\x01", assignment=b"\x02\x03")
GROUP = GroupMetadataValue("consumer", 4, "range", "m1", 10, (MEMBER,))
EMPTY_GROUP = GroupMetadataValue("consumer", 1, None, None, 10, ())

#                   type  len g    len t    partition
OFFSET_KEY_BYTES = H("0001" "0001 67" "0001 74" "00000003".replace(" ", ""))
GROUP_KEY_BYTES = H("0002" "000167")
#            version offset            leaderEpoch len m    commitTimestamp
VALUE_V3 = H("0003" "0000000000000005" "00000002" "00016d" "0000000000000007")
#            version offset            len m    commitTimestamp    expireTimestamp
VALUE_V1 = H("0001" "0000000000000005" "00016d" "0000000000000007" "0000000000000009")
#            version offset            leaderEpoch compact "m" commitTimestamp    no tags
VALUE_V4 = H("0004" "0000000000000005" "00000002" "026d" "0000000000000007" "00")
#                  version len "consumer"          generation protocol leader currentState      members
EMPTY_GROUP_V3 = H("0003" "0008" + b"consumer".hex() + "00000001" "ffff" "ffff" "000000000000000a" "00000000")
GROUP_V4 = H(
    "0004" "09" + b"consumer".hex() + "00000004" "06" + b"range".hex() + "03" + b"m1".hex()
    + "000000000000000a" "02"  # currentStateTimestamp, one member (compact count 1 + 1)
    + "03" + b"m1".hex() + "02" + b"i".hex() + "02" + b"c".hex() + "03" + b"/h".hex()
    + "000493e0" "0000afc8" "0201" "030203" "00"  # rebalance, session, subscription, assignment, tags
    + "00"  # the value's tags
)


def test_an_offset_commit_key_is_type_1_group_topic_partition():
    assert encode_key(OFFSET_KEY) == OFFSET_KEY_BYTES
    assert decode_key(OFFSET_KEY_BYTES) == OFFSET_KEY


def test_a_type_0_key_is_an_offset_commit_too():
    assert decode_key(b"\x00\x00" + OFFSET_KEY_BYTES[2:]) == OFFSET_KEY


def test_a_group_metadata_key_is_type_2_group():
    assert encode_key(GROUP_KEY) == GROUP_KEY_BYTES
    assert decode_key(GROUP_KEY_BYTES) == GROUP_KEY


def test_an_offset_commit_value_is_written_in_version_3_as_kafka_3_writes_it():
    assert encode_value(VALUE) == VALUE_V3
    assert decode_value(OFFSET_KEY, VALUE_V3) == VALUE


def test_an_expire_timestamp_is_written_in_version_1_the_only_version_holding_it():
    expiring = VALUE._replace(expire_timestamp_ms=9)
    assert encode_value(expiring) == VALUE_V1
    assert decode_value(OFFSET_KEY, VALUE_V1) == expiring._replace(leader_epoch=-1)


def test_the_flexible_version_4_value_reads_with_compact_strings_and_tags():
    assert decode_value(OFFSET_KEY, VALUE_V4) == VALUE
    assert encode_value(VALUE, version=4) == VALUE_V4


def test_unknown_tagged_fields_are_skipped():
    tagged = VALUE_V4[:-1] + H("01" "05" "02" "abcd")  # one field: tag 5, two bytes
    assert decode_value(OFFSET_KEY, tagged) == VALUE


def test_an_empty_group_is_written_in_version_3():
    assert encode_value(EMPTY_GROUP) == EMPTY_GROUP_V3
    assert decode_value(GROUP_KEY, EMPTY_GROUP_V3) == EMPTY_GROUP


def test_a_group_with_a_member_reads_in_the_flexible_version_4():
    assert decode_value(GROUP_KEY, GROUP_V4) == GROUP
    assert encode_value(GROUP, version=4) == GROUP_V4


def test_a_version_0_member_reads_its_rebalance_timeout_as_its_session_timeout():
    old = encode_value(GROUP, version=0)
    member = decode_value(GROUP_KEY, old).members[0]
    assert (member.rebalance_timeout_ms, member.group_instance_id) == (45000, None)


def test_an_unknown_key_type_is_its_own_error():
    with pytest.raises(UnknownGroupRecordError, match="unknown key type 9"):
        decode_key(H("0009") + GROUP_KEY_BYTES[2:])


def test_a_value_version_past_4_is_unknown():
    with pytest.raises(UnknownGroupRecordError, match="value version 5"):
        decode_value(OFFSET_KEY, H("0005") + VALUE_V3[2:])


@pytest.mark.parametrize("key, data", [
    (None, OFFSET_KEY_BYTES), (None, GROUP_KEY_BYTES), (OFFSET_KEY, VALUE_V1), (OFFSET_KEY, VALUE_V3),
    (OFFSET_KEY, VALUE_V4), (GROUP_KEY, EMPTY_GROUP_V3), (GROUP_KEY, GROUP_V4),
])
def test_every_truncation_and_any_trailing_byte_is_corrupt(key, data):
    decode = decode_key if key is None else (lambda raw: decode_value(key, raw))
    for length in range(len(data)):
        with pytest.raises(CorruptGroupRecordError) as caught:
            decode(data[:length])
        assert not isinstance(caught.value, UnknownGroupRecordError) or length >= 2
    with pytest.raises(CorruptGroupRecordError, match="1 bytes after the last field"):
        decode(data + b"\x00")


def test_a_null_non_nullable_string_and_a_lying_member_count_are_corrupt():
    with pytest.raises(CorruptGroupRecordError, match="group has length -1"):
        decode_key(H("0002ffff"))
    with pytest.raises(CorruptGroupRecordError, match="members counts 1000000"):
        decode_value(GROUP_KEY, EMPTY_GROUP_V3[:-4] + (1_000_000).to_bytes(4, "big"))


def test_a_string_that_is_not_utf8_is_corrupt():
    with pytest.raises(CorruptGroupRecordError, match="not UTF-8"):
        decode_key(H("0002" "0001" "ff"))


# -- Hypothesis: round trips over every version, and any bytes -----------------------------------

text = st.text(max_size=20)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
offset_values = st.builds(OffsetCommitValue, int64, int64, text, int32, int64)
members = st.builds(MemberMetadata, text, text, text, int32, int32, st.none() | text, st.binary(max_size=8),
                    st.binary(max_size=8))
groups = st.builds(GroupMetadataValue, text, int32, st.none() | text, st.none() | text, int64,
                   st.lists(members, max_size=3).map(tuple))


def as_version(value, version: int):
    """What ``value`` reads back as after a trip through ``version`` (absent fields: defaults)."""
    if isinstance(value, OffsetCommitValue):
        return value._replace(leader_epoch=value.leader_epoch if version >= 3 else -1,
                              expire_timestamp_ms=value.expire_timestamp_ms if version == 1 else -1)
    return value._replace(
        current_state_timestamp_ms=value.current_state_timestamp_ms if version >= 2 else -1,
        members=tuple(m._replace(rebalance_timeout_ms=m.rebalance_timeout_ms if version >= 1 else m.session_timeout_ms,
                                 group_instance_id=m.group_instance_id if version >= 3 else None)
                      for m in value.members),
    )


@given(key=st.builds(OffsetCommitKey, text, text, int32) | st.builds(GroupMetadataKey, text))
def test_keys_round_trip(key):
    assert decode_key(encode_key(key)) == key


@given(value=offset_values | groups, version=st.integers(0, 4))
def test_values_round_trip_in_every_version(value, version):
    key = OFFSET_KEY if isinstance(value, OffsetCommitValue) else GROUP_KEY
    assert decode_value(key, encode_value(value, version)) == as_version(value, version)


@settings(max_examples=300)
@given(data=st.binary(max_size=64), key=st.sampled_from([None, OFFSET_KEY, GROUP_KEY]))
def test_any_bytes_decode_or_raise_the_one_error(data, key):
    try:
        decode_key(data) if key is None else decode_value(key, data)
    except CorruptGroupRecordError:
        pass


# -- cross-check: kafka-python's schema-driven encoder, fed the same schemas --------------------

SCHEMAS = {
    "OffsetCommitValue": {"validVersions": "0-4", "flexibleVersions": "4+", "fields": [
        {"name": "offset", "type": "int64", "versions": "0+"},
        {"name": "leaderEpoch", "type": "int32", "versions": "3+", "default": -1},
        {"name": "metadata", "type": "string", "versions": "0+"},
        {"name": "commitTimestamp", "type": "int64", "versions": "0+"},
        {"name": "expireTimestamp", "type": "int64", "versions": "1", "default": -1}]},
    "GroupMetadataValue": {"validVersions": "0-4", "flexibleVersions": "4+", "fields": [
        {"name": "protocolType", "type": "string", "versions": "0+"},
        {"name": "generation", "type": "int32", "versions": "0+"},
        {"name": "protocol", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        {"name": "leader", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        {"name": "currentStateTimestamp", "type": "int64", "versions": "2+", "default": -1},
        {"name": "members", "type": "[]MemberMetadata", "versions": "0+", "fields": [
            {"name": "memberId", "type": "string", "versions": "0+"},
            {"name": "groupInstanceId", "type": "string", "versions": "3+", "nullableVersions": "3+",
             "default": "null"},
            {"name": "clientId", "type": "string", "versions": "0+"},
            {"name": "clientHost", "type": "string", "versions": "0+"},
            {"name": "rebalanceTimeout", "type": "int32", "versions": "1+"},
            {"name": "sessionTimeout", "type": "int32", "versions": "0+"},
            {"name": "subscription", "type": "bytes", "versions": "0+"},
            {"name": "assignment", "type": "bytes", "versions": "0+"}]}]},
}


@pytest.fixture(scope="module")
def kafka_python(tmp_path_factory):
    """kafka-python's ApiData classes for the two values, built from the schemas above."""
    pytest.importorskip("kafka.protocol.api_data", reason="kafka-python is a test dependency (requirements.txt)")
    from kafka.protocol.api_data import ApiData

    root = tmp_path_factory.mktemp("schemas")
    package = root / "group_schemas"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, schema in SCHEMAS.items():
        (package / f"{name}.json").write_text(json.dumps({"type": "data", "name": name, **schema}))
    sys.path.insert(0, str(root))
    try:
        import group_schemas
        classes = {name: type(name, (ApiData,), {}, load_json=group_schemas) for name in SCHEMAS}
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("group_schemas", None)
    return classes


def theirs_offset_commit(classes, value: OffsetCommitValue, version: int) -> bytes:
    return classes["OffsetCommitValue"](
        offset=value.offset, leader_epoch=value.leader_epoch, metadata=value.metadata,
        commit_timestamp=value.commit_timestamp_ms, expire_timestamp=value.expire_timestamp_ms,
    ).encode(version=version)


def theirs_group(classes, value: GroupMetadataValue, version: int) -> bytes:
    member_class = classes["GroupMetadataValue"].MemberMetadata
    members = [member_class(
        member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
        client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms, session_timeout=m.session_timeout_ms,
        subscription=m.subscription, assignment=m.assignment) for m in value.members]
    return classes["GroupMetadataValue"](
        protocol_type=value.protocol_type, generation=value.generation, protocol=value.protocol,
        leader=value.leader, current_state_timestamp=value.current_state_timestamp_ms, members=members,
    ).encode(version=version)


@settings(max_examples=60, deadline=None)
@given(value=offset_values, version=st.integers(0, 4))
def test_offset_commit_values_match_kafka_python(kafka_python, value, version):
    assert encode_value(value, version) == theirs_offset_commit(kafka_python, value, version)


@settings(max_examples=60, deadline=None)
@given(value=groups, version=st.integers(0, 4))
def test_group_metadata_values_match_kafka_python(kafka_python, value, version):
    assert encode_value(value, version) == theirs_group(kafka_python, value, version)


def test_the_golden_vectors_match_kafka_python(kafka_python):
    assert theirs_offset_commit(kafka_python, VALUE, 3) == VALUE_V3
    assert theirs_offset_commit(kafka_python, VALUE, 4) == VALUE_V4
    assert theirs_group(kafka_python, GROUP, 4) == GROUP_V4
    assert theirs_group(kafka_python, EMPTY_GROUP, 3) == EMPTY_GROUP_V3
