"""What the log answers the cleaner (segment_views.py): ``cleanable_view``, ``snapshot_segments``,
``describe_segment`` and ``segments_in_range``, explicit operations in place of a callback into
the log's lock. Real files, a FakeClock, faults through FaultFs."""

from __future__ import annotations

import errno
import os

import pytest
from tests.support.fault_fs import FaultFs
from tests.support.log_test_support import NOW_MS, batch, config, open_log

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import (
    LogDirOfflineError,
    ResourceExhaustedError,
    StaleCleaningResultError,
)

HOUR_MS = 3_600_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


def three_closed_segments(log) -> list[int]:
    """Segments at 0, 2, 4 (two records each) and an active one at 6; their base offsets."""
    for _ in range(3):
        log.append(batch(b"a", b"b", timestamps=NOW_MS))
        log.roll()
    return [segment.base_offset for segment in log.segments_snapshot()]


def test_snapshot_segments_links_the_closed_segments_from_the_log_start_up_to_the_offset(tmp_path, clock):
    log = open_log(tmp_path / "log", clock)
    assert three_closed_segments(log) == [0, 2, 4, 6]
    into = tmp_path / "snapshot"
    into.mkdir()
    taken = log.snapshot_segments(4, link_into=str(into), log_start_offset=0)
    live = log.segments_snapshot()
    assert [linked.segment for linked in taken.linked] == live[:2]
    assert sorted(os.listdir(into)) == [linked.file for linked in taken.linked]
    for linked in taken.linked:
        assert linked.size_bytes == linked.segment.size_in_bytes
        assert os.path.samefile(into / linked.file, linked.segment.log.path)
    assert taken.log_start_offset == 0
    log.close()


def test_snapshot_segments_starts_at_the_segment_holding_the_log_start_offset(tmp_path, clock):
    log = open_log(tmp_path / "log", clock)
    three_closed_segments(log)
    log.delete_records(3)
    taken = log.snapshot_segments(6, link_into=str(tmp_path), log_start_offset=3)
    assert [linked.segment.base_offset for linked in taken.linked] == [2, 4]
    log.close()


def test_a_log_start_offset_moved_since_the_choice_refuses_the_snapshot_and_links_nothing(tmp_path, clock):
    log = open_log(tmp_path / "log", clock)
    three_closed_segments(log)
    view = log.cleanable_view()
    log.delete_records(2)  # DeleteRecords between the choice and the snapshot
    into = tmp_path / "snapshot"
    into.mkdir()
    with pytest.raises(StaleCleaningResultError, match="log start offset moved from 0 to 2"):
        log.snapshot_segments(6, link_into=str(into), log_start_offset=view.log_start_offset)
    assert os.listdir(into) == []
    assert not log.is_offline
    log.close()


@pytest.mark.parametrize("up_to", [3, 8])
def test_an_offset_that_is_no_segment_boundary_at_or_below_the_active_one_is_refused(tmp_path, clock, up_to):
    """A truncation (the range now past the active segment) or another cleaning (segments
    merged: the offset now inside one) since the range was chosen."""
    log = open_log(tmp_path / "log", clock)
    three_closed_segments(log)
    log.append(batch(b"c", b"d"))
    with pytest.raises(StaleCleaningResultError, match=f"offset {up_to} is no longer the base offset"):
        log.snapshot_segments(up_to, link_into=str(tmp_path), log_start_offset=0)
    assert not log.is_offline
    log.close()


def test_a_full_disk_at_a_link_is_retriable_and_leaves_the_log_online(tmp_path, clock):
    fs = FaultFs()
    log = open_log(tmp_path / "log", clock, fs=fs)
    three_closed_segments(log)
    fs.fail("link", errno.ENOSPC)
    with pytest.raises(ResourceExhaustedError):
        log.snapshot_segments(6, link_into=str(tmp_path), log_start_offset=0)
    assert not log.is_offline
    log.append(batch(b"e"))
    log.close()


def test_an_io_error_at_a_link_takes_the_log_offline(tmp_path, clock):
    fs = FaultFs()
    log = open_log(tmp_path / "log", clock, fs=fs)
    three_closed_segments(log)
    fs.fail("link", errno.EIO, skip=1)
    with pytest.raises(LogDirOfflineError, match="linking segments of"):
        log.snapshot_segments(6, link_into=str(tmp_path), log_start_offset=0)
    assert log.is_offline
    with pytest.raises(LogDirOfflineError):
        log.cleanable_view()
    log.close_handlers()


def test_snapshot_segments_takes_the_producers_last_offsets_under_the_same_lock(tmp_path, clock):
    log = open_log(tmp_path / "log", clock)
    log.append(batch(b"a", producer_id=7, producer_epoch=0, base_sequence=0))
    log.roll()
    taken = log.snapshot_segments(1, link_into=str(tmp_path))
    assert dict(taken.producer_last_offsets) == {7: 0}
    log.close()


def test_describe_segment_answers_what_the_segment_says(tmp_path, clock):
    log = open_log(tmp_path / "log", clock)
    three_closed_segments(log)
    segment = log.segments_snapshot()[1]
    described = log.describe_segment(segment)
    assert (described.base_offset, described.next_offset) == (2, 4)
    assert described.largest_timestamp_ms == NOW_MS
    assert described.last_modified_ms == segment.last_modified_ms()
    log.close()


def test_the_cleanable_view_reads_no_timestamp_when_no_compaction_lag_is_set(tmp_path, clock):
    log = open_log(tmp_path / "log", clock)
    three_closed_segments(log)
    view = log.cleanable_view(timestamps_from=2)
    assert [(f.base_offset, f.largest_timestamp_ms, f.first_batch_timestamp_ms) for f in view.segments] == [
        (0, None, None), (2, None, None), (4, None, None), (6, None, None)
    ]
    assert [f.size_in_bytes for f in view.segments] == [s.size_in_bytes for s in log.segments_snapshot()]
    log.close()


@pytest.mark.parametrize(("timestamps_from", "read_from"), [(2, 2), (None, 0), (99, 0)])
def test_the_cleanable_view_reads_the_closed_segments_timestamps_from_the_first_dirty_offset(
    tmp_path, clock, timestamps_from, read_from
):
    """From the checkpoint, or from the log start when there is none or it lies outside the log
    (the cleaner's first dirty offset); never the active segment's."""
    lags = config(min_compaction_lag_ms=HOUR_MS, max_compaction_lag_ms=HOUR_MS)
    log = open_log(tmp_path / "log", clock, lags)
    three_closed_segments(log)
    view = log.cleanable_view(timestamps_from=timestamps_from)
    assert view.timestamps_from == read_from
    expected = [NOW_MS if base >= read_from and base < 6 else None for base in (0, 2, 4, 6)]
    assert [f.largest_timestamp_ms for f in view.segments] == expected
    assert [f.first_batch_timestamp_ms for f in view.segments] == expected
    log.close()


def test_segments_in_range_answers_the_live_segments_and_the_active_one(tmp_path, clock):
    log = open_log(tmp_path / "log", clock)
    three_closed_segments(log)
    live = log.segments_snapshot()
    found = log.segments_in_range(2, 6)
    assert found.segments == tuple(live[1:3])
    assert found.active is live[-1]
    assert found.log_start_offset == 0
    log.close()
