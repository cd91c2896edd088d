"""LocalLog: one partition's segments and their files (Kafka's ``LocalLog``, section 5).

What the files need, and nothing of offsets' meaning: the segment map and the one re-entrant
lock guarding it, roll mechanics (open the new segment's files, seal the old), reads and the
two-level offset lookup across segments, the flush (which segments, their fdatasyncs outside
the lock, the directory), truncation of the segment map, delayed deletion (``.deleted`` files
unlinked after file.delete.delay.ms), the compaction swap, close, and the offline state an I/O
error leaves. ``UnifiedLog`` (unified_log.py) holds the offsets and the policies (validation,
producer state, when to flush and the recovery point, retention, DeleteRecords, the offsets of
a truncation) and calls in here under the same lock.

The compaction swap is two explicit operations of ``UnifiedLog``: ``snapshot_segments`` (the
range's segments checked and hard-linked under one lock, segment_views.py) and
``swap_segments`` (here: the expected old segments for the new ones, checked and swapped under
one acquisition of the lock; any failure once the first rename is done takes the log offline).
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..base import file_names
from ..base.clock import Clock
from ..base.errors import (
    CorruptRecordError,
    CorruptSegmentError,
    LogDirOfflineError,
    StaleCleaningResultError,
    StorageError,
)
from ..base.fs import FileSystem
from ..base.io_errors import exhaustion_error
from ..base.log_config import LogConfig
from ..base.observer import OBSERVER, stopwatch
from ..format.lost_offsets import LostOffsets
from ..segment.log_segment import LogSegment
from ..segment.log_segments import LogSegments
from ..segment.open_segments import OpenSegments
from ..segment.segment_timestamps import SegmentTimestamps

__all__ = ["FlushPlan", "LocalLog", "roll_jitter_ms"]

_LOG = logging.getLogger(__name__)


def roll_jitter_ms(config: LogConfig, rng: random.Random) -> int:
    """Kafka's randomSegmentJitter: uniform in [0, min(segment.jitter.ms, segment.ms))."""
    if config.segment_jitter_ms <= 0:
        return 0
    return rng.randrange(min(config.segment_jitter_ms, config.segment_ms))


@dataclass(frozen=True)
class FlushPlan:
    """What one flush syncs (``LocalLog.plan_flush``), chosen under the lock."""

    segments: list[LogSegment]
    log_only: LogSegment | None  # holds the new recovery point: its log synced, not its indexes
    new_files: bool  # a segment begins at or above the recovery point: sync the directory too
    truncation_epoch: int  # as the plan saw it: a truncation since leaves the recovery point


class LocalLog:
    """The segments of partition ``name`` in ``directory``. Every method expects ``lock`` held
    (it is re-entrant; the public ones of ``UnifiedLog`` take it), except ``try_release_handles``
    and ``sync_segment``, which take it themselves."""

    def __init__(
        self,
        directory: str,
        name: str,
        config: LogConfig,
        segments: LogSegments[LogSegment],
        *,
        clock: Clock,
        fs: FileSystem,
        rng: random.Random,
        open_segments: OpenSegments,
        lost_offsets: LostOffsets,
    ) -> None:
        assert segments, "a log always has an active segment"
        self.dir = directory
        self.name = name
        self.config = config
        self.segments = segments
        self.lock = threading.RLock()
        self.timestamps = SegmentTimestamps()
        self.lost_offsets = lost_offsets
        self._clock = clock
        self._fs = fs
        self._rng = rng
        self._open_segments = open_segments
        self._pending_deletes: list[tuple[int, LogSegment]] = []  # (due time ms, segment)
        self.closed = False
        # Set by stop_changes() before the final flush: nothing may change the log after the
        # flush a shutdown relies on (an append there would be acknowledged yet unsynced under
        # a clean-shutdown marker). Reads and the flush go on; close() follows.
        self.closing = False
        self.offline_cause: BaseException | None = None
        # Bumped by every truncation: a flush that saw it change while its fsyncs ran (outside
        # the lock) leaves the recovery point alone, since offsets it meant to cover were cut
        # and may have been written again, unsynced.
        self.truncation_epoch = 0
        # What the last whole-log flush made durable (``files_state``): a whole-log flush that
        # finds the same state has nothing new to sync and returns without a single fdatasync.
        self.fully_synced_state: tuple[int, int, int, int] | None = None
        self.exhausted = False  # a resource ran out (disk, descriptors) and no append succeeded since
        # statistics
        self.read_count = 0
        self.read_bytes = 0
        self.roll_counts: Counter[str] = Counter()
        self.deleted_segment_count = 0
        self.retired_warm_lookups = 0
        self.retired_cold_lookups = 0

    @property
    def fs(self) -> FileSystem:
        return self._fs

    # -- the offline state --------------------------------------------------------------------
    def check_usable(self) -> None:
        if self.offline_cause is not None:
            raise LogDirOfflineError(
                f"log {self.name} in {self.dir} is offline after an I/O error: {self.offline_cause}"
            )
        if self.closed:
            raise StorageError(f"log {self.name} in {self.dir} is closed")

    def check_changeable(self) -> None:
        self.check_usable()
        if self.closing:
            raise LogDirOfflineError(
                f"log {self.name} is shutting down: nothing more is written to it; retry on a "
                f"running service"
            )

    def io_error(self, action: str, exc: OSError, *, sync: bool = False) -> StorageError:
        """The error to raise for ``exc``: a retriable ``ResourceExhaustedError`` when the disk
        is full or descriptors ran out (the log stays online: each write path fails before it
        changes anything), else ``LogDirOfflineError``, and the log goes offline. A failed
        fsync (``sync``) is a failure even on ENOSPC: the kernel may have dropped the pages; only
        EMFILE/ENFILE (from the open before a sync, io_errors.py) stays retriable there."""
        exhausted = exhaustion_error(exc, f"{action} partition {self.name}", sync=sync)
        if exhausted is not None:
            if not self.exhausted:  # once per episode, not once per refused request
                self.exhausted = True
                _LOG.warning("%s: %s", self.name, exhausted)
            return exhausted
        self.offline_cause = exc
        return LogDirOfflineError(f"I/O error while {action} log {self.name} in {self.dir}: {exc}")

    def corrupt(self, what: str, exc: Exception) -> CorruptSegmentError:
        return CorruptSegmentError(f"partition {self.name}: stored data is corrupt where {what} looked: {exc}")

    # -- roll -----------------------------------------------------------------------------------
    def roll(self, new_offset: int, reason_text: str) -> LogSegment:
        """A new active segment at ``new_offset`` (the log end offset), the old one sealed."""
        active = self.segments.active
        if new_offset in self.segments:
            if active.base_offset != new_offset or active.size_in_bytes != 0:
                raise StorageError(
                    f"{self.name}: cannot roll to a new segment at {new_offset}: a segment with "
                    f"that base offset already exists"
                )
            # KAFKA-6388: an empty active segment reported an index full; replace it.
            new_segment = self.create_and_delete_segment(new_offset, active)
        elif new_offset < active.base_offset:
            raise StorageError(
                f"{self.name}: cannot roll to offset {new_offset}, below the active segment's "
                f"base offset {active.base_offset}"
            )
        else:
            # The new segment's files first: if they cannot be created (a full disk), the active
            # segment has not been sealed and trimmed yet and takes the next append as before.
            new_segment = self._open_segment(new_offset)
            try:
                active.on_become_inactive_segment()
            except BaseException:
                new_segment.delete_if_exists()
                raise
            self.segments.add(new_segment)
            self.touch(active)
        self.roll_counts[reason_text] += 1
        self.timestamps.invalidate()
        return new_segment

    def _open_segment(self, base_offset: int) -> LogSegment:
        self._delete_stale_files(base_offset)
        return LogSegment.open(
            self.dir,
            base_offset,
            self.config,
            clock=self._clock,
            fs=self._fs,
            create=True,
            roll_jitter_ms=roll_jitter_ms(self.config, self._rng),
        )

    def _delete_stale_files(self, base_offset: int) -> None:
        for path in (
            file_names.log_path(self.dir, base_offset),
            file_names.offset_index_path(self.dir, base_offset),
            file_names.time_index_path(self.dir, base_offset),
        ):
            try:
                self._fs.unlink(path)
                _LOG.warning("%s: deleted stale file %s before rolling", self.name, path)
            except FileNotFoundError:
                pass

    def create_and_delete_segment(self, new_offset: int, old: LogSegment) -> LogSegment:
        """Replaces ``old`` with a new empty segment at ``new_offset`` (created first, so the
        log is never without an active segment)."""
        if new_offset == old.base_offset:
            old.change_file_suffixes("", file_names.DELETED_SUFFIX)
        new_segment = self.segments.add(self._open_segment(new_offset))
        if new_offset != old.base_offset:
            self.segments.remove(old.base_offset)
        self.schedule_delete([old])
        return new_segment

    # -- descriptors of inactive segments ------------------------------------------------------
    def touch(self, segment: LogSegment) -> None:
        self._open_segments.touch(segment, self)

    def forget(self, segment: LogSegment) -> None:
        self._open_segments.forget(segment)

    def try_release_handles(self, segment: LogSegment) -> bool:
        """For the descriptor budget: releases ``segment``'s handles unless this log is busy in
        another thread (then False; the budget tries another time)."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if not self.closed:
                segment.release_handles()
            return True
        finally:
            self.lock.release()

    # -- read -----------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, min_one_batch: bool, log_start_offset: int,
             log_end_offset: int) -> tuple[bytes, int]:
        """(whole batches from the one holding ``offset``, the offset after them); the caller
        checked ``offset`` against the log's range."""
        try:
            records, next_offset = self._read_segments(offset, max_bytes, min_one_batch, log_start_offset,
                                                       log_end_offset)
        except OSError as exc:
            raise self.io_error("reading", exc) from exc
        except CorruptRecordError as exc:
            raise self.corrupt(f"a read at offset {offset}", exc) from exc
        self.read_count += 1
        self.read_bytes += len(records)
        return records, next_offset

    def _read_segments(self, offset: int, max_bytes: int, min_one_batch: bool, log_start_offset: int,
                       log_end_offset: int) -> tuple[bytes, int]:
        segments = self.segments
        lost = self.lost_offsets
        lost.check(offset, log_start_offset, self.name)  # never step over lost offsets
        watch = stopwatch("fetch")
        segment = segments.floor(offset)
        if segment is None:  # below the first segment (a log start offset inside a gap)
            segment = segments.first
        watch.lap("segment_lookup")
        while segment is not None:
            self.touch(segment)
            following = segments.higher(segment.base_offset)
            # Every batch in the segments is below the high watermark (= log end offset), so
            # each segment may be read to its end. The read checks each batch against the
            # segment's offsets: None means the segment was walked whole and holds nothing at
            # or above ``offset`` (a gap compaction left), never that a length lied.
            limit = None if following is None else following.base_offset
            found = segment.read_with_next_offset(offset, max_bytes, None, min_one_batch, limit, watch)
            if segment.cut_on_first_use_bytes:
                # Its first-use check (this read, or an earlier use) cut its tail, and wrote the
                # offsets up to the next segment down before the cut (LogSegment.defer_check):
                # never step over them.
                lost.check(offset, log_start_offset, self.name)
            if found is not None:
                if watch.observing:
                    # How far behind the log end this read starts: offsets, and bytes of log
                    # after it (the rest of its segment, read to its end, and every later one).
                    behind_bytes = segment.last_read_rest_bytes
                    if following is not None:
                        behind_bytes += sum(s.size_in_bytes for s in segments.higher_segments(segment.base_offset))
                    OBSERVER.current.read_age(log_end_offset - offset, behind_bytes)
                return found
            segment = following
        return b"", offset

    def position_of(self, offset: int) -> tuple[int, int] | None:
        """(segment base offset, byte position) of the batch holding ``offset`` or, in a gap,
        the next batch; None past the last batch. Both lookup levels, no data read."""
        segment = self.segments.floor(offset)
        while segment is not None:
            self.touch(segment)
            following = self.segments.higher(segment.base_offset)
            limit = None if following is None else following.base_offset
            try:
                header = segment.translate_offset(offset, offset_limit=limit)
            except CorruptRecordError as exc:
                raise self.corrupt(f"a lookup of offset {offset}", exc) from exc
            if header is not None:
                return segment.base_offset, header.position
            segment = following
        return None

    # -- flush (UnifiedLog decides when, and the recovery point) --------------------------------
    def files_state(self, log_end_offset: int) -> tuple[int, int, int, int]:
        """Changes whenever a whole-log flush would have something new to sync: an append (log
        end offset), a roll (active segment), a truncation or a swap (epoch, segment count)."""
        return (self.truncation_epoch, log_end_offset, self.segments.active.base_offset, len(self.segments))

    def plan_flush(self, recovery_point: int, flush_to: int, *, holding_offset: int | None) -> FlushPlan:
        """The segments holding offsets in [``recovery_point``, ``flush_to``), chosen under the
        lock. The segment holding ``holding_offset`` (the new recovery point) is recovered
        (reindexed) after a crash anyway: only its log needs the fsync, not its indexes. None (a
        whole-log flush): every index, since a clean shutdown marker may follow, and with it no
        reindexing."""
        segments = self.segments.values(recovery_point, flush_to)
        return FlushPlan(
            segments=segments,
            log_only=None if holding_offset is None else self.segments.floor(holding_offset),
            new_files=any(segment.base_offset >= recovery_point for segment in segments),
            truncation_epoch=self.truncation_epoch,
        )

    def flush(self, plan: FlushPlan) -> None:
        """Kafka's LocalLog.flush, outside the lock (appends go on meanwhile): fdatasyncs each
        planned segment's files (``sync_segment``), then the directory when files are new since
        the recovery point. A failed sync takes the log offline (``io_error(sync=True)``)."""
        watch = stopwatch("flush")
        try:
            for segment in plan.segments:
                self.sync_segment(segment, with_indexes=segment is not plan.log_only)
            if plan.new_files:
                self.sync_dir()
            watch.lap("fsync")
        except OSError as exc:  # from a sync: an open's failures were raised as StorageError
            with self.lock:
                raise self.io_error("flushing", exc, sync=True) from exc

    def sync_segment(self, segment: LogSegment, *, with_indexes: bool) -> None:
        """fdatasyncs the segment's files (its log only, without ``with_indexes``) through
        descriptors opened for the purpose under the lock: the segment's own may be released
        (or its number reused) while the sync runs, outside the lock."""
        with self.lock:
            if self.segments.get(segment.base_offset) is not segment:
                return  # deleted or replaced meanwhile: nothing of it is left to make durable
            descriptors = []
            try:
                paths = segment.files_to_sync()  # (creates an active segment's index files)
                if not with_indexes:
                    paths = paths[:1]
                for path in paths:
                    descriptors.append(self._fs.open(path, os.O_RDONLY))
            except BaseException as exc:
                for fd in descriptors:
                    self._fs.close(fd)
                if isinstance(exc, OSError):
                    # Nothing was synced yet, so nothing can have been lost: a full disk (an
                    # index file to create) or no descriptor left is retriable, like an append.
                    raise self.io_error("opening files to flush", exc) from exc
                raise
        try:
            for fd in descriptors:
                # fdatasync: the data and the size needed to read it back, not the mtime (a log
                # append changes both; skipping the mtime saves a journal commit per flush here).
                # It also writes back pages dirtied through an index mapping.
                self._fs.fdatasync(fd)
        finally:
            for fd in descriptors:
                self._fs.close(fd)

    def sync_dir(self) -> None:
        self._fs.fsync_dir(self.dir)

    # -- truncation (UnifiedLog moves the offsets and the producer state) -----------------------
    def truncate_to(self, target_offset: int) -> None:
        """Kafka's LocalLog.truncateTo: the segments above ``target_offset`` deleted, the one
        holding it cut there and active again. The caller checked that a segment holds it."""
        self.truncation_epoch += 1
        self.remove_and_delete(self.segments.higher_segments(target_offset))
        self.forget(self.segments.active)  # inactive until now: active again
        self.segments.active.truncate_to(target_offset)
        self.timestamps.invalidate()

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Every segment deleted and one new empty segment at ``new_offset`` (created before the
        last old one goes, so the log is never without an active segment)."""
        self.truncation_epoch += 1
        segments = self.segments.values()
        self.remove_and_delete(segments[:-1])
        self.create_and_delete_segment(new_offset, segments[-1])
        self.timestamps.invalidate()

    # -- delayed deletion -----------------------------------------------------------------------
    def remove_and_delete(self, segments: Sequence[LogSegment]) -> None:
        for segment in segments:
            self.segments.remove(segment.base_offset)
        self.schedule_delete(segments)
        self.timestamps.invalidate()

    def schedule_delete(self, segments: Sequence[LogSegment]) -> None:
        """Renames the segments' files to ``.deleted``; ``delete_due_files`` unlinks them once
        file.delete.delay.ms has passed. Their descriptors close now, as Kafka closes a
        segment's handles when it schedules the deletion: out of the map they are out of the
        open-segment budget too, and a minute of them (two cleanings and a read sweep) ran the
        process out of descriptors. A read of the log from now on never reaches them (the log
        start offset moved, or the segment was replaced); one holding the segment already (a
        cleaning snapshot describing it) reopens the renamed files on its next use."""
        due_ms = self._clock.time_ms() + self.config.file_delete_delay_ms
        for segment in segments:
            self.forget(segment)
            try:
                if not segment.has_suffix(file_names.DELETED_SUFFIX):
                    segment.change_file_suffixes("", file_names.DELETED_SUFFIX)
            finally:
                segment.release_handles()
                segment.drop_batch_directory()  # out of the directories' budget now, not at the unlink
            self._pending_deletes.append((due_ms, segment))
            self.deleted_segment_count += 1

    def delete_due_files(self) -> int:
        """Unlinks the ``.deleted`` segments whose delay has passed; returns how many."""
        now_ms = self._clock.time_ms()
        due = [segment for due_ms, segment in self._pending_deletes if due_ms <= now_ms]
        self._pending_deletes = [(due_ms, s) for due_ms, s in self._pending_deletes if due_ms > now_ms]
        for segment in due:
            stats = segment.statistics()
            self.retired_warm_lookups += stats.warm_lookup_count
            self.retired_cold_lookups += stats.cold_lookup_count
            segment.delete_if_exists()
        return len(due)

    @property
    def pending_delete_count(self) -> int:
        return len(self._pending_deletes)

    # -- the compaction swap --------------------------------------------------------------------
    def open_cleaned_segment(self, base_offset: int, *, create: bool = False) -> LogSegment:
        """A segment over ``<base>.log.cleaned`` and its indexes in this log's directory; with
        ``create``, new empty files (stale ``.cleaned`` files of that base are replaced)."""
        if create:
            for path in (
                file_names.log_path(self.dir, base_offset, file_names.CLEANED_SUFFIX),
                file_names.offset_index_path(self.dir, base_offset, file_names.CLEANED_SUFFIX),
                file_names.time_index_path(self.dir, base_offset, file_names.CLEANED_SUFFIX),
            ):
                try:
                    self._fs.unlink(path)
                except FileNotFoundError:
                    pass
        return LogSegment.open(
            self.dir,
            base_offset,
            self.config,
            clock=self._clock,
            fs=self._fs,
            suffix=file_names.CLEANED_SUFFIX,
            create=create,
        )

    def swap_segments(self, expected_old: Sequence[LogSegment], new_segments: Sequence[LogSegment]) -> None:
        """Swaps ``new_segments`` (complete and flushed ``.cleaned`` segments) in for
        ``expected_old`` with Kafka's crash-safe protocol (6.6): rename the new ones
        ``.cleaned`` -> ``.swap`` from the highest base offset down, rename the old ones
        ``.deleted``, then ``.swap`` -> final names and fsync the directory. A crash at any point
        is rolled back or forward by the next load; any failure once the first rename is done
        takes the log offline. First, under the same acquisition of the lock: the expected
        segments must still be the live ones of their range (the very objects, in offset order,
        none added between them), else StaleCleaningResultError and nothing changes."""
        if not new_segments or not expected_old:
            raise ValueError(f"{self.name}: a swap needs at least one old and one new segment")
        with self.lock:
            self.check_changeable()
            self._check_live(expected_old)
            active = self.segments.active
            if any(segment is active for segment in expected_old) or any(
                segment.base_offset >= active.base_offset for segment in new_segments
            ):
                raise StorageError(
                    f"{self.name}: the active segment (base offset {active.base_offset}) cannot be "
                    f"replaced; replacements must lie below it"
                )
            ordered_new = sorted(new_segments, key=lambda segment: segment.base_offset)
            ordered_old = sorted(expected_old, key=lambda segment: segment.base_offset)
            try:
                for segment in reversed(ordered_new):
                    segment.change_file_suffixes(file_names.CLEANED_SUFFIX, file_names.SWAP_SUFFIX)
                    self.segments.add(segment)
                for segment in ordered_old:
                    if segment.base_offset != ordered_new[0].base_offset:
                        if self.segments.get(segment.base_offset) is segment:
                            self.segments.remove(segment.base_offset)
                    self.schedule_delete([segment])
                for segment in ordered_new:
                    segment.change_file_suffixes(file_names.SWAP_SUFFIX, "")
                    self.touch(segment)
                self._fs.fsync_dir(self.dir)
            except BaseException as exc:
                if all(segment.has_suffix(file_names.CLEANED_SUFFIX) for segment in ordered_new):
                    # The first rename failed: nothing was swapped, a full disk is retriable.
                    if isinstance(exc, OSError):
                        raise self.io_error("replacing segments of", exc) from exc
                    raise
                offline = self._swap_failed(exc)
                if not isinstance(exc, Exception):
                    raise  # (a KeyboardInterrupt, a cancellation: the log is offline all the same)
                raise offline from exc
            finally:
                self.timestamps.invalidate()
                self.fully_synced_state = None  # a whole-log flush after it syncs every file again

    def _check_live(self, expected_old: Sequence[LogSegment]) -> None:
        """StaleCleaningResultError unless ``expected_old`` are exactly the live segments from
        the first one's base offset to the last one's (a retention pass, a truncation or
        another swap since they were chosen replaced or removed some)."""
        ordered = sorted(expected_old, key=lambda segment: segment.base_offset)
        live = self.segments.values(ordered[0].base_offset, ordered[-1].base_offset + 1)
        if len(live) != len(ordered) or any(a is not b for a, b in zip(live, ordered)):
            changed = next((e.base_offset for e in ordered if self.segments.get(e.base_offset) is not e),
                           ordered[0].base_offset)
            raise StaleCleaningResultError(
                f"{self.name}: the segments to replace are no longer the live ones: segment {changed} was "
                f"deleted or replaced since they were chosen (retention, a truncation or another cleaning)"
            )

    def _swap_failed(self, exc: BaseException) -> LogDirOfflineError:
        """A swap that failed half done, whatever the failure (an OSError of any errno, or
        anything else once the first rename is done: a BufferError from an mmap close while the
        old segments are scheduled for deletion, a bug): the segment map and the files hold old
        and new segments side by side (overlapping offsets a read would answer as DATA_LOSS),
        and only the loader's swap recovery (6.6) sorts that out. So the log goes offline, as
        Kafka's does on any IOException, and the next start completes the swap (``.swap``
        files below the lowest ``.cleaned``) or rolls it back."""
        self.offline_cause = exc
        what = "I/O error" if isinstance(exc, OSError) else f"{type(exc).__name__}"
        _LOG.error("%s: replacing segments failed half done (%s: %s); the log is offline until a restart "
                   "completes or rolls back the swap", self.name, what, exc)
        return LogDirOfflineError(
            f"{what} while replacing segments of log {self.name} in {self.dir}, half done: {exc}; "
            f"the next start completes or rolls back the swap"
        )

    # -- life cycle -----------------------------------------------------------------------------
    def close(self, failure: BaseException | None = None) -> None:
        """Closes every segment (final time-index entry, trimmed and unmapped indexes); raises
        ``failure`` or the first segment's failure once all are closed."""
        for segment in self.segments.values():
            self.forget(segment)
            try:
                segment.close()
            except Exception as exc:  # close the others, then say the log did not close
                failure = failure or exc
                segment.close_handlers()
        for _, segment in self._pending_deletes:
            segment.close_handlers()
        if failure is not None:
            raise failure

    def close_handlers(self) -> None:
        """Closes descriptors and mappings without writing anything."""
        self.closed = True
        for segment in self.segments.values():
            self.forget(segment)
            segment.close_handlers()
        for _, segment in self._pending_deletes:
            segment.close_handlers()
