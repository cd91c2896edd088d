"""The objects of removed exported snapshots, deleted off every lock and retried until the store
answers.

Removing an exported snapshot (commit, drop, expiry, DeleteTopic) has two halves: its local
directory, gone at once, and its objects under ``cleaning-snapshots/<id>/``, a LIST and a DELETE
of up to the store's deadline each. Expiry and DeleteTopic run under the manager's admin lock, so
the store half waits here instead: ``record`` writes a durable marker
``.seglog-snapshots/<id>.store-removal`` (before the local directory goes, so a crash cannot
forget the objects), and ``remove_due`` (the remote tier's thread, each pass) deletes the objects
and then the marker. A store that does not answer keeps the marker: the next pass, or the next
start (``load``), tries again, and each failure is logged.
"""

from __future__ import annotations

import logging
import os
import threading

from ..base.errors import RemoteStorageError, StorageError
from ..base.fs import FileSystem
from .log_snapshot import check_snapshot_id, snapshots_root
from .snapshot_store import SnapshotStore

__all__ = ["REMOVAL_MARKER_SUFFIX", "SnapshotRemovals"]

_log = logging.getLogger(__name__)

# A marker is a regular file named <snapshot id> + this suffix beside the snapshot directories
# (ids may hold dots, so a marker is told from a snapshot by being a file, not by its name).
REMOVAL_MARKER_SUFFIX = ".store-removal"


def marker_path(log_dir: str, snapshot_id: str) -> str:
    return os.path.join(snapshots_root(log_dir), snapshot_id + REMOVAL_MARKER_SUFFIX)


class SnapshotRemovals:
    """Snapshot ids whose objects are still to be deleted, each with the directory of its marker."""

    def __init__(self, store: SnapshotStore, fs: FileSystem) -> None:
        self._store = store
        self._fs = fs
        self._lock = threading.Lock()
        self._pending: dict[str, str] = {}  # snapshot id -> log directory holding its marker
        self.failure_count = 0

    def record(self, log_dir: str, snapshot_id: str) -> None:
        """Makes the removal durable (raises OSError: the caller keeps the snapshot then)."""
        self._fs.write_atomically(marker_path(log_dir, snapshot_id), b"")
        with self._lock:
            self._pending[snapshot_id] = log_dir

    def load(self, log_dir: str, file_name: str) -> str | None:
        """The snapshot id of a marker found at start-up (now pending again), else None."""
        if not file_name.endswith(REMOVAL_MARKER_SUFFIX):
            return None
        snapshot_id = file_name[: -len(REMOVAL_MARKER_SUFFIX)]
        try:
            check_snapshot_id(snapshot_id)
        except StorageError:  # not ours: the caller removes it as an incomplete file
            return None
        with self._lock:
            self._pending[snapshot_id] = log_dir
        return snapshot_id

    def pending(self) -> list[str]:
        with self._lock:
            return sorted(self._pending)

    def remove_due(self, only: str | None = None) -> int:
        """Deletes the objects of every pending snapshot (or of ``only``), then its marker; a
        store failure is logged and the snapshot stays pending. Returns how many were done."""
        with self._lock:
            due = [(i, d) for i, d in self._pending.items() if only is None or i == only]
        done = 0
        for snapshot_id, log_dir in due:
            done += self._remove(snapshot_id, log_dir)
        return done

    def _remove(self, snapshot_id: str, log_dir: str) -> bool:
        try:
            count = self._store.remove(snapshot_id)
        except RemoteStorageError as exc:
            with self._lock:
                self.failure_count += 1
            _log.warning("deleting the objects of cleaning snapshot %s failed (retried at the next remote "
                         "pass and at start-up): %s", snapshot_id, exc)
            return False
        try:
            self._fs.unlink(marker_path(log_dir, snapshot_id))
            self._fs.fsync_dir(snapshots_root(log_dir))
        except FileNotFoundError:
            pass  # another caller finished it
        except OSError as exc:
            # The objects are gone; a marker left behind only repeats an empty LIST at start.
            _log.warning("removing the store-removal marker of cleaning snapshot %s failed: %s", snapshot_id, exc)
        with self._lock:
            self._pending.pop(snapshot_id, None)
        _log.info("deleted %d objects of cleaning snapshot %s from the store", count, snapshot_id)
        return True
