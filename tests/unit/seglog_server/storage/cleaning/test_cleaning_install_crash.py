"""A crash at every step of CommitCleaned's install, then a restart: the partition holds either
its old segments or the new ones, never a mix, never a loss; when it is the old ones, the same
result still commits after the restart.

The crash is injected through the fs seam: from the k-th write-like operation of the commit on
(link, unlink, rename, fsync, truncate, write, mtime change, directory creation), every one fails,
as if the process had died there; then the manager is halted (no flush, no checkpoint, no marker)
and a new one starts on the same directory with the real file system."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import LogDirOfflineError, SnapshotNotFoundError, StaleCleaningResultError
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals

from tests.support.cleaning_support import hand_clean
from test_log_cleaner_manager import COMPACT, NOW_MS, fill, replay

EVERY_PASS = MaintenanceIntervals(0, 0, 0, 0, 0)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class DyingFS(FileSystem):
    """Counts the test thread's write-like operations; from the ``die_at``-th on, every one
    (background roll flushes included) raises EIO. Background threads are not counted, so the
    step numbers of the commit do not depend on when a roll's flush happened to run."""

    def __init__(self) -> None:
        self.count = 0
        self.die_at: int | None = None
        self.dead = False
        self.steps: list[str] = []

    def _step(self, name: str, path: object = "") -> None:
        if threading.current_thread() is threading.main_thread():
            self.count += 1
            self.steps.append(f"{name} {os.path.basename(str(path))}")
            if self.die_at is not None and self.count >= self.die_at:
                self.dead = True
        if self.dead:
            raise OSError(errno.EIO, f"injected crash at step {self.count} ({name})", str(path))

    def open(self, path, flags, mode=0o644):
        if flags & _WRITE_FLAGS:
            self._step("open-for-write", path)
        return super().open(path, flags, mode)

    def pwrite(self, fd, data, position):
        self._step("pwrite")
        return super().pwrite(fd, data, position)

    def pwritev(self, fd, buffers, position):
        self._step("pwritev")
        return super().pwritev(fd, buffers, position)

    def fsync(self, fd):
        self._step("fsync")
        super().fsync(fd)

    def fdatasync(self, fd):
        self._step("fdatasync")
        super().fdatasync(fd)

    def ftruncate(self, fd, size):
        self._step("ftruncate")
        super().ftruncate(fd, size)

    def replace(self, src, dst):
        self._step("rename", f"{os.path.basename(src)}->{os.path.basename(dst)}")
        super().replace(src, dst)

    def link(self, src, dst):
        self._step("link", dst)
        super().link(src, dst)

    def unlink(self, path):
        self._step("unlink", path)
        super().unlink(path)

    def rmdir(self, path):
        self._step("rmdir", path)
        super().rmdir(path)

    def makedirs(self, path):
        self._step("makedirs", path)
        super().makedirs(path)

    def set_mtime_ms(self, path, mtime_ms):
        self._step("utime", path)
        super().set_mtime_ms(path, mtime_ms)

    def fsync_dir(self, path):
        self._step("fsync-dir", path)
        super().fsync_dir(path)


def prepared(directory, fs):
    """A manager on ``fs`` with a filled compacted log, a snapshot and its hand-cleaned result."""
    clock = FakeClock(NOW_MS)
    manager = LogManager([str(directory)], clock=clock, fs=fs, intervals=EVERY_PASS)
    manager.startup()
    manager.create_topic("c", 1, COMPACT)
    log = manager.get_log("c", 0)
    fill(log, rounds=4, keys=3, segment_rounds=2)
    log.flush()
    taken = manager.create_snapshot("c", 0)
    hand_clean(taken.path)
    return manager, log, taken


def restarted(directory):
    manager = LogManager([str(directory)], clock=FakeClock(NOW_MS), intervals=EVERY_PASS)
    manager.startup()
    return manager


def test_a_crash_at_every_install_step_leaves_old_or_new_segments(tmp_path):
    reference_fs = DyingFS()
    manager, log, taken = prepared(tmp_path / "reference", reference_fs)
    old = replay(log)
    old_files = sorted(os.listdir(log.dir))
    first_step = reference_fs.count + 1
    manager.commit_cleaned(taken.manifest.snapshot_id)
    new = replay(log)
    step_count = reference_fs.count - first_step + 1
    manager.shutdown()
    assert new != old and step_count > 20, reference_fs.steps[first_step - 1 :]

    outcomes = []
    for step in range(1, step_count + 1):
        fs = DyingFS()
        directory = tmp_path / f"crash{step}"
        manager, log, taken = prepared(directory, fs)
        fs.die_at = fs.count + step
        with pytest.raises(LogDirOfflineError):
            manager.commit_cleaned(taken.manifest.snapshot_id)
        manager.halt()
        again = restarted(directory)
        try:
            log = again.get_log("c", 0)
            found = replay(log)
            where = f"crash at step {step}: {fs.steps[fs.die_at - 1]}"
            assert found in (old, new), where
            leftovers = [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap", ".deleted"))]
            assert leftovers == [], where
            if found == old:
                assert sorted(os.listdir(log.dir)) == old_files, where
                again.commit_cleaned(taken.manifest.snapshot_id)  # the result still applies
                assert replay(log) == new, where
            else:  # refused: already installed (or the half-removed snapshot went at start-up)
                with pytest.raises((StaleCleaningResultError, SnapshotNotFoundError)):
                    again.commit_cleaned(taken.manifest.snapshot_id)
            outcomes.append(found == new)
        finally:
            again.shutdown()
    # Early crashes roll back, late ones roll forward, and the switch happens once.
    assert outcomes[0] is False and outcomes[-1] is True
    assert outcomes == sorted(outcomes)
