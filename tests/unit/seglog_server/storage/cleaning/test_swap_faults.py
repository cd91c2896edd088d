"""The compaction swap (CommitCleaned's step 5, ``Log.swap_segments``) failing at each of its
renames and at its directory sync, with ENOSPC (a rename may need a new directory block) and EIO.

A swap either completes or takes the log offline: while online, reads never meet old and new
segments side by side (which they would answer DATA_LOSS); offline, they answer UNAVAILABLE's
LogDirOfflineError. A restart then completes the swap or rolls it back (kafka-storage.md 6.6):
the log holds either the records before or the cleaned ones, and no ``.cleaned`` or ``.swap``
file is left.
"""

from __future__ import annotations

import errno
import os
from collections import Counter

import pytest
from tests.support.fault_fs import FaultFs

from seglog.records import RecordBatchBuilder, iter_batches
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import CorruptSegmentError, LogDirOfflineError, ResourceExhaustedError
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals

from tests.support.cleaning_support import hand_clean

NOW_MS = 1_700_000_000_000
EVERY_PASS = MaintenanceIntervals(0, 0, 0, 0, 0)
COMPACT = {"cleanup.policy": "compact", "file.delete.delay.ms": "0"}


def keyed(key: bytes, value: bytes) -> bytes:
    builder = RecordBatchBuilder()
    builder.append(value, key=key, timestamp_ms=NOW_MS)
    return builder.build()


def start(data, fs) -> LogManager:
    manager = LogManager([str(data)], clock=FakeClock(NOW_MS), fs=fs, intervals=EVERY_PASS)
    manager.startup()
    return manager


def records(log) -> list[tuple[int, bytes | None, bytes | None]]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        batches = list(iter_batches(log.read(offset, 2**24).records))
        for one in batches:
            out.extend((r.offset, r.key, r.value) for r in one if r.offset >= offset)
        offset = batches[-1].next_offset
    return out


def cleaned_round(data, fs):
    """A compacted log of four segments, a snapshot of the three closed ones, cleaned."""
    manager = start(data, fs)
    manager.create_topic("c", 1, COMPACT)
    log = manager.get_log("c", 0)
    for round_ in range(3):
        for k in range(4):
            log.append(keyed(b"k%d" % k, b"v%d-%d" % (k, round_)))
        log.roll()
    log.append(keyed(b"tail", b"t"))
    manager.shutdown()  # drains the rolls' background flushes: the steps below are the commit's alone
    manager = start(data, fs)
    log = manager.get_log("c", 0)
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    return manager, log, taken.manifest.snapshot_id


def leftovers(data) -> list[str]:
    return sorted(n for n in os.listdir(data / "c-0") if n.endswith((".cleaned", ".swap")))


def swap_steps(tmp_path) -> tuple[list[tuple[str, str, int]], list, list]:
    """The swap's seam calls in a clean run: (operation, first path, how many calls of that
    operation on that path the commit made before), from its first rename of a ``.cleaned``
    file; and the records before and after."""
    fs = FaultFs()
    manager, log, snapshot_id = cleaned_round(tmp_path / "reference", fs)
    before = records(log)
    fs.tracing = True
    manager.commit_cleaned(snapshot_id)
    fs.tracing = False
    after = records(log)
    manager.shutdown()
    steps, started, earlier = [], False, Counter()
    for operation, paths in fs.trace:
        started = started or (operation == "replace" and paths[0].endswith(".cleaned"))
        if started and operation in ("replace", "fsync_dir") and "c-0" in paths[0]:
            steps.append((operation, paths[0], earlier[operation, paths[0]]))
        if started and operation == "fsync_dir":
            break
        earlier[operation, paths[0] if paths else ""] += 1
    return steps, before, after


def relative(path: str, data) -> str:
    return os.path.relpath(path, data)


@pytest.mark.slow  # 2 x 22 fresh logs, each cleaned, faulted and reloaded (about 4 s each)
@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EIO])
def test_a_swap_failing_at_any_step_completes_or_goes_offline_and_a_restart_recovers(tmp_path, error):
    steps, before, after = swap_steps(tmp_path)
    assert before != after
    assert [op for op, _, _ in steps] == ["replace"] * 21 + ["fsync_dir"]  # 2 new, 3 old segments
    for index, (operation, path, seen) in enumerate(steps):
        data = tmp_path / f"step-{index}"
        fs = FaultFs()
        manager, log, snapshot_id = cleaned_round(data, fs)
        reference = relative(path, tmp_path / "reference")
        target = str(data / reference)
        rule = fs.fail(operation, error, path=lambda p, want=target: p == want, skip=seen)
        with pytest.raises((ResourceExhaustedError, LogDirOfflineError)) as failed:
            manager.commit_cleaned(snapshot_id)
        assert rule.hits == 1, (index, operation, reference)
        fs.heal()
        if log.is_offline:
            with pytest.raises(LogDirOfflineError):  # never DATA_LOSS over a half-swapped map
                log.read(0, 2**24)
        else:  # only the first rename failing on a full disk: nothing was swapped
            assert index == 0 and error == errno.ENOSPC and isinstance(failed.value, ResourceExhaustedError)
            try:
                assert records(log) == before
            except CorruptSegmentError as exc:  # pragma: no cover - the failure this test exists for
                raise AssertionError(f"step {index}: a read answered DATA_LOSS while online: {exc}") from exc
            assert leftovers(data) == []
        manager.shutdown()
        restarted = start(data, fs)
        recovered = records(restarted.get_log("c", 0))
        assert recovered in (before, after), (index, operation, reference)
        assert leftovers(data) == [], (index, operation, reference)
        restarted.shutdown()


def live_files(data) -> list[str]:
    return sorted(n for n in os.listdir(data / "c-0") if n.endswith((".log", ".index", ".timeindex")))


@pytest.mark.parametrize("where", ["second-segment-rename", "directory-sync"])
def test_a_non_io_error_after_the_first_rename_takes_the_log_offline_and_deletes_no_live_file(tmp_path, where):
    """Not only OSError can fail a swap half done (a BufferError from an mmap close while the
    old segments are scheduled for deletion, a ValueError from the descriptor budget): any
    failure after the first rename leaves old and new segments side by side, so the log goes
    offline and the files stay for the next start to complete or roll back. The built segments
    are deleted only while they still carry ``.cleaned`` (nothing swapped yet): after the
    directory sync they are live under their final names."""
    steps, before, after = swap_steps(tmp_path / "reference")
    fs = FaultFs()
    data = tmp_path / "data"
    manager, log, snapshot_id = cleaned_round(data, fs)
    if where == "directory-sync":  # the swap's own sync, after every rename
        operation, _, seen = steps[-1]
        assert operation == "fsync_dir"
        rule = fs.fail("fsync_dir", 0, path=lambda p: p.endswith("c-0"), skip=seen, raises=ValueError("injected: not I/O"))
    else:  # the first segment's three renames done
        rule = fs.fail("replace", 0, path=lambda p: "c-0" in p, skip=3, raises=BufferError("injected: not I/O"))
    with pytest.raises(LogDirOfflineError, match="half done"):
        manager.commit_cleaned(snapshot_id)
    assert rule.hits == 1 and log.is_offline
    fs.heal()
    if where == "directory-sync":  # swapped whole: the new segments' files are the live ones
        assert leftovers(data) == []
        assert len(live_files(data)) == 3 * 3  # 2 cleaned segments and the active one
    manager.shutdown()
    restarted = start(data, fs)
    recovered = records(restarted.get_log("c", 0))
    assert recovered in ((after,) if where == "directory-sync" else (before, after))
    assert leftovers(data) == []
    restarted.shutdown()
