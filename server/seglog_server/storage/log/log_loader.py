"""Opening a partition directory: Kafka's ``LogLoader`` passes (kafka-storage.md 5.11, 6.6).

1. Temporary files: every ``*.deleted`` goes; ``*.swap`` files at or above the smallest
   ``*.cleaned`` base offset belong to a replacement that never finished renaming to ``.swap``
   and go with every ``*.cleaned`` (the replacement is rolled back).
2. Swap completion: the remaining ``.swap`` segments were all renamed, so the replacement is
   rolled forward: every other file with an offset in [smallest swap base, largest swap next
   offset) is a replaced original and is deleted, then each ``.swap`` takes its final name.
3. Segments: index files without a ``.log`` are deleted; every ``.log`` becomes a lazy segment
   (nothing opened or mapped); a segment missing an index file is recovered (reindexed) now.
   Every segment that recovery will not rebuild anyway has its index files sanity-checked by
   their tails and its ``.log`` walked from the last index entry to the end of the file
   (``segment_check.py``): the last segment now, the others on first use; a segment whose
   files disagree is recovered. The marker
   never lets a log start whose next offset already exists in a file.
4. After an unclean shutdown, segments from the one holding the recovery point on are recovered
   in order, each cut at its first torn or corrupt batch or at the first batch reaching the next
   segment's base offset. A cut does not end the log: the later segments are recovered too and
   kept. (Kafka deletes every segment after the first cut and lets the follower fetch them again
   from the leader; seglog has no replica, so that would delete acknowledged, CRC-valid records
   and then hand their offsets out again. The cut leaves a gap of offsets, never a reused one.)
   The gap is written down at once (lost_offsets.py): reads in it answer DATA_LOSS naming it,
   this load's and every later one's, until the log start offset moves past it.
5. A log whose segments end below the log start offset it was opened with (the
   log-start-offset checkpoint's) is not touched: the load raises ``CorruptCheckpointError``
   naming both offsets and the partition stays offline with every file kept. Kafka empties such a
   log (a follower behind its leader's log start fetches from there); a single copy cannot tell a
   rotted checkpoint digit from a DeleteRecords whose unflushed tail a power loss took, and
   guessing the first deletes every stored record. The operator's fix is in docs/reliability.md.
   An empty directory gets a first segment at the log start offset.
6. The active segment's indexes get their full ``segment.index.bytes`` back (trimmed at close).

So a clean shutdown costs one directory listing and one object per segment, plus three small
reads of the last segment (its index tails and a CRC walk of the log from its last index entry).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from ..base import file_names as names
from ..base.clock import Clock

from ..base.errors import CorruptCheckpointError, CorruptRecordError, InvalidOffsetError
from ..format.checkpoint import LOG_START_OFFSET_CHECKPOINT
from ..format.file_records import FileRecords, HeaderField
from ..base.fs import FileSystem
from ..base.log_config import LogConfig
from ..segment.log_segment import LogSegment
from ..segment.log_segments import LogSegments
from ..format.lost_offsets import LostOffsets
from ..segment.segment_check import check_indexes, check_tail

__all__ = ["LoadedLog", "LogLoader"]

_LOG = logging.getLogger(__name__)
# KRaft snapshot files share the .deleted suffix and are recovered elsewhere (Kafka skips them too).
_SNAPSHOT_DELETED_SUFFIX = ".checkpoint.deleted"
_OFFSET_MAX = 2**63 - 1


@dataclass
class LoadedLog:
    segments: LogSegments[LogSegment]
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    recovered_segment_count: int
    truncated_bytes: int
    lost_offsets: LostOffsets


class LogLoader:
    """Runs the load passes once over one partition directory."""

    def __init__(
        self,
        directory: str,
        config: LogConfig,
        *,
        clock: Clock,
        fs: FileSystem,
        had_clean_shutdown: bool,
        recovery_point: int,
        log_start_offset: int,
        roll_jitter_ms: Callable[[], int],
    ) -> None:
        self._dir = directory
        self._config = config
        self._clock = clock
        self._fs = fs
        self._had_clean_shutdown = had_clean_shutdown
        self._recovery_point = recovery_point
        self._log_start_offset = log_start_offset
        self._roll_jitter_ms = roll_jitter_ms
        self._segments: LogSegments[LogSegment] = LogSegments()
        self._recovered: dict[int, int] = {}  # base offset -> bytes truncated, for segments recovered
        self._truncated_bytes = 0
        self._lost: LostOffsets | None = None

    def load(self) -> LoadedLog:
        try:
            return self._load()
        except BaseException:
            for segment in self._segments.values():  # a failed load keeps no descriptor or mapping
                segment.close_handlers()
            raise

    def _load(self) -> LoadedLog:
        self._fs.makedirs(self._dir)
        self._lost = LostOffsets.read(self._dir, self._fs)
        swaps = self._remove_temp_files_and_collect_swaps()
        if swaps:
            self._complete_swaps(swaps)
        self._load_segment_files()
        self._check_segments()
        recovery_point, log_end_offset = self._recover_log()
        self._segments.active.resize_indexes(self._config.segment_index_bytes)
        for slot in range(len(self._segments) - 1):
            self._segments.at(slot).log.seal()  # inactive: read through a mapping once opened
        first_base = self._segments.at(0).base_offset
        return LoadedLog(
            segments=self._segments,
            log_start_offset=max(self._log_start_offset, first_base),
            recovery_point=recovery_point,
            log_end_offset=log_end_offset,
            recovered_segment_count=len(self._recovered),
            truncated_bytes=self._truncated_bytes,
            lost_offsets=self._lost,
        )

    # -- pass 1: temporary files ------------------------------------------------------------
    def _remove_temp_files_and_collect_swaps(self) -> list[str]:
        swaps: list[str] = []
        cleaned: list[str] = []
        min_cleaned = _OFFSET_MAX
        for name in self._fs.listdir(self._dir):
            if name.endswith(names.DELETED_SUFFIX) and not name.endswith(_SNAPSHOT_DELETED_SUFFIX):
                self._unlink(name)
            elif name.endswith(names.CLEANED_SUFFIX) and _has_offset(name):
                min_cleaned = min(min_cleaned, names.offset_from_name(name))
                cleaned.append(name)
            elif name.endswith(names.SWAP_SUFFIX) and _has_offset(name):
                swaps.append(name)
        valid = []
        for name in swaps:
            if names.offset_from_name(name) >= min_cleaned:
                _LOG.info("%s: deleting %s, part of a replacement that did not finish", self._dir, name)
                self._unlink(name)
            else:
                valid.append(name)
        for name in cleaned:
            self._unlink(name)
        return valid

    # -- pass 2: swap completion ------------------------------------------------------------
    def _complete_swaps(self, swaps: list[str]) -> None:
        min_swap, max_swap = _OFFSET_MAX, -1
        for name in swaps:
            if not names.is_log_file(names.replace_suffix(name, names.SWAP_SUFFIX, "")):
                continue
            base = names.offset_from_name(name)
            min_swap = min(min_swap, base)
            max_swap = max(max_swap, self._next_offset_of(os.path.join(self._dir, name), base))
        for name in self._fs.listdir(self._dir):
            if name.endswith(names.SWAP_SUFFIX) or not _has_offset(name):
                continue
            if min_swap <= names.offset_from_name(name) < max_swap:
                _LOG.info("%s: deleting %s, replaced by a swap segment", self._dir, name)
                self._unlink(name)
        for name in self._fs.listdir(self._dir):
            if name.endswith(names.SWAP_SUFFIX):
                path = os.path.join(self._dir, name)
                self._fs.replace(path, names.replace_suffix(path, names.SWAP_SUFFIX, ""))
        self._fs.fsync_dir(self._dir)

    def _next_offset_of(self, log_path: str, base_offset: int) -> int:
        """The next offset after a ``.log`` file's last batch, by a header walk (no index)."""
        records = FileRecords(log_path, fs=self._fs)
        next_offset = base_offset
        try:
            for _, fields in records.raw_headers(0):
                next_offset = fields[HeaderField.BASE_OFFSET] + fields[HeaderField.LAST_OFFSET_DELTA] + 1
        finally:
            records.close_handler()
        return next_offset

    # -- pass 3: segments -------------------------------------------------------------------
    def _load_segment_files(self) -> None:
        listing = sorted(self._fs.listdir(self._dir))
        present = set(listing)
        missing_index: list[LogSegment] = []
        for name in listing:
            if not _has_offset(name):
                continue
            if names.offset_from_name(name) > _OFFSET_MAX:
                # Not a file seglog (or Kafka) wrote; serving it would hand out offsets no
                # checkpoint, index or client can hold. The partition stays offline, untouched.
                raise CorruptRecordError(
                    f"{os.path.join(self._dir, name)}: the file name names offset "
                    f"{names.offset_from_name(name)}, above the largest offset {_OFFSET_MAX}"
                )
            prefix = names.filename_prefix(names.offset_from_name(name))
            if names.is_index_file(name):
                if prefix + names.LOG_SUFFIX not in present:
                    _LOG.warning("%s: deleting orphaned index file %s", self._dir, name)
                    self._unlink(name)
            elif names.is_log_file(name):
                segment = self._open_segment(names.offset_from_name(name))
                if prefix + names.INDEX_SUFFIX not in present or prefix + names.TIME_INDEX_SUFFIX not in present:
                    missing_index.append(segment)
                self._segments.add(segment)
        for segment in missing_index:  # once every segment is known: each is bounded by the next
            self._recover_segment(segment)

    def _check_segments(self) -> None:
        """The last segment's files are checked now (its tail sets the log end offset, so it
        must agree before any offset is handed out); every other trusted segment is checked on
        first use (``LogSegment.defer_check``). A segment whose files disagree is recovered.
        Segments that recovery after an unclean shutdown rebuilds anyway are not checked."""
        segments = self._segments.values()
        to_recover = set()
        if not self._had_clean_shutdown:
            to_recover = {s.base_offset for s in self._segments.values(self._recovery_point, _OFFSET_MAX)}
        for slot, segment in enumerate(segments):
            if segment.base_offset in self._recovered or segment.base_offset in to_recover:
                continue
            if slot < len(segments) - 1:
                following = segments[slot + 1].base_offset
                segment.defer_check(following, self._lost_recorder(following, segment))
                continue
            problem = check_indexes(segment.files, self._fs, None)
            if problem is None:
                problem, _ = check_tail(segment.files, self._fs)
            if problem is not None:
                _LOG.warning("%s: recovering %s although its files were trusted: %s", self._dir, segment, problem)
                self._recover_segment(segment)

    def _open_segment(self, base_offset: int, *, create: bool = False) -> LogSegment:
        return LogSegment.open(
            self._dir,
            base_offset,
            self._config,
            clock=self._clock,
            fs=self._fs,
            create=create,
            roll_jitter_ms=self._roll_jitter_ms(),
        )

    def _recover_segment(self, segment: LogSegment) -> int:
        following = self._next_base_offset(segment)
        before_cut = None if following is None else lambda end: self._note_lost(end, following, segment)
        truncated = segment.recover(following, before_cut)
        segment.release_handles()  # thousands may be recovered: keep no descriptor per segment
        self._recovered[segment.base_offset] = self._recovered.get(segment.base_offset, 0) + truncated
        self._truncated_bytes += truncated
        if truncated:
            _LOG.warning("%s: cut %d invalid bytes from the end of %s", self._dir, truncated, segment)
        return truncated

    # -- pass 4-5: recovery -----------------------------------------------------------------
    def _recover_log(self) -> tuple[int, int]:
        """Returns (recovery point, log end offset)."""
        if not self._had_clean_shutdown:
            self._recover_unflushed()
        log_end_offset = self._check_log_start_within_log_end()
        if not self._segments:
            self._segments.add(self._open_segment(self._log_start_offset, create=True))
        if self._had_clean_shutdown and log_end_offset is not None:
            return log_end_offset, log_end_offset
        if log_end_offset is None:
            log_end_offset = self._segments.active.read_next_offset()
        return min(self._recovery_point, log_end_offset), log_end_offset

    def _recover_unflushed(self) -> None:
        """Recovers every segment from the one holding the recovery point on. A segment cut
        short keeps the segments after it (see pass 4 in the module docstring): their batches
        were stored, acknowledged and are checked by their own recovery, and their offsets lie
        above everything left in the cut segment."""
        unflushed = self._segments.values(self._recovery_point, _OFFSET_MAX)
        for segment in unflushed:
            if segment.base_offset in self._recovered:
                continue  # reindexed in pass 3 already
            try:
                self._recover_segment(segment)
            except InvalidOffsetError:
                _LOG.warning("%s: invalid offsets in %s; emptying it", self._dir, segment)
                self._truncated_bytes += segment.truncate_to(segment.base_offset)
                following = self._next_base_offset(segment)
                if following is not None:
                    self._note_lost(segment.base_offset, following, segment)

    def _note_lost(self, start: int, end: int, segment: LogSegment) -> None:
        """[start, end): what a cut took from a segment that is not the last (lost_offsets.py)."""
        assert self._lost is not None
        self._lost.note_cut(start, end, self._log_start_offset, str(segment))

    def _lost_recorder(self, following: int, segment: LogSegment) -> Callable[[int], None]:
        """The ``before_cut`` of a segment checked on first use: a cut found then loses the
        offsets up to ``following`` just as one found now. The log start offset is the load's
        (a later DeleteRecords only makes part of the range an accepted loss, which the reads
        and the figures leave out and the file's next write drops)."""
        lost, log_start_offset = self._lost, self._log_start_offset
        assert lost is not None

        def record(start: int) -> None:
            lost.note_cut(start, following, log_start_offset, str(segment))

        return record

    def _next_base_offset(self, segment: LogSegment) -> int | None:
        """The base offset of the segment after ``segment`` (None for the last one): the offsets
        recovery may leave in ``segment`` stay below it."""
        later = self._segments.higher(segment.base_offset)
        return None if later is None else later.base_offset

    def _check_log_start_within_log_end(self) -> int | None:
        """The log end offset (None without segments); raises CorruptCheckpointError, touching
        nothing, when it is below the log start offset (pass 5 of the module docstring)."""
        if not self._segments:
            return None
        log_end_offset = self._segments.active.read_next_offset()
        if log_end_offset >= self._log_start_offset:
            return log_end_offset
        checkpoint = os.path.join(os.path.dirname(self._dir), LOG_START_OFFSET_CHECKPOINT)
        raise CorruptCheckpointError(  # load() closes what the passes opened
            f"{self._dir}: the log start offset {self._log_start_offset} ({checkpoint}) is above the "
            f"log end offset {log_end_offset} its segments hold (from offset {self._segments.first.base_offset}); "
            "every file is kept and the partition stays offline. Fix: set the partition's line in that "
            f"file to at most {log_end_offset}, or remove the line and lower the entry count on the file's "
            "second line by one to serve every record, then restart "
            "(docs/reliability.md)")

    def _unlink(self, name: str) -> None:
        try:
            self._fs.unlink(os.path.join(self._dir, name))
        except FileNotFoundError:
            pass


def _has_offset(name: str) -> bool:
    return name[:1].isdigit() and name.split(".", 1)[0].isdigit()
