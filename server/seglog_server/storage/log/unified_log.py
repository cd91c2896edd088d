"""UnifiedLog: one partition's log over its ``LocalLog`` (Kafka's UnifiedLog, section 5).

The offsets and the policies: validation and offsets of appends, idempotent producers, when
to flush and the recovery point, retention and DeleteRecords (their rules and the retention
pass: log_retention.py), the offsets of a truncation, statistics. The segments
and their files (roll mechanics, reads, the flush's syncs, cutting the segment map, delayed
deletion, the compaction swap, close, the offline state) are the ``LocalLog``'s (local_log.py),
and what the cleaner asks is answered in segment_views.py, all under the same lock. Its lookups
by time (``offset(s)_for_timestamp(s)``, ``lookup_timestamp*``, ``explain_timestamp``: local,
bounded and tiered) are ``LogTimeLookups`` (log_time_lookups.py), the mixin the class is built on.

Offsets: ``log_start_offset`` (first offset clients may read; moved by retention and
DeleteRecords), ``log_end_offset`` (next offset to assign), ``high_watermark`` (equal to the log
end offset: seglog has one replica) and ``recovery_point`` (first offset not known to be fsynced).

Every public method is thread-safe: a per-log re-entrant lock serialises appends, reads, rolls,
retention and truncation. fsync runs outside that lock (under a separate flush lock), so a flush
does not stall appends and concurrent flushes coalesce.

File I/O errors (``OSError``) from an append, read, roll or flush surface as
``LogDirOfflineError`` and leave the log offline: every later call raises the same error, and the
log manager takes the directory offline. Except an exhausted resource (a full disk, no descriptors
left; ``io_errors.py``): a retriable ``ResourceExhaustedError``, and the log stays online, since
every write path fails before it changes anything.

Descriptors: every segment used (active or not) is reported to an ``OpenSegments`` budget, shared
by all logs of a log manager, which releases the least recently used segments' handles.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from seglog.records import NO_TIMESTAMP, TimestampType

from ..base.clock import SYSTEM_CLOCK, Clock
from ..base.errors import (
    FencedLeaderEpochError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    RemoteStorageUnavailableError,
    StaleCleaningResultError,
    StorageError,
)
from ..base.fs import REAL_FS, FileSystem
from ..base.io_errors import is_exhaustion
from ..base.log_config import LogConfig
from .local_log import LocalLog, roll_jitter_ms
from .leader_epoch_cache import EndOffset, EpochEntry, LeaderEpochCache, load_leader_epoch_cache
from .log_loader import LogLoader
from .log_statistics import LogCounters, log_statistics, log_summary
from .log_results import (
    AppendInfo,
    FetchData,
    LogStatistics,
    LogSummary,
)
from ..segment.log_segment import LogSegment, RollReason, written_head
from .log_retention import delete_records_offset, retention_pass, tiered_retention_pass
from ..segment.log_segments import LogSegments
from .log_validator import LogValidator
from .log_time_lookups import INLINE_BUSY, INLINE_REFUSED, INLINE_UNLOADED, LogTimeLookups
from .lookup_explain import LookupExplanation, ResidentPages, explain_offset, no_residency
from ..base.observer import OBSERVER, stopwatch
from ..segment.open_segments import DEFAULT_OPEN_SEGMENTS_MAX, OpenSegments
from ..format.leader_epoch_checkpoint import LeaderEpochCheckpointFile, format_epochs
from ..format.lost_offsets import LostOffsets
from ..producers.producer_state import BatchMetadata, ProducerStateManager, ProducerStateStatistics
from ..producers.producer_state_loader import delete_snapshots_below, load_producer_state, take_snapshot
from ..producers.producer_snapshot import snapshot_path
from ..base import file_names
from .segment_views import (
    CleanableView,
    SegmentDescription,
    SegmentRange,
    SegmentsSnapshot,
    cleanable_view,
    describe_segment,
    segments_in_range,
    snapshot_segments,
)
if TYPE_CHECKING:  # boto3 (the remote extra) is loaded only where a store is configured
    from ..remote.remote_storage_manager import LogSegmentData
    from .remote_log_tier import RemoteLogTier

__all__ = [
    "INLINE_BUSY",
    "INLINE_REFUSED",
    "INLINE_UNLOADED",
    "AppendedBatch",
    "ChangeListener",
    "FlushScheduler",
    "Log",
    "UnifiedLog",
    "roll_jitter_ms",
]

_LOG = logging.getLogger(__name__)

FlushScheduler = Callable[[Callable[[], None]], None]
"""Runs a background flush (Kafka's scheduler.scheduleOnce("flush-log")): after a roll, the
segments below the new one are fsynced off the append path, advancing the recovery point."""

ChangeListener = Callable[..., None]
"""Told ``(topic, partition)`` after a log's offsets moved: an append moved the log end offset
(then ``(topic, partition, appended)``: the ``AppendedBatch`` just written),
a truncation moved it back, or DeleteRecords moved the log start offset. Long polls at the tail
wait on it (the rpc layer's AppendWaiters): the log announces its own changes, so an append
whose caller went away (a cancelled call, its append still running on a pool thread) wakes them
all the same. Called outside the log's lock, on whatever thread made the change; it must be
quick and thread-safe, and what it raises is logged, never the change's caller's failure."""


class AppendedBatch:
    """The batch an append just wrote, as the segment holds it, told to the change listener: a
    reader parked at its base offset serves it without reading the log again, through
    ``UnifiedLog.read_appended``, which answers only while nothing else changed the log since.
    Nothing keeps it but whoever was told: the log forgets it once the announcement returns."""

    __slots__ = ("_head", "_records", "_rest", "base_offset", "end_offset", "log", "size", "version")

    def __init__(self, log: UnifiedLog, version: int, base_offset: int, end_offset: int, head: bytes,
                 rest: memoryview) -> None:
        self.log = log
        self.version = version  # the log's change version right after this append
        self.base_offset = base_offset
        self.end_offset = end_offset  # one past its last offset: the log end offset it left
        self.size = len(head) + len(rest)  # the batch's bytes on disk
        self._head = head
        self._rest = rest
        self._records: bytes | None = None

    def records(self) -> bytes:
        """The batch's bytes on disk (built once, for every reader woken by it; on the event
        loop only, outside the log's lock: the parts never change)."""
        records = self._records
        if records is None:
            records = self._records = b"".join((self._head, self._rest))
            self._rest = memoryview(b"")
        return records


def _announceable(batch: memoryview, records: bytes | bytearray | memoryview) -> bool:
    """Whether the validated ``batch`` is a view of the immutable bytes ``records`` the append
    was given (then an AppendedBatch may keep a view of them for readers)."""
    source = records.obj if type(records) is memoryview else records
    return type(source) is bytes and batch.obj is source


# A v2 batch's header up to and including lastOffsetDelta (bytes 23..27).
BATCH_HEADER_PEEK = 27


def _flush_in_thread(task: Callable[[], None]) -> None:
    threading.Thread(target=task, name="seglog-roll-flush", daemon=True).start()


class UnifiedLog(LogTimeLookups):
    """One partition's log. Build with ``UnifiedLog.load``."""

    def __init__(
        self,
        directory: str,
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        segments: LogSegments[LogSegment],
        log_start_offset: int,
        recovery_point: int,
        log_end_offset: int,
        clock: Clock = SYSTEM_CLOCK,
        fs: FileSystem = REAL_FS,
        rng: random.Random | None = None,
        flush_scheduler: FlushScheduler = _flush_in_thread,
        open_segments_max: int = DEFAULT_OPEN_SEGMENTS_MAX,
        open_segments: OpenSegments | None = None,
        loaded_recovered_segment_count: int = 0,
        loaded_truncated_bytes: int = 0,
        producer_state: ProducerStateManager | None = None,
        lost_offsets: LostOffsets | None = None,
        leader_epochs: LeaderEpochCache | None = None,
    ) -> None:
        assert segments, "a log always has an active segment"
        assert log_start_offset <= log_end_offset and recovery_point <= log_end_offset
        self._dir = directory
        self._topic = topic
        self._partition = partition
        self._name = f"{topic}-{partition}"
        self._clock = clock
        self._fs = fs
        self._flush_scheduler = flush_scheduler
        # The process-wide descriptor budget when the log manager gives one; else a private one.
        self._local = LocalLog(
            directory, self._name, config, segments, clock=clock, fs=fs,
            rng=rng if rng is not None else random.Random(),
            open_segments=open_segments if open_segments is not None else OpenSegments(open_segments_max),
            lost_offsets=lost_offsets if lost_offsets is not None else LostOffsets(directory, fs),
        )
        self._segments = segments
        self._lock = self._local.lock  # the one lock: the LocalLog's, taken by every public method
        self._log_start_offset = log_start_offset
        self._log_end_offset = log_end_offset
        self._recovery_point = recovery_point
        self._last_flush_time_ms = clock.time_ms()
        self._flush_lock = threading.Lock()
        self._change_listener: ChangeListener | None = None
        # Moved under the lock by every append, roll and truncation: an AppendedBatch whose
        # version is still the log's is the last batch and still as written (read_appended).
        self._version = 0
        self._remote_tier: RemoteLogTier | None = None
        self._apply_config(config)
        # Idempotent producers' state (producer_state.py); UnifiedLog.load rebuilds it from the
        # snapshots and the log. A log built directly starts with none, at its log end offset.
        if producer_state is None:
            producer_state = ProducerStateManager(self._name)
            producer_state.reset(log_end_offset)
        self._producers = producer_state
        # Cluster mode's ownership epochs (leader_epoch_cache.py). ``_leader_epoch`` is the
        # partition's current epoch as this instance knows it; None in a single process, whose
        # appends carry no epoch and are neither stamped nor fenced.
        if leader_epochs is None:
            leader_epochs = LeaderEpochCache(LeaderEpochCheckpointFile(directory, fs=fs))
        self._leader_epochs = leader_epochs
        # A loaded cache's latest epoch is the floor: an append admitted under an older one than
        # the log already holds is refused, never allowed to cut the cache back.
        self._leader_epoch: int | None = leader_epochs.latest_epoch
        self._counters = LogCounters(
            loaded_recovered_segment_count=loaded_recovered_segment_count, loaded_truncated_bytes=loaded_truncated_bytes
        )
        with self._lock:
            for segment in segments.values():
                if segment.holds_handles:  # loading (or creating) opened it: count it
                    self._local.touch(segment)

    @classmethod
    def load(
        cls,
        dir: str,  # noqa: A002 - the contract's name
        topic: str,
        partition: int,
        config: LogConfig,
        *,
        clock: Clock = SYSTEM_CLOCK,
        fs: FileSystem = REAL_FS,
        had_clean_shutdown: bool,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        rng: random.Random | None = None,
        flush_scheduler: FlushScheduler = _flush_in_thread,
        open_segments_max: int = DEFAULT_OPEN_SEGMENTS_MAX,
        open_segments: OpenSegments | None = None,
    ) -> UnifiedLog:
        """Opens (or creates) the partition directory ``dir`` with Kafka's load passes."""
        rng = rng if rng is not None else random.Random()
        loaded = LogLoader(
            dir,
            config,
            clock=clock,
            fs=fs,
            had_clean_shutdown=had_clean_shutdown,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            roll_jitter_ms=lambda: roll_jitter_ms(config, rng),
        ).load()
        try:
            producers = load_producer_state(
                os.path.basename(dir), fs, dir, loaded.segments.values(),
                log_start_offset=loaded.log_start_offset,
                log_end_offset=loaded.log_end_offset,
                had_clean_shutdown=had_clean_shutdown,
                now_ms=clock.time_ms(),
                expiration_ms=config.producer_id_expiration_ms,
            )
            leader_epochs = load_leader_epoch_cache(
                dir, loaded.segments.values(), log_start_offset=loaded.log_start_offset,
                log_end_offset=loaded.log_end_offset, fs=fs,
                rebuild_if_missing=not had_clean_shutdown and recovery_point == 0)
        except BaseException:
            for segment in loaded.segments.values():
                segment.close_handlers()
            raise
        return cls(
            dir,
            topic,
            partition,
            config,
            segments=loaded.segments,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            log_end_offset=loaded.log_end_offset,
            clock=clock,
            fs=fs,
            rng=rng,
            flush_scheduler=flush_scheduler,
            open_segments_max=open_segments_max,
            open_segments=open_segments,
            loaded_recovered_segment_count=loaded.recovered_segment_count,
            loaded_truncated_bytes=loaded.truncated_bytes,
            producer_state=producers,
            lost_offsets=loaded.lost_offsets,
            leader_epochs=leader_epochs,
        )

    def _apply_config(self, config: LogConfig) -> None:
        self._config = config
        self._local.config = config
        self._validator = LogValidator(config, self._name)
        self._segment_bytes = config.segment_bytes
        self._roll_ms = config.roll_ms
        self._flush_messages = config.flush_messages

    # -- identity and offsets -------------------------------------------------------------------
    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition(self) -> int:
        return self._partition

    @property
    def dir(self) -> str:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_flush_time_ms(self) -> int:
        return self._last_flush_time_ms

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return self._segments.size_in_bytes

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def loaded_recovered_segment_count(self) -> int:
        """Segments that loading recovered (rebuilt indexes, CRC-checked, torn tail cut)."""
        return self._counters.loaded_recovered_segment_count

    @property
    def loaded_truncated_bytes(self) -> int:
        """Bytes that loading cut from torn or corrupt segment tails."""
        return self._counters.loaded_truncated_bytes

    @property
    def is_offline(self) -> bool:
        return self._local.offline_cause is not None

    @property
    def is_closed(self) -> bool:
        """Closed by a deletion or the shutdown: no more changes, no more uploads."""
        return self._local.closed

    def set_change_listener(self, listener: ChangeListener | None) -> None:
        """Who is told of this log's changes from now on (``ChangeListener``); None: nobody."""
        self._change_listener = listener

    def _announce_change(self, appended: AppendedBatch | None = None) -> None:
        listener = self._change_listener
        if listener is None:
            return
        try:
            if appended is None:
                listener(self._topic, self._partition)
            else:
                listener(self._topic, self._partition, appended)
        except Exception:  # a bug in the listener: the change itself stands
            _LOG.exception("%s: the change listener failed", self._name)

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._apply_config(config)

    def stop_changes(self) -> None:
        """Refuses every change from now on (appends, rolls, truncations, DeleteRecords,
        retention, cleaning) with LogDirOfflineError "shutting down", once the change under way
        (holding the log lock) is done: what the next flush makes durable is then everything the
        log ever acknowledged. Reads and flush() go on; close() follows. Idempotent."""
        with self._lock:
            self._local.closing = True

    # -- append ---------------------------------------------------------------------------------
    def append(self, records: bytes | bytearray | memoryview, *, leader_epoch: int | None = None) -> AppendInfo:
        """Validates one produced batch, assigns it offsets from the log end offset and appends
        it (rolling first when the active segment says so).

        ``leader_epoch`` (cluster mode): the ownership epoch the request was admitted under. Under
        the log's lock it must be the partition's current epoch (``advance_leader_epoch``), else
        FencedLeaderEpochError and nothing is written; a newer one becomes the current epoch. It
        is stamped into the batch's partitionLeaderEpoch, and the first append of an epoch
        records it in the leader-epoch cache (and its checkpoint) before the batch is written.
        Without it (a single process) the batch's bytes are written as sent."""
        now_ms = self._clock.time_ms()
        watch = stopwatch("produce")
        batch, size, last_offset_delta, record_count, max_timestamp_ms, append_time_ms, records_area = (
            self._validator.validate(records, now_ms))
        watch.lap("validation")
        local = self._local
        with self._lock:
            if local.closed or local.closing or local.offline_cause is not None:
                local.check_changeable()
            if leader_epoch is not None and leader_epoch != self._leader_epoch:
                self._admit_epoch(leader_epoch)  # refused, or a newer epoch adopted
            pending = self._producers.check(batch)
            if pending is not None and type(pending) is BatchMetadata:
                return self._duplicate(pending)
            base_offset = self._log_end_offset
            last_offset = base_offset + last_offset_delta
            try:
                segment = self._segments.active
                reason = segment.should_roll(
                    max_segment_bytes=self._segment_bytes,
                    max_segment_ms=self._roll_ms,
                    messages_bytes=size,
                    max_timestamp_ms=max_timestamp_ms,
                    last_offset=last_offset,
                    now_ms=now_ms,
                )
                if reason is not None:
                    segment = self._roll(base_offset, reason)
                watch.mark_faults()
                local.touch(segment)
                if leader_epoch is not None and (leader_epoch != self._leader_epochs.latest_epoch
                                                 or self._leader_epochs.stale):
                    self._leader_epochs.assign(leader_epoch, base_offset)
                segment.append_batch(batch, base_offset, last_offset, max_timestamp_ms, leader_epoch, records_area)
                watch.lap_faults("append", "append")
            except OSError as exc:
                raise local.io_error("appending to", exc) from exc
            self._log_end_offset = last_offset + 1
            self._version += 1
            version = self._version
            if pending is not None:
                self._producers.complete(pending, base_offset, last_offset, max_timestamp_ms, now_ms)
            if local.exhausted:
                local.exhausted = False
                _LOG.info("%s: appends succeed again", self._name)
            self._counters.count_append(record_count, size)
            flush_due = last_offset + 1 - self._recovery_point >= self._flush_messages
            log_start_offset = self._log_start_offset
        # Readable now; the flush below only makes it durable. The batch's bytes go with the
        # announcement only when they are the request's own and immutable: a view of the bytes
        # the caller passed, not a copy the validator rewrote (a LogAppendTime stamp, a corrected
        # maxTimestamp) nor a buffer its owner could change after the append.
        appended = None
        if self._change_listener is not None and _announceable(batch, records):
            head, rest_start = written_head(batch, base_offset, leader_epoch)
            appended = AppendedBatch(self, version, base_offset, last_offset + 1, head, batch[rest_start:size])
        self._announce_change(appended)
        del appended
        if flush_due:
            self.flush()
        return AppendInfo(
            base_offset, last_offset, append_time_ms, log_start_offset, max_timestamp_ms, record_count, size
        )

    def _admit_epoch(self, admitted_epoch: int) -> None:
        """Under the lock: an append admitted under an epoch older than the current one is
        refused; a newer one (the admission saw the cache move before the change reached the
        log) becomes current, so every older one is refused from now on."""
        current = self._leader_epoch
        if current is None or admitted_epoch > current:
            self._leader_epoch = admitted_epoch
        elif admitted_epoch < current:
            raise FencedLeaderEpochError(
                f"{self._name}: append admitted under ownership epoch {admitted_epoch}, but the partition is "
                f"at epoch {current} now: refused, nothing written",
                admitted_epoch=admitted_epoch, current_epoch=current)

    # -- ownership epochs (cluster mode) --------------------------------------------------------
    def advance_leader_epoch(self, epoch: int) -> int:
        """The partition's ownership changed (or was first seen) at ``epoch``: from the moment
        this returns, no append admitted under an older epoch lands (the check runs under the
        lock this takes, so one in progress finishes first). Epochs only increase: an older one
        changes nothing. Returns the current epoch. A new epoch is announced as a change
        (``ChangeListener``): readers waiting at the tail wake and ask who owns the partition now."""
        if epoch < 0:
            raise ValueError(f"{self._name}: an ownership epoch is >= 0, not {epoch}")
        with self._lock:
            advanced = self._leader_epoch is None or epoch > self._leader_epoch
            if advanced:
                self._leader_epoch = epoch
            current = self._leader_epoch
        if advanced:
            self._announce_change()
        return current

    @property
    def leader_epoch(self) -> int | None:
        """The current ownership epoch this log knows; None in a single process."""
        return self._leader_epoch

    def leader_epoch_entries(self) -> list[EpochEntry]:
        """The leader-epoch cache's (epoch, start offset) entries, in epoch order."""
        with self._lock:
            return self._leader_epochs.entries()

    def end_offset_for_epoch(self, epoch: int) -> EndOffset:
        """Kafka's OffsetsForLeaderEpoch answer: (epoch, where its records end)."""
        with self._lock:
            return self._leader_epochs.end_offset_for(epoch, self._log_end_offset)

    def _duplicate(self, original: BatchMetadata) -> AppendInfo:
        """The answer to a retried batch already written: its original offsets, nothing new."""
        log_append_time = self._config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
        append_time_ms = original.timestamp_ms if log_append_time else NO_TIMESTAMP
        return AppendInfo(
            original.first_offset, original.last_offset, append_time_ms, self._log_start_offset,
            original.timestamp_ms, 0, 0,
        )

    # -- idempotent producers -----------------------------------------------------------------
    def remove_expired_producers(self) -> int:
        """Forgets producers idle for producer.id.expiration.ms; returns how many."""
        with self._lock:
            return self._producers.remove_expired(self._clock.time_ms(), self._config.producer_id_expiration_ms)

    def producer_state_statistics(self) -> ProducerStateStatistics:
        with self._lock:
            return self._producers.statistics()

    def producer_last_offsets(self) -> dict[int, int]:
        """Producer id -> the last offset of its last batch (for a cleaning snapshot)."""
        with self._lock:
            return self._producers.last_offsets()

    def _snapshot_producers(self, offset: int, *, sync: bool = False) -> None:
        self._producers.map_end_offset = offset
        take_snapshot(self._producers, self._fs, self._dir, offset, sync=sync)

    def _reload_producers(self) -> None:
        """After a truncation: the state at the new log end, from the snapshots and the log."""
        self._producers = load_producer_state(
            self._name, self._fs, self._dir, self._segments.values(),
            log_start_offset=self._log_start_offset,
            log_end_offset=self._log_end_offset,
            had_clean_shutdown=False,
            now_ms=self._clock.time_ms(),
            expiration_ms=self._config.producer_id_expiration_ms,
        )

    # -- roll -----------------------------------------------------------------------------------
    def roll(self, reason: RollReason = RollReason.REQUESTED) -> int:
        """Starts a new active segment at the log end offset; returns its base offset."""
        with self._lock:
            self._local.check_changeable()
            try:
                return self._roll(self._log_end_offset, reason).base_offset
            except OSError as exc:
                raise self._local.io_error("rolling", exc) from exc

    def _roll(self, expected_next_offset: int, reason: RollReason) -> LogSegment:
        new_offset = max(expected_next_offset, self._log_end_offset)
        self._version += 1  # the last batch's segment may be cleaned or tiered from now on
        new_segment = self._local.roll(new_offset, reason.value)
        self._snapshot_at_roll(new_offset)
        self._flush_scheduler(lambda: self._flush_quietly(new_offset))
        return new_segment

    def _snapshot_at_roll(self, offset: int) -> None:
        """Kafka's UnifiedLog.roll: the producer state at the new segment's base offset, so a
        restart replays at most the active segment. The roll has happened by now, so a full
        disk (or no descriptor) must not undo it nor skip its flush: the snapshot only shortens
        the next load's replay, which starts from an older snapshot instead (the torn file is
        removed by ``write_snapshot``)."""
        try:
            self._snapshot_producers(offset)
        except OSError as exc:
            if not is_exhaustion(exc):
                raise
            _LOG.warning("%s: no producer snapshot at the roll to %d (%s); the next load replays from an "
                         "older one", self._name, offset, exc)

    def try_release_handles(self, segment: LogSegment) -> bool:
        """For the descriptor budget: releases ``segment``'s handles unless this log is busy in
        another thread (then False; the budget tries another time)."""
        return self._local.try_release_handles(segment)

    # -- read -----------------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True) -> FetchData:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (at least one
        batch with ``min_one_batch``), none past the high watermark."""
        with self._lock:
            self._local.check_usable()
            log_start, high_watermark = self._log_start_offset, self._log_end_offset
            tier = self._remote_tier
            if 0 <= offset < log_start and self._remote_start_unknown():
                # The log start offset is the local one until the store is listed: what lies
                # below it is unknown, not out of range.
                raise self._unlisted(f"offset {offset} is below the local log start {log_start}")
            if offset < log_start or offset > high_watermark:
                raise OffsetOutOfRangeError(
                    f"{self._name}: offset {offset} is outside the log's range "
                    f"[{log_start}, {high_watermark}] (log start offset, log end offset)"
                )
            below_local = tier is not None and offset < self._segments.first.base_offset
            records, next_offset = b"", offset
            if below_local:
                pass  # read from the store below, outside the lock
            elif offset < high_watermark:
                records, next_offset = self._local.read(offset, max_bytes, min_one_batch, log_start, high_watermark)
            else:
                self._local.read_count += 1
            if not below_local:
                return FetchData(records, high_watermark, log_start, high_watermark, next_offset)
        assert tier is not None
        try:
            return self._read_remote(tier, offset, max_bytes, min_one_batch, log_start, high_watermark)
        except RemoteStorageUnavailableError as exc:
            raise RemoteStorageUnavailableError(
                f"{self._name}: offset {offset} is below the local log start and the object store "
                f"did not answer (retry later): {exc}") from exc

    def read_appended(self, appended: AppendedBatch, offset: int) -> FetchData | None:
        """What ``read(offset, max_bytes)`` answers, whatever ``max_bytes``, when ``appended``
        is this log's last batch, untouched since its append, and ``offset`` its base offset:
        that batch alone, up to the high watermark it left. None in every other case (another
        append, roll or truncation since, the log start moved past it, the log offline or
        closed, another log's batch, the log's lock busy: it never waits for it, so an event
        loop may call it): the caller reads the log. The checks hold the lock, the batch's bytes
        are joined after it (up to max.message.bytes: no append waits on the copy); the answer
        is the log's at the check, as a read's is at its own."""
        if appended.log is not self or offset != appended.base_offset:
            return None
        lock = self._lock
        if not lock.acquire(blocking=False):
            return None
        try:
            local = self._local
            if (appended.version != self._version or offset < self._log_start_offset or local.closed
                    or local.offline_cause is not None):
                return None
            local.read_count += 1
            high_watermark, log_start_offset = self._log_end_offset, self._log_start_offset
        finally:
            lock.release()
        return FetchData(appended.records(), high_watermark, log_start_offset, high_watermark, appended.end_offset)

    def position_of(self, offset: int) -> tuple[int, int] | None:
        """(segment base offset, byte position) of the batch holding ``offset`` or, in a gap,
        the next batch; None past the last batch. Both lookup levels, no data read."""
        with self._lock:
            self._local.check_usable()
            local_start = self._segments.first.base_offset
            if self._remote_tier is not None and offset < local_start:
                raise OffsetOutOfRangeError(
                    f"{self._name}: offset {offset} is below the local log start {local_start}: it is in "
                    "the object store, in no local segment")
            return self._local.position_of(offset)

    def _remote_start_unknown(self) -> bool:
        """Under the lock: whether offsets below the local log start may be in the store while
        nobody knows yet (the tier not listed since the start: opening a log asks the store
        nothing). A local log starting at the checkpoint's log start (a new partition, or one
        never cut locally) has nothing below it, so its answers are known."""
        tier = self._remote_tier
        return (tier is not None and not tier.listed
                and tier.checkpoint_log_start_offset < self._segments.first.base_offset)

    def _unlisted(self, what: str) -> RemoteStorageUnavailableError:
        tier = self._remote_tier
        failed = tier.listing_error if tier is not None else None
        why = ("the object store has not answered since the start" if failed is None
               else f"its last listing failed: {failed}")
        return RemoteStorageUnavailableError(
            f"{self._name}: {what}, and the remote segment list of {self._name} is not loaded yet: {why} (retry later)")

    def known_log_start_offset(self) -> int:
        """The log start offset, for an answer that names it (EARLIEST, DescribeTopic): a
        retriable RemoteStorageUnavailableError while offsets below the local log start may be
        in the store unlisted (``log_start_offset`` is then the local one)."""
        with self._lock:
            if self._remote_start_unknown():
                raise self._unlisted("the log start offset may lie below the local log start "
                                     f"{self._segments.first.base_offset}")
            return self._log_start_offset

    # -- ExplainLookup ---------------------------------------------------------------------------
    def explain_offset(self, offset: int, residency: ResidentPages | None = None) -> LookupExplanation:
        """The path of a read at ``offset``: segment, index searches, scan (lookup_explain.py)."""
        with self._lock:
            self._local.check_usable()
            if offset < self._log_start_offset and self._remote_start_unknown():
                raise self._unlisted(f"offset {offset} is below the local log start {self._log_start_offset}")
            if not self._log_start_offset <= offset < self._log_end_offset:
                raise OffsetOutOfRangeError(
                    f"{self._name}: offset {offset} is outside the log's records "
                    f"[{self._log_start_offset}, {self._log_end_offset})"
                )
            tier = self._remote_tier
            if tier is None or offset >= self._segments.first.base_offset:
                return explain_offset(self._segments, offset, residency or no_residency)
        return tier.explain(offset)  # below the local log start: a store call, outside the lock

    # -- flush (the mechanics: LocalLog.plan_flush and LocalLog.flush) ---------------------------
    def flush(self, offset: int | None = None) -> None:
        """fsyncs every segment holding offsets below ``offset`` (default: everything, the
        active segment included even when empty) and advances the recovery point to it.

        The fsyncs run outside the log lock (``LocalLog.flush``), so appends go on meanwhile and
        concurrent flushes coalesce (the second finds the recovery point already past its
        offset). A flush to ``offset`` syncs only the log of the segment holding the new recovery
        point; a whole-log flush (no ``offset``, as at shutdown) syncs every segment's indexes,
        the active one's included: after a clean shutdown the next load trusts them."""
        local = self._local
        with self._flush_lock:
            with self._lock:
                local.check_usable()
                target = self._log_end_offset if offset is None else min(offset, self._log_end_offset)
                flush_to = target + 1 if offset is None else target
                if flush_to <= self._recovery_point:
                    return
                files_state = local.files_state(self._log_end_offset)
                if offset is None and files_state == local.fully_synced_state:
                    return  # nothing appended, rolled or cut since the last whole-log flush
                plan = local.plan_flush(self._recovery_point, flush_to,
                                        holding_offset=None if offset is None else target)
            local.flush(plan)
            with self._lock:
                if local.truncation_epoch == plan.truncation_epoch:  # else offsets it covered were cut
                    if target > self._recovery_point:
                        self._recovery_point = min(target, self._log_end_offset)
                        self._last_flush_time_ms = self._clock.time_ms()
                    if offset is None:
                        local.fully_synced_state = files_state
                self._counters.flush_count += 1
            OBSERVER.current.log_flushed()  # /metrics' total, which a deleted topic must not lower

    def _flush_quietly(self, offset: int) -> None:
        """A roll's background flush: nobody waits for it, so it says itself how it failed.
        A failed sync has already taken the log offline (the log manager then takes the
        directory offline at its next pass); a retriable failure leaves the recovery point
        where it was, and the next flush covers these offsets."""
        try:
            self.flush(offset)
        except LogDirOfflineError as exc:
            if not self._local.closed:  # a log closed meanwhile has nothing left to flush
                _LOG.error("%s: background flush to %d failed, the log is offline: %s", self._name, offset, exc)
        except StorageError as exc:
            if not self._local.closed:
                _LOG.warning("%s: background flush to %d failed: %s", self._name, offset, exc)
        except Exception:  # a bug: never lost in a pool's future nobody reads
            _LOG.exception("%s: background flush to %d failed", self._name, offset)

    # -- retention and DeleteRecords (the rules: log_retention.py) -----------------------------
    def delete_old_segments(self) -> int:
        """One retention pass (``log_retention.retention_pass``); returns the count deleted.
        A tiered log deletes local segments only once uploaded, by local.retention.*
        (``tiered_retention_pass``); the whole log's retention then runs over the remote ones."""
        with self._lock:
            self._local.check_changeable()
            tier = self._remote_tier
            if tier is not None and self._config.remote_storage_enable:
                try:
                    return tiered_retention_pass(
                        self._segments, self._config, self._clock, log_start_offset=self._log_start_offset,
                        high_watermark=self.high_watermark, log_end_offset=self._log_end_offset,
                        highest_uploaded_offset=tier.highest_uploaded_offset, delete=self._delete_local_segments)
                except OSError as exc:
                    raise self._local.io_error("deleting old segments of", exc) from exc
            try:
                return retention_pass(self._segments, self._config, self._clock,
                                      log_start_offset=self._log_start_offset, high_watermark=self.high_watermark,
                                      log_end_offset=self._log_end_offset, delete=self._delete_segments)
            except OSError as exc:
                raise self._local.io_error("deleting old segments of", exc) from exc

    def _delete_segments(self, deletable: list[LogSegment]) -> None:
        """Kafka's deleteSegments: a roll first when every segment goes, then the log start
        offset moved to the first segment kept, the files and the producer snapshots below it."""
        if len(deletable) == len(self._segments):
            new_segment = self._roll(self._log_end_offset, RollReason.RETENTION)
            if deletable[-1].base_offset == new_segment.base_offset:
                deletable = deletable[:-1]  # the empty active segment was recreated by the roll
        if not deletable:
            return
        following = self._segments.higher(deletable[-1].base_offset)
        assert following is not None
        self._log_start_offset = max(self._log_start_offset, following.base_offset)
        self._epochs_from_start(self._log_start_offset)
        self._local.remove_and_delete(deletable)
        delete_snapshots_below(self._producers, self._fs, self._dir, following.base_offset)

    def _delete_local_segments(self, deletable: list[LogSegment]) -> None:
        """A tiered log's local deletion: the segments are in the store, so the log start offset
        stays (it covers the remote segments too); only the local files and snapshots go."""
        following = self._segments.higher(deletable[-1].base_offset)
        assert following is not None, "the active segment is never uploaded"
        self._local.remove_and_delete(deletable)
        delete_snapshots_below(self._producers, self._fs, self._dir, following.base_offset)

    # -- the remote tier (remote_log_tier.py): wired by the log manager for tiered topics -------
    def attach_remote_tier(self, tier: RemoteLogTier) -> None:
        """Use ``tier`` for uploads, retention and reads below the local log start. A loaded tier
        whose segments reach the local log sets the log start from the earliest remote offset (the
        loader only knew the local segments), then the log counts as listed (``tier.listed``).
        Only the first listing since the open may lower the start, and no lower than the
        checkpoint's; a later one (``reload``, a stale list) never goes below the current start,
        which DeleteRecords or retention may have moved since."""
        with self._lock:
            self._remote_tier = tier
            if not tier.loaded:
                return
            earliest = tier.earliest_offset
            local_start = self._segments.first.base_offset
            floor = self._log_start_offset if tier.listed else tier.checkpoint_log_start_offset
            if earliest is not None and earliest < local_start and tier.highest_uploaded_offset >= local_start - 1:
                self._log_start_offset = max(floor, earliest)
            tier.mark_listed()

    def log_start_offset_to_checkpoint(self) -> int:
        """The log start offset the log-start-offset checkpoint keeps: the checkpoint's own value
        while a tiered log's start below its local one is unknown (unlisted), so a restart's
        first listing lowers it no further than the start the log really had."""
        with self._lock:
            if self._remote_start_unknown():
                assert self._remote_tier is not None
                return self._remote_tier.checkpoint_log_start_offset
            return self._log_start_offset

    @property
    def remote_tier(self) -> RemoteLogTier | None:
        return self._remote_tier

    @property
    def local_log_start_offset(self) -> int:
        with self._lock:
            return max(self._log_start_offset, self._segments.first.base_offset)

    def upload_candidates(self, highest_uploaded_offset: int) -> list[LogSegmentData]:
        """The closed segments above ``highest_uploaded_offset`` and below the high watermark,
        oldest first, as the remote storage manager copies them."""
        from ..remote.remote_storage_manager import LogSegmentData

        with self._lock:
            found: list[LogSegmentData] = []
            segments = self._segments.values()
            for segment, following in zip(segments, segments[1:]):
                end_offset = following.base_offset - 1
                if end_offset <= highest_uploaded_offset or following.base_offset > self.high_watermark:
                    continue
                if segment.size_in_bytes == 0:
                    continue
                snapshot = snapshot_path(self._dir, following.base_offset)
                # Kafka's copy: the leader-epoch entries up to the segment's end (the cache cut
                # from the end at the next segment's base), none when no batch carried an epoch.
                epochs = [e for e in self._leader_epochs.entries() if e.start_offset <= end_offset]
                found.append(LogSegmentData(
                    topic=self._topic, partition=self._partition, base_offset=segment.base_offset,
                    end_offset=end_offset, max_timestamp_ms=segment.largest_timestamp(),
                    log_path=file_names.log_path(self._dir, segment.base_offset),
                    offset_index_path=file_names.offset_index_path(self._dir, segment.base_offset),
                    time_index_path=file_names.time_index_path(self._dir, segment.base_offset),
                    producer_snapshot_path=snapshot if self._fs.exists(snapshot) else None,
                    leader_epoch_bytes=format_epochs(epochs) if epochs else None,
                    leader_epochs=tuple((e.epoch, e.start_offset) for e in epochs)))
            return found

    def upload_lag(self, highest_uploaded_offset: int) -> tuple[int, int]:
        """(bytes, count) of the closed segments above ``highest_uploaded_offset`` and below the
        high watermark not uploaded yet, and the oldest one's roll time (ms, -1 when none) as the
        third figure's source: ``upload_lag_since_ms``."""
        with self._lock:
            lag_bytes, oldest_ms = 0, -1
            segments = self._segments.values()
            for segment, following in zip(segments, segments[1:]):
                if following.base_offset - 1 <= highest_uploaded_offset or following.base_offset > self.high_watermark:
                    continue
                lag_bytes += segment.size_in_bytes
                if oldest_ms < 0:
                    oldest_ms = segment.largest_timestamp()
            return lag_bytes, oldest_ms

    def remote_retention_pass(self) -> int:
        """The whole log's retention over the remote segments: the log start offset moves past
        the doomed ones first, then they are deleted from the store (outside the lock)."""
        tier = self._remote_tier
        if tier is None or not self._config.remote_storage_enable:
            return 0
        with self._lock:
            plan = tier.plan_retention(
                log_start_offset=self._log_start_offset, local_start_offset=self._segments.first.base_offset,
                local_bytes=self._segments.size_in_bytes, retention_ms=self._config.retention_ms if self._config.is_delete else -1,
                retention_bytes=self._config.retention_bytes if self._config.is_delete else -1)
            if plan is None:
                return 0
            moved = plan.new_log_start_offset > self._log_start_offset
            self._log_start_offset = max(self._log_start_offset, plan.new_log_start_offset)
        if moved:
            self._announce_change()
        return tier.delete(plan.segments)

    def _read_remote(self, tier: RemoteLogTier, offset: int, max_bytes: int, min_one_batch: bool,
                     log_start: int, high_watermark: int) -> FetchData:
        """Whole batches from the remote segment holding ``offset`` (below the local log)."""
        metadata = tier.segment_for(offset)
        if metadata is None:
            raise OffsetOutOfRangeError(
                f"{self._name}: offset {offset} is below the local log and in no remote segment")
        position = tier.position_for(metadata, offset)
        while True:  # to the batch holding offset: 12 header bytes per batch
            header = tier.read_bytes(metadata, position, BATCH_HEADER_PEEK)
            if len(header) < BATCH_HEADER_PEEK:
                raise OffsetOutOfRangeError(f"{self._name}: offset {offset} is not in remote segment "
                                            f"{metadata.segment_id} (ends at {metadata.end_offset})")
            base = int.from_bytes(header[0:8], "big")
            length = int.from_bytes(header[8:12], "big", signed=True)
            last = base + int.from_bytes(header[23:27], "big", signed=True)
            if length <= 0:
                raise OffsetOutOfRangeError(f"{self._name}: remote segment {metadata.segment_id} "
                                            f"holds a batch of length {length} at {position}")
            if last >= offset:
                break
            position += 12 + length
        first_size = 12 + length
        data = tier.read_bytes(metadata, position, max(max_bytes, first_size if min_one_batch else 0))
        used, next_offset = 0, offset
        while used + 12 <= len(data):
            size = 12 + int.from_bytes(data[used + 8:used + 12], "big", signed=True)
            if used + size > len(data) or size <= 12:
                break
            next_offset = int.from_bytes(data[used:used + 8], "big") + \
                int.from_bytes(data[used + 23:used + 27], "big", signed=True) + 1
            used += size
        return FetchData(bytes(data[:used]), high_watermark, log_start, high_watermark, next_offset)

    def delete_due_files(self) -> int:
        """Unlinks the ``.deleted`` segments whose delay has passed; returns how many."""
        with self._lock:
            return self._local.delete_due_files()

    def delete_records(self, offset: int) -> int:
        """Moves the log start offset up to ``offset`` (-1: the high watermark); returns it.
        Segments wholly below it go in the next retention pass."""
        with self._lock:
            self._local.check_changeable()
            if self._remote_start_unknown():
                # Refused whatever the offset: the first listing sets the log start from the
                # store, which would undo a start moved before it.
                raise self._unlisted(f"DeleteRecords to offset {offset} moves the log start offset")
            offset = delete_records_offset(offset, self.high_watermark, self._name)
            moved = offset > self._log_start_offset
            if moved:
                self._log_start_offset = offset
                self._epochs_from_start(offset)
            log_start_offset = self._log_start_offset
        if moved:  # a reader waiting below the new start learns it is out of range
            self._announce_change()
        return log_start_offset

    # -- truncation (of the segment map: LocalLog.truncate_to, truncate_fully_and_start_at) -----
    def truncate_to(self, target_offset: int) -> bool:
        """Removes every record at or above ``target_offset`` (whole batches: a cut inside a
        batch or a gap removes that batch). False when there was nothing to remove."""
        if target_offset < 0:
            raise ValueError(f"{self._name}: cannot truncate to a negative offset ({target_offset})")
        with self._lock:
            self._local.check_changeable()
            if target_offset >= self._log_end_offset:
                return False
            try:
                if self._segments.at(0).base_offset > target_offset:
                    self._local.truncate_fully_and_start_at(target_offset)
                    self._truncated(target_offset, target_offset)
                else:
                    self._local.truncate_to(target_offset)
                    self._truncated(target_offset, min(self._log_start_offset, target_offset))
            except OSError as exc:
                raise self._local.io_error("truncating", exc) from exc
        self._announce_change()
        return True

    def truncate_fully_and_start_at(self, new_offset: int, *, only_if: Callable[[], bool] | None = None) -> bool:
        """Deletes every record and restarts the log, empty, at ``new_offset``; True when done.

        ``only_if`` is asked first, under the log's lock, and False changes nothing: a decision
        taken earlier (a copy found stale, rpc/move_rpcs.py) is taken again where no append can
        land between it and the truncation. It may call this log's methods (the lock is
        re-entrant), never wait on a thread that waits for this log."""
        if new_offset < 0:
            raise ValueError(f"{self._name}: cannot start the log at a negative offset ({new_offset})")
        with self._lock:
            self._local.check_changeable()
            if only_if is not None and not only_if():
                return False
            try:
                self._local.truncate_fully_and_start_at(new_offset)
                self._truncated(new_offset, new_offset)
            except OSError as exc:
                raise self._local.io_error("truncating", exc) from exc
        self._announce_change()
        return True

    def _truncated(self, log_end_offset: int, log_start_offset: int) -> None:
        """The offsets after the segments were cut, the producers' state at the new end, and
        the leader epochs cut to the records left (all of them when none is left). The segments
        are cut already: the offsets in memory follow them first, whatever the checkpoint does."""
        self._log_end_offset = log_end_offset
        self._log_start_offset = log_start_offset
        self._version += 1
        self._recovery_point = min(self._recovery_point, log_end_offset)
        try:
            if log_end_offset == log_start_offset:
                self._leader_epochs.clear()
            else:
                self._leader_epochs.truncate_from_end(log_end_offset)
        except OSError as exc:
            # Memory is cut (LeaderEpochCache cuts it first); the stale file is rewritten by the
            # next epoch's assign before any record lands past the cut, and cut at load anyway.
            _LOG.warning("%s: leader-epoch checkpoint not rewritten for the truncation to %d: %s", self._name,
                         log_end_offset, exc)
        self._reload_producers()

    def _epochs_from_start(self, log_start_offset: int) -> None:
        """The log start moved up: the leader epochs below it go. The log start is already in
        memory, and the entries are cut in memory whatever the checkpoint write does; a failed
        write only leaves older entries the next assign rewrites and the next load cuts."""
        try:
            self._leader_epochs.truncate_from_start(log_start_offset)
        except OSError as exc:
            _LOG.warning("%s: leader-epoch checkpoint not rewritten for log start %d: %s", self._name,
                         log_start_offset, exc)

    # -- replacing segments (compaction) ------------------------------------------------------
    def open_cleaned_segment(self, base_offset: int, *, create: bool = False) -> LogSegment:
        """A segment over ``<base>.log.cleaned`` and its indexes in this log's directory; with
        ``create``, new empty files (stale ``.cleaned`` files of that base are replaced)."""
        return self._local.open_cleaned_segment(base_offset, create=create)

    def swap_segments(
        self, expected_old: Sequence[LogSegment], new_segments: Sequence[LogSegment], *,
        log_start_offset: int | None = None,
    ) -> None:
        """The compaction's swap, one explicit operation under one acquisition of the lock:
        refused with StaleCleaningResultError (nothing changed) when the log is no longer
        compacted (its cleanup.policy changed since the snapshot: a compaction's result would
        delete records the delete policy keeps), when the log start offset is no longer
        ``log_start_offset`` (when given: DeleteRecords or retention since the snapshot) or
        ``expected_old`` are no longer the live segments of their range; then ``new_segments``
        swapped in with Kafka's crash-safe protocol (``LocalLog.swap_segments``, 6.6), the log
        offline on any failure after the first rename. A whole-log flush after it syncs every
        file again."""
        with self._lock:
            # Checked under the lock update_config takes: no policy change slips in before the swap.
            if not self._config.is_compacted:
                raise StaleCleaningResultError(
                    f"{self._name}: the topic is no longer compacted (cleanup.policy="
                    f"{','.join(sorted(self._config.cleanup_policy))}); a cleaning result is not installed"
                )
            if log_start_offset is not None and log_start_offset != self._log_start_offset:
                raise StaleCleaningResultError(
                    f"{self._name}: the log start offset moved from {log_start_offset} to "
                    f"{self._log_start_offset} since the snapshot (DeleteRecords or retention)"
                )
            self._local.swap_segments(expected_old, new_segments)

    # -- life cycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Writes each segment's final time-index entry, trims and unmaps the indexes and closes
        the files. No fsync: the log manager flushes first. Idempotent."""
        local = self._local
        with self._lock:
            if local.closed:
                return
            local.closed = True
            failure: BaseException | None = None
            if local.offline_cause is None:
                # Kafka's UnifiedLog.close: the state at the log end for the next start. Synced
                # only when it holds producers: a lost empty snapshot loses nothing (the load
                # falls back to an older one, or to no state when none is left), and a shutdown
                # of thousands of idle partitions then costs no fsync per partition.
                try:
                    has_producers = self._producers.statistics().producer_count > 0
                    self._snapshot_producers(self._log_end_offset, sync=has_producers)
                except Exception as exc:  # close the segments, then say the log did not close
                    failure = exc
            local.close(failure)

    def close_handlers(self) -> None:
        """Closes descriptors and mappings without writing anything: for a failed disk, or to
        drop a log as a crash would."""
        with self._lock:
            self._local.close_handlers()

    # -- statistics (log_statistics.py) ---------------------------------------------------------
    def statistics(self) -> LogStatistics:
        with self._lock:
            return log_statistics(
                self._local, self._counters, topic=self._topic, partition=self._partition,
                log_start_offset=self._log_start_offset, log_end_offset=self._log_end_offset,
                recovery_point=self._recovery_point, last_flush_time_ms=self._last_flush_time_ms,
            )

    def summary(self) -> LogSummary:
        """The running figures a scrape reads per partition (no per-segment statistics)."""
        with self._lock:
            return log_summary(self._local, self._counters, log_start_offset=self._log_start_offset,
                               log_end_offset=self._log_end_offset, recovery_point=self._recovery_point)

    # -- what the cleaner asks (the operations: segment_views.py) -------------------------------
    def cleanable_view(self, *, timestamps_from: int | None = None) -> CleanableView:
        """The input of the cleaner's choice (``segment_views.cleanable_view``), under the lock."""
        with self._lock:
            return cleanable_view(self._local, log_start_offset=self._log_start_offset,
                                  log_end_offset=self._log_end_offset, timestamps_from=timestamps_from)

    def snapshot_segments(self, up_to_offset: int, *, link_into: str, log_start_offset: int | None = None) -> SegmentsSnapshot:
        """The range's segments checked and hard-linked into ``link_into``, and the producers'
        last offsets, under one acquisition of the lock (``segment_views.snapshot_segments``)."""
        with self._lock:
            return snapshot_segments(self._local, self._producers, up_to_offset, link_into,
                                     log_start_offset=self._log_start_offset, expected_log_start_offset=log_start_offset)

    def describe_segment(self, segment: LogSegment) -> SegmentDescription:
        """A closed segment's offsets and times, under the lock for it alone (segment_views.py)."""
        with self._lock:
            return describe_segment(self._local, segment)

    def segments_in_range(self, from_offset: int, to_offset: int) -> SegmentRange:
        """The live segments of [``from_offset``, ``to_offset``), the active one and the log
        start offset, as one acquisition of the lock saw them (segment_views.py)."""
        with self._lock:
            return segments_in_range(self._local, from_offset, to_offset, log_start_offset=self._log_start_offset)

    def segments_snapshot(self) -> list[LogSegment]:
        """The segments in offset order (for snapshots, the cleaner and tests)."""
        with self._lock:
            return self._segments.values()

    def __repr__(self) -> str:
        return (
            f"Log({self._name}, dir={self._dir!r}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )


Log = UnifiedLog
"""The name the service and the tests know the unified log by (``seglog_server.storage.Log``)."""
