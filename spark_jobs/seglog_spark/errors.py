"""Errors of the offline cleaner::

    CleanerError                   root: nothing was written (or what was written is incomplete,
    |                              and result.json, written last, is absent)
    +-- SnapshotError              the snapshot is not what its manifest says: missing or
    |                              malformed manifest, a segment missing, resized or with another
    |                              CRC-32C, batches outside the segment's range
    +-- UnsupportedBatchError      a transactional or control batch: seglog writes none, and
                                   cleaning them needs the producer and transaction state
                                   Kafka's cleaner keeps; the snapshot is refused, not guessed at
Corrupt batches raise seglog.records.CorruptRecordError (a CRC or layout problem), with the file
and position in the message.
"""

from __future__ import annotations

__all__ = ["CleanerError", "SnapshotError", "UnsupportedBatchError"]


class CleanerError(Exception):
    """Root of the cleaner's errors."""


class SnapshotError(CleanerError):
    """The snapshot directory or its manifest is unusable."""


class UnsupportedBatchError(CleanerError):
    """A batch the cleaner refuses to rewrite (transactional or control)."""
