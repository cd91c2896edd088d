"""The cleaner's steps in the service under injected faults (fault_fs.FaultFs): ListCleanable,
CreateSnapshot and CommitCleaned.

- an I/O error inside the log's locked steps (``Log.run_locked``) takes that log offline with a
  LogDirOfflineError (it used to be an AttributeError answered INTERNAL);
- a full disk or no descriptors fails the cleaning alone, with a retriable
  ResourceExhaustedError: its partial snapshot or ``.cleaned`` files are removed, the directory
  keeps serving (reads, produce, DeleteTopic), nothing is lost, and a later round succeeds.
"""

from __future__ import annotations

import errno
import os

import pytest
from fault_fs import FaultFs

from seglog.records import RecordBatchBuilder, iter_batches
from seglog_server.storage.clock import FakeClock
from seglog_server.storage.errors import LogDirOfflineError, TooManyOpenFilesError
from seglog_server.storage.log_manager import LogManager, MaintenanceIntervals
from seglog_server.storage.log_snapshot import SNAPSHOTS_DIR_NAME


NOW_MS = 1_700_000_000_000
EVERY_PASS = MaintenanceIntervals(0, 0, 0, 0, 0)
COMPACT = {"cleanup.policy": "compact", "file.delete.delay.ms": "0", "min.compaction.lag.ms": "1"}
FULL = [errno.ENOSPC, errno.EDQUOT]


@pytest.fixture
def clock():
    return FakeClock(NOW_MS)


@pytest.fixture
def fs():
    return FaultFs()


def start(path, clock, fs) -> LogManager:
    manager = LogManager([str(path)], clock=clock, fs=fs, intervals=EVERY_PASS, snapshot_ttl_ms=3_600_000)
    manager.startup()
    return manager


def keyed(key: bytes, value: bytes | None) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(value, key=key, timestamp_ms=NOW_MS)
    return builder.build()


def fill(log, rounds: int = 3, keys: int = 4) -> None:
    for round_ in range(rounds):
        for k in range(keys):
            log.append(keyed(b"k%d" % k, b"v%d-%d" % (k, round_)))
        log.roll()
    log.append(keyed(b"tail", b"t"))


def records(log) -> list[tuple[int, bytes | None, bytes | None]]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        batches = list(iter_batches(log.read(offset, 2**24).records))
        for one in batches:
            out.extend((r.offset, r.key, r.value) for r in one if r.offset >= offset)
        offset = batches[-1].next_offset
    return out


def latest(rows) -> dict:
    return {key: value for _, key, value in rows}


@pytest.fixture
def restarted(tmp_path, clock, fs):
    """Two compacted topics, written, then a restart: the segments' figures are read again on
    first use (through the seam)."""
    data = tmp_path / "d"
    manager = start(data, clock, fs)
    for name in ("a", "b"):
        manager.create_topic(name, 1, COMPACT)
        fill(manager.get_log(name, 0))
    manager.shutdown()
    clock.advance(1000)
    manager = start(data, clock, fs)
    yield manager, data
    manager.shutdown()


def snapshot_dirs(data) -> list[str]:
    root = os.path.join(data, SNAPSHOTS_DIR_NAME)
    return os.listdir(root) if os.path.exists(root) else []


def cleaned_files(data) -> list[str]:
    return [n for part in os.listdir(data) if os.path.isdir(data / part)
            for n in os.listdir(data / part) if n.endswith((".cleaned", ".swap"))]


# -- ListCleanable and the locked steps --------------------------------------------------------
def test_an_io_error_in_a_locked_cleaner_step_takes_the_log_offline(restarted, fs):
    manager, _ = restarted
    rule = fs.fail("open", errno.EIO, path="a-0", times=None)
    listed = manager.list_cleanable()
    assert rule.hits >= 1
    assert [(c.topic, c.partition) for c in listed] == [("b", 0)]  # a-0 went offline, left out
    manager.run_maintenance()  # the manager's pass finds the offline log: its directory goes
    with pytest.raises(LogDirOfflineError):
        manager.get_log("a", 0)


def test_no_descriptor_in_a_locked_cleaner_step_is_retriable(restarted, fs):
    manager, _ = restarted
    fs.fail("open", errno.EMFILE, path="a-0", times=None)
    with pytest.raises(TooManyOpenFilesError):
        manager.list_cleanable("a")
    fs.heal()
    assert [c.topic for c in manager.list_cleanable("a")] == ["a"]


def test_a_link_failing_with_eio_while_snapshotting_takes_the_directory_offline(restarted, fs):
    manager, data = restarted
    fs.fail("link", errno.EIO, path="a-0")
    with pytest.raises(LogDirOfflineError):
        manager.create_snapshot("a", 0)
    with pytest.raises(LogDirOfflineError):
        manager.get_log("b", 0)
