"""The clean-shutdown marker ``.kafka_cleanshutdown`` of one log directory (Kafka's
``CleanShutdownFileHandler``).

Its *existence* says every log in the directory was flushed, closed and checkpointed by the last
shutdown, so loading may skip recovery. Its content (v0) is the JSON document
``{"version":0,"brokerEpoch":<n>}``; unreadable content only means "epoch unknown".

The protocol, kept by the log manager:
- start-up: if present, remember "clean" and delete it (durably) *before* loading any log, so a
  crash while loading counts as unclean next time (KAFKA-10471);
- shutdown: write it last, after the directory's logs are flushed, closed and checkpointed, and
  only if the directory was clean last time or all its logs finished loading in this run
  (KAFKA-15375: a directory whose load was cut short must not claim to be clean).
"""

from __future__ import annotations

import json
import os

from ..base.fs import REAL_FS, FileSystem
from ..base.json_document import INT64_MAX, read_json_document

__all__ = ["CLEAN_SHUTDOWN_FILE_NAME", "CLEAN_SHUTDOWN_VERSION", "NO_BROKER_EPOCH", "CleanShutdownFile"]

CLEAN_SHUTDOWN_FILE_NAME = ".kafka_cleanshutdown"
CLEAN_SHUTDOWN_VERSION = 0
# Kafka's LogManager.shutdown default when no broker epoch is known.
NO_BROKER_EPOCH = -1
# The marker is a few dozen bytes; anything larger is not ours.
_MARKER_BYTES_MAX = 4096


class CleanShutdownFile:
    def __init__(self, log_dir: str, *, fs: FileSystem = REAL_FS) -> None:
        self._dir = log_dir
        self._path = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE_NAME)
        self._fs = fs

    @property
    def path(self) -> str:
        return self._path

    def exists(self) -> bool:
        return self._fs.exists(self._path)

    def write(self, broker_epoch: int = NO_BROKER_EPOCH) -> None:
        """Writes the marker atomically and durably (file and directory fsynced)."""
        content = {"version": CLEAN_SHUTDOWN_VERSION, "brokerEpoch": int(broker_epoch)}
        data = json.dumps(content, separators=(",", ":")).encode("utf-8")
        self._fs.write_atomically(self._path, data)

    def delete(self) -> bool:
        """Removes the marker durably; returns whether it existed."""
        try:
            self._fs.unlink(self._path)
        except FileNotFoundError:
            return False
        # Without the directory fsync a crash could bring the marker back, and a later start-up
        # would skip recovery of logs this run already began to change.
        self._fs.fsync_dir(self._dir)
        return True

    def read_broker_epoch(self) -> int | None:
        """The broker epoch stored in the marker; None if absent or unreadable."""
        try:
            fd = self._fs.open(self._path, os.O_RDONLY)
        except OSError:
            return None
        try:
            data = self._fs.pread(fd, _MARKER_BYTES_MAX, 0)
        except OSError:
            return None
        finally:
            self._fs.close(fd)
        return _parse_broker_epoch(data)


class _UnreadableMarkerError(Exception):
    """The marker's content is not the document written (the bounded JSON reader's error)."""


def _parse_broker_epoch(data: bytes) -> int | None:
    try:
        content = read_json_document(data, CLEAN_SHUTDOWN_FILE_NAME, _UnreadableMarkerError,
                                     bytes_max=_MARKER_BYTES_MAX)
    except _UnreadableMarkerError:
        return None  # nesting that once raised RecursionError here, a 5000-digit epoch: unknown
    if not isinstance(content, dict):
        return None
    epoch = content.get("brokerEpoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not -INT64_MAX - 1 <= epoch <= INT64_MAX:
        return None
    return epoch
