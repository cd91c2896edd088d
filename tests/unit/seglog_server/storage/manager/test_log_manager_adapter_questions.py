"""The questions the gRPC adapter asks the log manager about a log (rpc/storage_port.py), answered
by the storage from its own state: which lock an event loop may try, whether an append or a lookup
by time may block, and which directory goes offline after an I/O error. Real directories, a
FakeClock, a restart for the first-lookup case."""

from __future__ import annotations

import threading
import time

import pytest

from seglog.records import Compression, RecordBatchBuilder
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import LogDirOfflineError
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.log.log_results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from seglog_server.storage.manager.log_manager import LogManager


def batch(value: bytes, compression: int = Compression.NONE) -> bytes:
    builder = RecordBatchBuilder(compression=compression)
    builder.append(value)
    return builder.build()


@pytest.fixture
def manager(tmp_path):
    manager = LogManager([str(tmp_path / "d")], clock=FakeClock())
    manager.startup()
    yield manager
    manager.shutdown()


def test_a_plain_batch_to_a_topic_without_a_flush_policy_does_not_block(manager):
    manager.create_topic("t", 1)
    assert manager.append_may_block(manager.get_log("t", 0), batch(b"v")) is False


def test_an_append_under_a_flush_messages_policy_may_block(manager):
    manager.create_topic("t", 1, {"flush.messages": "1"})
    assert manager.append_may_block(manager.get_log("t", 0), batch(b"v")) is True


def test_a_compressed_batch_may_block(manager):
    manager.create_topic("t", 1)
    assert manager.append_may_block(manager.get_log("t", 0), batch(b"v" * 100, Compression.GZIP)) is True


def test_a_truncated_header_is_not_called_compressed(manager):
    """Too short to carry attributes: the append itself refuses it, inline."""
    manager.create_topic("t", 1)
    assert manager.append_may_block(manager.get_log("t", 0), b"\x00" * 5) is False


def test_the_first_lookup_by_time_after_a_restart_may_block_and_the_special_targets_never(tmp_path):
    dirs = [str(tmp_path / "d")]
    first = LogManager(dirs, clock=FakeClock())
    first.startup()
    first.create_topic("t", 1, {"segment.bytes": "1024"})
    log = first.get_log("t", 0)
    for number in range(40):
        log.append(batch(b"%d" % number * 20))
    first.shutdown()
    manager = LogManager(dirs, clock=FakeClock())
    manager.startup()
    try:
        log = manager.get_log("t", 0)
        assert manager.timestamp_lookup_may_block(log, [EARLIEST_TIMESTAMP, LATEST_TIMESTAMP]) is False
        assert manager.timestamp_lookup_may_block(log, [0]) is True
        assert manager.timestamp_lookup_may_block(log, [LATEST_TIMESTAMP, MAX_TIMESTAMP]) is True
        log.offset_for_timestamp(0)  # loads every segment's largest timestamp
        assert manager.timestamp_lookup_may_block(log, [0, MAX_TIMESTAMP]) is False
    finally:
        manager.shutdown()


class _LinkHeldFs(FileSystem):
    """The real file system, whose ``link`` waits (inside the log operation that calls it)
    until the test lets it go."""

    def __init__(self) -> None:
        self.entered, self.leave = threading.Event(), threading.Event()

    def link(self, src, dst):
        self.entered.set()
        self.leave.wait(30)
        super().link(src, dst)


def test_the_inline_lock_is_the_one_a_log_operation_holds(tmp_path):
    fs = _LinkHeldFs()
    manager = LogManager([str(tmp_path / "d")], clock=FakeClock(), fs=fs)
    manager.startup()
    try:
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        log.append(batch(b"v"))
        up_to = log.roll()
        _the_roll_flush_done(log, up_to)
        lock = manager.inline_lock(log)
        worker = threading.Thread(target=log.snapshot_segments, args=(up_to,), kwargs={"link_into": str(tmp_path)})
        worker.start()
        try:
            assert fs.entered.wait(30)  # the snapshot is linking, under the log's lock
            assert lock.acquire(blocking=False) is False  # busy: an event loop sends the call to the pool
        finally:
            fs.leave.set()
            worker.join(30)
        _the_free_lock_is_reentered(log, lock)
    finally:
        manager.shutdown()


# A bound on a hang, not a speed assertion: the roll's flush of one small segment takes milliseconds.
ROLL_FLUSH_BOUND_S = 30.0


def _the_roll_flush_done(log, up_to: int) -> None:
    """The roll's background flush (on the manager's pool) takes the log's lock too: were it
    still running, the lock could be its, not free, after the snapshot. It moves the recovery point
    to the roll's offset under the lock; a flush on this thread then waits (on the flush lock, held
    until the background one has let the log's lock go) and finds nothing left to do."""
    deadline = time.monotonic() + ROLL_FLUSH_BOUND_S
    while log.recovery_point < up_to:
        assert time.monotonic() < deadline, f"the roll's flush to {up_to} not done in {ROLL_FLUSH_BOUND_S} s"
        time.sleep(0.01)
    log.flush(up_to)


def _the_free_lock_is_reentered(log, lock) -> None:
    assert lock.acquire(blocking=False) is True
    try:  # held, a call on this thread re-enters it (StorageCalls runs the call while holding it)
        log.append(batch(b"v"))
    finally:
        lock.release()


def test_a_log_failure_takes_its_directory_offline(manager):
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    manager.handle_log_failure(log, OSError("injected"))
    with pytest.raises(LogDirOfflineError):
        manager.get_log("t", 0)
    assert [d.online for d in manager.statistics().log_dirs] == [False]
