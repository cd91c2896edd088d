"""A full disk and exhausted descriptors: index space reserved before stores, sparse
preallocation, retriable errors that keep the directory online, and one descriptor budget
across every log. Faults through the fs seam (ENOSPC, EDQUOT, EMFILE, EIO) on real files; the
real full file system is in tests/integration/test_service_disk_full.py."""

from __future__ import annotations

import errno
import mmap
import os
import threading

import pytest
from tests.support.log_test_support import NOW_MS, all_offsets, batch, config, open_log, sized_batch

from seglog_server.storage.format.abstract_index import RESERVE_AHEAD_BYTES
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import (
    LogDirFullError,
    LogDirOfflineError,
    TooManyOpenFilesError,
)
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals
from seglog_server.storage.format.offset_index import OffsetIndex
from seglog_server.storage.segment.open_segments import (
    DESCRIPTOR_HEADROOM_MIN,
    OPEN_SEGMENTS_MIN,
    OpenSegments,
    open_segments_max_for,
)
from seglog_server.storage.format.time_index import TimeIndex

EVERY_PASS = MaintenanceIntervals(
    initial_delay_ms=0,
    retention_check_ms=0,
    flush_check_ms=0,
    recovery_point_checkpoint_ms=0,
    log_start_offset_checkpoint_ms=0,
)
BLOCK_BYTES = 512  # st_blocks counts 512-byte units whatever the file system's block size


class ExhaustingFs(FileSystem):
    """Fails chosen operations with a chosen errno while ``armed``: ``pwrite`` (index space
    reservations, checkpoints), ``pwritev`` (log appends), ``open``, ``makedirs``."""

    def __init__(self, error: int = errno.ENOSPC, operations: tuple[str, ...] = ()) -> None:
        self.error = error
        self.operations = set(operations)
        self.armed = False
        self.failures = 0

    def _maybe_fail(self, operation: str) -> None:
        if self.armed and operation in self.operations:
            self.failures += 1
            raise OSError(self.error, f"injected: {os.strerror(self.error)}")

    def pwritev(self, fd, buffers, position):
        self._maybe_fail("pwritev")
        return super().pwritev(fd, buffers, position)

    def pwrite(self, fd, data, position):
        self._maybe_fail("pwrite")
        return super().pwrite(fd, data, position)

    def open(self, path, flags, mode=0o644):
        self._maybe_fail("open")
        return super().open(path, flags, mode)

    def makedirs(self, path):
        self._maybe_fail("makedirs")
        super().makedirs(path)


@pytest.fixture
def clock():
    return FakeClock()


def allocated_bytes(path) -> int:
    return os.stat(path).st_blocks * BLOCK_BYTES


# -- sparse preallocation, space reserved just ahead of the stores -----------------------------
def test_a_new_partition_holds_no_blocks_for_its_preallocated_indexes(tmp_path, clock):
    manager = LogManager([str(tmp_path / "d")], clock=clock, intervals=EVERY_PASS)
    manager.startup()
    manager.create_topic("t", 3)
    for partition in range(3):
        log = manager.get_log("t", partition)
        segment = log.segments_snapshot()[0]
        segment.flush()  # creates both index files, preallocated to segment.index.bytes
        for index in (segment.offset_index, segment.time_index):
            assert os.path.getsize(index.path) >= 10 * 1024 * 1024 - 12
            assert allocated_bytes(index.path) == 0, index.path
    manager.shutdown()


def test_appends_back_only_the_pages_just_ahead_of_the_write_position(tmp_path, clock):
    log = open_log(tmp_path, clock, config(index_interval_bytes=1))
    for _ in range(50):
        log.append(batch(b"v"))
    segment = log.segments_snapshot()[-1]
    assert segment.offset_index.entry_count >= 49
    for index in (segment.offset_index, segment.time_index):
        used = index.entry_count * index.LAYOUT.entry_bytes
        assert used <= allocated_bytes(index.path) <= RESERVE_AHEAD_BYTES + used + 4096
    log.close()


def test_an_index_append_on_a_full_disk_raises_before_storing_and_succeeds_once_space_is_back(tmp_path):
    fs = ExhaustingFs(operations=("pwrite",))
    index = OffsetIndex(str(tmp_path / "0.index"), 0, 1024 * 1024, fs=fs)
    index.append(0, 0)
    fs.armed = True
    # The first reservation covered RESERVE_AHEAD_BYTES past the first entry, to a page boundary:
    # fill it, then the next entry needs a new one.
    slots_reserved = -mmap.PAGESIZE * (-(8 + RESERVE_AHEAD_BYTES) // mmap.PAGESIZE) // 8
    for slot in range(1, slots_reserved):
        index.append(slot, slot * 10)
    with pytest.raises(OSError) as raised:
        index.append(slots_reserved, slots_reserved * 10)
    assert raised.value.errno == errno.ENOSPC
    assert index.entry_count == slots_reserved and index.last_offset == slots_reserved - 1
    fs.armed = False
    index.append(slots_reserved, slots_reserved * 10)
    assert index.lookup(slots_reserved) == (slots_reserved, slots_reserved * 10)
    index.close()


def test_reserving_space_in_a_reopened_index_never_overwrites_its_entries(tmp_path):
    path = str(tmp_path / "0.index")
    index = OffsetIndex(path, 0, 1024 * 1024)
    for slot in range(100):
        index.append(slot, slot * 10)
    index.close()  # trimmed to its 100 entries
    reopened = OffsetIndex(path, 0, 1024 * 1024)
    reopened.resize(1024 * 1024)  # the active segment's index regrows on load
    reopened.append(100, 1000)
    assert [reopened.entry(slot) for slot in range(101)] == [(slot, slot * 10) for slot in range(101)]
    reopened.close()


def test_a_time_index_append_on_a_full_disk_raises_before_storing(tmp_path):
    fs = ExhaustingFs(operations=("pwrite",))
    index = TimeIndex(str(tmp_path / "0.timeindex"), 0, 1024 * 1024, fs=fs)
    fs.armed = True
    with pytest.raises(OSError):
        index.maybe_append(NOW_MS, 0)
    assert index.entry_count == 0
    fs.armed = False
    index.maybe_append(NOW_MS, 0)
    assert index.last_entry == (NOW_MS, 0)
    index.close()


# -- the log on a full disk -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("operation", "appended_before"),
    [("pwrite", 1), ("pwritev", 3)],  # the second batch is the first one indexed: a reservation
)
def test_a_full_disk_refuses_appends_without_changing_the_log_and_appends_resume(
    tmp_path, clock, operation, appended_before
):
    fs = ExhaustingFs(operations=(operation,))
    log = open_log(tmp_path, clock, config(index_interval_bytes=100), fs=fs)
    for _ in range(appended_before):
        log.append(sized_batch(200))
    size_before = log.size_in_bytes
    fs.armed = True
    for _ in range(3):
        with pytest.raises(LogDirFullError, match="no space left"):
            log.append(sized_batch(200))
    assert fs.failures == 3
    assert not log.is_offline
    assert log.log_end_offset == appended_before and log.size_in_bytes == size_before
    assert os.path.getsize(log.segments_snapshot()[-1].log.path) == size_before  # nothing half-written
    assert all_offsets(log) == list(range(appended_before))
    fs.armed = False
    assert log.append(sized_batch(200)).base_offset == appended_before
    assert log.append(sized_batch(200)).base_offset == appended_before + 1
    log.flush()
    log.close()
    reopened = open_log(tmp_path, clock, config(index_interval_bytes=100))
    assert all_offsets(reopened) == list(range(appended_before + 2))
    for segment in reopened.segments_snapshot():
        segment.offset_index.sanity_check()
        segment.time_index.sanity_check()
        assert segment.offset_index.entry_count == appended_before + 1
    reopened.close()


def test_a_roll_on_a_full_disk_leaves_the_active_segment_taking_appends(tmp_path, clock):
    fs = ExhaustingFs(operations=("open",))
    log = open_log(tmp_path, clock, config(segment_bytes=2048), fs=fs)
    while len(log.segments_snapshot()) == 1:
        appended = log.append(sized_batch(400))
    fs.armed = True  # the next roll cannot create its files
    while True:
        try:
            log.append(sized_batch(400))
        except LogDirFullError:
            break
    assert not log.is_offline
    fs.armed = False
    assert log.append(sized_batch(400)).base_offset == log.log_end_offset - 1
    assert all_offsets(log) == list(range(log.log_end_offset))
    assert appended.base_offset >= 1
    log.close()


def test_a_failed_disk_still_takes_the_log_offline(tmp_path, clock):
    fs = ExhaustingFs(error=errno.EIO, operations=("pwritev",))
    log = open_log(tmp_path, clock, fs=fs)
    fs.armed = True
    with pytest.raises(LogDirOfflineError):
        log.append(batch(b"a"))
    assert log.is_offline


def test_running_out_of_descriptors_is_back_pressure_not_a_failure(tmp_path, clock):
    fs = ExhaustingFs(error=errno.EMFILE, operations=("open",))
    log = open_log(tmp_path, clock, config(segment_bytes=1024), fs=fs)
    for _ in range(4):
        log.append(sized_batch(400))
    first = log.segments_snapshot()[0]
    first.release_handles()
    fs.armed = True
    with pytest.raises(TooManyOpenFilesError, match="out of file descriptors"):
        log.read(0, 1000)
    assert not log.is_offline
    fs.armed = False
    assert log.read(0, 1000).records


# -- the log manager on a full disk ---------------------------------------------------------------
def start_manager(tmp_path, clock, fs, **kwargs) -> LogManager:
    manager = LogManager([str(tmp_path / "d0"), str(tmp_path / "d1")], clock=clock, fs=fs,
                         intervals=EVERY_PASS, **kwargs)
    manager.startup()
    return manager


def test_on_a_full_disk_reads_deletion_and_maintenance_go_on_and_the_directory_stays_online(tmp_path, clock):
    fs = ExhaustingFs(operations=("pwritev", "pwrite", "makedirs"))
    manager = start_manager(tmp_path, clock, fs)
    manager.create_topic("keep", 2)
    manager.create_topic("drop", 2)
    for partition in range(2):
        manager.get_log("keep", partition).append(batch(b"k"))
        manager.get_log("drop", partition).append(batch(b"d"))
    fs.armed = True
    with pytest.raises(LogDirFullError):
        manager.get_log("keep", 0).append(batch(b"k2"))
    with pytest.raises(LogDirFullError, match="creating topic 'new'"):
        manager.create_topic("new", 1)
    assert [name for name, _ in manager.list_topics()] == ["drop", "keep"]
    manager.run_maintenance()  # checkpoints cannot be written: skipped, not a failure
    assert manager.get_log("keep", 0).read(0, 1000).records  # reads go on
    assert manager.get_log("keep", 0).delete_records(1) == 1  # DeleteRecords works
    manager.delete_topic("drop")  # and DeleteTopic frees space
    stats = manager.statistics()
    assert stats.offline_log_dir_count == 0 and manager.can_serve()
    assert not any(name.startswith("drop") for d in ("d0", "d1") for name in os.listdir(tmp_path / d))
    fs.armed = False
    assert manager.get_log("keep", 1).append(batch(b"k3")).base_offset == 1
    manager.create_topic("new", 1)
    manager.run_maintenance()
    manager.shutdown()
    restarted = start_manager(tmp_path, clock, FileSystem())
    assert restarted.statistics().logs_recovered_count == 0  # a clean stop despite the full disk
    assert restarted.get_log("keep", 1).log_end_offset == 2
    assert restarted.get_log("keep", 0).log_start_offset == 1
    restarted.shutdown()


# -- one descriptor budget for every log ---------------------------------------------------------
def test_the_budget_is_shared_by_every_log_and_covers_active_segments(tmp_path, clock):
    manager = start_manager(tmp_path, clock, FileSystem(), open_segments_max=3)
    manager.create_topic("t", 10)
    for round_ in range(3):
        for partition in range(10):
            manager.get_log("t", partition).append(batch(b"%d" % round_))
    stats = manager.statistics()
    assert stats.open_segment_count <= 3 and stats.open_segments_max == 3
    assert stats.descriptor_budget == 12 and stats.released_segment_total >= 10
    holding = [
        s for p in range(10) for s in manager.get_log("t", p).segments_snapshot() if s.holds_handles
    ]
    assert len(holding) <= 3
    for partition in range(10):
        assert all_offsets(manager.get_log("t", partition)) == [0, 1, 2]
    manager.shutdown()
    restarted = start_manager(tmp_path, clock, FileSystem())
    for partition in range(10):
        log = restarted.get_log("t", partition)
        assert all_offsets(log) == [0, 1, 2]
        assert log.append(batch(b"after")).base_offset == 3
    restarted.shutdown()


def test_a_released_active_segment_keeps_its_index_entries_and_free_slots(tmp_path, clock):
    log = open_log(tmp_path, clock, config(index_interval_bytes=1))
    for value in range(20):
        log.append(batch(b"%d" % value))
        log.segments_snapshot()[-1].release_handles()
    active = log.segments_snapshot()[-1]
    assert not active.holds_handles
    assert active.offset_index.entry_count == 19  # the first batch is never indexed (interval rule)
    assert active.offset_index.lookup(10).offset == 10
    assert not active.offset_index.is_full()
    log.close()
    reopened = open_log(tmp_path, clock, config(index_interval_bytes=1))
    segment = reopened.segments_snapshot()[-1]
    assert segment.offset_index.entry_count == 19 and segment.time_index.entry_count >= 1
    segment.offset_index.sanity_check()
    assert all_offsets(reopened) == list(range(20))
    reopened.close()


def test_retention_and_flush_leave_a_released_segment_without_handles(tmp_path, clock):
    """A released segment holds nothing the budget does not know of: retention, roll checks and
    flushes answer from its kept counts instead of mapping its indexes again."""
    log = open_log(tmp_path, clock, config(index_interval_bytes=1, retention_ms=3_600_000))
    for value in range(5):
        log.append(batch(b"%d" % value))
    active = log.segments_snapshot()[-1]
    active.release_handles()
    assert log.delete_old_segments() == 0
    log.flush()
    assert active.offset_index.is_full() is False and active.offset_index.last_offset == 4
    assert active.time_index.last_entry == (NOW_MS, 0)  # every batch has the same timestamp
    assert not active.holds_handles
    assert log.append(batch(b"after")).base_offset == 5  # and it works again when used
    log.close()


class _Owner:
    def __init__(self):
        self.lock = threading.RLock()
        self.released = []

    def try_release_handles(self, segment):
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self.released.append(segment)
            return True
        finally:
            self.lock.release()


def test_a_segment_of_a_busy_log_is_kept_for_now_and_counted():
    budget = OpenSegments(1)
    busy, idle = _Owner(), _Owner()
    first, second, third = object(), object(), object()
    budget.touch(first, busy)
    holder = threading.Thread(target=busy.lock.acquire)
    holder.start()
    holder.join()  # another thread now holds the busy log's lock
    budget.touch(second, idle)
    assert busy.released == [] and budget.statistics().busy_skip_count == 1
    budget.touch(third, idle)
    assert second in idle.released
    assert len(budget) <= 2


def test_an_error_releasing_another_logs_segment_is_not_the_callers_error(caplog):
    class BrokenOwner:
        def try_release_handles(self, segment):
            raise OSError(errno.EIO, "close failed")

    budget = OpenSegments(1)
    budget.touch(object(), BrokenOwner())
    budget.touch(object(), _Owner())  # evicts the broken owner's segment: logged, not raised
    assert "releasing the handles" in caplog.text
    assert len(budget) == 1


@pytest.mark.parametrize(
    ("descriptor_limit", "mapping_limit", "expected"),
    [
        (1024, None, (1024 - DESCRIPTOR_HEADROOM_MIN) // 4),
        (4096, None, (4096 - 1024) // 4),
        (1 << 20, 65530, (65530 - 8192) // 3),  # vm.max_map_count binds first
        (300, None, OPEN_SEGMENTS_MIN),
    ],
)
def test_the_budget_leaves_headroom_for_sockets_and_mappings(descriptor_limit, mapping_limit, expected):
    assert open_segments_max_for(descriptor_limit, mapping_limit) == expected
