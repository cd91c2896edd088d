"""LeaderEpochCache: a partition's (leader epoch, start offset) entries and their checkpoint file
(Kafka's ``LeaderEpochFileCache``, kafka-storage.md 1.3, 4.4, 5.3, 5.8, 5.9).

In cluster mode the owner of a partition stamps its ownership epoch (etcd's, bumped at every
ownership change) into the ``partitionLeaderEpoch`` of each batch it appends; this cache records
the first offset of each epoch, so ``end_offset_for(epoch)`` says where an epoch's records end.

The rules (Kafka's):

- ``assign(epoch, start_offset)``: only a new epoch, or the latest epoch at a lower offset,
  changes anything; entries at or after it (an epoch >= it, or a start offset >= its) are dropped
  first, so epochs and start offsets both always increase. Written to the file at once (fsync):
  the append path assigns before it writes the batch, so the file never misses an epoch the log
  holds (one that the log lost in a crash is cut at load by ``truncate_from_end``).
- ``truncate_from_end(end_offset)``: a truncation of the log drops the entries starting at or
  after it.
- ``truncate_from_start(start_offset)``: the log start moved up (retention, DeleteRecords): the
  entries wholly below it go and the last of them starts at ``start_offset`` instead.

A single process stamps nothing and assigns nothing: its cache stays empty and writes no file.

Loading (``load_leader_epoch_cache``) trusts the file only after its checks
(leader_epoch_checkpoint.py); a file that fails them is reported (a warning naming the file and
the fault) and rebuilt from the log's own batches: every complete batch's ``partitionLeaderEpoch``
is read, and each epoch (>= 0) above the latest starts an entry at its batch's base offset (Kafka's
recovery rule, 4.4). Then the entries are cut to the log's end and start offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import NamedTuple

from ..base.errors import CorruptCheckpointError, CorruptRecordError
from ..base.fs import REAL_FS, FileSystem
from ..format.file_records import HeaderField
from ..format.leader_epoch_checkpoint import EpochEntry, LeaderEpochCheckpointFile
from ..segment.log_segment import LogSegment

__all__ = ["UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "EpochEntry", "LeaderEpochCache", "load_leader_epoch_cache"]

_LOG = logging.getLogger(__name__)

# Kafka's OffsetsForLeaderEpoch sentinels: no epoch known / no end offset known.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EndOffset(NamedTuple):
    epoch: int
    end_offset: int


class LeaderEpochCache:
    """The entries, in epoch order, and the file they are written to. Not thread-safe: the log
    calls it under its lock."""

    def __init__(self, checkpoint: LeaderEpochCheckpointFile, entries: Iterable[EpochEntry] = (), *,
                 rebuilt_because: str | None = None) -> None:
        self._checkpoint = checkpoint
        self._entries: list[EpochEntry] = []
        for entry in entries:
            self._entries = _with_entry(self._entries, EpochEntry(*entry), self.path)
        # Why the load rebuilt the entries from the log (the file's fault); None when it did not.
        self.rebuilt_because = rebuilt_because
        # The last entry's epoch (None: no entry), a plain attribute: every cluster-mode append
        # compares its epoch with it.
        self.latest_epoch: int | None = self._entries[-1].epoch if self._entries else None
        # The file still holds entries memory dropped (a truncation whose write failed): the
        # next assign rewrites it before any record is appended past the cut.
        self.stale = False

    @property
    def path(self) -> str:
        return self._checkpoint.path

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None


    # -- changes ------------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Records that ``epoch`` starts at ``start_offset``; writes the file when anything
        changed. Returns whether it did."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset}): both must be >= 0")
        entries = _with_entry(self._entries, EpochEntry(epoch, start_offset), self.path)
        if entries is self._entries and not self.stale:
            return False
        self._replace(entries)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drops the entries starting at or after ``end_offset`` (a truncation of the log)."""
        kept = [entry for entry in self._entries if entry.start_offset < end_offset]
        if end_offset < 0 or len(kept) == len(self._entries):
            return False
        self._replace(kept, cut=True)
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log starts at ``start_offset`` now: entries wholly below it go, and the last entry
        at or below it starts there (exclusive of ``start_offset``: an entry there is kept)."""
        below = [entry for entry in self._entries if entry.start_offset <= start_offset]
        if not below or (len(below) == 1 and below[0].start_offset == start_offset):
            return False
        self._replace([EpochEntry(below[-1].epoch, start_offset)] + self._entries[len(below):], cut=True)
        return True

    def clear(self) -> bool:
        if not self._entries:
            return False
        self._replace([], cut=True)
        return True

    # -- questions ----------------------------------------------------------------------------
    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EndOffset:
        """Kafka's ``endOffsetFor``: the largest known epoch <= ``requested_epoch`` and the offset
        its records end at (the next epoch's start, or the log end for the latest epoch); an
        epoch below every entry answers the first entry's start offset; an unknown one
        (UNDEFINED_EPOCH, or above the latest) answers (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)."""
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries:
            return EndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        if requested_epoch == entries[-1].epoch:
            return EndOffset(requested_epoch, log_end_offset)
        higher = next((entry for entry in entries if entry.epoch > requested_epoch), None)
        if higher is None:
            return EndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        floor = [entry for entry in entries if entry.epoch <= requested_epoch]
        if not floor:
            return EndOffset(requested_epoch, higher.start_offset)
        return EndOffset(floor[-1].epoch, higher.start_offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` was appended under, as far as the entries say."""
        found = None
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    # -- inside -------------------------------------------------------------------------------
    def _replace(self, entries: list[EpochEntry], *, cut: bool = False) -> None:
        """The file first, then memory: a failed write (OSError) leaves both as they were, so a
        retried append assigns its epoch again instead of finding it in memory only. A ``cut``
        (the log lost records: a truncation, a new log start) is memory first, since the records
        are gone whatever the file says: a failed write raises with the file ``stale``, which
        the next assign rewrites (and a load cuts to the log anyway)."""
        if cut:
            self._set(entries)
            self.stale = True
        self._checkpoint.write(entries)
        self._set(entries)
        self.stale = False

    def _set(self, entries: list[EpochEntry]) -> None:
        self._entries = entries
        self.latest_epoch = entries[-1].epoch if entries else None


def _with_entry(entries: list[EpochEntry], entry: EpochEntry, path: str) -> list[EpochEntry]:
    """Kafka's assign over a copy: ``entries`` itself when nothing changes, else a new list with
    the entries the new one contradicts dropped (an epoch >= its, or a start offset >= its)."""
    if entries and entries[-1].epoch == entry.epoch and entry.start_offset >= entries[-1].start_offset:
        return entries
    kept = list(entries)
    while kept and (kept[-1].epoch >= entry.epoch or kept[-1].start_offset >= entry.start_offset):
        dropped = kept.pop()
        if dropped.start_offset != entry.start_offset:
            _LOG.warning("%s: epoch entry %s replaces the conflicting entry %s", path, tuple(entry), tuple(dropped))
    kept.append(entry)
    return kept


def load_leader_epoch_cache(directory: str, segments: Iterable[LogSegment], *, log_start_offset: int,
                            log_end_offset: int, fs: FileSystem = REAL_FS,
                            rebuild_if_missing: bool = False) -> LeaderEpochCache:
    """The partition's cache as its file says, or rebuilt from ``segments`` when the file fails
    its checks; cut to ``[log_start_offset, log_end_offset)``. A missing file is an empty cache
    (a single process never writes one), unless ``rebuild_if_missing``: a log recovered from
    offset 0 (a partition a move installed from copied segments, a first load after a crash),
    whose recovery walks every batch anyway; the file is then written only if some batch
    carries an epoch. OSError from the disk propagates."""
    checkpoint = LeaderEpochCheckpointFile(directory, fs=fs)
    try:
        if rebuild_if_missing and not checkpoint.exists():
            entries = epochs_from_batches(segments)
            if entries:
                checkpoint.write(entries)
            return _cut(LeaderEpochCache(checkpoint, entries), log_start_offset, log_end_offset)
        cache = LeaderEpochCache(checkpoint, checkpoint.read())
    except CorruptCheckpointError as exc:
        _LOG.warning("%s cannot be trusted (%s); rebuilding it from the partitionLeaderEpoch of the log's "
                     "batches", checkpoint.path, exc)
        entries = epochs_from_batches(segments)
        checkpoint.write(entries)
        cache = LeaderEpochCache(checkpoint, entries, rebuilt_because=str(exc))
    return _cut(cache, log_start_offset, log_end_offset)


def _cut(cache: LeaderEpochCache, log_start_offset: int, log_end_offset: int) -> LeaderEpochCache:
    cache.truncate_from_end(log_end_offset)
    cache.truncate_from_start(log_start_offset)
    return cache


def epochs_from_batches(segments: Iterable[LogSegment]) -> list[EpochEntry]:
    """Kafka's recovery rule over every complete batch: an epoch (>= 0) above the latest seen
    starts an entry at the batch's base offset. Stops quietly at bytes no batch can be (the load
    already cut the log at its first invalid batch)."""
    entries: list[EpochEntry] = []
    latest = -1
    for segment in segments:
        try:
            for _, fields in segment.log.raw_headers():
                epoch = fields[HeaderField.PARTITION_LEADER_EPOCH]
                if epoch > latest:
                    latest = epoch
                    base_offset = fields[HeaderField.BASE_OFFSET]
                    if not entries or base_offset > entries[-1].start_offset:
                        entries.append(EpochEntry(epoch, base_offset))
        except CorruptRecordError as exc:
            _LOG.warning("leader epochs rebuilt up to %s only: %s", segment, exc)
            break
    return entries
