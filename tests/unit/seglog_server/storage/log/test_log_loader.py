"""Loading a partition directory: lazy opening, recovery after an unclean shutdown, rebuilt
indexes, temporary files and the .cleaned -> .swap -> final protocol at every crash point
(ports of Kafka's LogLoaderTest and the swap/crash cases of LogCleanerTest)."""

from __future__ import annotations

import errno
import os

import pytest
from tests.support.log_test_support import (
    NOW_MS,
    all_offsets,
    batch,
    config,
    offsets_of,
    open_log,
    reopen,
    segment_files,
    values_of,
)

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import LogDirOfflineError, OffsetsLostError, StorageError
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.log.unified_log import Log

HOUR_MS = 3_600_000

@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


def write_segments(tmp_path, clock, count: int, per_segment: int = 5, **overrides) -> Log:
    one = batch(b"x" * 40)
    overrides.setdefault("segment_bytes", len(one) * per_segment)
    log = open_log(tmp_path, clock, config(**overrides))
    for offset in range(count):
        log.append(batch(b"v%03d" % offset + b"x" * 36, timestamps=NOW_MS + offset * 10))
    return log


def crash(log: Log) -> None:
    """Drops the log as a process death would: nothing trimmed, flushed or renamed."""
    log.close_handlers()


def flip_byte(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x55]))


def cut_tail(path: str, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - size)


# -- opening -------------------------------------------------------------------------------------


def test_an_empty_directory_gets_a_first_segment_at_the_log_start_offset(tmp_path, clock):
    log = open_log(tmp_path / "p", clock, log_start_offset=42)
    assert (log.log_start_offset, log.log_end_offset) == (42, 42)
    assert "00000000000000000042.log" in segment_files(tmp_path / "p")


def test_clean_reopen_keeps_every_record_and_offset(tmp_path, clock):
    log = write_segments(tmp_path, clock, 23)
    reopened = reopen(log, clock)
    assert reopened.log_end_offset == 23
    assert reopened.recovery_point == 23
    assert all_offsets(reopened) == list(range(23))
    assert reopened.append(batch(b"next")).base_offset == 23


def test_clean_load_is_lazy_opening_only_the_active_segment(tmp_path, clock):
    log = write_segments(tmp_path, clock, 50, index_interval_bytes=1)
    reopened = reopen(log, clock)
    segments = reopened.segments_snapshot()
    assert len(segments) == 10
    for segment in segments[:-1]:
        assert not segment.log.is_open
        assert not segment.offset_index.is_materialized and not segment.time_index.is_materialized
    assert reopened.read(0, 100).records  # the first use opens what it needs
    assert segments[0].log.is_open and segments[0].offset_index.is_materialized


def test_clean_load_gives_the_active_segment_its_full_index_size_back(tmp_path, clock):
    log = write_segments(tmp_path, clock, 7, index_interval_bytes=1, segment_index_bytes=4096)
    reopened = reopen(log, clock)
    active = reopened.segments_snapshot()[-1]
    assert active.offset_index.file_bytes == 4096
    assert not active.offset_index.is_full()


def test_log_start_offset_is_the_checkpoint_or_the_first_segment_whichever_is_higher(tmp_path, clock):
    log = write_segments(tmp_path, clock, 12)
    log.delete_records(7)
    log.delete_old_segments()
    first_base = log.segments_snapshot()[0].base_offset
    assert reopen(log, clock, log_start_offset=0).log_start_offset == first_base
    log2 = open_log(tmp_path, clock, config(segment_bytes=log.config.segment_bytes), log_start_offset=7)
    assert log2.log_start_offset == 7


def test_files_of_deleted_segments_are_removed_on_open(tmp_path, clock):
    log = write_segments(tmp_path, clock, 20, retention_ms=HOUR_MS)
    clock.advance(2 * HOUR_MS)
    log.delete_old_segments()
    assert any(name.endswith(".deleted") for name in os.listdir(tmp_path))
    reopened = reopen(log, clock, clean=False)
    assert reopened.segment_count == 1
    assert not any(name.endswith(".deleted") for name in os.listdir(tmp_path))


def test_index_files_without_a_log_file_are_deleted(tmp_path, clock):
    for name in ("00000000000000000005.index", "00000000000000000005.timeindex"):
        (tmp_path / name).write_bytes(b"")
    log = open_log(tmp_path, clock)
    assert not any(name.startswith("00000000000000000005") for name in segment_files(tmp_path))
    for _ in range(10):
        log.append(batch(b"test"))
    assert log.log_end_offset == 10


# -- rebuilding indexes --------------------------------------------------------------------------


def test_missing_index_files_are_rebuilt(tmp_path, clock):
    log = write_segments(tmp_path, clock, 40, index_interval_bytes=1)
    log.flush()
    log.close()
    for name in os.listdir(tmp_path):
        if name.endswith((".index", ".timeindex")):
            os.unlink(tmp_path / name)
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False)
    assert reopened.log_end_offset == 40
    first = reopened.segments_snapshot()[0]
    assert first.offset_index.entry_count > 0 and first.time_index.entry_count > 0
    for offset in range(40):
        assert batch_last_offsets(reopened.read(offset, 100).records)[0] == offset
        assert reopened.offset_for_timestamp(NOW_MS + offset * 10).offset == offset


def batch_last_offsets(data: bytes) -> list[int]:
    from seglog.records import iter_batches

    return [one.last_offset for one in iter_batches(data)]


def test_corrupt_index_files_are_rebuilt_after_an_unclean_shutdown(tmp_path, clock):
    log = write_segments(tmp_path, clock, 40, index_interval_bytes=1)
    log.flush()
    log.close()
    for name in os.listdir(tmp_path):
        if name.endswith((".index", ".timeindex")):
            (tmp_path / name).write_bytes(b"  ")
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False, recovery_point=0)
    assert reopened.log_end_offset == 40
    for offset in range(40):
        assert batch_last_offsets(reopened.read(offset, 100).records)[0] == offset
        assert reopened.offset_for_timestamp(NOW_MS + offset * 10).offset == offset


# -- recovery after an unclean shutdown ----------------------------------------------------------


def test_unclean_load_keeps_the_recovery_point_until_the_next_flush(tmp_path, clock):
    log = write_segments(tmp_path, clock, 30, index_interval_bytes=100)
    log.flush()
    active = log.segments_snapshot()[-1]
    entries_before = active.offset_index.entry_count
    log.close()
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False, recovery_point=10)
    assert reopened.recovery_point == 10
    assert reopened.log_end_offset == 30
    assert reopened.segments_snapshot()[-1].offset_index.entry_count == entries_before
    reopened.flush()
    assert reopened.recovery_point == 30


def test_a_torn_tail_is_cut_after_an_unclean_shutdown(tmp_path, clock):
    log = write_segments(tmp_path, clock, 12)
    active_path = log.segments_snapshot()[-1].log.path
    crash(log)
    cut_tail(active_path, 7)
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False)
    assert reopened.log_end_offset == 11
    assert all_offsets(reopened) == list(range(11))
    assert reopened.statistics().loaded_truncated_bytes == len(batch(b"v011" + b"x" * 36)) - 7
    assert reopened.append(batch(b"again")).base_offset == 11


def test_garbage_appended_to_log_and_index_is_cut(tmp_path, clock):
    log = write_segments(tmp_path, clock, 60, index_interval_bytes=1)
    expected = values_of(log.read(0, 2**20).records) + values_of(log.read(50, 2**20).records)
    active = log.segments_snapshot()[-1]
    active.flush()
    log.close()
    with open(active.log.path, "ab") as f:
        f.write(os.urandom(300))
    with open(active.offset_index.path, "ab") as f:
        f.write(os.urandom(37))
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False, recovery_point=50)
    assert reopened.log_end_offset == 60
    assert all_offsets(reopened) == list(range(60))
    assert values_of(reopened.read(0, 2**20).records) + values_of(reopened.read(50, 2**20).records) == expected


def test_a_corrupt_batch_in_a_middle_segment_cuts_that_segment_and_keeps_every_later_one(tmp_path, clock):
    # Kafka deletes every segment after the cut (a follower fetches them again from the leader);
    # seglog has no replica, so the later segments' acknowledged records stay, and their offsets
    # are never handed out again. Offsets 12..14 (the cut batch and the rest of its segment) go.
    log = write_segments(tmp_path, clock, 25)  # segments at 0, 5, 10, 15, 20
    segments = log.segments_snapshot()
    target = segments[2]
    position = target.log.search_for_offset_with_size(12, 0).position + 70
    crash(log)
    flip_byte(target.log.path, position)
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False, recovery_point=0)
    assert reopened.log_end_offset == 25
    assert offsets_of(reopened.read(10, 2**20).records) == [10, 11]  # up to the cut
    with pytest.raises(OffsetsLostError, match=r"offsets \[12, 15\) were lost"):  # never past it
        all_offsets(reopened)
    assert [s.base_offset for s in reopened.segments_snapshot()] == [0, 5, 10, 15, 20]
    assert values_of(reopened.read(15, 2**20).records)[0] == b"v015" + b"x" * 36  # after the gap
    assert reopened.append(batch(b"next")).base_offset == 25


def test_recovery_keeps_each_segment_below_the_next_ones_base_offset(tmp_path, clock):
    # A base offset is not covered by the CRC: a flipped bit that moves a batch into the next
    # segment's range must cut it, or two segments would serve the same offsets.
    log = write_segments(tmp_path, clock, 25)  # segments at 0, 5, 10, 15, 20
    target = log.segments_snapshot()[1]
    position = target.log.search_for_offset_with_size(8, 0).position
    crash(log)
    with open(target.log.path, "r+b") as f:
        f.seek(position + 7)  # the base offset's lowest byte: 8 -> 8 + 16 = 24
        byte = f.read(1)[0]
        f.seek(position + 7)
        f.write(bytes([byte ^ 0x10]))
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False, recovery_point=0)
    assert offsets_of(reopened.read(5, 2**20).records) == [5, 6, 7]
    with pytest.raises(OffsetsLostError, match=r"offsets \[8, 10\) were lost"):
        reopened.read(8, 2**20)
    assert offsets_of(reopened.read(10, 2**20).records)[0] == 10
    assert reopened.log_end_offset == 25


def test_segments_below_the_recovery_point_are_not_checked(tmp_path, clock):
    log = write_segments(tmp_path, clock, 25)
    log.flush()
    target = log.segments_snapshot()[1]
    position = target.log.search_for_offset_with_size(6, 0).position + 70
    log.close()
    flip_byte(target.log.path, position)
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False, recovery_point=20)
    assert reopened.log_end_offset == 25
    assert reopened.statistics().loaded_recovered_segment_count == 1


def test_corruption_below_the_log_start_offset_keeps_the_records_above_it(tmp_path, clock):
    # Kafka deletes every segment after the corrupt one, finds the log end (1) below the log start
    # offset (4) and empties the log; seglog keeps the later segments, so record 4 (acknowledged,
    # CRC-valid, above the log start offset) is still served and offset 4 is not handed out again.
    log = open_log(tmp_path, clock)
    for offset in range(5):
        log.append(batch(b"%d" % offset))
        log.roll()
    assert log.segment_count == 6
    log.delete_records(4)
    second = log.segments_snapshot()[1]
    log.close()
    with open(second.log.path, "wb") as f:
        f.write(b"corruptRecord")
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False, log_start_offset=4)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (4, 5)
    assert values_of(reopened.read(4, 2**20).records) == [b"4"]
    assert reopened.append(batch(b"5")).base_offset == 5


def test_an_empty_active_segment_without_index_files_loads(tmp_path, clock):
    log = write_segments(tmp_path, clock, 20, per_segment=7)
    log.roll()
    log.flush(log.log_end_offset)  # exclusive: the empty active segment's indexes stay unmade
    end = log.log_end_offset
    crash(log)
    reopened = open_log(tmp_path, clock, log.config, had_clean_shutdown=False, recovery_point=end)
    assert (reopened.recovery_point, reopened.log_end_offset) == (end, end)
    assert reopened.segments_snapshot()[-1].time_index.entry_count == 0
    assert reopened.append(batch(b"a")).base_offset == end


# -- temporary files and the swap protocol -------------------------------------------------------


class CrashingFS(FileSystem):
    """Fails the Nth rename with EIO, leaving the directory as a crash at that point would."""

    def __init__(self, fail_at: int | None) -> None:
        self.fail_at = fail_at
        self.replace_count = 0

    def replace(self, src: str, dst: str) -> None:
        self.replace_count += 1
        if self.fail_at is not None and self.replace_count == self.fail_at:
            raise OSError(errno.EIO, f"injected crash before renaming {src}")
        super().replace(src, dst)


KEPT_OFFSETS = [1, 3, 7, 9]


def log_to_clean(tmp_path, clock, fs: FileSystem) -> Log:
    """Segments [0..4] [5..9] and an active [10, 11], keyed records v<offset>, compacted."""
    log = open_log(tmp_path, clock, config(index_interval_bytes=1, cleanup_policy=frozenset({"compact"})), fs=fs)
    for offset in range(12):
        log.append(batch(b"v%d" % offset, keys=[b"k%d" % (offset % 4)]))
        if offset in (4, 9):
            log.roll()
    log.flush()
    return log


def install_cleaned_segment(log: Log) -> None:
    """Replaces the first two segments with one holding only KEPT_OFFSETS (compaction)."""
    cleaned = log.open_cleaned_segment(0, create=True)
    for offset in KEPT_OFFSETS:
        cleaned.append(batch(b"v%d" % offset, keys=[b"k%d" % (offset % 4)], base_offset=offset))
    cleaned.on_become_inactive_segment()
    cleaned.flush()
    log.swap_segments(log.segments_snapshot()[:2], [cleaned])


def readable(log: Log) -> list[tuple[int, bytes]]:
    from seglog.records import iter_batches

    data = log.read(log.log_start_offset, 2**20).records
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 2**20).records
        for one in iter_batches(data):
            out.extend((record.offset, record.value) for record in one)
            offset = one.next_offset
    return out


ORIGINAL = [(offset, b"v%d" % offset) for offset in range(12)]
CLEANED = [(offset, b"v%d" % offset) for offset in KEPT_OFFSETS + [10, 11]]


def test_replace_segments_installs_the_cleaned_segment(tmp_path, clock):
    log = log_to_clean(tmp_path, clock, FileSystem())
    install_cleaned_segment(log)
    assert readable(log) == CLEANED
    assert [s.base_offset for s in log.segments_snapshot()] == [0, 10]
    assert not any(name.endswith((".swap", ".cleaned")) for name in os.listdir(tmp_path))
    assert readable(reopen(log, clock)) == CLEANED


def count_renames(tmp_path, clock) -> int:
    fs = CrashingFS(None)
    log = log_to_clean(tmp_path / "count", clock, fs)
    before = fs.replace_count
    install_cleaned_segment(log)
    log.close()
    return fs.replace_count - before


def test_a_crash_at_every_rename_of_the_swap_protocol_rolls_back_or_forward(tmp_path, clock):
    renames = count_renames(tmp_path, clock)
    cleaned_to_swap = 3  # log, offset index, time index of the one new segment
    assert renames > cleaned_to_swap
    for fail_at in range(1, renames + 1):
        directory = tmp_path / f"crash{fail_at}"
        fs = CrashingFS(None)
        log = log_to_clean(directory, clock, fs)
        fs.fail_at = fs.replace_count + fail_at
        with pytest.raises(LogDirOfflineError, match="injected crash"):
            install_cleaned_segment(log)
        crash(log)
        recovered = open_log(directory, clock, log.config, had_clean_shutdown=False)
        expected = ORIGINAL if fail_at <= cleaned_to_swap else CLEANED
        assert readable(recovered) == expected, f"crash at rename {fail_at}"
        assert recovered.log_end_offset == 12
        leftovers = [n for n in os.listdir(directory) if n.endswith((".swap", ".cleaned", ".deleted"))]
        assert leftovers == [], f"crash at rename {fail_at}"


def test_leftover_cleaned_files_are_deleted_and_the_originals_kept(tmp_path, clock):
    log = log_to_clean(tmp_path, clock, FileSystem())
    cleaned = log.open_cleaned_segment(0, create=True)
    cleaned.append(batch(b"v1", keys=[b"k1"], base_offset=1))
    cleaned.flush()
    crash(log)
    recovered = open_log(tmp_path, clock, log.config, had_clean_shutdown=False)
    assert readable(recovered) == ORIGINAL
    assert not any(name.endswith(".cleaned") for name in os.listdir(tmp_path))


def test_a_swap_at_or_above_a_remaining_cleaned_file_is_an_unfinished_replacement(tmp_path, clock):
    log = log_to_clean(tmp_path, clock, FileSystem())
    # Two new segments; the higher one reached .swap, the lower one is still .cleaned.
    low = log.open_cleaned_segment(0, create=True)
    low.append(batch(b"v1", keys=[b"k1"], base_offset=1))
    high = log.open_cleaned_segment(5, create=True)
    high.append(batch(b"v7", keys=[b"k3"], base_offset=7))
    for segment in (low, high):
        segment.on_become_inactive_segment()
        segment.flush()
    high.change_file_suffixes(".cleaned", ".swap")
    crash(log)
    recovered = open_log(tmp_path, clock, log.config, had_clean_shutdown=False)
    assert readable(recovered) == ORIGINAL


def test_all_swaps_with_originals_still_present_completes_the_replacement(tmp_path, clock):
    log = log_to_clean(tmp_path, clock, FileSystem())
    low = log.open_cleaned_segment(0, create=True)
    for offset in (1, 3):
        low.append(batch(b"v%d" % offset, keys=[b"k%d" % offset], base_offset=offset))
    high = log.open_cleaned_segment(5, create=True)
    for offset in (7, 9):
        high.append(batch(b"v%d" % offset, keys=[b"k%d" % (offset % 4)], base_offset=offset))
    for segment in (high, low):
        segment.on_become_inactive_segment()
        segment.flush()
        segment.change_file_suffixes(".cleaned", ".swap")
    crash(log)
    recovered = open_log(tmp_path, clock, log.config, had_clean_shutdown=False)
    assert readable(recovered) == CLEANED
    assert [s.base_offset for s in recovered.segments_snapshot()] == [0, 5, 10]


def test_the_active_segment_cannot_be_replaced(tmp_path, clock):
    log = log_to_clean(tmp_path, clock, FileSystem())
    cleaned = log.open_cleaned_segment(10, create=True)
    with pytest.raises(StorageError, match="active segment"):
        log.swap_segments([log.segments_snapshot()[-1]], [cleaned])
    assert readable(log) == ORIGINAL


def cleaned_first_segment(log: Log):
    cleaned = log.open_cleaned_segment(0, create=True)
    for offset in KEPT_OFFSETS:
        if offset < 5:
            cleaned.append(batch(b"v%d" % offset, keys=[b"k%d" % (offset % 4)], base_offset=offset))
    cleaned.on_become_inactive_segment()
    cleaned.flush()
    return cleaned


@pytest.mark.parametrize("change", ["retention", "another-swap", "log-start-moved"])
def test_a_swap_whose_expected_segments_are_no_longer_live_is_refused_stale_and_changes_nothing(tmp_path, clock, change):
    """swap_segments checks under its own take of the lock that the segments it replaces are the
    live ones (and the log start offset the snapshot's): a change between the snapshot and the
    swap refuses it with the stale-result error, the log online and its records as they were."""
    from seglog_server.storage.base.errors import StaleCleaningResultError

    log = log_to_clean(tmp_path, clock, FileSystem())
    expected = log.segments_snapshot()[:2]
    log_start_offset = log.log_start_offset
    if change == "retention":
        log.delete_records(5)
        log.delete_old_segments()  # segment 0 goes
        log_start_offset = log.log_start_offset
    elif change == "another-swap":
        log.swap_segments(expected[:1], [cleaned_first_segment(log)])
    else:
        log.delete_records(2)
    before = readable(log)
    cleaned = log.open_cleaned_segment(0, create=True)  # (replaced by this base's .cleaned files)
    cleaned.on_become_inactive_segment()
    with pytest.raises(StaleCleaningResultError, match="log start offset moved" if change == "log-start-moved" else "no longer the live ones"):
        log.swap_segments(expected, [cleaned], log_start_offset=log_start_offset if change != "log-start-moved" else 0)
    assert not log.is_offline and readable(log) == before
    cleaned.close_handlers()
    log.close()
