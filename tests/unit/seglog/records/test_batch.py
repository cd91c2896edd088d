"""RecordBatch views and iter_batches: the byte-exact batches of kafka-storage.md 2.4, every
buffer kind, validation, malformed batches and Kafka's file-iteration rules."""

import mmap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog.records import (
    CodecError,
    Compression,
    CorruptRecordError,
    InvalidCrcError,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    UnsupportedCompressionError,
    iter_batches,
)
from seglog.records.compression import compress

from records_test_support import ONE_RECORD_BATCH, TIMESTAMP_MS, TWO_RECORD_BATCH, raw_batch, record, record_body

def test_one_record_golden_batch_header_fields():
    batch = RecordBatch(ONE_RECORD_BATCH)
    assert (batch.base_offset, batch.length, batch.size_in_bytes) == (0, 60, 72)
    assert (batch.partition_leader_epoch, batch.magic, batch.crc, batch.attributes) == (0, 2, 0xCE68B28D, 0)
    assert (batch.last_offset_delta, batch.base_timestamp, batch.max_timestamp) == (0, TIMESTAMP_MS, TIMESTAMP_MS)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.records_count) == (-1, -1, -1, 1)
    assert (batch.last_offset, batch.next_offset) == (0, 1)
    assert batch.compression is Compression.NONE and batch.timestamp_type is TimestampType.CREATE_TIME
    assert not batch.is_transactional and not batch.is_control and batch.delete_horizon_ms is None


def test_one_record_golden_batch_is_valid_and_decodes():
    batch = RecordBatch(ONE_RECORD_BATCH)
    batch.ensure_valid()
    assert batch.is_valid() and batch.compute_crc() == 0xCE68B28D
    assert batch.records() == [Record((0, TIMESTAMP_MS, None, b"test", ()))]


def test_two_record_golden_batch_decodes_offsets_timestamps_and_headers():
    batch = RecordBatch(TWO_RECORD_BATCH)
    batch.ensure_valid()
    assert (batch.size_in_bytes, batch.crc, batch.last_offset, batch.max_timestamp) == (87, 0xAC5D2415, 101, TIMESTAMP_MS + 5)
    assert list(batch) == [
        Record((100, TIMESTAMP_MS, b"k1", b"v1", ())),
        Record((101, TIMESTAMP_MS + 5, b"k2", b"v2", (("h", b"x"),))),
    ]


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "mmap"])
def test_view_reads_every_buffer_kind_at_a_position(kind):
    data = b"\xee" * 5 + TWO_RECORD_BATCH + b"\xee" * 3
    if kind == "mmap":
        buffer = mmap.mmap(-1, len(data))
        buffer[:] = data
    else:
        buffer = {"bytes": bytes, "bytearray": bytearray, "memoryview": memoryview}[kind](data)
    batch = RecordBatch(buffer, 5)
    batch.ensure_valid()
    assert batch.position == 5 and batch.base_offset == 100
    assert [r.value for r in batch.records()] == [b"v1", b"v2"]
    assert all(type(r.key) is bytes and type(r.value) is bytes for r in batch.records())
    with batch.view as view:
        assert view.tobytes() == TWO_RECORD_BATCH
    if kind == "mmap":
        buffer.close()  # the view holds no exported buffer once released


def test_header_fields_of_a_producer_batch():
    builder = RecordBatchBuilder(
        base_offset=7,
        partition_leader_epoch=3,
        producer_id=1234,
        producer_epoch=5,
        base_sequence=77,
        is_transactional=True,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        compression=Compression.GZIP,
    )
    builder.append(b"a", timestamp_ms=10)
    builder.append(b"b", timestamp_ms=30)
    batch = RecordBatch(builder.build())
    assert (batch.base_offset, batch.partition_leader_epoch, batch.last_offset_delta, batch.last_offset) == (7, 3, 1, 8)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1234, 5, 77)
    assert batch.is_transactional and not batch.is_control
    assert batch.compression is Compression.GZIP and batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.attributes == 0x01 | 0x08 | 0x10


def test_log_append_time_batch_reads_max_timestamp_for_every_record():
    builder = RecordBatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME)
    for timestamp in (100, 50, 300):
        builder.append(b"v", timestamp_ms=timestamp)
    batch = RecordBatch(builder.build())
    assert batch.max_timestamp == 300
    assert [r.timestamp_ms for r in batch.records()] == [300, 300, 300]


def test_delete_horizon_reads_the_base_timestamp_when_bit_six_is_set():
    area = record(record_body(timestamp_delta=-5))
    batch = RecordBatch(raw_batch(area, 1, attributes=0x40, base_timestamp=9000, max_timestamp=8995))
    assert batch.delete_horizon_ms == 9000
    assert batch.records()[0].timestamp_ms == 8995


def test_control_flag_reads_from_bit_five():
    assert RecordBatch(raw_batch(record(record_body()), 1, attributes=0x20)).is_control


# -- validation ------------------------------------------------------------------------------


def test_a_flipped_record_byte_fails_the_crc_naming_both_values():
    corrupt = bytearray(TWO_RECORD_BATCH)
    corrupt[-1] ^= 0x01
    batch = RecordBatch(corrupt)
    assert not batch.is_valid()
    with pytest.raises(InvalidCrcError, match=f"batch at position 0 \\(base offset 100\\)\\): stored crc = {0xAC5D2415}, computed crc = {batch.compute_crc()}"):
        batch.ensure_valid()


# baseOffset (0-7) and partitionLeaderEpoch (12-15); length and magic sit outside the CRC
# too, but changing them changes how the batch is read, which the size and magic rules check.
@pytest.mark.parametrize("position", [*range(0, 8), *range(12, 16)])
def test_base_offset_and_leader_epoch_are_outside_the_crc(position):
    changed = bytearray(TWO_RECORD_BATCH)
    changed[position] ^= 0x01
    assert RecordBatch(changed).compute_crc() == 0xAC5D2415


@pytest.mark.parametrize("position", range(21, 61))
def test_every_header_byte_from_the_attributes_on_is_inside_the_crc(position):
    changed = bytearray(TWO_RECORD_BATCH)
    changed[position] ^= 0x01
    with pytest.raises(InvalidCrcError):
        RecordBatch(changed).ensure_valid()


def test_magic_other_than_two_is_rejected_by_ensure_valid_and_records():
    old = raw_batch(record(record_body()), 1, magic=1)
    batch = RecordBatch(old)
    with pytest.raises(CorruptRecordError, match="Unsupported record format in batch at position 0 \\(base offset 0\\): expected magic 2, found 1"):
        batch.ensure_valid()
    with pytest.raises(CorruptRecordError, match="expected magic 2, found 1"):
        batch.records()
    assert not batch.is_valid()


def test_batch_shorter_than_its_header_is_corrupt():
    short = ONE_RECORD_BATCH[:8] + (30).to_bytes(4, "big") + ONE_RECORD_BATCH[12:42]
    batch = RecordBatch(short)
    assert batch.size_in_bytes == 42
    with pytest.raises(CorruptRecordError, match="Record batch is corrupt \\(batch at position 0 \\(base offset 0\\)\\): expected a size of at least 61 bytes \\(the header\\), found 42"):
        batch.ensure_valid()


def test_batch_cut_by_the_end_of_the_buffer_is_truncated():
    batch = RecordBatch(TWO_RECORD_BATCH[:-10])
    with pytest.raises(CorruptRecordError, match="Truncated batch at position 0 \\(base offset 100\\): expected 87 bytes \\(length field 75\\), found 77 left in the buffer"):
        batch.ensure_valid()
    with pytest.raises(CorruptRecordError, match="Truncated batch"):
        batch.records()
    with pytest.raises(CorruptRecordError, match="Truncated batch"):
        batch.view


def test_buffer_without_a_length_field_is_truncated():
    with pytest.raises(CorruptRecordError, match="Truncated batch at position 3: expected at least 12 bytes for baseOffset and length, found 8"):
        RecordBatch(b"\x00" * 11, 3)


def test_iterating_does_not_check_the_crc():
    corrupt = bytearray(TWO_RECORD_BATCH)
    corrupt[-1] ^= 0x01  # header value "x" becomes "y"
    assert RecordBatch(corrupt).records()[1].headers == (("h", b"y"),)


# -- malformed records areas behind a valid CRC: errors say where ---------------------------


def test_trailing_bytes_after_the_last_record_are_an_incorrect_batch_size():
    batch = RecordBatch(b"\x00" * 4 + raw_batch(record(record_body()) + b"\x00\x00", 1, base_offset=42), 4)
    batch.ensure_valid()
    with pytest.raises(CorruptRecordError, match="Incorrect declared batch size, records still remaining: expected the records area to end after 1 records at byte 73, found 2 more bytes \\(in the buffer of the batch at position 4 \\(base offset 42\\)\\)"):
        batch.records()


def test_records_count_above_the_records_present_is_a_premature_end():
    batch = RecordBatch(raw_batch(record(record_body()), 3))
    with pytest.raises(CorruptRecordError, match="premature EOF reached: expected 3 records, record 1 starts at byte 69, where the records area ends"):
        batch.records()


def test_negative_records_count_is_rejected():
    with pytest.raises(CorruptRecordError, match="Found invalid record count: expected >= 0, found -2"):
        RecordBatch(raw_batch(b"", -2)).records()


def test_negative_header_count_inside_a_batch_is_rejected():
    with pytest.raises(CorruptRecordError, match="Found invalid number of record headers in record 0: expected >= 0, found -1 \\(in the buffer of the batch"):
        RecordBatch(raw_batch(record(record_body(header_count=-1)), 1)).records()


def test_bad_varint_inside_a_batch_is_rejected():
    area = record(b"\x00\x00" + b"\xff" * 6 + b"\x01\x01\x02v\x00")
    with pytest.raises(CorruptRecordError, match="Illegal varint at byte 64: expected it to end within 5 bytes"):
        RecordBatch(raw_batch(area, 1)).records()


def test_trailing_bytes_inside_a_compressed_area_are_an_incorrect_batch_size():
    area = compress(Compression.ZSTD, record(record_body()) + b"\x07")
    with pytest.raises(CorruptRecordError, match="found 1 more bytes \\(in the decompressed records area of the batch at position 0"):
        RecordBatch(raw_batch(area, 1, attributes=Compression.ZSTD)).records()


def test_undecompressable_area_is_corrupt():
    with pytest.raises(CorruptRecordError, match="Failed to decompress lz4 records"):
        RecordBatch(raw_batch(b"not lz4 at all", 1, attributes=Compression.LZ4)).records()


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_id_in_a_batch_is_unsupported(codec_id):
    batch = RecordBatch(raw_batch(record(record_body()), 1, attributes=codec_id))
    batch.ensure_valid()  # the CRC does not care
    with pytest.raises(UnsupportedCompressionError, match=f"found {codec_id}"):
        batch.compression
    with pytest.raises(UnsupportedCompressionError, match=f"found {codec_id}"):
        batch.records()


def test_empty_batch_has_no_records():
    batch = RecordBatch(raw_batch(b"", 0, last_offset_delta=4, base_offset=10))
    batch.ensure_valid()
    assert batch.records() == [] and batch.size_in_bytes == 61 and batch.next_offset == 15


# -- iter_batches: Kafka's FileLogInputStream rules ------------------------------------------


def test_iter_batches_yields_each_batch_with_its_position():
    data = ONE_RECORD_BATCH + TWO_RECORD_BATCH + ONE_RECORD_BATCH
    batches = list(iter_batches(data))
    assert [b.position for b in batches] == [0, 72, 159]
    assert [b.base_offset for b in batches] == [0, 100, 0]


@pytest.mark.parametrize("tail", [0, 1, 17])
def test_iter_batches_stops_quietly_when_17_bytes_or_fewer_remain(tail):
    data = ONE_RECORD_BATCH + b"\xff" * tail
    assert len(list(iter_batches(data))) == 1


def test_iter_batches_stops_quietly_at_a_partial_trailing_batch():
    data = ONE_RECORD_BATCH + TWO_RECORD_BATCH[:-1]
    assert [b.position for b in iter_batches(data)] == [0]


def test_iter_batches_stops_at_a_partial_batch_shorter_than_a_header():
    data = ONE_RECORD_BATCH + TWO_RECORD_BATCH[:30]
    assert [b.position for b in iter_batches(data)] == [0]


@pytest.mark.parametrize("length", [13, 0, -5])
def test_iter_batches_raises_on_a_length_below_14(length):
    bad = (0).to_bytes(8, "big") + length.to_bytes(4, "big", signed=True) + b"\x00" * 60
    with pytest.raises(CorruptRecordError, match=f"Found record size {length} in the length field of the batch at position 72: expected at least 49"):
        list(iter_batches(ONE_RECORD_BATCH + bad))


def test_iter_batches_refuses_a_whole_batch_shorter_than_a_v2_header():
    # length 14 passes Kafka's file iterator (the v0 minimum); no v2 batch is that short, and
    # the bounded walker says so before handing out a view.
    short = (5).to_bytes(8, "big") + (14).to_bytes(4, "big") + b"\x00\x00\x00\x00\x02" + b"\x00" * 9
    with pytest.raises(CorruptRecordError, match="Found record size 14 .* expected at least 49"):
        list(iter_batches(short))


def test_iter_batches_stops_quietly_at_a_short_length_that_runs_past_the_end():
    # Kafka's rule: a length of 14..48 whose batch does not fit is a torn tail, not garbage.
    torn = ONE_RECORD_BATCH + (5).to_bytes(8, "big") + (40).to_bytes(4, "big") + b"\x00" * 10
    assert [b.position for b in iter_batches(torn)] == [0]


def test_iter_batches_honours_position_and_end():
    data = ONE_RECORD_BATCH + TWO_RECORD_BATCH + ONE_RECORD_BATCH
    assert [b.position for b in iter_batches(data, 72)] == [72, 159]
    assert [b.position for b in iter_batches(data, 0, 159)] == [0, 72]
    assert [b.position for b in iter_batches(data, 0, 158)] == [0]


def test_iter_batches_does_not_check_crcs():
    corrupt = bytearray(ONE_RECORD_BATCH)
    corrupt[-2] ^= 0xFF
    (batch,) = iter_batches(corrupt)
    assert not batch.is_valid()


def test_iter_batches_over_an_mmap():
    data = ONE_RECORD_BATCH + TWO_RECORD_BATCH
    with mmap.mmap(-1, len(data)) as mapped:
        mapped[:] = data
        batches = list(iter_batches(mapped))
        assert [len(b.records()) for b in batches] == [1, 2]
        for batch in batches:
            batch.ensure_valid()
        del batches  # views hold no exported buffer: the mmap closes cleanly


def test_iter_batches_over_nothing_yields_nothing():
    assert list(iter_batches(b"")) == []


def test_iter_batches_never_reads_past_the_buffer_whatever_end_says():
    data = ONE_RECORD_BATCH + TWO_RECORD_BATCH[:-1]
    assert [b.position for b in iter_batches(data, 0, 10_000)] == [0]


def test_negative_position_is_refused():
    with pytest.raises(ValueError, match="a batch position must be >= 0, found -1"):
        RecordBatch(ONE_RECORD_BATCH, -1)


def test_error_positions_in_a_copied_records_area_count_from_the_area():
    data = bytearray(b"\x00" * 4 + raw_batch(record(record_body()) + b"\x00\x00", 1))
    with pytest.raises(CorruptRecordError, match="at byte 8, found 2 more bytes \\(in the records area of the batch at position 4"):
        RecordBatch(data, 4).records()


# -- fuzzing: whatever the bytes, the only errors are the codec's own -----------------------


def _rebuilt(records_area: bytes, count: int, attributes: int) -> RecordBatch:
    batch = RecordBatch(raw_batch(records_area, count, attributes=attributes))
    batch.ensure_valid()
    return batch


@settings(max_examples=300, deadline=None)
@given(
    compression=st.sampled_from(list(Compression)),
    flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), min_size=1, max_size=4),
    count_change=st.sampled_from([0, 0, 0, -1, 1, 1000]),
)
def test_corrupted_records_areas_raise_only_codec_errors(compression, flips, count_change):
    builder = RecordBatchBuilder(compression=compression)
    for i in range(5):
        builder.append(b"value-%d" % i, b"key" if i % 2 else None, TIMESTAMP_MS + i, [("h", b"x")] if i == 3 else ())
    good = RecordBatch(builder.build())
    area = bytearray(good.view[61:])
    for index, mask in flips:
        area[index % len(area)] ^= mask
    batch = _rebuilt(bytes(area), good.records_count + count_change, good.attributes)
    try:
        records = batch.records()
    except CodecError:
        return
    assert all(isinstance(r, Record) for r in records)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=400))
def test_random_bytes_walk_and_decode_with_only_codec_errors(data):
    try:
        for batch in iter_batches(ONE_RECORD_BATCH + data):
            batch.is_valid()
            batch.records()
    except CodecError:
        pass
