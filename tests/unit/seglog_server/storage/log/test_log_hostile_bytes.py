"""Hostile bytes at the Log: stored headers that lie on read, produced batches whose records lie.

- A read checks every batch it hands out against where it came from: a length running past its
  segment, a base offset outside the segment's range or not above the previous batch is
  CorruptSegmentError naming the partition and the offset, never a skip to the next segment and
  never offsets invented from a rotted header.
- Produce walks every record: key, value and header lengths inside the record, varints ending
  in time; the batch's maxTimestamp is recomputed from the records (header and CRC patched).
"""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import example, HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, batch, config, open_log, poke

from seglog.records import (
    LENGTH_OFFSET,
    CodecError,
    RECORDS_OFFSET,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    iter_batches,
    set_max_timestamp,
)
from seglog.records.record_codec import encode_record
from seglog.records.varint import encode_varint
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import CorruptSegmentError, InvalidRecordError
from seglog_server.storage.log.log_results import MAX_TIMESTAMP

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
SEGMENT_BYTES = 2048


def filled_log(directory, clock, batch_count: int = 60):
    """A log of ``batch_count`` 3-record batches over several 2 KiB segments."""
    log = open_log(directory, clock, config(segment_bytes=SEGMENT_BYTES, index_interval_bytes=256))
    for index in range(batch_count):
        log.append(batch(b"a" * 30, b"b" * 30, b"c" * 30, timestamps=NOW_MS + index))
    assert log.segment_count > 2
    return log


def first_segment_path(directory) -> str:
    return os.path.join(directory, "00000000000000000000.log")


def batch_positions(path: str) -> list[tuple[int, RecordBatch]]:
    with open(path, "rb") as file:
        data = file.read()
    return [(b.position, b) for b in iter_batches(data)]


def consume_all(log) -> list[int]:
    """What a consumer from the beginning sees: record offsets, read after read."""
    offsets: list[int] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1500).records
        batches = list(iter_batches(data))
        assert batches, f"an empty read below the log end at {offset}"
        for found in batches:
            offsets.extend(r.offset for r in found.records() if r.offset >= offset)
        offset = batches[-1].next_offset
    return offsets


@pytest.fixture
def clock():
    return FakeClock(NOW_MS)


def test_a_length_running_past_an_older_segment_is_data_loss_not_a_skip(tmp_path, clock):
    log = filled_log(tmp_path, clock)
    path = first_segment_path(tmp_path)
    position, victim = batch_positions(path)[3]
    poke(path, position + LENGTH_OFFSET, _INT32, 10_000)
    with pytest.raises(CorruptSegmentError, match=r"partition topic-0: .* at offset \d+ .*Truncated the batch at position"):
        consume_all(log)


@pytest.mark.parametrize("length", [-12, -13, -1000, 5])
def test_a_negative_or_tiny_length_in_an_older_segment_is_data_loss(tmp_path, clock, length):
    log = filled_log(tmp_path, clock)
    path = first_segment_path(tmp_path)
    position, _ = batch_positions(path)[2]
    poke(path, position + LENGTH_OFFSET, _INT32, length)
    with pytest.raises(CorruptSegmentError, match=f"Found record size {length}"):
        consume_all(log)


@pytest.mark.parametrize("rotted", ["next segment", "backwards"])
def test_a_rotted_base_offset_is_data_loss_not_served(tmp_path, clock, rotted):
    log = filled_log(tmp_path, clock)
    path = first_segment_path(tmp_path)
    position, victim = batch_positions(path)[4]
    value = 10_000 if rotted == "next segment" else 0
    poke(path, position, _INT64, value)
    with pytest.raises(CorruptSegmentError, match=r"Corrupt header of the batch at position \d+: (last|base) offset"):
        consume_all(log)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    victim=st.integers(0, 1000),
    field=st.sampled_from(["length", "base_offset"]),
    value=st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([-12, 0, 49, 61, 2**31 - 1])),
)
# Found in CI: the first batch of a segment rotted to claim a higher base offset (inside the
# segment's range, overlapping the next batch) was served, and the offsets below it skipped.
@example(victim=0, field="base_offset", value=5)
def test_a_consumer_sees_every_offset_once_in_order_or_data_loss(tmp_path_factory, victim, field, value):
    directory = tmp_path_factory.mktemp("hostile")
    log = filled_log(directory, FakeClock(NOW_MS), batch_count=30)
    expected = list(range(log.log_end_offset))
    path = first_segment_path(directory)
    batches = batch_positions(path)
    position, _ = batches[victim % len(batches)]
    if field == "length":
        poke(path, position + LENGTH_OFFSET, _INT32, value)
    else:
        poke(path, position, _INT64, value)
    try:
        seen = consume_all(log)
    except (CorruptSegmentError, CodecError):
        # The read refused the lie (DATA_LOSS), or served the batches before it and the
        # consumer's decode of a batch cut short by its own length refused it: never a gap.
        return
    assert seen == expected  # the lie was harmless (the value it already had): nothing skipped


# -- maxTimestamp is recomputed at produce -------------------------------------------------------


def lying_max_timestamp(claimed: int, timestamps: list[int]) -> bytes:
    data = bytearray(batch(*[b"v"] * len(timestamps), timestamps=timestamps))
    set_max_timestamp(data, TimestampType.CREATE_TIME, claimed)
    assert RecordBatch(bytes(data)).is_valid() and RecordBatch(bytes(data)).max_timestamp == claimed
    return bytes(data)


def test_a_header_max_below_the_largest_record_is_recomputed_and_lookups_find_the_record(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"first", timestamps=NOW_MS))
    # kafkajs sends this: the header max from the records that carried a timestamp only.
    log.append(lying_max_timestamp(NOW_MS + 10, [NOW_MS + 10, NOW_MS + 500, NOW_MS + 20]))
    (_, stored) = list(iter_batches(log.read(0, 10_000).records))
    assert stored.max_timestamp == NOW_MS + 500 and stored.is_valid()
    found = log.offset_for_timestamp(NOW_MS + 400)
    assert (found.offset, found.timestamp_ms) == (2, NOW_MS + 500)
    found = log.offset_for_timestamp(MAX_TIMESTAMP)
    assert (found.offset, found.timestamp_ms) == (2, NOW_MS + 500)


def test_a_header_max_above_every_record_is_recomputed_and_does_not_pin_retention(tmp_path, clock):
    hour = 3_600_000
    log = open_log(tmp_path, clock, config(retention_ms=hour))
    far_future = NOW_MS + 365 * 24 * hour
    log.append(lying_max_timestamp(far_future, [NOW_MS, NOW_MS + 1]))
    log.roll()
    (stored,) = list(iter_batches(log.read(0, 10_000).records))
    assert stored.max_timestamp == NOW_MS + 1 and stored.is_valid()
    assert log.offset_for_timestamp(NOW_MS + 2) is None
    clock.advance(hour + 10)
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 2


def test_a_header_telling_the_truth_is_appended_without_a_copy(tmp_path, clock):
    log = open_log(tmp_path, clock)
    data = batch(b"a", b"b", timestamps=[NOW_MS, NOW_MS + 3])
    validated = log._validator.validate(memoryview(data), NOW_MS)
    assert validated.batch.obj is data and validated.max_timestamp_ms == NOW_MS + 3


# -- every record's fields are validated at produce ----------------------------------------------


def with_area(area: bytes, count: int) -> bytes:
    template = bytearray(batch(*[b"v"] * count))
    data = bytearray(template[:RECORDS_OFFSET]) + area
    _INT32.pack_into(data, LENGTH_OFFSET, len(data) - 12)
    # CRC over attributes..end
    from seglog.records import crc32c

    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def record_body(key: bytes, key_length: int, value: bytes, value_length: int, offset_delta: int = 1, tail: bytes = b"\x00") -> bytes:
    body = b"\x00" + encode_varint(0) + encode_varint(offset_delta)
    body += encode_varint(key_length) + key + encode_varint(value_length) + value + tail
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (record_body(b"k", 40, b"v", 1), "key length of record 1"),
        (record_body(b"k", 1, b"vv", 90), "value length of record 1"),
        (record_body(b"k", 1, b"v", -7), "value length of record 1"),
        (record_body(b"k", 1, b"v", 1, tail=encode_varint(1) + encode_varint(30) + b"h" + encode_varint(-1)), "header key length of record 1"),
        (record_body(b"k", 1, b"v", 1, tail=encode_varint(-3)), "number of record headers in record 1"),
    ],
)
def test_produce_refuses_a_record_whose_fields_overrun_it_naming_the_record(tmp_path, clock, second, message):
    log = open_log(tmp_path, clock)
    data = with_area(encode_record(0, 0, b"k", b"v") + second, 2)
    assert RecordBatch(data).is_valid()  # a valid CRC over an impossible record
    with pytest.raises(InvalidRecordError, match=message):
        log.append(data)
    assert log.log_end_offset == 0


def test_produce_refuses_an_over_long_varint(tmp_path, clock):
    log = open_log(tmp_path, clock)
    first = encode_record(0, 0, b"k", b"v")
    # record 1's keyLength as six continuation-padded bytes: Kafka's limit is five.
    body = b"\x00\x00\x02" + b"\x82\x80\x80\x80\x80\x00" + b"k" + encode_varint(1) + b"v" + b"\x00"
    data = with_area(first + encode_varint(len(body)) + body, 2)
    with pytest.raises(InvalidRecordError, match="Illegal varint"):
        log.append(data)


def test_produce_accepts_records_with_headers_and_null_fields(tmp_path, clock):
    log = open_log(tmp_path, clock)
    builder = RecordBatchBuilder()
    builder.append(None, key=None, timestamp_ms=NOW_MS, headers=(("a", b"1"), ("b", None)))
    builder.append(b"v", key=b"k", timestamp_ms=NOW_MS)
    assert log.append(builder.build()).last_offset == 1
