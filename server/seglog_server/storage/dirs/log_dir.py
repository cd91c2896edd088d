"""One configured log directory (a ``log.dirs`` entry): its lock, marker, checkpoints and children.

Layout (Kafka's, kafka-storage.md 1.1)::

    <log dir>/
      .lock                              held (flock) while a seglog process serves the directory
      .kafka_cleanshutdown               clean-shutdown marker (clean_shutdown.py)
      recovery-point-offset-checkpoint   per partition: first offset not known to be fsynced
      log-start-offset-checkpoint        per partition: log start offset, when above the first segment
      cleaner-offset-checkpoint          per compacted partition: first dirty offset (the cleaner)
      remote-deletion-checkpoint         per deleted tiered partition: objects still in the store
      instance.id                        cluster mode: this instance's id (cluster/instance_identity.py)
      <topic>-<partition>/               a partition (topic.properties + segments)
      <topic>-<partition>.<uuid32hex>-delete/   a partition whose deletion was interrupted
      .seglog-snapshots/<snapshot id>/   cleaning snapshots (log_snapshot.py); not scanned here

``LogDir`` does the file work; the log manager decides when. A directory is *online* until the
first ``OSError`` the manager sees on it; from then on nothing is written to it (no checkpoint, no
marker), so the next start-up recovers it in full.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..format.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REMOTE_DELETION_CHECKPOINT,
    CorruptCheckpointError,
    OffsetCheckpointFile,
    RemoteDeletionCheckpointFile,
)
from ..format.clean_shutdown import CLEAN_SHUTDOWN_FILE_NAME, CleanShutdownFile
from ..base.errors import LogDirStateError, StorageError
from ..base.fs import REAL_FS, FileSystem
from ..producers.producer_ids import PRODUCER_ID_BLOCK_FILE
from ..base.topic_partition import DirKind, TopicIdPartition, TopicPartition, parse_log_dir_name

# Cleaning snapshots (log_snapshot.py) live here; never a partition (a leading dot is not a
# legal topic name start seglog creates, and the name has no partition number).
SNAPSHOTS_DIR_NAME = ".seglog-snapshots"

__all__ = ["LOCK_FILE_NAME", "DirScan", "LogDir", "LogDirStateError", "remove_tree"]

_log = logging.getLogger(__name__)

LOCK_FILE_NAME = ".lock"
# Files a log directory may hold besides partition directories; never reported as strays.
_KNOWN_FILES = frozenset(
    {
        LOCK_FILE_NAME,
        CLEAN_SHUTDOWN_FILE_NAME,
        RECOVERY_POINT_CHECKPOINT,
        LOG_START_OFFSET_CHECKPOINT,
        CLEANER_OFFSET_CHECKPOINT,
        REMOTE_DELETION_CHECKPOINT,
        "replication-offset-checkpoint",  # Kafka's high watermarks, if a Kafka dir is reused
        "meta.properties",  # Kafka's broker identity, likewise
        "instance.id",  # the cluster instance's id, written in cluster mode (cluster/instance_identity.py)
        PRODUCER_ID_BLOCK_FILE,  # the producer ids reserved so far (producer_ids.py)
    }
)



@dataclass
class DirScan:
    """What a log directory holds, by kind of entry."""

    partitions: dict[TopicPartition, str] = field(default_factory=dict)  # tp -> path
    delete_dirs: list[str] = field(default_factory=list)  # paths of "-delete" leftovers
    ignored: list[str] = field(default_factory=list)  # names that are not seglog's


class LogDir:
    def __init__(self, path: str, *, fs: FileSystem = REAL_FS) -> None:
        self.path = os.path.abspath(path)
        self._fs = fs
        self.online = True
        self.offline_reason: str | None = None
        self.had_clean_shutdown = False
        self.load_completed = False
        self.checkpoint_read_error_count = 0
        self.pending_delete_dirs: list[str] = []
        self.ignored_entries: list[str] = []
        self.recovery_points: dict[TopicPartition, int] = {}
        self.log_start_offsets: dict[TopicPartition, int] = {}
        # Partitions of deleted tiered topics whose objects the store still holds -> deletion time.
        self.remote_deletions: dict[TopicIdPartition, int] = {}
        self.marker = CleanShutdownFile(self.path, fs=fs)
        self._recovery_point_file = OffsetCheckpointFile(
            os.path.join(self.path, RECOVERY_POINT_CHECKPOINT), fs=fs
        )
        self._log_start_offset_file = OffsetCheckpointFile(
            os.path.join(self.path, LOG_START_OFFSET_CHECKPOINT), fs=fs
        )
        self.cleaner_offset_file = OffsetCheckpointFile(
            os.path.join(self.path, CLEANER_OFFSET_CHECKPOINT), fs=fs
        )
        self._remote_deletion_file = RemoteDeletionCheckpointFile(
            os.path.join(self.path, REMOTE_DELETION_CHECKPOINT), fs=fs
        )
        self._lock_fd: int | None = None

    def __repr__(self) -> str:
        state = "online" if self.online else f"offline: {self.offline_reason}"
        return f"LogDir({self.path!r}, {state})"

    # -- start-up ----------------------------------------------------------------------------
    def open(self) -> None:
        """Creates and locks the directory, consumes the marker, reads the checkpoints.

        Raises OSError when the disk fails (the caller takes the directory offline) and
        LogDirStateError when another process serves it.
        """
        self._create()
        self._lock()
        # KAFKA-10471: the marker goes before any log is touched, so a crash while loading
        # makes the next start-up recover.
        self.had_clean_shutdown = self.marker.delete()
        self.recovery_points = self._read_checkpoint(self._recovery_point_file)
        self.log_start_offsets = self._read_checkpoint(self._log_start_offset_file)
        self.remote_deletions = self._read_checkpoint(self._remote_deletion_file)  # type: ignore[assignment]

    def _create(self) -> None:
        if self._fs.exists(self.path):
            return
        _log.info("log directory %s not found, creating it", self.path)
        self._fs.makedirs(self.path)
        self._fs.fsync_dir(os.path.dirname(self.path))

    def _lock(self) -> None:
        fd = self._fs.open(os.path.join(self.path, LOCK_FILE_NAME), os.O_RDWR | os.O_CREAT)
        try:
            # flock, not the fs seam: a lock is process state, not file content to fault.
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fs.close(fd)
            raise LogDirStateError(
                f"failed to lock {self.path}/{LOCK_FILE_NAME}: another seglog process "
                f"is using this log directory"
            ) from None
        except BaseException:
            self._fs.close(fd)
            raise
        self._lock_fd = fd

    def unlock(self) -> None:
        """Releases the directory lock (closing the fd drops the flock); idempotent."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is None:
            return
        try:
            self._fs.close(fd)
        except OSError as exc:
            _log.warning("closing the lock of %s failed: %s", self.path, exc)

    def _read_checkpoint(self, checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        """The file's entries; an unreadable file (any bad byte is CorruptCheckpointError, never
        another error: checkpoint.py) is read as empty, which loses no stored record:

        - recovery-point-offset-checkpoint: every log recovers from its first segment (slower);
        - log-start-offset-checkpoint: every log starts at its first local segment, so every
          segment is kept (records a DeleteRecords hid below it are served again until the next
          DeleteRecords or retention; a tiered log learns its start from the store's listing);
        - remote-deletion-checkpoint: the objects of deleted tiered topics stay in the store (an
          operator removes them; nothing served is touched).

        (cleaner-offset-checkpoint is read by the cleaner, which likewise cleans from the start.)
        OSError propagates: the caller takes the directory offline.
        """
        try:
            return checkpoint.read()
        except CorruptCheckpointError as exc:
            self.checkpoint_read_error_count += 1
            _log.warning("%s; proceeding as if it were empty", exc)
            return {}

    def scan(self) -> DirScan:
        """Classifies the entries of the directory; raises OSError if it cannot be listed."""
        scan = DirScan()
        for name in sorted(self._fs.listdir(self.path)):
            if name in _KNOWN_FILES or name.endswith(".tmp") or name == SNAPSHOTS_DIR_NAME:
                continue
            path = os.path.join(self.path, name)
            if not os.path.isdir(path):
                scan.ignored.append(name)
                continue
            try:
                parsed = parse_log_dir_name(name)
            except StorageError as exc:
                _log.warning("ignoring %s in log directory %s: %s", name, self.path, exc)
                scan.ignored.append(name)
                continue
            if parsed.kind == DirKind.LIVE:
                scan.partitions[parsed.topic_partition] = path
            elif parsed.kind == DirKind.DELETE:
                scan.delete_dirs.append(path)
            else:
                # Kafka's replica-move and stray directories: seglog never makes them, and
                # deleting data it does not understand is not its call.
                _log.warning("ignoring Kafka %s directory %s", parsed.kind, path)
                scan.ignored.append(name)
        self.ignored_entries = scan.ignored
        return scan

    # -- running -----------------------------------------------------------------------------
    def take_offline(self, reason: str) -> None:
        if self.online:
            _log.error("log directory %s is offline: %s", self.path, reason)
        self.online = False
        self.offline_reason = reason
        self.unlock()

    def write_recovery_points(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._recovery_point_file.write(offsets)

    def write_log_start_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._log_start_offset_file.write(offsets)

    def write_remote_deletions(self, deletions: Mapping[TopicIdPartition, int]) -> None:
        """Replaces the pending remote deletions (atomically: the old list or the new one)."""
        self._remote_deletion_file.write(deletions)
        self.remote_deletions = dict(deletions)

    def remove_pending_delete_dirs(self) -> int:
        """Removes "-delete" directories; those that fail stay pending. Returns how many went."""
        removed = 0
        still_pending = []
        for path in self.pending_delete_dirs:
            try:
                remove_tree(path, self._fs)
                removed += 1
            except FileNotFoundError:
                removed += 1
            except OSError as exc:
                _log.warning("could not remove %s yet: %s", path, exc)
                still_pending.append(path)
        self.pending_delete_dirs = still_pending
        if removed:
            self._fs.fsync_dir(self.path)
        return removed

    def schedule_delete_dirs(self, paths: Iterable[str]) -> None:
        self.pending_delete_dirs.extend(paths)


def remove_tree(path: str, fs: FileSystem) -> None:
    """Deletes ``path`` and everything below it through the fs seam (no symlink following)."""
    for name in fs.listdir(path):
        child = os.path.join(path, name)
        if os.path.isdir(child) and not os.path.islink(child):
            remove_tree(child, fs)
        else:
            try:
                fs.unlink(child)
            except FileNotFoundError:
                pass
    try:
        fs.rmdir(path)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
