"""The record walk of lookups by timestamp agrees with the codec's full decode (the oracle)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.log_test_support import with_second_record_running_past_the_batch

from seglog.records import Compression, CorruptRecordError, RecordBatch, RecordBatchBuilder, TimestampType
from seglog_server.storage.format.record_timestamps import first_record_at_or_after, offsets_and_timestamps

NOW_MS = 1_700_000_000_000


def built(timestamps, *, value_bytes=10, compression=Compression.NONE, timestamp_type=TimestampType.CREATE_TIME):
    builder = RecordBatchBuilder(compression=compression, timestamp_type=timestamp_type, base_offset=1000)
    for index, timestamp in enumerate(timestamps):
        builder.append(b"v" * value_bytes, key=b"k%d" % index, timestamp_ms=timestamp)
    return builder.build()


CASES = {
    "increasing": [NOW_MS + i for i in range(10)],
    "out of order": [NOW_MS + 50, NOW_MS + 10, NOW_MS + 90, NOW_MS],
    "far apart (multi-byte deltas)": [NOW_MS + i * 10_000_000 for i in range(5)],
    "one record": [NOW_MS],
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("value_bytes", [10, 100, 10_000])
@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
def test_offsets_and_timestamps_match_the_codec(name, value_bytes, compression):
    data = built(CASES[name], value_bytes=value_bytes, compression=compression)
    expected = [(record.offset, record.timestamp_ms) for record in RecordBatch(data)]
    assert list(offsets_and_timestamps(data)) == expected


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("value_bytes", [10, 100, 10_000])
@pytest.mark.parametrize("compression", [Compression.NONE, Compression.LZ4])
@pytest.mark.parametrize("timestamp_type", [TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME])
def test_first_record_at_or_after_matches_a_scan_of_the_decoded_records(name, value_bytes, compression, timestamp_type):
    """Compressed batches are decompressed and walked as uncompressed ones (no record decoded)."""
    data = built(CASES[name], value_bytes=value_bytes, compression=compression, timestamp_type=timestamp_type)
    records = [(record.offset, record.timestamp_ms) for record in RecordBatch(data)]
    rng = random.Random(value_bytes)
    low, high = min(t for _, t in records), max(t for _, t in records)
    for _ in range(50):
        target = rng.randrange(low - 5, high + 5)
        starting = rng.randrange(1000, 1000 + len(records) + 1)
        expected = next(((o, t) for o, t in records if t >= target and o >= starting), None)
        assert first_record_at_or_after(data, target, starting) == expected


def test_log_append_time_batches_read_the_batch_max_timestamp():
    builder = RecordBatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME, base_offset=5)
    for index in range(3):
        builder.append(b"v", timestamp_ms=NOW_MS + index)
    data = builder.build()
    max_timestamp = RecordBatch(data).max_timestamp
    assert list(offsets_and_timestamps(data)) == [(5, max_timestamp), (6, max_timestamp), (7, max_timestamp)]
    assert first_record_at_or_after(data, 0, 6) == (6, max_timestamp)


def test_a_walk_past_the_end_of_the_batch_raises_the_codecs_corrupt_record_error():
    data = with_second_record_running_past_the_batch(built([NOW_MS, NOW_MS, NOW_MS + 5], value_bytes=1))
    with pytest.raises(CorruptRecordError, match="Invalid record length of record 1"):
        first_record_at_or_after(data, NOW_MS + 5, 0)
    with pytest.raises(CorruptRecordError, match="Invalid record length of record 1"):
        list(offsets_and_timestamps(data))


# -- per-batch tables against the walk (Hypothesis) ---------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(st.tuples(st.integers(1, 5), st.integers(-50, 400)), min_size=1, max_size=60),
    base_offset=st.integers(0, 10**6),
    starting_shift=st.integers(-3, 80),
    targets=st.lists(st.integers(-60, 420), max_size=20),
    compressed=st.booleans(),
)
def test_a_batch_s_table_answers_as_its_walk_with_offset_gaps(records, base_offset, starting_shift, targets, compressed):
    """Compacted batches keep gaps between their offsets; the table keeps their offset deltas
    (and none for a batch without gaps): every answer is the walk's, or the table declines."""
    from seglog_server.storage.format.record_timestamps import RecordTimesCache, first_records_at_or_after

    builder = RecordBatchBuilder(base_offset=base_offset,
                                 compression=Compression.GZIP if compressed else Compression.NONE)
    offset_delta = -1
    for gap, timestamp in records:
        offset_delta += gap
        builder.append_at(offset_delta, b"v", timestamp_ms=NOW_MS + timestamp)
    data = builder.build()
    targets = sorted(NOW_MS + target for target in targets)
    starting_offset = base_offset + starting_shift
    cache = RecordTimesCache(records_min=1)
    answers = cache.answers("f.log", data, 0, 0, targets, starting_offset, lambda: data)
    walked = first_records_at_or_after(data, targets, starting_offset)
    assert answers is None or answers == walked
    if starting_shift <= records[0][0] - 1:  # every record at or after the starting offset
        assert answers == walked
    assert len(cache) == 1
