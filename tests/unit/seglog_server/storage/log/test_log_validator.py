"""Produce validation: each rule raises its own error with a message saying what was wrong."""

from __future__ import annotations

import struct

import pytest
from tests.support.log_test_support import NOW_MS, batch, config

from seglog.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    Compression,
    RecordBatch,
    TimestampType,
    crc32c,
)
from seglog.records.compression import compress
from seglog.records.record_codec import encode_record
from seglog.records.varint import encode_varint
from seglog_server.storage.base.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from seglog_server.storage.log.log_validator import LogValidator

HOUR_MS = 3_600_000


def validator(**overrides) -> LogValidator:
    return LogValidator(config(**overrides), "topic-0")


def patched(data: bytes, position: int, fmt: str, value: int, *, fix_crc: bool = True) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, position, value)
    if fix_crc:
        struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


def test_a_valid_batch_passes_untouched_without_a_copy():
    data = batch(b"a", b"b", timestamps=[NOW_MS - 5, NOW_MS])
    view = memoryview(data)
    result = validator().validate(view, NOW_MS)
    assert result.batch.obj is data
    assert (result.size_in_bytes, result.last_offset_delta, result.record_count) == (len(data), 1, 2)
    assert result.max_timestamp_ms == NOW_MS
    assert result.log_append_time_ms == -1


def test_too_few_bytes_for_a_header_is_corrupt():
    with pytest.raises(CorruptRecordError, match="cannot hold a record batch"):
        validator().validate(batch()[:40], NOW_MS)


def test_a_length_field_past_the_end_is_corrupt():
    data = batch(b"abc")
    with pytest.raises(CorruptRecordError, match="declares"):
        validator().validate(data[:-1], NOW_MS)


def test_magic_other_than_two_is_refused():
    data = patched(batch(), MAGIC_OFFSET, ">b", 1, fix_crc=False)
    with pytest.raises(InvalidRecordError, match="unsupported batch magic 1"):
        validator().validate(data, NOW_MS)


def test_base_offset_must_be_zero():
    with pytest.raises(InvalidRecordError, match="base offset 0, found 7"):
        validator().validate(batch(base_offset=7), NOW_MS)


def test_a_batch_above_max_message_bytes_is_too_large():
    data = batch(b"x" * 200)
    with pytest.raises(RecordTooLargeError, match=f"{len(data)} bytes, above max.message.bytes \\(100\\)"):
        validator(max_message_bytes=100).validate(data, NOW_MS)


def test_a_flipped_byte_fails_the_crc():
    data = bytearray(batch(b"payload"))
    data[-3] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        validator().validate(bytes(data), NOW_MS)


def test_size_is_checked_before_the_crc():
    data = bytearray(batch(b"x" * 200))
    data[-3] ^= 0x40
    with pytest.raises(RecordTooLargeError):
        validator(max_message_bytes=100).validate(bytes(data), NOW_MS)


def test_more_than_one_batch_is_refused():
    with pytest.raises(InvalidRecordError, match="exactly one batch"):
        validator().validate(batch(b"a") + batch(b"b"), NOW_MS)


def test_trailing_garbage_is_refused():
    with pytest.raises(InvalidRecordError, match="3 bytes follow"):
        validator().validate(batch(b"a") + b"xyz", NOW_MS)


def test_record_count_must_match_the_last_offset_delta():
    data = patched(batch(b"a", b"b"), RECORDS_COUNT_OFFSET, ">i", 3)
    with pytest.raises(InvalidRecordError, match=r"inconsistent batch offset range \[0, 1\] and count of records 3"):
        validator().validate(data, NOW_MS)


def test_a_zero_record_count_is_refused():
    data = patched(batch(b"a"), RECORDS_COUNT_OFFSET, ">i", 0)
    with pytest.raises(InvalidRecordError, match="invalid record count 0"):
        validator().validate(data, NOW_MS)


def test_a_negative_offset_range_is_refused():
    data = patched(batch(b"a"), LAST_OFFSET_DELTA_OFFSET, ">i", -1)
    with pytest.raises(InvalidRecordError, match=r"invalid offset range \[0, -1\]"):
        validator().validate(data, NOW_MS)


def test_an_unknown_compression_codec_is_refused():
    data = patched(batch(b"a"), ATTRIBUTES_OFFSET, ">h", 6)
    with pytest.raises(InvalidRecordError, match="unknown compression codec id 6"):
        validator().validate(data, NOW_MS)


def test_control_batches_are_refused():
    data = batch(b"a", is_control=True)
    with pytest.raises(InvalidRecordError, match="control batches"):
        validator().validate(data, NOW_MS)


def test_a_producer_id_without_a_base_sequence_is_refused():
    data = batch(b"a", producer_id=42, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError, match="invalid base sequence -1 in a batch with producer id 42"):
        validator().validate(data, NOW_MS)


def test_an_idempotent_batch_is_accepted():
    data = batch(b"a", producer_id=42, producer_epoch=0, base_sequence=0)
    assert validator().validate(data, NOW_MS).record_count == 1


def test_compacted_topics_require_keys():
    data = batch(b"a", b"b", keys=[b"k", None])
    with pytest.raises(InvalidRecordError, match="record 1: Compacted topic cannot accept message without key"):
        validator(cleanup_policy=frozenset({"compact"})).validate(data, NOW_MS)


def test_compacted_topics_accept_keyed_compressed_batches():
    data = batch(b"a", b"b", keys=[b"k1", b"k2"], compression=Compression.GZIP)
    assert validator(cleanup_policy=frozenset({"compact"})).validate(data, NOW_MS).record_count == 2


def test_a_timestamp_too_far_in_the_past_is_refused():
    data = batch(b"a", b"b", timestamps=[NOW_MS, NOW_MS - 2 * HOUR_MS])
    with pytest.raises(InvalidTimestampError, match=f"timestamp {NOW_MS - 2 * HOUR_MS} is out of range"):
        validator(message_timestamp_before_max_ms=HOUR_MS).validate(data, NOW_MS)


def test_a_timestamp_too_far_in_the_future_is_refused():
    data = batch(b"a", timestamps=NOW_MS + 2 * HOUR_MS)
    with pytest.raises(InvalidTimestampError, match=f"\\[{NOW_MS - 2**63 + 1}, {NOW_MS + HOUR_MS}\\]"):
        validator(message_timestamp_after_max_ms=HOUR_MS).validate(data, NOW_MS)


def test_timestamps_inside_the_window_pass_and_the_max_is_recomputed_from_the_records():
    data = batch(b"a", b"b", timestamps=[NOW_MS - 10, NOW_MS - 20])
    result = validator(message_timestamp_before_max_ms=HOUR_MS).validate(data, NOW_MS)
    assert result.max_timestamp_ms == NOW_MS - 10


def test_no_timestamp_is_never_out_of_range():
    data = batch(b"a", timestamps=-1)
    assert validator(message_timestamp_before_max_ms=1).validate(data, NOW_MS).max_timestamp_ms == -1


def test_a_producer_claiming_log_append_time_on_a_log_append_time_topic_is_refused():
    data = batch(b"a", b"b", timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(InvalidTimestampError, match="should not set the timestamp type to LogAppendTime"):
        validator(message_timestamp_type=TimestampType.LOG_APPEND_TIME).validate(data, NOW_MS)


def test_log_append_time_claimed_without_a_timestamp_on_a_create_time_topic_is_refused():
    data = batch(b"a", timestamp_type=TimestampType.LOG_APPEND_TIME, timestamps=-1)
    with pytest.raises(InvalidTimestampError, match="LogAppendTime"):
        validator().validate(data, NOW_MS)


def test_log_append_time_claimed_with_a_timestamp_on_a_create_time_topic_becomes_create_time():
    data = batch(b"a", timestamp_type=TimestampType.LOG_APPEND_TIME, timestamps=NOW_MS - 7)
    result = validator().validate(data, NOW_MS)
    rewritten = RecordBatch(result.batch)
    assert rewritten.timestamp_type == TimestampType.CREATE_TIME
    assert rewritten.is_valid()


def test_log_append_time_topics_stamp_the_broker_time_and_recompute_the_crc():
    data = batch(b"a", b"b", timestamps=[1, 2])
    result = validator(message_timestamp_type=TimestampType.LOG_APPEND_TIME).validate(data, NOW_MS)
    stamped = RecordBatch(result.batch)
    assert stamped.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert stamped.max_timestamp == NOW_MS
    assert stamped.is_valid()
    assert [record.timestamp_ms for record in stamped] == [NOW_MS, NOW_MS]
    assert (result.max_timestamp_ms, result.log_append_time_ms) == (NOW_MS, NOW_MS)
    assert bytes(data) != bytes(result.batch)


def test_a_batch_above_segment_bytes_is_a_batch_too_large():
    data = batch(b"x" * 100)
    with pytest.raises(RecordBatchTooLargeError, match="above segment.bytes"):
        validator(segment_bytes=100).validate(data, NOW_MS)



# -- the records area: a valid CRC proves the bytes arrived intact, not that they parse ----------
def with_records_area(template: bytes, area: bytes, count: int) -> bytes:
    """``template``'s header (its attributes, hence its compression) over ``area``, with the
    length, record count, last offset delta and CRC made consistent with it."""
    buf = bytearray(template[:RECORDS_OFFSET]) + area
    struct.pack_into(">i", buf, LENGTH_OFFSET, len(buf) - LOG_OVERHEAD)
    struct.pack_into(">i", buf, RECORDS_COUNT_OFFSET, count)
    struct.pack_into(">i", buf, LAST_OFFSET_DELTA_OFFSET, count - 1)
    struct.pack_into(">I", buf, CRC_OFFSET, crc32c(bytes(buf[ATTRIBUTES_OFFSET:])))
    return bytes(buf)


def records_area(*offset_deltas: int, value: bytes = b"v" * 20) -> bytes:
    return b"".join(encode_record(delta, 0, None, value) for delta in offset_deltas)


def test_a_record_whose_length_runs_past_the_batch_is_refused_despite_a_valid_crc():
    # The reviewer's reproduction: record 1's length varint claims 200 bytes; 26 remain.
    second = encode_record(1, 0, None, b"v" * 20)
    assert second[0] == 2 * (len(second) - 1)  # a one-byte length
    area = records_area(0) + encode_varint(200) + second[1:]
    data = with_records_area(batch(b"a", b"b"), area, 2)
    RecordBatch(data).ensure_valid()  # the CRC is fine
    with pytest.raises(InvalidRecordError, match=r"record 1 at byte 27: expected 1..26 \(the bytes left in the records area\), found 200"):
        validator().validate(data, NOW_MS)


def test_a_record_count_above_the_records_present_is_refused():
    data = with_records_area(batch(b"a", b"b"), records_area(0, 1), 3)
    with pytest.raises(InvalidRecordError, match=r"premature EOF reached: expected 3 records, found 2"):
        validator().validate(data, NOW_MS)


def test_a_record_count_below_the_records_present_is_refused():
    data = with_records_area(batch(b"a", b"b"), records_area(0, 1, 2), 2)
    with pytest.raises(InvalidRecordError, match=r"to end after 2 records at byte 54, found 27 more bytes"):
        validator().validate(data, NOW_MS)


def test_offset_deltas_must_run_from_zero_in_order():
    data = with_records_area(batch(b"a", b"b"), records_area(0, 2, 1), 3)
    with pytest.raises(InvalidRecordError, match="expected record 1 to have offset delta 1, found 2"):
        validator().validate(data, NOW_MS)


def test_a_record_shorter_than_its_own_fields_is_refused():
    area = records_area(0) + b"\x04" + b"\x00" * 5  # record 1 claims 2 bytes: no room for its fields
    data = with_records_area(batch(b"a", b"b"), area, 2)
    with pytest.raises(InvalidRecordError, match="Invalid record 1: its fields run .* past its declared length"):
        validator().validate(data, NOW_MS)


def test_many_records_with_wide_varints_pass_the_framing_walk():
    # 100 records (two-byte offset deltas), 9-byte timestamp deltas and 300-byte values take the
    # careful walk, not the common one, and still pass.
    values = [bytes([index]) * 300 for index in range(100)]
    data = batch(*values, timestamps=[NOW_MS - 10**12 + index for index in range(100)])
    assert validator().validate(data, NOW_MS).record_count == 100


def test_a_compressed_batch_whose_records_do_not_decode_is_refused():
    template = batch(b"a", b"b", compression=Compression.GZIP)
    data = with_records_area(template, compress(Compression.GZIP, records_area(0, 1)), 3)
    with pytest.raises(InvalidRecordError, match="malformed records area of a 3-record batch"):
        validator().validate(data, NOW_MS)


def test_a_compressed_batch_with_offset_deltas_out_of_order_is_refused():
    template = batch(b"a", b"b", compression=Compression.GZIP)
    data = with_records_area(template, compress(Compression.GZIP, records_area(1, 0)), 2)
    with pytest.raises(InvalidRecordError, match="expected record 0 to have offset delta 0, found 1"):
        validator().validate(data, NOW_MS)


def test_a_batch_claiming_log_append_time_has_its_records_area_walked_too():
    data = with_records_area(
        batch(b"a", b"b", timestamp_type=TimestampType.LOG_APPEND_TIME, timestamps=NOW_MS), records_area(0, 1), 3
    )
    with pytest.raises(InvalidRecordError, match="expected 3 records"):
        validator().validate(data, NOW_MS)


# -- the records walk on the fast path ---------------------------------------------------------
from seglog.records import RecordBatchBuilder  # noqa: E402


def _large_batch(count: int, timestamp_step_ms: int, value_bytes: int) -> bytes:
    builder = RecordBatchBuilder()
    for index in range(count):
        builder.append(b"v" * value_bytes, key=b"k%d" % index, timestamp_ms=NOW_MS + index * timestamp_step_ms)
    return builder.build()


def test_fast_path_takes_large_batches_with_two_byte_offset_and_timestamp_deltas():
    data = _large_batch(count=1000, timestamp_step_ms=100, value_bytes=100)
    validated = validator().validate(data, NOW_MS)
    assert validated.record_count == 1000 and validated.max_timestamp_ms == NOW_MS + 999 * 100


def test_fast_path_refuses_a_wrong_two_byte_offset_delta():
    builder = RecordBatchBuilder()
    for index in range(100):
        builder.append(b"v", key=b"k", timestamp_ms=NOW_MS)
    area = bytearray(builder.build()[RECORDS_OFFSET:])
    # Record 70's offsetDelta (zigzag 140 = 0x8c 0x01) sits after its 1-byte length, attributes
    # and 1-byte timestampDelta; make it claim delta 71 (zigzag 142 = 0x8e 0x01).
    position = 0
    for _ in range(70):  # every length here is one zigzag byte
        position += 1 + area[position] // 2
    delta_at = position + 3
    assert area[delta_at : delta_at + 2] == b"\x8c\x01"
    area[delta_at] = 0x8E
    with pytest.raises(InvalidRecordError, match="expected record 70 to have offset delta 70, found 71"):
        validator().validate(with_records_area(builder.build(), bytes(area), 100), NOW_MS)


# -- the compiled walk on the fast path against the Python loop (Hypothesis) -------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from seglog_server.storage.log import log_validator  # noqa: E402


def _verdict(data: bytes, now_ms: int):
    try:
        validated = validator().validate(data, now_ms)
    except (CorruptRecordError, InvalidRecordError, InvalidTimestampError) as exc:
        return type(exc).__name__, str(exc)
    return bytes(validated[0]), tuple(validated[1:])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    timestamps=st.lists(st.integers(-70_000, 70_000), min_size=1, max_size=40),
    headers=st.booleans(),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
    count_change=st.sampled_from([0, 0, 0, -1, 1]),
    gap_at=st.one_of(st.none(), st.integers(0, 39)),
)
def test_the_compiled_fast_path_gives_the_python_loop_s_verdict(monkeypatch, timestamps, headers, edits, count_change,
                                                                 gap_at):
    """Valid batches (timestamps in any order, records with headers) and records areas with
    bytes overwritten or a lying count, the CRC made right: the same batch and fields, or the
    same error and message, with the compiled walk (record_steps) as with the Python loop."""
    builder = RecordBatchBuilder()
    for index, delta in enumerate(timestamps):
        gap = gap_at is not None and index >= gap_at  # offset deltas skipping one: refused
        builder.append_at(index + gap, b"v%d" % index, key=b"k", timestamp_ms=NOW_MS + delta,
                          headers=[("h", b"x")] if headers and index % 2 else [])
    built = builder.build()
    if gap_at is not None and gap_at < len(timestamps):
        built = with_records_area(built, built[RECORDS_OFFSET:], len(timestamps))  # count and CRC agreeing
    area = bytearray(built[RECORDS_OFFSET:])
    for at, value in edits:
        area[at % len(area)] = value
    data = with_records_area(built, bytes(area), len(timestamps) + count_change) if edits or count_change else built
    compiled = _verdict(data, NOW_MS)
    monkeypatch.setattr(log_validator, "STEPS_COMPILED", False)
    assert compiled == _verdict(data, NOW_MS)
    monkeypatch.undo()


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_a_compressed_batch_hands_on_the_records_area_its_validation_decompressed(timestamp_type):
    from seglog.records.compression import decompress

    topic = validator(message_timestamp_type=TimestampType(timestamp_type == "LogAppendTime"))
    data = batch(b"a", b"b", timestamps=[NOW_MS - 5, NOW_MS], compression=Compression.GZIP)
    result = topic.validate(data, NOW_MS)
    assert result.records_area == decompress(Compression.GZIP, memoryview(data)[RECORDS_OFFSET:], 1 << 20)
    assert topic.validate(batch(b"a", b"b", timestamps=[NOW_MS - 5, NOW_MS]), NOW_MS).records_area is None
