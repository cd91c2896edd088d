"""Offsets lost to damage of a closed segment (lost_offsets.py): real files, the tail of a
closed segment cut while the service is stopped (cleanly or not), then reloads. A read across
the lost offsets fails with OffsetsLostError (DATA_LOSS) naming the range, on this load and the
next; reads before and after the range still work; the per-partition figure counts the
offsets; DeleteRecords past the range accepts the loss. The record's file format and its write
failure are driven too."""

from __future__ import annotations

import errno
import os

import pytest
from tests.support.log_test_support import NOW_MS, batch, config, open_log, values_of

from seglog_server.rpc.status import status_for
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import CorruptCheckpointError, OffsetsLostError
from seglog_server.storage.base.fs import REAL_FS
from seglog_server.storage.log.unified_log import Log
from seglog_server.storage.format.lost_offsets import LOST_OFFSETS_FILE, LostOffsets
from tests.support.fault_fs import FaultFs

RECORDS_PER_SEGMENT = 100
HOUR_MS = 3_600_000


def three_segments(directory, clock: FakeClock, *, spacing_ms: int = 0) -> Log:
    """Offsets [0, 100), [100, 200), [200, 300) in three segments, one record per batch; the
    records of segment k timestamped ``NOW_MS + k * spacing_ms``."""
    log = open_log(directory, clock)
    for segment in range(3):
        if segment:
            log.roll()
        for offset in range(segment * RECORDS_PER_SEGMENT, (segment + 1) * RECORDS_PER_SEGMENT):
            log.append(batch(b"v%d" % offset, timestamps=NOW_MS + segment * spacing_ms))
    return log


def cut_middle_segment_at(log: Log, offset: int, *, clean: bool) -> None:
    """Stops the log, then cuts segment 100's .log inside the batch holding ``offset``."""
    base, position = log.position_of(offset)
    assert base == RECORDS_PER_SEGMENT
    if clean:
        log.flush()
        log.close()
    else:
        log.close_handlers()
    path = os.path.join(log.dir, f"{base:020d}.log")
    os.truncate(path, position + 7)  # a torn batch: recovery cuts at ``offset``


def reload(log: Log, clock: FakeClock, *, clean: bool, fs=REAL_FS) -> Log:
    return open_log(log.dir, clock, had_clean_shutdown=clean, recovery_point=0 if not clean else 300,
                    log_start_offset=log.log_start_offset, fs=fs)


def read_values(log: Log, offset: int) -> list[bytes]:
    return values_of(log.read(offset, 1 << 20).records)


@pytest.mark.parametrize("clean", [False, True], ids=["after-kill", "after-clean-stop"])
def test_a_read_across_offsets_cut_from_a_closed_segment_answers_data_loss_naming_them(tmp_path, clean):
    clock = FakeClock(NOW_MS)
    log = three_segments(tmp_path, clock)
    cut_middle_segment_at(log, 150, clean=clean)
    log = reload(log, clock, clean=clean)
    assert read_values(log, 100)[-1] == b"v149"  # before the gap: read up to it
    with pytest.raises(OffsetsLostError, match=r"offsets \[150, 200\) were lost") as caught:
        log.read(150, 1 << 20)
    assert (caught.value.start, caught.value.end) == (150, 200)
    assert status_for(caught.value).code.name == "DATA_LOSS"
    with pytest.raises(OffsetsLostError):
        log.read(199, 1 << 20)
    assert read_values(log, 200)[0] == b"v200"  # after the gap: read on
    assert log.summary().lost_offset_count == 50
    log.close()


def test_the_lost_range_survives_another_restart(tmp_path):
    clock = FakeClock(NOW_MS)
    log = three_segments(tmp_path, clock)
    cut_middle_segment_at(log, 150, clean=False)
    log = reload(log, clock, clean=False)
    log.flush()
    log.close()
    log = reload(log, clock, clean=True)  # the segment looks whole now: only the record knows
    with pytest.raises(OffsetsLostError, match=r"\[150, 200\)"):
        log.read(160, 1 << 20)
    assert log.summary().lost_offset_count == 50
    log.close()


def test_delete_records_past_the_range_accepts_the_loss(tmp_path):
    clock = FakeClock(NOW_MS)
    log = three_segments(tmp_path, clock)
    cut_middle_segment_at(log, 150, clean=False)
    log = reload(log, clock, clean=False)
    log.delete_records(170)
    with pytest.raises(OffsetsLostError, match=r"offsets \[170, 200\)"):  # what is still lost
        log.read(170, 1 << 20)
    assert log.summary().lost_offset_count == 30
    log.delete_records(200)
    assert read_values(log, 200)[0] == b"v200"
    assert log.summary().lost_offset_count == 0
    log.close()


def test_a_cut_of_the_last_segment_is_no_gap(tmp_path):
    clock = FakeClock(NOW_MS)
    log = three_segments(tmp_path, clock)
    base, position = log.position_of(250)
    log.close_handlers()
    os.truncate(os.path.join(log.dir, f"{base:020d}.log"), position + 7)
    log = reload(log, clock, clean=False)
    assert log.log_end_offset == 250 and log.summary().lost_offset_count == 0
    assert not os.path.exists(os.path.join(log.dir, LOST_OFFSETS_FILE))
    log.close()


def test_a_failed_write_of_the_record_fails_the_load_instead_of_leaving_a_silent_gap(tmp_path):
    clock = FakeClock(NOW_MS)
    log = three_segments(tmp_path, clock)
    cut_middle_segment_at(log, 150, clean=False)
    fs = FaultFs()
    rule = fs.fail("open", errno.ENOSPC, path=LOST_OFFSETS_FILE + ".tmp")
    with pytest.raises(OSError) as caught:
        reload(log, clock, clean=False, fs=fs)
    assert caught.value.errno == errno.ENOSPC and rule.hits == 1
    # The range is written before the cut: the failed load left the segment whole, so the
    # next load (disk back) finds the damage again and writes the range down.
    fs.heal()
    log = reload(log, clock, clean=False, fs=fs)
    with pytest.raises(OffsetsLostError, match=r"\[150, 200\)"):
        log.read(150, 1 << 20)
    log.close()


# -- the record's file ------------------------------------------------------------------------


def test_ranges_merge_and_round_trip_through_the_file(tmp_path):
    lost = LostOffsets(str(tmp_path), REAL_FS)
    lost.record(50, 100, 0)
    lost.record(300, 310, 0)
    lost.record(90, 120, 0)
    assert lost.ranges == [(50, 120), (300, 310)]
    assert LostOffsets.read(str(tmp_path), REAL_FS).ranges == [(50, 120), (300, 310)]
    assert (tmp_path / LOST_OFFSETS_FILE).read_text() == "0\n2\n50 120\n300 310\n"
    assert lost.covering(49) is None and lost.covering(50) == (50, 120) and lost.covering(120) is None
    assert lost.offset_count(0) == 80 and lost.offset_count(100) == 30


def test_ranges_below_the_log_start_are_dropped_when_the_file_is_next_written(tmp_path):
    lost = LostOffsets(str(tmp_path), REAL_FS, [(10, 20)])
    lost.record(50, 60, log_start_offset=20)
    assert lost.ranges == [(50, 60)]


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\n1 2\n", "0\n1\n5 5\n", "0\n2\n5 9\n8 12\n", "0\n1\nx y\n", "\xff"])
def test_a_damaged_record_is_refused_by_name(tmp_path, text):
    (tmp_path / LOST_OFFSETS_FILE).write_bytes(text.encode("latin-1"))
    with pytest.raises(CorruptCheckpointError, match=LOST_OFFSETS_FILE):
        LostOffsets.read(str(tmp_path), REAL_FS)


# -- a cut found on first use, by any path ---------------------------------------------------
# After a clean stop the closed segments are checked on first use (LogSegment.defer_check), and
# many first uses read nothing: a lookup by time asks every segment its largest timestamp, so
# do MAX_TIMESTAMP and retention. Whichever use finds the cut, the range is written down before
# the segment is cut, so a later restart, which finds the segment whole, still knows it.

FIRST_USES = {
    "lookup-by-time": lambda log: log.offsets_for_timestamps([0]),
    "one-lookup-by-time": lambda log: log.offset_for_timestamp(NOW_MS + 1),
    "max-timestamp": lambda log: log.offset_for_timestamp(-3),
    # Segment 0 is past retention.ms, so the pass asks segment 100 its largest timestamp too.
    "retention": lambda log: log.delete_old_segments() == 1,
    "read-before-the-range": lambda log: log.read(100, 10),
    "read-in-the-range": lambda log: pytest.raises(OffsetsLostError, log.read, 150, 1 << 20),
}


@pytest.mark.parametrize("first_use", list(FIRST_USES))
def test_a_cut_found_on_first_use_is_recorded_by_every_path_and_survives_a_clean_restart(tmp_path, first_use):
    clock = FakeClock(NOW_MS)
    log = three_segments(tmp_path, clock, spacing_ms=HOUR_MS)
    cut_middle_segment_at(log, 150, clean=True)
    clock.advance(2 * HOUR_MS)
    log = open_log(log.dir, clock, config(retention_ms=3 * HOUR_MS // 2), recovery_point=300)
    assert FIRST_USES[first_use](log) is not False
    assert log.summary().lost_offset_count == 50
    log.flush()
    log.close()
    log = reload(log, clock, clean=True)  # the segment looks whole now: only the record knows
    with pytest.raises(OffsetsLostError, match=r"offsets \[150, 200\) were lost"):
        log.read(150, 1 << 20)
    assert log.summary().lost_offset_count == 50
    log.close()


@pytest.mark.parametrize("first_use", ["lookup-by-time", "read-in-the-range"])
def test_a_full_disk_while_recording_a_cut_found_on_first_use_loses_nothing(tmp_path, first_use):
    """The record is written before the cut: when its write fails (ENOSPC), the segment is left
    as it was and still unchecked, the use fails retriably, and the next use finds the damage
    again and writes the range down; no read steps over it meanwhile."""
    clock = FakeClock(NOW_MS)
    log = three_segments(tmp_path, clock)
    cut_middle_segment_at(log, 150, clean=True)
    fs = FaultFs()
    log = reload(log, clock, clean=True, fs=fs)
    rule = fs.fail("open", errno.ENOSPC, path=LOST_OFFSETS_FILE + ".tmp", times=None)
    for _ in range(2):  # and again: the failed check is not forgotten
        with pytest.raises(Exception) as caught:
            FIRST_USES[first_use](log)
        assert isinstance(caught.value, OSError) or status_for(caught.value).code.name == "RESOURCE_EXHAUSTED"
        with pytest.raises(Exception) as caught:
            log.read(150, 1 << 20)  # never the record at 200
        assert not isinstance(caught.value, OffsetsLostError)
    assert rule.hits >= 4 and not log.is_offline
    assert not os.path.exists(os.path.join(log.dir, LOST_OFFSETS_FILE))
    fs.heal()
    with pytest.raises(OffsetsLostError, match=r"\[150, 200\)"):
        log.read(150, 1 << 20)
    assert log.summary().lost_offset_count == 50
    log.flush()
    log.close()
    log = reload(log, clock, clean=True)
    with pytest.raises(OffsetsLostError, match=r"\[150, 200\)"):
        log.read(150, 1 << 20)
    log.close()


def test_a_cut_found_by_the_cleaners_snapshot_is_recorded(tmp_path):
    """The cleaner's snapshot asks each linked segment its next offset and largest timestamp:
    a first use that reads no record."""
    from seglog_server.storage.cleaning.log_snapshot import take_snapshot

    clock = FakeClock(NOW_MS)
    log = three_segments(tmp_path / "topic-0", clock)
    cut_middle_segment_at(log, 150, clean=True)
    log = open_log(log.dir, clock, config(cleanup_policy=frozenset({"compact"})), recovery_point=300)
    taken = take_snapshot(log, str(tmp_path), checkpoint=None, now_ms=NOW_MS, snapshot_id="topic-0-1-abcd", fs=REAL_FS)
    assert [segment.next_offset for segment in taken.manifest.segments] == [100, 150]
    assert log.summary().lost_offset_count == 50
    with pytest.raises(OffsetsLostError, match=r"\[150, 200\)"):
        log.read(150, 1 << 20)
    log.close()
