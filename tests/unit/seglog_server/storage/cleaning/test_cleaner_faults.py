"""The cleaner's steps in the service under injected faults (fault_fs.FaultFs): ListCleanable,
CreateSnapshot and CommitCleaned.

- an I/O error inside the log's locked steps (``Log.snapshot_segments``, ``describe_segment``)
  takes that log offline with a LogDirOfflineError (it used to be an AttributeError answered
  INTERNAL);
- a full disk or no descriptors fails the cleaning alone, with a retriable
  ResourceExhaustedError: its partial snapshot or ``.cleaned`` files are removed, the directory
  keeps serving (reads, produce, DeleteTopic), nothing is lost, and a later round succeeds.
"""

from __future__ import annotations

import errno
import os
import re
from collections import Counter

import pytest
from tests.support.fault_fs import FaultFs

from seglog.records import RecordBatchBuilder, iter_batches
from seglog_server.storage.format.checkpoint import CLEANER_OFFSET_CHECKPOINT
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import LogDirOfflineError, ResourceExhaustedError, TooManyOpenFilesError
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals
from seglog_server.storage.cleaning.log_snapshot import SNAPSHOTS_DIR_NAME

from tests.support.cleaning_support import hand_clean

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


# -- a cleaner round on a full disk ------------------------------------------------------------
SNAPSHOT_DIR = re.compile(re.escape(os.sep + SNAPSHOTS_DIR_NAME + os.sep) + r"[^" + re.escape(os.sep) + r"]+")


def step_of(path: str) -> str:
    """A path with its snapshot's id (time and random tail) left out: the same step of another
    round names the same file."""
    return SNAPSHOT_DIR.sub(os.sep + SNAPSHOTS_DIR_NAME + os.sep + "*", path)


def traced_steps(fs, operations, start=None) -> list[tuple[str, str, int]]:
    """(operation, step path, how many earlier calls made it) of the traced calls of
    ``operations``, from the first for which ``start`` holds."""
    steps, earlier, started = [], Counter(), start is None
    for operation, paths in fs.trace:
        key = (operation, step_of(paths[0]) if paths else "")
        started = started or start(operation, paths)
        if started and operation in operations:
            steps.append((*key, earlier[key]))
        earlier[key] += 1
    fs.trace.clear()
    return steps


def fail_step(fs, error, operation, path, seen):
    return fs.fail(operation, error, path=lambda p, want=path: step_of(p) == want, skip=seen)


WRITING_STEPS = ("makedirs", "link", "open", "pwrite", "pwritev", "ftruncate", "fsync", "fdatasync",
                 "set_mtime_ms", "replace", "fsync_dir")


@pytest.mark.parametrize("error", FULL + [errno.EMFILE])
def test_create_snapshot_on_a_full_disk_fails_alone_at_every_step(restarted, fs, error):
    manager, data = restarted
    before = records(manager.get_log("a", 0))
    fs.tracing = True
    taken = manager.create_snapshot("a", 0)
    fs.tracing = False
    steps = traced_steps(fs, WRITING_STEPS)
    manager.drop_snapshot(taken.manifest.snapshot_id)
    assert [op for op, _, _ in steps].count("link") == 3
    faulted = 0
    for index, (operation, path, seen) in enumerate(steps):
        rule = fail_step(fs, error, operation, path, seen)
        try:
            taken = manager.create_snapshot("a", 0)
        except ResourceExhaustedError:
            assert rule.hits == 1, (index, operation, path)
            faulted += 1
        else:  # a read the first run made once (a segment's first use after the restart)
            assert rule.hits == 0, (index, operation, path)
            manager.drop_snapshot(taken.manifest.snapshot_id)
        fs.heal()
        assert snapshot_dirs(data) == [], (index, operation)  # the partial snapshot is gone
        log = manager.get_log("a", 0)  # the directory and the log keep serving
        assert not log.is_offline
        assert records(log) == before
    assert faulted >= len(steps) - 6
    manager.get_log("b", 0).append(keyed(b"x", b"y"))
    taken = manager.create_snapshot("a", 0)  # space is back: the next round works
    assert os.path.isdir(taken.path)


def test_delete_topic_works_after_a_cleaner_round_failed_on_a_full_disk(restarted, fs):
    manager, data = restarted
    fs.fail("link", errno.ENOSPC, path="a-0")
    with pytest.raises(ResourceExhaustedError):
        manager.create_snapshot("a", 0)
    manager.delete_topic("b")  # the way to free space is still open
    assert manager.list_topics() == [("a", 1)]
    assert not os.path.exists(data / "b-0")
    assert records(manager.get_log("a", 0))  # and the partition that failed to clean still reads


@pytest.mark.parametrize("error", FULL)
def test_commit_cleaned_on_a_full_disk_fails_alone_before_the_swap(restarted, fs, error):
    manager, data = restarted
    log = manager.get_log("a", 0)
    before = records(log)
    taken = manager.create_snapshot("a", 0)
    hand_clean(taken.path)
    snapshot_id = taken.manifest.snapshot_id
    # A run to learn the steps, stopped by a full disk at the swap's first rename (nothing
    # swapped: retriable, the snapshot stays for the rounds below).
    fs.fail("replace", error, path=".log.cleaned")
    fs.tracing = True
    with pytest.raises(ResourceExhaustedError):
        manager.commit_cleaned(snapshot_id)
    fs.tracing = False
    fs.heal()
    assert cleaned_files(data) == [] and records(log) == before
    steps = traced_steps(fs, WRITING_STEPS)[:-1]  # (the failed rename)
    steps = [step for step in steps if f"{os.sep}a-0" in step[1] or step[0] == "link"]
    assert {op for op, _, _ in steps} >= {"link", "pwrite", "fsync_dir"}
    assert {op for op, _, _ in steps} & {"fsync", "fdatasync"}
    faulted = 0
    for index, (operation, path, seen) in enumerate(steps):
        rule = fail_step(fs, error, operation, path, seen)
        try:
            manager.commit_cleaned(snapshot_id)
        except ResourceExhaustedError:
            assert rule.hits == 1, (index, operation, path)
            faulted += 1
        else:  # pragma: no cover - the commit went through: no later step left to fault
            raise AssertionError(f"step {index} ({operation} {path}) did not fail the commit")
        fs.heal()
        assert not log.is_offline, (index, operation, path)
        assert cleaned_files(data) == [], (index, operation)  # the built segments are gone
        assert records(log) == before  # nothing installed, nothing lost
        assert manager.get_log("b", 0).append(keyed(b"x%d" % index, b"y")).base_offset >= 13
    assert faulted == len(steps)
    outcome = manager.commit_cleaned(snapshot_id)  # space is back: the same result installs
    assert outcome.installed_segment_count >= 1
    assert latest(records(log)) == latest(before)


@pytest.mark.parametrize("error", FULL)
def test_a_commit_whose_cleaner_checkpoint_cannot_be_written_on_a_full_disk_still_installs(restarted, fs, error):
    manager, data = restarted
    log = manager.get_log("a", 0)
    before = latest(records(log))
    taken = manager.create_snapshot("a", 0)
    hand_clean(taken.path)
    rule = fs.fail("fsync", error, path=CLEANER_OFFSET_CHECKPOINT + ".tmp")
    outcome = manager.commit_cleaned(taken.manifest.snapshot_id)  # in the log: not reported failed
    assert rule.hits == 1 and outcome.installed_segment_count >= 1
    assert latest(records(log)) == before and not log.is_offline
    assert [c.to_clean.first_dirty_offset for c in manager.list_cleanable("a")] == [0]  # recopied next round
