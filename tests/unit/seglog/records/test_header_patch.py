"""Header patches the storage engine applies at append time."""

import mmap

import pytest

from seglog.records import (
    Compression,
    CorruptRecordError,
    RecordBatch,
    RecordBatchBuilder,
    TimestampType,
    set_max_timestamp,
    set_partition_leader_epoch,
)

from records_test_support import TIMESTAMP_MS, TWO_RECORD_BATCH, raw_batch, record, record_body


def built(compression=Compression.NONE) -> bytes:
    builder = RecordBatchBuilder(compression=compression, is_transactional=True, producer_id=1, producer_epoch=0, base_sequence=0)
    builder.append(b"a", timestamp_ms=100)
    builder.append(b"b", timestamp_ms=200)
    return builder.build()


@pytest.mark.parametrize("compression", list(Compression))
def test_set_max_timestamp_to_log_append_time_sets_bit_three_and_recomputes_the_crc(compression):
    buf = bytearray(built(compression))
    set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, 5000)
    batch = RecordBatch(buf)
    batch.ensure_valid()
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME and batch.max_timestamp == 5000
    assert batch.compression is compression and batch.is_transactional
    assert [r.timestamp_ms for r in batch.records()] == [5000, 5000]


def test_set_max_timestamp_under_create_time_changes_only_max_timestamp():
    buf = bytearray(built())
    set_max_timestamp(buf, TimestampType.CREATE_TIME, 150)
    batch = RecordBatch(buf)
    batch.ensure_valid()
    assert (batch.timestamp_type, batch.max_timestamp, batch.base_timestamp) == (TimestampType.CREATE_TIME, 150, 100)
    assert [r.timestamp_ms for r in batch.records()] == [100, 200]


def test_set_max_timestamp_with_the_current_values_leaves_the_bytes_untouched():
    original = bytearray(TWO_RECORD_BATCH)
    original[-1] ^= 0x01  # a bad CRC survives: nothing is rewritten, as in Kafka
    buf = bytearray(original)
    set_max_timestamp(buf, TimestampType.CREATE_TIME, TIMESTAMP_MS + 5)
    assert buf == original


def test_set_max_timestamp_drops_unknown_attribute_bits_like_kafka():
    buf = bytearray(raw_batch(record(record_body()), 1, attributes=0x0180 | 0x24))
    set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, 9)
    batch = RecordBatch(buf)
    batch.ensure_valid()
    assert batch.attributes == 0x24 | 0x08


def test_set_max_timestamp_at_a_position_inside_a_larger_buffer():
    buf = bytearray(TWO_RECORD_BATCH + built())
    set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, 777, position=len(TWO_RECORD_BATCH))
    assert bytes(buf[: len(TWO_RECORD_BATCH)]) == TWO_RECORD_BATCH
    batch = RecordBatch(buf, len(TWO_RECORD_BATCH))
    batch.ensure_valid()
    assert batch.max_timestamp == 777


def test_set_max_timestamp_on_an_mmap():
    data = built()
    with mmap.mmap(-1, len(data)) as mapped:
        mapped[:] = data
        set_max_timestamp(mapped, TimestampType.LOG_APPEND_TIME, 31)
        assert RecordBatch(mapped).is_valid() and RecordBatch(mapped).max_timestamp == 31


def test_set_max_timestamp_refuses_a_truncated_batch():
    buf = bytearray(built()[:-3])
    with pytest.raises(CorruptRecordError, match="Truncated batch at position 0"):
        set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, 1)
    assert buf == built()[:-3]


def test_set_max_timestamp_refuses_an_unknown_timestamp_type():
    with pytest.raises(ValueError):
        set_max_timestamp(bytearray(built()), 3, 1)


def test_set_partition_leader_epoch_keeps_the_crc_valid():
    buf = bytearray(TWO_RECORD_BATCH)
    set_partition_leader_epoch(buf, 12345)
    batch = RecordBatch(buf)
    batch.ensure_valid()
    assert batch.partition_leader_epoch == 12345 and batch.crc == 0xAC5D2415
    assert bytes(buf[16:]) == TWO_RECORD_BATCH[16:]


def test_set_partition_leader_epoch_at_a_position():
    buf = bytearray(b"\x00" * 10 + TWO_RECORD_BATCH)
    set_partition_leader_epoch(buf, -1, position=10)
    assert RecordBatch(buf, 10).partition_leader_epoch == -1
