"""Every durability path under injected faults (fault_fs.FaultFs over the ``fs`` seam).

The rule (io_errors.py, docs/reliability.md): a failed fsync is a failure whatever its errno,
ENOSPC and EDQUOT included (the kernel may have dropped the pages): the log goes offline and the
recovery point never moves over those offsets. Running out of descriptors in the ``open`` a
flush makes is retriable: nothing was synced, so nothing was lost; the recovery point stays and
the next flush covers the offsets. Files written atomically (checkpoints) lose nothing when
their fsync fails: the old file stays, so that failure is retriable too.
"""

from __future__ import annotations

import errno
import logging
import os
import time

import pytest
from tests.support.fault_fs import FaultFs
from tests.support.log_test_support import batch, open_log

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import (
    LogDirOfflineError,
    ResourceExhaustedError,
    TooManyOpenFilesError,
)
from seglog_server.storage.base.log_config import LogConfig
from seglog_server.storage.format.checkpoint import RECOVERY_POINT_CHECKPOINT as RECOVERY_POINT_CHECKPOINT_FILE_NAME
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals

EVERY_PASS = MaintenanceIntervals(
    initial_delay_ms=0,
    retention_check_ms=0,
    flush_check_ms=0,
    recovery_point_checkpoint_ms=0,
    log_start_offset_checkpoint_ms=0,
)
SYNC_FAILURES = [errno.ENOSPC, errno.EDQUOT, errno.EIO]
DESCRIPTOR_SHORTAGES = [errno.EMFILE, errno.ENFILE]


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def fs():
    return FaultFs()


def with_records(log, count: int = 3):
    for n in range(count):
        log.append(batch(b"v%d" % n))
    return log


# -- flush of the active segment --------------------------------------------------------------
@pytest.mark.parametrize("error", SYNC_FAILURES)
@pytest.mark.parametrize("operation", ["fdatasync", "fsync_dir"])
def test_a_failed_sync_takes_the_log_offline_and_never_moves_the_recovery_point(tmp_path, clock, fs, error, operation):
    log = with_records(open_log(tmp_path, clock, fs=fs))
    rule = fs.fail(operation, error, path=".log" if operation == "fdatasync" else None)
    with pytest.raises(LogDirOfflineError, match="flushing"):
        log.flush()
    assert rule.hits == 1 and log.is_offline and log.recovery_point == 0
    fs.heal()  # the next flush would succeed, over pages the kernel may have dropped: refused
    with pytest.raises(LogDirOfflineError):
        log.flush()
    with pytest.raises(LogDirOfflineError):
        log.append(batch(b"later"))
    assert log.recovery_point == 0
    log.close_handlers()


@pytest.mark.parametrize("error", DESCRIPTOR_SHORTAGES)
def test_no_descriptor_for_a_flush_is_retriable_and_leaves_the_recovery_point(tmp_path, clock, fs, error):
    log = with_records(open_log(tmp_path, clock, fs=fs))
    rule = fs.fail("open", error, path=".log")
    with pytest.raises(TooManyOpenFilesError, match="to flush partition topic-0"):
        log.flush()
    assert rule.hits == 1 and not log.is_offline and log.recovery_point == 0
    assert log.append(batch(b"more")).base_offset == 3  # still serving
    log.flush()
    assert log.recovery_point == log.log_end_offset == 4
    log.close()


@pytest.mark.parametrize("error", DESCRIPTOR_SHORTAGES)
def test_no_descriptor_for_the_directory_sync_is_retriable(tmp_path, clock, fs, error):
    # fsync(2) never answers EMFILE/ENFILE: the directory's open did, before any sync.
    log = with_records(open_log(tmp_path, clock, fs=fs))
    fs.fail("fsync_dir", error)
    with pytest.raises(TooManyOpenFilesError):
        log.flush()
    assert not log.is_offline and log.recovery_point == 0
    log.flush()
    assert log.recovery_point == 3
    log.close()


def test_a_full_disk_creating_an_index_file_to_flush_is_retriable(tmp_path, clock, fs):
    log = with_records(open_log(tmp_path, clock, fs=fs))
    log.roll()  # the new active segment's index files are created by its first flush
    fs.fail("open", errno.ENOSPC, path=".index")
    with pytest.raises(ResourceExhaustedError, match="no space left"):
        log.flush()
    assert not log.is_offline and log.recovery_point == 3  # (the roll flushed below it)
    log.flush()
    assert log.recovery_point == log.log_end_offset == 3
    log.close()


def test_a_failed_sync_of_a_later_segment_keeps_the_recovery_point_below_all_of_them(tmp_path, clock, fs):
    log = with_records(open_log(tmp_path, clock, fs=fs), 2)
    log.roll()
    with_records(log, 2)
    fs.fail("fdatasync", errno.ENOSPC, path="00000000000000000002.log")
    with pytest.raises(LogDirOfflineError):
        log.flush()
    assert log.recovery_point == 2  # where the roll's flush left it
    log.close_handlers()


# -- roll flushes in the background -------------------------------------------------------------
@pytest.mark.parametrize("error", SYNC_FAILURES)
def test_a_failed_roll_flush_is_logged_and_takes_the_log_offline(tmp_path, clock, fs, error, caplog):
    tasks = []
    log = open_log(tmp_path, clock, fs=fs)
    log._flush_scheduler = tasks.append  # the pool, run by hand
    with_records(log)
    log.roll()
    fs.fail("fdatasync", error)
    with caplog.at_level(logging.ERROR, logger="seglog_server.storage.log.unified_log"):
        for task in tasks:
            task()  # a pool's task: must not raise into a future nobody reads
    assert log.is_offline and log.recovery_point == 0
    assert "background flush to 3 failed, the log is offline" in caplog.text
    log.close_handlers()


def test_a_roll_flush_short_of_descriptors_is_logged_and_the_next_flush_covers_it(tmp_path, clock, fs, caplog):
    tasks = []
    log = open_log(tmp_path, clock, fs=fs)
    log._flush_scheduler = tasks.append
    with_records(log)
    log.roll()
    fs.fail("open", errno.EMFILE)
    with caplog.at_level(logging.WARNING, logger="seglog_server.storage.log.unified_log"):
        tasks.pop()()
    assert "background flush to 3 failed" in caplog.text
    assert not log.is_offline and log.recovery_point == 0
    log.flush(3)
    assert log.recovery_point == 3
    log.close()


def test_a_roll_flush_failing_in_the_managers_pool_takes_the_directory_offline(tmp_path, clock, fs, caplog):
    manager = LogManager([str(tmp_path / "d")], clock=clock, fs=fs, intervals=EVERY_PASS)
    manager.startup()
    manager.create_topic("t", 1)
    log = with_records(manager.get_log("t", 0))
    fs.fail("fdatasync", errno.ENOSPC, path=".log")
    with caplog.at_level(logging.ERROR, logger="seglog_server.storage.log.unified_log"):
        log.roll()  # its flush runs on the manager's pool
        # Waits for the pool's thread (not a timing assertion) until it has done both: the
        # flush sets the offline flag before its caller logs the failure, so the flag alone
        # can be seen while the line is not written yet.
        for _ in range(5000):
            if log.is_offline and "background flush to 3 failed" in caplog.text:
                break
            time.sleep(0.001)
    assert log.is_offline and log.recovery_point == 0
    assert "background flush to 3 failed" in caplog.text
    manager.run_maintenance()  # the manager's pass finds the offline log
    with pytest.raises(LogDirOfflineError):
        manager.get_log("t", 0)
    manager.shutdown()
    assert not manager.stopped_cleanly


# -- checkpoints -------------------------------------------------------------------------------
def _checkpoint_text(directory) -> str:
    with open(os.path.join(directory, RECOVERY_POINT_CHECKPOINT_FILE_NAME)) as file:
        return file.read()


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EDQUOT])
def test_a_checkpoint_whose_fsync_fails_on_a_full_disk_keeps_the_old_one_and_is_retried(tmp_path, clock, fs, error):
    data = tmp_path / "d"
    manager = LogManager([str(data)], clock=clock, fs=fs, intervals=EVERY_PASS)
    manager.startup()
    manager.create_topic("t", 1)
    manager.run_maintenance()
    before = _checkpoint_text(data)
    log = with_records(manager.get_log("t", 0))
    log.flush()
    rule = fs.fail("fsync", error, path=RECOVERY_POINT_CHECKPOINT_FILE_NAME + ".tmp")
    manager.run_maintenance()
    assert rule.hits == 1
    assert _checkpoint_text(data) == before  # the old checkpoint, never a torn one
    assert not any(name.endswith(".tmp") for name in os.listdir(data))  # no blocks held
    assert manager.get_log("t", 0) is log  # the directory stays online
    manager.run_maintenance()
    assert "t 0 3" in _checkpoint_text(data)
    manager.shutdown()


def test_a_checkpoint_whose_fsync_fails_on_a_failed_disk_takes_the_directory_offline(tmp_path, clock, fs):
    manager = LogManager([str(tmp_path / "d")], clock=clock, fs=fs, intervals=EVERY_PASS)
    manager.startup()
    manager.create_topic("t", 1)
    fs.fail("fsync", errno.EIO, path=RECOVERY_POINT_CHECKPOINT_FILE_NAME + ".tmp")
    manager.run_maintenance()
    with pytest.raises(LogDirOfflineError):
        manager.get_log("t", 0)
    manager.shutdown()


def test_the_recovery_point_checkpoint_never_passes_a_failed_flush(tmp_path, clock, fs):
    data = tmp_path / "d"
    manager = LogManager([str(data)], clock=clock, fs=fs, intervals=EVERY_PASS)
    manager.startup()
    manager.create_topic("t", 1, {"flush.ms": "0"})
    manager.run_maintenance()
    with_records(manager.get_log("t", 0))
    fs.fail("fdatasync", errno.ENOSPC, times=None)
    manager.run_maintenance()  # flush.ms due: the flush fails, the directory goes offline
    assert "t 0 3" not in _checkpoint_text(data)
    with pytest.raises(LogDirOfflineError):
        manager.get_log("t", 0)
    manager.shutdown()
    assert not manager.stopped_cleanly


# -- producer snapshots ------------------------------------------------------------------------
def idempotent_batch(sequence: int, value: bytes) -> bytes:
    return batch(value, producer_id=7, producer_epoch=0, base_sequence=sequence)


@pytest.mark.parametrize("error", SYNC_FAILURES)
def test_a_failed_producer_snapshot_sync_at_shutdown_leaves_no_clean_marker(tmp_path, clock, fs, error):
    data = tmp_path / "d"
    manager = LogManager([str(data)], clock=clock, fs=fs, intervals=EVERY_PASS)
    manager.startup()
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    for sequence in range(3):
        log.append(idempotent_batch(sequence, b"p%d" % sequence))
    fs.fail("fdatasync", error, path=".snapshot")
    manager.shutdown()
    assert not manager.stopped_cleanly  # the next start recovers instead of trusting it
    fs.heal()
    again = LogManager([str(data)], clock=clock, fs=fs, intervals=EVERY_PASS)
    again.startup()
    reloaded = again.get_log("t", 0)
    assert reloaded.log_end_offset == 3
    duplicate = reloaded.append(idempotent_batch(2, b"p2"))  # a retry of the last batch
    assert (duplicate.base_offset, reloaded.log_end_offset) == (2, 3)
    again.shutdown()


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_writing_the_rolls_producer_snapshot_still_rolls_and_flushes(tmp_path, clock, fs, error):
    tasks = []
    log = open_log(tmp_path, clock, LogConfig(), fs=fs)
    log._flush_scheduler = tasks.append
    for sequence in range(3):
        log.append(idempotent_batch(sequence, b"p%d" % sequence))
    fs.fail("pwrite", error, path=".snapshot")
    log.roll()
    assert [segment.base_offset for segment in log.segments_snapshot()] == [0, 3]
    assert "00000000000000000003.snapshot" not in os.listdir(tmp_path)  # no torn file holding blocks
    for task in tasks:
        task()
    assert log.recovery_point == 3 and not log.is_offline
    log.close()
