"""RecordBatchBuilder.append_at / build(last_offset_delta=) and build_empty_batch: the batches
a log cleaner writes (offsets kept, gaps inside, the original last offset, empty batches)."""

import pytest
from kafka.record.default_records import DefaultRecordBatch

from seglog.records import NO_TIMESTAMP, RecordBatch, RecordBatchBuilder, build_empty_batch


def test_append_at_keeps_offset_gaps_and_the_overridden_last_offset():
    builder = RecordBatchBuilder(base_offset=100)
    builder.append_at(2, b"v2", b"k2", 1000)
    builder.append_at(7, None, b"k7", 1005)
    batch = RecordBatch(builder.build(last_offset_delta=9))
    batch.ensure_valid()
    assert [(r.offset, r.key, r.value, r.timestamp_ms) for r in batch.records()] == [
        (102, b"k2", b"v2", 1000),
        (107, b"k7", None, 1005),
    ]
    assert batch.last_offset == 109 and batch.records_count == 2


def test_a_delete_horizon_rebases_timestamps_below_it():
    builder = RecordBatchBuilder(base_offset=0, delete_horizon_ms=5000)
    builder.append_at(0, None, b"k", 1000)
    batch = RecordBatch(builder.build())
    assert batch.delete_horizon_ms == 5000 and batch.base_timestamp == 5000
    assert batch.records()[0].timestamp_ms == 1000
    theirs = DefaultRecordBatch(bytearray(builder.build()))
    assert theirs.validate_crc() and [r.timestamp for r in theirs] == [1000]


def test_offset_deltas_must_increase():
    builder = RecordBatchBuilder()
    builder.append_at(3, b"v")
    with pytest.raises(ValueError, match="increase"):
        builder.append_at(3, b"v")
    with pytest.raises(ValueError, match="last_offset_delta"):
        builder.build(last_offset_delta=2)


def test_empty_batch_is_kafkas_write_empty_header():
    data = build_empty_batch(base_offset=40, last_offset_delta=4, max_timestamp_ms=1234, partition_leader_epoch=3)
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert len(data) == 61 and batch.records_count == 0 and batch.records() == []
    assert (batch.base_offset, batch.last_offset, batch.max_timestamp) == (40, 44, 1234)
    assert batch.base_timestamp == NO_TIMESTAMP and batch.delete_horizon_ms is None
    assert batch.partition_leader_epoch == 3
    assert DefaultRecordBatch(bytearray(data)).validate_crc()
