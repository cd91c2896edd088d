"""A tiered log's remote side (Kafka's ``RemoteLogManager`` for one partition): which closed
segments are in the object store, copying the next ones, and the whole log's retention over them.

- **Upload** (``upload_pass``): closed segments above the highest uploaded offset, oldest first,
  through ``RemoteStorageManager.copy_log_segment`` (state records, create-only objects). It runs
  in the log manager's maintenance pass on the storage pool, outside the log's lock: a closed
  segment's files never change, and a tiered log deletes a local segment only once it is
  uploaded, so nothing removes a file being copied (a topic deletion may: the copy then fails and
  leaves an orphan). The store failing (``RemoteStorageUnavailableError``) stops the pass and
  backs off exponentially (1 s doubling to 60 s); produce and local reads never wait for it.
- **The highest uploaded offset** is derived from ``RemoteLogMetadata.list()`` when the tier
  loads, then kept in memory. The tier loads on the uploader's pass, not when the log opens (a
  silent store never holds up a start); until the log took its first listing (``listed``) it answers
  UNAVAILABLE whatever depends on its log start (reads below the local start, EARLIEST, lookups
  by time, DeleteRecords: ``UnifiedLog._remote_start_unknown``).
- **Whole-log retention** (``retention_pass``): remote segments below the log start offset, or
  beyond retention.bytes (remote bytes below the local log plus the local log), or older than
  retention.ms go: the log start offset moves first (no read is answered from a segment about to
  go), then DELETE_SEGMENT_STARTED -> objects -> DELETE_SEGMENT_FINISHED -> record removed.
- **Reads** (``read``): the segment holding an offset, its offset index (whole, through the chunk
  cache), then the bytes by ranged GETs through the ``RemoteChunkCache``; lookups by time
  (remote_timestamps.py) read the ``.timeindex`` the same way.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..base.clock import Clock
from ..base.errors import CorruptRemoteObjectError, RemoteStorageError, RemoteStorageUnavailableError
from ..base.topic_partition import TopicIdPartition
from ..remote.remote_chunk_cache import RemoteChunkCache
from ..remote.remote_segment_metadata import RemoteLogSegmentMetadata
from ..remote.remote_storage_manager import LogSegmentData, RemoteStorageManager
from .lookup_explain import NOT_FOUND, LookupExplanation

__all__ = ["BACKOFF_INITIAL_MS", "BACKOFF_MAX_MS", "RemoteLogTier", "RemoteRetention"]

_log = logging.getLogger(__name__)

# Kafka's remote.log.manager.copier retry: 100 ms doubling to 30 s; here 1 s doubling to 60 s,
# since a pass runs at the maintenance interval (about a second) anyway.
BACKOFF_INITIAL_MS = 1_000
BACKOFF_MAX_MS = 60_000
# A batch header up to its last offset delta (base offset 8, length 4, epoch 4, magic 1, crc 4,
# attributes 2, last offset delta 4): what a walk to the batch holding an offset reads of each.
_HEADER_PEEK = 27
_REMOTE_ENTRIES_CHECKED = 3  # an uploaded offset index's entries checked before the segment's start


@dataclass(frozen=True)
class RemoteRetention:
    """What a whole-log retention pass decided: the segments to delete and the new log start."""

    segments: list[RemoteLogSegmentMetadata]
    new_log_start_offset: int


class RemoteLogTier:
    def __init__(self, rsm: RemoteStorageManager, tp: TopicIdPartition, clock: Clock,
                 cache: RemoteChunkCache | None = None, *, checkpoint_log_start_offset: int = 0) -> None:
        self._rsm = rsm
        # The topic id keys the partition's objects: this generation's only (remote_log_metadata.py).
        self.topic_id_partition = tp
        self._topic, self._partition = tp.topic, tp.partition
        self._clock = clock
        self._cache = cache
        # The log start offset of the checkpoint the log loaded with: the log start once the
        # remote segments are known may be below the local log's (attach_remote_tier).
        self.checkpoint_log_start_offset = checkpoint_log_start_offset
        self._lock = threading.Lock()  # the remote segment list and the backoff
        self._segments: list[RemoteLogSegmentMetadata] | None = None  # None: not loaded yet
        self._stale = False  # reload(): read the list again at the next load
        self._attached_listing = False  # listed: only UnifiedLog.attach_remote_tier sets it
        self._failures = 0
        self._lying_indexes: set[str] = set()  # remote segments whose offset index disagreed with the log
        self._next_attempt_ms = 0
        self.uploaded_segment_count = 0
        self.uploaded_bytes = 0
        self.last_error: str | None = None
        # The last listing's error when it was this partition's own (a corrupt record), not the
        # store's silence: what an answer waiting for the list names.
        self.listing_error: str | None = None

    # -- what is remote ---------------------------------------------------------------------------
    def load(self) -> bool:
        """Read the partition's COPY_SEGMENT_FINISHED records (once); False while the store is
        down (the caller retries at its next pass). Any other store error (a corrupt record,
        access refused) is this partition's own: raised, after the same backoff."""
        with self._lock:
            if self._segments is not None and not self._stale:
                return True
        try:
            found = self._rsm.metadata.list(self.topic_id_partition)
        except RemoteStorageUnavailableError as exc:
            self._failed(exc)
            return False
        except RemoteStorageError as exc:
            self._failed(exc)
            with self._lock:
                self.listing_error = str(exc)
            raise
        with self._lock:
            if self._segments is None or self._stale:
                self._segments = sorted(found, key=lambda m: m.base_offset)
                self._stale = False
            self.listing_error = None
        return True

    def reload(self) -> None:
        """The next ``load`` reads the segment list from the store again (a partition this
        instance just became the owner of: its previous owner uploaded meanwhile); reads use the
        list known until then."""
        with self._lock:
            self._stale = True

    def mark_listed(self) -> None:
        """The log took this tier's list (under its lock): see ``listed``."""
        self._attached_listing = True

    @property
    def loaded(self) -> bool:
        return self._segments is not None and not self._stale

    @property
    def listed(self) -> bool:
        """Whether the log holding this tier took a segment list read from the store since its
        open (the log start and every answer below the local log start need it; a stale one,
        see ``reload``, still answers). Set by ``UnifiedLog.attach_remote_tier`` under the log's
        lock once the log start is set from the list, never by ``load`` alone: between the two
        the log would answer from its local start what the list is about to change."""
        return self._attached_listing

    def segments(self) -> list[RemoteLogSegmentMetadata]:
        with self._lock:
            return list(self._segments or ())

    @property
    def highest_uploaded_offset(self) -> int:
        """The last offset of the newest uploaded segment; -1 when none (or not loaded)."""
        with self._lock:
            return self._segments[-1].end_offset if self._segments else -1

    @property
    def earliest_offset(self) -> int | None:
        with self._lock:
            return self._segments[0].base_offset if self._segments else None

    # -- upload -----------------------------------------------------------------------------------
    def backing_off(self) -> bool:
        with self._lock:
            return self._clock.time_ms() < self._next_attempt_ms

    def _failed(self, exc: RemoteStorageError) -> None:
        with self._lock:
            self._failures += 1
            delay = min(BACKOFF_INITIAL_MS * 2 ** (self._failures - 1), BACKOFF_MAX_MS)
            self._next_attempt_ms = self._clock.time_ms() + delay
            self.last_error = str(exc)
        _log.warning("%s-%d: object store call failed, next attempt in %d ms: %s",
                     self._topic, self._partition, delay, exc)

    def upload_pass(self, candidates: Callable[[int], list[LogSegmentData]]) -> int:
        """Copy the closed segments ``candidates(highest uploaded offset)`` names, oldest first;
        returns how many were copied. Stops at the first failure and backs off."""
        if self.backing_off() or not self.load():
            return 0
        copied = 0
        for data in candidates(self.highest_uploaded_offset):
            try:
                metadata = self._rsm.copy_log_segment(self.topic_id_partition.topic_id, data)
            except (RemoteStorageError, OSError) as exc:
                # OSError: the segment's files went (its topic was deleted): an orphan remains.
                self._failed(exc if isinstance(exc, RemoteStorageError)
                             else RemoteStorageUnavailableError(f"reading {data.log_path}: {exc}"))
                break
            with self._lock:
                assert self._segments is not None
                self._segments.append(metadata)
                self._failures, self._next_attempt_ms, self.last_error = 0, 0, None
            self.uploaded_segment_count += 1
            self.uploaded_bytes += metadata.segment_bytes
            copied += 1
        return copied

    # -- whole-log retention ----------------------------------------------------------------------
    def plan_retention(self, *, log_start_offset: int, local_start_offset: int, local_bytes: int,
                       retention_ms: int, retention_bytes: int) -> RemoteRetention | None:
        """The oldest remote segments the whole log's retention deletes (wholly below the local
        log, so a segment still held locally goes with the local one's own rules)."""
        remote = [m for m in self.segments() if m.end_offset < local_start_offset] if self.loaded else []
        if not remote:
            return None
        now_ms = self._clock.time_ms()
        total = local_bytes + sum(m.segment_bytes for m in remote)
        doomed: list[RemoteLogSegmentMetadata] = []
        for metadata in remote:
            below_start = metadata.end_offset < log_start_offset
            beyond_bytes = retention_bytes >= 0 and total - metadata.segment_bytes >= retention_bytes
            too_old = retention_ms >= 0 and now_ms - metadata.max_timestamp_ms > retention_ms
            if not (below_start or beyond_bytes or too_old):
                break
            doomed.append(metadata)
            total -= metadata.segment_bytes
        if not doomed:
            return None
        following = remote[len(doomed)].base_offset if len(doomed) < len(remote) else local_start_offset
        return RemoteRetention(doomed, max(log_start_offset, following))

    def delete(self, segments: list[RemoteLogSegmentMetadata]) -> int:
        """Delete ``segments`` (the log start already moved past them); returns how many went.
        A failure leaves DELETE_SEGMENT_STARTED, an orphan ``cleanup_orphans`` removes."""
        with self._lock:
            gone = {m.segment_id for m in segments}
            self._segments = [m for m in self._segments or () if m.segment_id not in gone]
        deleted = 0
        for metadata in segments:
            if self._cache is not None:
                for kind in ("", ".index", ".timeindex"):
                    self._cache.invalidate(metadata.segment_id + kind)
            try:
                self._rsm.delete_log_segment(metadata)
            except RemoteStorageError as exc:
                self._failed(exc)
                break
            deleted += 1
        return deleted

    # -- reads ------------------------------------------------------------------------------------
    def segment_for(self, offset: int) -> RemoteLogSegmentMetadata | None:
        with self._lock:
            segments = self._segments or []
            slot = bisect.bisect_right([m.base_offset for m in segments], offset) - 1
            if slot >= 0 and segments[slot].base_offset <= offset <= segments[slot].end_offset:
                return segments[slot]
            return None

    def position_for(self, metadata: RemoteLogSegmentMetadata, offset: int) -> int:
        """The byte position in the segment's log of the last index entry at or below ``offset``
        (0 when none): the remote offset index, read whole once per segment. An uploaded index
        is trusted as far as the log agrees (as LogSegment._search_from_entry trusts a local
        one): the batch at the entry's position must start at or below the entry's offset, or
        the batches between would be skipped. An entry that disagrees (a rotted offset or
        position) is passed over for an earlier one, at most ``_REMOTE_ENTRIES_CHECKED`` of them
        (one header read each, through the chunk cache the read then uses), then the segment's
        start."""
        index = self.index_of(metadata, ".index")
        relative = offset - metadata.base_offset
        candidates: list[tuple[int, int]] = []  # the last entries at or below offset, in index order
        for entry in range(len(index) // 8):
            entry_relative = int.from_bytes(index[entry * 8:entry * 8 + 4], "big")
            entry_position = int.from_bytes(index[entry * 8 + 4:entry * 8 + 8], "big")
            if entry_relative == 0 and entry_position == 0 and entry > 0:
                break  # the preallocated tail
            if entry_relative > relative:
                break
            candidates.append((entry_relative, entry_position))
            if len(candidates) > _REMOTE_ENTRIES_CHECKED:
                del candidates[0]
        for entry_relative, entry_position in reversed(candidates):
            if not entry_position or self._batch_starts_within(metadata, entry_position, entry_relative):
                return entry_position
            if metadata.segment_id in self._lying_indexes:
                continue
            self._lying_indexes.add(metadata.segment_id)  # said once a segment, not by every read
            _log.warning("remote segment %s of %s-%d: its offset index entry (offset %d, position %d) disagrees "
                         "with its log; searched from an earlier entry", metadata.segment_id, self._topic,
                         self._partition, metadata.base_offset + entry_relative, entry_position)
        return 0

    def _batch_starts_within(self, metadata: RemoteLogSegmentMetadata, position: int, entry_relative: int) -> bool:
        """Whether a v2 batch held whole by the segment starts at ``position``, at or below the
        entry's offset and at or above the segment's base offset: one header read."""
        if position + _HEADER_PEEK > metadata.segment_bytes:
            return False
        header = self.read_bytes(metadata, position, _HEADER_PEEK)
        if len(header) < _HEADER_PEEK:
            return False
        base = int.from_bytes(header[0:8], "big")
        length = int.from_bytes(header[8:12], "big", signed=True)
        return (header[16] == 2 and 0 < length and position + 12 + length <= metadata.segment_bytes
                and metadata.base_offset <= base <= metadata.base_offset + entry_relative)

    def explain(self, offset: int) -> LookupExplanation:
        """ExplainLookup of ``offset`` below the local log start: the remote segment holding it,
        the position its offset index gives, then batch headers (ranged reads through the chunk
        cache) to the batch holding it. Store errors propagate, as a read's do."""
        started = time.perf_counter()
        count = len(self.segments())
        metadata = self.segment_for(offset)
        if metadata is None:
            return LookupExplanation(count, NOT_FOUND, (), NOT_FOUND, NOT_FOUND, NOT_FOUND, 0,
                                     time.perf_counter() - started)
        index_position = position = self.position_for(metadata, offset)
        found_offset = found_position = NOT_FOUND
        while position + _HEADER_PEEK <= metadata.segment_bytes:
            header = self.read_bytes(metadata, position, _HEADER_PEEK)
            base = int.from_bytes(header[0:8], "big")
            length = int.from_bytes(header[8:12], "big", signed=True)
            if length <= 0:
                raise CorruptRemoteObjectError(f"remote segment {metadata.segment_id} of {self._topic}-"
                                               f"{self._partition} holds a batch of length {length} at {position}")
            if base + int.from_bytes(header[23:27], "big", signed=True) >= offset:
                found_offset, found_position = base, position
                break
            position += 12 + length
        scanned = found_position - index_position if found_position != NOT_FOUND else 0
        return LookupExplanation(count, metadata.base_offset, (), index_position, found_offset, found_position,
                                 scanned, time.perf_counter() - started, remote_segment_id=metadata.segment_id)

    def index_of(self, metadata: RemoteLogSegmentMetadata, kind: str) -> bytes:
        """The segment's whole ``.index`` or ``.timeindex``, through the chunk cache (under the
        key ``<segment id><kind>``), so the indexes of many remote segments stay within the
        cache's bound instead of piling up."""
        size = metadata.files.get(kind, 0)
        if size == 0:
            return b""
        if self._cache is None:
            return self._rsm.fetch_index(metadata, kind)
        return self._cache.read(metadata.segment_id + kind, size, 0, size,
                                lambda first, last: self._rsm.fetch_index_range(metadata, kind, first, last))

    def read_bytes(self, metadata: RemoteLogSegmentMetadata, position: int, size: int) -> bytes:
        """``size`` bytes of the segment's log from ``position`` (clamped to its end)."""
        end = min(position + size, metadata.segment_bytes)
        if end <= position:
            return b""
        if self._cache is None:
            return self._rsm.fetch_log_segment(metadata, position, end - position)
        return self._cache.read(metadata.segment_id, metadata.segment_bytes, position, end - position,
                                lambda first, last: self._rsm.fetch_log_segment(metadata, first, last - first + 1))
