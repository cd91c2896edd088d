"""Log: append and offset assignment, rolls, reads, offsets by timestamp, retention, DeleteRecords,
truncation, flush and recovery point, statistics, concurrency (ports of UnifiedLogTest)."""

from __future__ import annotations

import errno
import os
import struct
import threading

import pytest
from tests.support.log_test_support import (
    NOW_MS,
    all_offsets,
    append_all,
    batch,
    batch_offsets,
    config,
    first_batch,
    new_segment,
    offsets_of,
    open_log,
    records_of,
    reopen,
    segment_files,
    sized_batch,
    values_of,
    with_second_record_running_past_the_batch,
)

from seglog.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    RECORDS_COUNT_OFFSET,
    TimestampType,
    crc32c,
    iter_batches,
)
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.base.errors import (
    CorruptRecordError,
    CorruptSegmentError,
    InvalidRecordError,
    LogDirFullError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    StorageError,
)
from seglog_server.storage.log.leader_epoch_cache import EpochEntry
from seglog_server.storage.log.log_results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from seglog_server.storage.segment.log_segment import RollReason

HOUR_MS = 3_600_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


def test_a_new_log_has_one_empty_segment_at_offset_zero(tmp_path, clock):
    log = open_log(tmp_path, clock)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert log.segment_count == 1
    assert segment_files(tmp_path) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]


# -- append ----------------------------------------------------------------------------------


def test_append_assigns_consecutive_offsets_from_the_log_end_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    first = log.append(batch(b"a", b"b", b"c"))
    second = log.append(batch(b"d"))
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.base_offset, second.last_offset) == (3, 3)
    assert log.log_end_offset == log.high_watermark == 4
    assert all_offsets(log) == [0, 1, 2, 3]
    assert values_of(log.read(0, 10_000).records) == [b"a", b"b", b"c", b"d"]


def test_append_rewrites_only_the_base_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    produced = batch(b"b", b"c")
    log.append(produced)
    stored = log.read(1, 10_000).records
    assert stored[8:] == produced[8:]
    assert first_batch(stored).base_offset == 1
    assert first_batch(stored).is_valid()


def test_append_info_reports_sizes_timestamps_and_the_log_start_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    data = batch(b"a", b"b", timestamps=[NOW_MS - 3, NOW_MS - 1])
    info = log.append(data)
    assert info.size_bytes == len(data)
    assert info.max_timestamp_ms == NOW_MS - 1
    assert info.log_append_time_ms == -1
    assert info.log_start_offset == 0


def test_log_append_time_stamps_the_clock_on_the_stored_batch(tmp_path, clock):
    log = open_log(tmp_path, clock, config(message_timestamp_type=TimestampType.LOG_APPEND_TIME))
    clock.advance(1234)
    info = log.append(batch(b"a", b"b", timestamps=[5, 6]))
    assert info.log_append_time_ms == info.max_timestamp_ms == NOW_MS + 1234
    stored = first_batch(log.read(0, 10_000).records)
    assert stored.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert stored.is_valid()
    assert [r.timestamp_ms for r in stored] == [NOW_MS + 1234] * 2
    found = log.offset_for_timestamp(NOW_MS + 1000)
    assert (found.timestamp_ms, found.offset) == (NOW_MS + 1234, 0)


def test_invalid_batches_change_nothing(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    corrupt = bytearray(batch(b"b"))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append(bytes(corrupt))
    with pytest.raises(InvalidRecordError, match="base offset 0"):
        log.append(batch(b"c", base_offset=3))
    assert log.log_end_offset == 1
    assert log.statistics().appended_batch_count == 1


def test_a_batch_larger_than_a_segment_is_refused(tmp_path, clock):
    log = open_log(tmp_path, clock, config(segment_bytes=100))
    with pytest.raises(RecordBatchTooLargeError):
        log.append(batch(b"x" * 100))


def test_compacted_topics_refuse_records_without_keys(tmp_path, clock):
    log = open_log(tmp_path, clock, config(cleanup_policy=frozenset({"compact"})))
    with pytest.raises(InvalidRecordError, match="without key"):
        log.append(batch(b"a"))
    log.append(batch(b"a", keys=[b"k"]))
    assert log.log_end_offset == 1


# -- roll ------------------------------------------------------------------------------------


def test_roll_for_size_starts_a_segment_at_the_next_offset(tmp_path, clock):
    one = batch(b"x" * 50)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 3))
    for _ in range(7):
        log.append(one)
    assert [s.base_offset for s in log.segments_snapshot()] == [0, 3, 6]
    assert log.statistics().roll_counts == {"size": 2}
    assert all_offsets(log) == list(range(7))


def test_roll_for_time_uses_record_timestamps(tmp_path, clock):
    log = open_log(tmp_path, clock, config(segment_ms=HOUR_MS))
    log.append(batch(b"a", timestamps=NOW_MS))
    log.append(batch(b"b", timestamps=NOW_MS + HOUR_MS))
    assert log.segment_count == 1
    log.append(batch(b"c", timestamps=NOW_MS + HOUR_MS + 1))
    assert log.segment_count == 2
    assert log.statistics().roll_counts == {"time": 1}


def test_roll_for_time_uses_the_clock_for_records_without_timestamps(tmp_path, clock):
    log = open_log(tmp_path, clock, config(segment_ms=HOUR_MS))
    log.append(batch(b"a", timestamps=-1))
    clock.advance(HOUR_MS)
    log.append(batch(b"b", timestamps=-1))
    assert log.segment_count == 1
    clock.advance(1)
    log.append(batch(b"c", timestamps=-1))
    assert log.segment_count == 2


def test_an_empty_segment_never_rolls_for_time(tmp_path, clock):
    log = open_log(tmp_path, clock, config(segment_ms=10))
    clock.advance(HOUR_MS)
    log.append(batch(b"a", timestamps=-1))
    assert log.segment_count == 1


def test_compacted_topics_roll_at_max_compaction_lag(tmp_path, clock):
    log = open_log(tmp_path, clock, config(cleanup_policy=frozenset({"compact"}), max_compaction_lag_ms=1000))
    log.append(batch(b"a", keys=[b"k"], timestamps=NOW_MS))
    log.append(batch(b"b", keys=[b"k"], timestamps=NOW_MS + 1001))
    assert log.segment_count == 2


def test_roll_when_the_offset_index_is_full(tmp_path, clock):
    log = open_log(tmp_path, clock, config(index_interval_bytes=1, segment_index_bytes=8 * 3 + 12))
    for _ in range(10):
        log.append(batch(b"a", timestamps=-1))
    reasons = log.statistics().roll_counts
    assert set(reasons) == {"offset_index_full"}
    assert all_offsets(log) == list(range(10))


def test_roll_when_the_time_index_is_full(tmp_path, clock):
    log = open_log(tmp_path, clock, config(index_interval_bytes=1, segment_index_bytes=36))
    for offset in range(10):
        log.append(batch(b"a", timestamps=NOW_MS + offset))
    assert set(log.statistics().roll_counts) == {"time_index_full"}
    assert all_offsets(log) == list(range(10))


def test_explicit_roll_flushes_the_previous_segments_and_moves_the_recovery_point(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a", b"b"))
    assert log.recovery_point == 0
    assert log.roll() == 2
    assert log.recovery_point == 2
    assert log.statistics().roll_counts == {RollReason.REQUESTED.value: 1}


def test_rolling_an_empty_active_segment_recreates_it(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    log.roll()
    assert log.roll() == 1
    assert [s.base_offset for s in log.segments_snapshot()] == [0, 1]


def test_roll_jitter_comes_from_the_injected_random(tmp_path, clock):
    log = open_log(tmp_path, clock, config(segment_ms=1000, segment_jitter_ms=500))
    assert 0 <= log.segments_snapshot()[0].roll_jitter_ms < 500


# -- read ------------------------------------------------------------------------------------


def test_read_outside_the_log_raises_offset_out_of_range(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a", b"b"))
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 3 is outside the log's range \[0, 2\]"):
        log.read(3, 100)
    log.delete_records(1)
    with pytest.raises(OffsetOutOfRangeError, match="offset 0"):
        log.read(0, 100)


def test_read_at_the_log_end_offset_is_empty(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    data = log.read(1, 100)
    assert data.records == b""
    assert (data.high_watermark, data.log_start_offset, data.log_end_offset) == (1, 0, 1)


def test_read_returns_whole_batches_within_max_bytes_and_at_least_one(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for value in (b"aa", b"bb", b"cc"):
        log.append(batch(value))
    size = len(batch(b"aa"))
    assert offsets_of(log.read(0, 2 * size).records) == [0, 1]
    assert offsets_of(log.read(0, size - 1).records) == [0]
    assert log.read(0, size - 1, min_one_batch=False).records == b""
    assert offsets_of(log.read(1, 10_000).records) == [1, 2]


def test_read_across_segments_stays_within_one_segment(tmp_path, clock):
    one = batch(b"x" * 50)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 2))
    for _ in range(5):
        log.append(one)
    assert offsets_of(log.read(0, 10_000).records) == [0, 1]
    assert offsets_of(log.read(2, 10_000).records) == [2, 3]
    assert offsets_of(log.read(4, 10_000).records) == [4]


def test_reads_across_offset_gaps_inside_and_between_segments(tmp_path, clock):
    # A compacted log: offsets 1-4 and 6-11 were cleaned away.
    first = new_segment(tmp_path, 0, clock)
    first.append(batch(b"a", base_offset=0) + batch(b"b", base_offset=5))
    first.close()
    second = new_segment(tmp_path, 10, clock)
    second.append(batch(b"c", base_offset=12))
    second.close()
    log = open_log(tmp_path, clock)
    assert log.log_end_offset == 13
    assert offsets_of(log.read(2, 10_000).records) == [5]
    assert offsets_of(log.read(6, 10_000).records) == [12]  # nothing left in the first segment
    assert offsets_of(log.read(11, 10_000).records) == [12]
    assert log.read(13, 10_000).records == b""


def test_position_of_goes_through_both_lookup_levels(tmp_path, clock):
    one = batch(b"x" * 50)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 2, index_interval_bytes=1))
    for _ in range(6):
        log.append(one)
    assert log.position_of(0) == (0, 0)
    assert log.position_of(3) == (2, len(one))
    assert log.position_of(6) is None


# -- offsets by timestamp --------------------------------------------------------------------


def test_special_targets_latest_earliest_and_max_timestamp(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a", b"b", timestamps=[NOW_MS + 5, NOW_MS + 9]))
    log.append(batch(b"c", timestamps=NOW_MS + 7))
    log.delete_records(1)
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (-1, 3)
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == (-1, 1)
    assert log.offset_for_timestamp(MAX_TIMESTAMP) == (NOW_MS + 9, 1)


def test_offset_for_timestamp_finds_the_first_record_at_or_after_it(tmp_path, clock):
    one = batch(b"x" * 40, timestamps=NOW_MS)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 3, index_interval_bytes=1))
    for offset in range(12):
        log.append(batch(b"x" * 40, timestamps=NOW_MS + offset * 10))
    assert log.segment_count == 4
    for offset in range(12):
        assert log.offset_for_timestamp(NOW_MS + offset * 10) == (NOW_MS + offset * 10, offset)
        if offset < 11:
            assert log.offset_for_timestamp(NOW_MS + offset * 10 + 1).offset == offset + 1
    assert log.offset_for_timestamp(NOW_MS - 100) == (NOW_MS, 0)
    assert log.offset_for_timestamp(NOW_MS + 111) is None


def test_offset_for_timestamp_skips_records_below_the_log_start_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    for offset in range(5):
        log.append(batch(b"a", timestamps=NOW_MS + offset))
    log.delete_records(3)
    assert log.offset_for_timestamp(NOW_MS) == (NOW_MS + 3, 3)


def test_offset_for_timestamp_with_out_of_order_timestamps_returns_the_first_in_log_order(tmp_path, clock):
    log = open_log(tmp_path, clock, config(index_interval_bytes=1))
    for ts in (50, 10, 70, 30):
        log.append(batch(b"a", timestamps=NOW_MS + ts))
    assert log.offset_for_timestamp(NOW_MS + 20) == (NOW_MS + 50, 0)
    assert log.offset_for_timestamp(NOW_MS + 60) == (NOW_MS + 70, 2)


def test_offset_for_timestamp_on_an_empty_log_is_none(tmp_path, clock):
    log = open_log(tmp_path, clock)
    assert log.offset_for_timestamp(NOW_MS) is None
    assert log.offset_for_timestamp(MAX_TIMESTAMP) is None
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == (-1, 0)


def test_offset_for_timestamp_after_segments_are_deleted_and_rolled(tmp_path, clock):
    one = batch(b"x" * 40)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 2))
    for offset in range(6):
        log.append(batch(b"x" * 40, timestamps=NOW_MS + offset))
    assert log.offset_for_timestamp(NOW_MS + 1).offset == 1
    log.delete_records(4)
    log.delete_old_segments()
    assert log.offset_for_timestamp(NOW_MS + 1).offset == 4
    for offset in range(6, 9):
        log.append(batch(b"x" * 40, timestamps=NOW_MS + offset))
    assert log.offset_for_timestamp(NOW_MS + 7).offset == 7


# -- retention -------------------------------------------------------------------------------


def test_time_retention_deletes_the_expired_prefix_of_segments(tmp_path, clock):
    one = batch(b"x" * 40)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 2, retention_ms=HOUR_MS))
    for offset in range(5):  # segments [0, 1] [2, 3] [4]; only the first two are old
        log.append(batch(b"x" * 40, timestamps=NOW_MS if offset < 4 else NOW_MS + HOUR_MS))
    assert log.delete_old_segments() == 0
    clock.advance(HOUR_MS + 1)
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == 4
    assert log.segment_count == 1


def test_time_retention_of_every_segment_rolls_first_and_keeps_an_empty_active_segment(tmp_path, clock):
    log = open_log(tmp_path, clock, config(retention_ms=HOUR_MS))
    for _ in range(3):
        log.append(batch(b"a", timestamps=NOW_MS))
    clock.advance(HOUR_MS + 1)
    assert log.delete_old_segments() == 1
    assert log.segment_count == 1
    assert log.log_start_offset == log.log_end_offset == 3
    assert log.statistics().roll_counts == {"retention": 1}
    log.append(batch(b"b"))
    assert all_offsets(log) == [3]


def test_retention_never_deletes_a_last_empty_segment(tmp_path, clock):
    log = open_log(tmp_path, clock, config(retention_ms=0))
    clock.advance(10)
    assert log.delete_old_segments() == 0
    assert log.segment_count == 1


def test_a_future_timestamp_keeps_its_segment_and_every_later_one(tmp_path, clock):
    one = batch(b"x" * 40)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one), retention_ms=HOUR_MS))
    log.append(batch(b"x" * 40, timestamps=NOW_MS + 10 * HOUR_MS))
    log.append(batch(b"x" * 40, timestamps=NOW_MS))
    log.append(batch(b"x" * 40, timestamps=NOW_MS))
    clock.advance(2 * HOUR_MS)
    assert log.delete_old_segments() == 0


def test_time_retention_uses_the_file_mtime_without_timestamps(tmp_path, clock):
    one = batch(b"x" * 40, timestamps=-1)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one), retention_ms=HOUR_MS))
    for _ in range(3):
        log.append(one)
    for segment in log.segments_snapshot()[:-1]:
        segment.set_last_modified_ms(NOW_MS - 2 * HOUR_MS)
    assert log.delete_old_segments() == 2


def test_size_retention_deletes_the_oldest_segments_beyond_retention_bytes(tmp_path, clock):
    one = batch(b"x" * 40)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 2, retention_bytes=len(one) * 3))
    for _ in range(7):
        log.append(one)
    # segments: [0,1] [2,3] [4,5] [6] = 7 batches; keep at least 3 batches' worth
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == 4
    assert log.size_in_bytes == len(one) * 3


def test_compact_only_topics_delete_only_below_the_log_start_offset(tmp_path, clock):
    log = open_log(tmp_path, clock, config(cleanup_policy=frozenset({"compact"}), retention_ms=1, retention_bytes=1))
    for _ in range(3):
        log.append(batch(b"a", keys=[b"k"]))
        log.roll()
    clock.advance(HOUR_MS)
    assert log.delete_old_segments() == 0
    log.delete_records(2)
    assert log.delete_old_segments() == 2
    assert all_offsets(log) == [2]


def test_delete_records_then_retention_removes_segments_below_the_new_start(tmp_path, clock):
    one = batch(b"x" * 40)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 2))
    for _ in range(6):
        log.append(one)
    assert log.delete_records(3) == 3
    assert log.delete_old_segments() == 1  # [0,1] goes; [2,3] holds offset 3
    assert [s.base_offset for s in log.segments_snapshot()] == [2, 4]
    assert all_offsets(log) == [3, 4, 5]


def test_delete_records_beyond_the_high_watermark_is_out_of_range(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        log.delete_records(2)
    assert log.delete_records(-1) == 1
    assert log.delete_records(0) == 1  # never moves backwards


def test_deleted_segments_are_renamed_then_unlinked_after_the_delay(tmp_path, clock):
    one = batch(b"x" * 40)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one), file_delete_delay_ms=60_000))
    for _ in range(3):
        log.append(one)
    log.flush()
    log.delete_records(2)
    assert log.delete_old_segments() == 2
    deleted = [name for name in os.listdir(tmp_path) if name.endswith(".deleted")]
    assert sorted(deleted) == [
        "00000000000000000000.index.deleted",
        "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted",
        "00000000000000000001.index.deleted",
        "00000000000000000001.log.deleted",
        "00000000000000000001.timeindex.deleted",
    ]
    assert log.delete_due_files() == 0
    clock.advance(60_000)
    assert log.delete_due_files() == 2
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".deleted")]


# -- truncation ------------------------------------------------------------------------------


def test_truncate_to_the_middle_of_a_batch_removes_the_whole_batch(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a", b"b"))
    log.append(batch(b"c", b"d", b"e"))
    assert log.truncate_to(3)
    assert log.log_end_offset == 3
    assert all_offsets(log) == [0, 1]  # the batch [2..4] went whole
    info = log.append(batch(b"f"))
    assert info.base_offset == 3


def test_truncate_across_segments_deletes_the_later_ones(tmp_path, clock):
    one = batch(b"x" * 40)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 5, index_interval_bytes=10_000))
    for _ in range(100):
        log.append(one)
    reopened = reopen(log, clock, clean=False, recovery_point=0)
    assert reopened.truncate_to(3)
    assert reopened.segment_count == 1
    assert reopened.log_end_offset == 3


def test_truncate_below_the_first_segment_starts_over(tmp_path, clock):
    log = open_log(tmp_path, clock, log_start_offset=0)
    log.truncate_fully_and_start_at(100)
    log.append(batch(b"a"))
    assert log.truncate_to(50)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    assert [s.base_offset for s in log.segments_snapshot()] == [50]


def test_truncate_to_at_or_past_the_end_changes_nothing(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    assert not log.truncate_to(1)
    assert not log.truncate_to(5)
    with pytest.raises(ValueError):
        log.truncate_to(-1)


def test_truncate_fully_and_start_at_leaves_one_empty_segment(tmp_path, clock):
    one = batch(b"x" * 40)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one)))
    for _ in range(3):
        log.append(one)
    log.truncate_fully_and_start_at(10)
    assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (10, 10, 1)
    assert log.append(batch(b"a")).base_offset == 10


def test_truncate_fully_and_start_at_asks_only_if_under_the_lock_and_false_changes_nothing(tmp_path, clock):
    """``only_if`` is asked with the log's lock held (another thread cannot take it, so no append
    lands between the answer and the truncation) and may read the log (the lock is re-entrant)."""
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"), leader_epoch=1)
    asked = []

    def lock_free_elsewhere() -> bool:
        free = []

        def probe() -> None:
            taken = log._lock.acquire(blocking=False)
            if taken:
                log._lock.release()
            free.append(taken)

        thread = threading.Thread(target=probe)
        thread.start()
        thread.join()
        return free[0]

    def only_if(answer: bool):
        def ask() -> bool:
            asked.append((lock_free_elsewhere(), log.leader_epoch_entries()))
            return answer
        return ask

    assert not log.truncate_fully_and_start_at(5, only_if=only_if(False))
    assert (log.log_start_offset, log.log_end_offset) == (0, 1)
    assert log.truncate_fully_and_start_at(5, only_if=only_if(True))
    assert (log.log_start_offset, log.log_end_offset) == (5, 5)
    assert asked == [(False, [EpochEntry(1, 0)])] * 2
    assert lock_free_elsewhere()  # released after


def test_a_truncation_only_if_refuses_announces_no_change(tmp_path, clock):
    """A refused truncation changes nothing, so the change listener (the Consume streams' and long
    polls' wake-up) hears nothing of it; a done one is announced once."""
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    heard = []
    log.set_change_listener(lambda *change: heard.append(change))
    assert not log.truncate_fully_and_start_at(0, only_if=lambda: False)
    assert heard == []
    assert log.truncate_fully_and_start_at(0, only_if=lambda: True)
    assert len(heard) == 1


# -- flush and recovery point ----------------------------------------------------------------


def test_flush_moves_the_recovery_point_to_the_log_end_offset(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a", b"b"))
    clock.advance(100)
    log.flush()
    assert log.recovery_point == 2
    assert log.last_flush_time_ms == NOW_MS + 100
    assert log.statistics().unflushed_record_count == 0


def test_flush_to_an_offset_moves_the_recovery_point_there(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a", b"b", b"c"))
    log.flush(2)
    assert log.recovery_point == 2
    log.flush(1)
    assert log.recovery_point == 2


def test_flush_messages_flushes_after_the_append_that_reaches_it(tmp_path, clock):
    log = open_log(tmp_path, clock, config(flush_messages=3))
    log.append(batch(b"a", b"b"))
    assert log.recovery_point == 0
    log.append(batch(b"c"))
    assert log.recovery_point == 3


def test_flushing_creates_the_index_files_of_an_empty_active_segment(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    log.roll()
    assert "00000000000000000001.index" not in os.listdir(tmp_path)
    log.flush()
    assert "00000000000000000001.index" in os.listdir(tmp_path)


class SyncRecordingFS(FileSystem):
    """Records the file name of every fdatasync; runs ``during_sync`` (once) at the first."""

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.synced: list[str] = []
        self.during_sync = None

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self.paths[fd] = os.path.basename(path)
        return fd

    def fdatasync(self, fd):
        self.synced.append(self.paths[fd])
        hook, self.during_sync = self.during_sync, None
        if hook is not None:
            hook()
        super().fdatasync(fd)


def test_a_whole_log_flush_syncs_the_active_segments_indexes(tmp_path, clock):
    # At shutdown the recovery point becomes the log end offset and the clean-shutdown marker
    # makes the next load trust the active segment's index files: they must be on disk.
    fs = SyncRecordingFS()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1), fs=fs)
    log.append(batch(b"a"))
    log.roll()
    log.append(batch(b"b", timestamps=NOW_MS + 1))
    log.append(batch(b"c", timestamps=NOW_MS + 2))
    fs.synced.clear()
    log.flush()
    active = "00000000000000000001"
    assert {f"{active}.log", f"{active}.index", f"{active}.timeindex"} <= set(fs.synced)
    assert log.recovery_point == log.log_end_offset == 3


def test_a_whole_log_flush_with_nothing_new_syncs_nothing(tmp_path, clock):
    fs = SyncRecordingFS()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1), fs=fs)
    log.append(batch(b"a"))
    log.flush()
    assert fs.synced  # the first flush had data to sync
    fs.synced.clear()
    log.flush()
    log.flush()
    assert fs.synced == []


def test_a_whole_log_flush_syncs_again_after_an_append_a_roll_or_a_truncation(tmp_path, clock):
    fs = SyncRecordingFS()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1), fs=fs)
    log.append(batch(b"a"))
    log.flush()
    fs.synced.clear()
    log.append(batch(b"b"))
    log.flush()
    assert "00000000000000000000.log" in fs.synced
    fs.synced.clear()
    log.roll()  # no new offsets, but a new active segment whose files were never synced
    log.flush()
    assert "00000000000000000002.index" in fs.synced
    fs.synced.clear()
    log.truncate_to(1)
    log.flush()
    assert fs.synced


def test_a_flush_to_an_offset_inside_the_active_segment_syncs_only_its_log(tmp_path, clock):
    # A crash reindexes the segment holding the recovery point: its indexes need no fsync.
    fs = SyncRecordingFS()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1), fs=fs)
    append_all(log, [batch(b"a"), batch(b"b"), batch(b"c")])
    fs.synced.clear()
    log.flush(2)
    assert fs.synced == ["00000000000000000000.log"]
    assert log.recovery_point == 2


def test_a_truncation_during_a_flush_keeps_the_recovery_point_below_the_rewritten_offsets(tmp_path, clock):
    # The flush means to cover offsets 0..2; while its fsyncs run (outside the log lock) the log
    # is cut to 1 and offsets 1..3 are written again, unsynced. The flush must not claim them.
    fs = SyncRecordingFS()
    log = open_log(tmp_path, clock, fs=fs)
    append_all(log, [batch(b"a"), batch(b"b"), batch(b"c")])

    def truncate_and_rewrite():
        assert log.truncate_to(1)
        append_all(log, [batch(b"x"), batch(b"y"), batch(b"z")])

    fs.during_sync = truncate_and_rewrite
    log.flush()
    assert log.log_end_offset == 4
    assert log.recovery_point <= 1
    assert values_of(log.read(0, 1 << 20).records) == [b"a", b"x", b"y", b"z"]
    log.flush()
    assert log.recovery_point == 4


def test_a_full_truncation_during_a_flush_keeps_the_recovery_point_at_the_new_start(tmp_path, clock):
    fs = SyncRecordingFS()
    log = open_log(tmp_path, clock, fs=fs)
    append_all(log, [batch(b"a"), batch(b"b"), batch(b"c")])

    def restart_and_rewrite():
        log.truncate_fully_and_start_at(2)
        append_all(log, [batch(b"x"), batch(b"y")])

    fs.during_sync = restart_and_rewrite
    log.flush()
    assert log.log_end_offset == 4
    assert log.recovery_point <= 2


# -- statistics and concurrency -------------------------------------------------------------


def test_statistics_count_appends_reads_and_index_lookups(tmp_path, clock):
    log = open_log(tmp_path, clock, config(index_interval_bytes=1))
    for _ in range(5):
        log.append(batch(b"abc"))
    log.read(3, 1000)
    stats = log.statistics()
    assert (stats.appended_batch_count, stats.appended_record_count) == (5, 5)
    assert stats.appended_bytes == 5 * len(batch(b"abc"))
    assert stats.read_count == 1 and stats.read_bytes > 0
    assert stats.size_bytes == log.size_in_bytes == stats.appended_bytes
    assert stats.index_warm_lookup_count + stats.index_cold_lookup_count >= 1
    assert (stats.log_start_offset, stats.log_end_offset, stats.segment_count) == (0, 5, 1)


def test_a_writer_and_readers_in_threads_see_only_whole_consistent_batches(tmp_path, clock):
    one = batch(b"x" * 30)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 20, index_interval_bytes=64))
    total = 600
    errors: list[BaseException] = []
    done = threading.Event()

    def writer():
        try:
            for index in range(total):
                log.append(batch(b"v%d" % index))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            done.set()

    def reader():
        try:
            position = 0
            while position < total:
                data = log.read(position, 4096).records
                for stored in iter_batches(data):
                    assert stored.is_valid()
                    assert stored.base_offset == position
                    assert [r.value for r in stored] == [b"v%d" % position]
                    position = stored.next_offset
                if done.is_set() and position == log.log_end_offset:
                    break
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert log.log_end_offset == total
    assert all_offsets(log) == list(range(total))


def test_closed_log_refuses_work(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.close()
    log.close()
    with pytest.raises(Exception, match="closed"):
        log.append(batch(b"a"))


def test_a_large_batch_round_trips(tmp_path, clock):
    log = open_log(tmp_path, clock)
    big = sized_batch(1024 * 1024)
    log.append(big)
    assert log.read(0, 1).records[8:] == big[8:]
    assert len(records_of(log.read(0, 1).records)) == 1
    assert batch_offsets(log.read(0, 1).records) == [(0, 0)]


def test_inactive_segments_beyond_the_budget_release_their_descriptors(tmp_path, clock):
    one = batch(b"x" * 40)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one), index_interval_bytes=1))
    for _ in range(20):
        log.append(one)
    log.close()
    from tests.support.log_test_support import run_now
    from seglog_server.storage.log.unified_log import Log

    reopened = Log.load(
        str(tmp_path), "topic", 0, log.config, clock=clock, had_clean_shutdown=True,
        flush_scheduler=run_now, open_segments_max=3,
    )
    for offset in range(20):
        assert offsets_of(reopened.read(offset, 1).records) == [offset]
        assert reopened.offset_for_timestamp(NOW_MS).offset == 0
    holding = [s.base_offset for s in reopened.segments_snapshot()[:-1] if s.holds_handles]
    assert len(holding) <= 3
    assert all_offsets(reopened) == list(range(20))
    # Counted across the releases: the 20 time lookups (a one-entry time index each); the reads
    # search empty offset indexes (one batch a segment), zone "none", in neither count.
    assert reopened.statistics().index_warm_lookup_count + reopened.statistics().index_cold_lookup_count >= 20
    reopened.close()
    recovered = Log.load(  # recovers (and releases) every segment: a flush then syncs them all
        str(tmp_path), "topic", 0, log.config, clock=clock, had_clean_shutdown=False,
        recovery_point=0, flush_scheduler=run_now, open_segments_max=3,
    )
    assert recovered.recovery_point == 0
    recovered.flush()
    assert recovered.recovery_point == 20
    assert len([s for s in recovered.segments_snapshot()[:-1] if s.holds_handles]) <= 3


def test_truncating_into_an_inactive_segment_makes_it_appendable_again(tmp_path, clock):
    one = batch(b"x" * 40)
    log = open_log(tmp_path, clock, config(segment_bytes=len(one) * 3))
    for _ in range(7):
        log.append(one)
    log = reopen(log, clock)
    assert log.read(1, 10).records  # maps the sealed first segment
    assert log.truncate_to(2)
    assert log.append(batch(b"new")).base_offset == 2
    assert values_of(log.read(0, 10_000).records)[-1] == b"new"


class FailingWritesFS(FileSystem):
    """Fails every pwritev once armed with ``error`` (EIO: a failed disk; ENOSPC: a full one)."""

    armed = False
    error = errno.EIO

    def pwritev(self, fd, buffers, position):
        if self.armed:
            raise OSError(self.error, f"injected: {os.strerror(self.error)}")
        return super().pwritev(fd, buffers, position)


def test_an_io_error_takes_the_log_offline_and_a_reload_recovers_what_was_written(tmp_path, clock):
    fs = FailingWritesFS()
    log = open_log(tmp_path, clock, fs=fs)
    log.append(batch(b"a"))
    fs.armed = True
    with pytest.raises(LogDirOfflineError, match="Input/output error"):
        log.append(batch(b"b"))
    assert log.is_offline
    with pytest.raises(LogDirOfflineError):
        log.read(0, 100)
    log.close_handlers()
    reloaded = open_log(tmp_path, clock, had_clean_shutdown=False)
    assert all_offsets(reloaded) == [0]
    assert reloaded.append(batch(b"c")).base_offset == 1


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_refuses_the_append_keeps_the_log_online_and_resumes_when_space_is_back(
    tmp_path, clock, error
):
    fs = FailingWritesFS()
    fs.error = error
    log = open_log(tmp_path, clock, fs=fs)
    log.append(batch(b"a"))
    fs.armed = True
    with pytest.raises(LogDirFullError, match="no space left .* partition topic-0"):
        log.append(batch(b"b"))
    assert not log.is_offline and log.log_end_offset == 1
    assert all_offsets(log) == [0]  # reads go on
    fs.armed = False
    assert log.append(batch(b"c")).base_offset == 1  # the refused batch took no offset
    assert all_offsets(log) == [0, 1]


def test_tiered_storage_targets_answer_as_kafka_does_without_tiering(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a", b"b"))
    log.delete_records(1)
    assert log.offset_for_timestamp(-4) == (-1, 1)  # EARLIEST_LOCAL = EARLIEST
    assert log.offset_for_timestamp(-5) == (-1, -1)  # LATEST_TIERED: nothing tiered
    with pytest.raises(ValueError, match="unknown special timestamp -6"):
        log.offset_for_timestamp(-6)


# -- a valid CRC over a garbage records area ----------------------------------------------------
def test_a_batch_with_a_valid_crc_over_a_garbage_records_area_is_refused_at_append(tmp_path, clock):
    log = open_log(tmp_path, clock)
    garbage = with_second_record_running_past_the_batch(batch(b"a", b"b", b"c", timestamps=NOW_MS))
    first_batch(garbage).ensure_valid()
    with pytest.raises(InvalidRecordError, match="Invalid record length of record 1 .* found 63"):
        log.append(garbage)
    assert log.log_end_offset == 0
    log.append(batch(b"a"))
    assert all_offsets(log) == [0]


def test_a_record_count_mismatch_under_a_valid_crc_is_refused_at_append(tmp_path, clock):
    log = open_log(tmp_path, clock)
    good = bytearray(batch(b"a", b"b", b"c", timestamps=NOW_MS))
    struct.pack_into(">i", good, RECORDS_COUNT_OFFSET, 4)
    struct.pack_into(">i", good, LAST_OFFSET_DELTA_OFFSET, 3)
    struct.pack_into(">I", good, CRC_OFFSET, crc32c(bytes(good[ATTRIBUTES_OFFSET:])))
    with pytest.raises(InvalidRecordError, match="expected 4 records, found 3"):
        log.append(bytes(good))
    assert log.log_end_offset == 0


@pytest.mark.parametrize("target", [NOW_MS + 5, MAX_TIMESTAMP])
def test_offset_for_timestamp_over_a_batch_corrupted_on_disk_raises_the_corrupt_batch_error(
    tmp_path, clock, target
):
    log = open_log(tmp_path, clock)
    good = batch(b"a", b"b", b"c", timestamps=[NOW_MS, NOW_MS, NOW_MS + 5])
    log.append(good)
    log.segments_snapshot()[-1].drop_time_steps()  # (a table the append fed answers from memory: time_steps.py)
    # Same length, base offset 0 as stored, CRC rewritten: only reading the records finds it.
    corrupt = with_second_record_running_past_the_batch(good)
    fd = os.open(os.path.join(tmp_path, "00000000000000000000.log"), os.O_WRONLY)
    try:
        os.pwrite(fd, corrupt, 0)
    finally:
        os.close(fd)
    with pytest.raises(StorageError) as raised:
        log.offset_for_timestamp(target)
    assert isinstance(raised.value, CorruptSegmentError) and "partition topic-0" in str(raised.value)
    assert "cannot decode the batch at position 0" in str(raised.value)
