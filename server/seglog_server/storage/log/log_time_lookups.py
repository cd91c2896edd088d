"""A log's lookups by time (kafka-storage.md section 4): ``LogTimeLookups``, the part of
``UnifiedLog`` that answers ``offset_for_timestamp``, ``offsets_for_timestamps``,
``lookup_timestamps`` and their bounded forms for a caller on an event loop
(``lookup_timestamps_without_builds``, ``lookup_timestamp_inline``), and ``explain_timestamp``.

It holds the glue between the log's state and the searches beside it: the local segments'
search (timestamp_lookups.py), the remote segments' (remote_timestamps.py) for a tiered log,
searched outside the lock and the local log after, the targets that wait for the tier's first
listing, and the bounded search's budget (lookup_budget.py). A mixin, as the lookups read the
log's own lock, offsets, segments and tier (``_lock``, ``_local``, ``_segments``, ``_name``,
``_log_start_offset``, ``_log_end_offset``, ``_remote_tier``, ``local_log_start_offset``) and ask
its tier-listing checks (``_remote_start_unknown``, ``_unlisted``); ``UnifiedLog``
(unified_log.py) is the one class built from it, so callers see one object.

Thread-safe as ``UnifiedLog`` is: every search of the local log runs under the log's lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..base.errors import RemoteStorageUnavailableError, StorageError
from ..format.file_records import TimestampAndOffset
from ..segment.lookup_budget import LookupBudget, LookupRefused
from .log_results import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from .lookup_explain import LookupExplanation, ResidentPages, explain_timestamp, no_residency
from .lookup_explain import nothing_found as explain_offset_none
from .remote_timestamps import remote_offset_for_timestamp, remote_offset_of_max_timestamp, remote_segments_below
from .timestamp_lookups import (
    LookupOutcome,
    check_targets,
    lookup_one_bounded,
    lookup_one_in_memory,
    lookup_timestamps,
)

if TYPE_CHECKING:  # boto3 (the remote extra) is loaded only where a store is configured
    from .remote_log_tier import RemoteLogTier

__all__ = ["INLINE_BUSY", "INLINE_REFUSED", "INLINE_UNLOADED", "TIERED_LOOKUP_ATTEMPTS_MAX", "LogTimeLookups"]


# Lookups by time on a tiered log search the store outside the lock and the local log after; a
# local start that moved in between (an upload and its local deletion) means a new search. Each
# needs a whole upload-and-delete in its window, so a few attempts only fail under a log whose
# uploader outruns every lookup; the caller then gets a retriable error.
TIERED_LOOKUP_ATTEMPTS_MAX = 4
# Why ``UnifiedLog.lookup_timestamp_inline`` did not answer (strings: no outcome is one).
INLINE_BUSY = "busy"
INLINE_UNLOADED = "unloaded"
INLINE_REFUSED = "refused"


@dataclass(frozen=True)
class _TieredView:
    """What a lookup below the local log start took under the lock."""

    tier: RemoteLogTier
    segments: list  # the remote segments below the local log reaching the log start
    log_start_offset: int
    local_start_offset: int
    log_end_offset: int


class LogTimeLookups:
    """The lookups by time of one partition's log (``UnifiedLog``'s base: its lock, offsets,
    segments and tier are the log's own, set up by ``UnifiedLog.__init__``)."""

    def offset_for_timestamp(self, timestamp_ms: int) -> TimestampAndOffset | None:
        """The first record with a timestamp >= ``timestamp_ms`` at or above the log start
        offset, or a special target: LATEST (-1), EARLIEST (-2), MAX_TIMESTAMP (-3). Raises the
        error its search meets. Below the local log start, the remote segments answer first
        (remote_timestamps.py), outside the lock."""
        outcome = self.lookup_timestamps([timestamp_ms])[0]
        if isinstance(outcome, StorageError):
            raise outcome
        return outcome

    def lookup_timestamps(self, timestamps_ms: Sequence[int]) -> list[LookupOutcome]:
        """The outcome of each of ``timestamps_ms``, in their order, under one acquisition of
        the lock (a tiered log: two, the store searched between them, and again when the local
        start moved meanwhile): the record found, None, or the storage error that target's own
        search meets (``timestamp_lookups.lookup_timestamps``). Raises only for the call as a whole: the log
        offline or closed, ValueError for a negative target that is no special one, or
        RemoteStorageUnavailableError when the local start moved during every attempt."""
        local = self._local
        for _ in range(TIERED_LOOKUP_ATTEMPTS_MAX):
            with self._lock:
                if local.closed or local.offline_cause is not None:
                    local.check_usable()
                view = self._tiered_view()
                if view is None:
                    return self._local_lookups(timestamps_ms)
            outcomes = self._tiered_lookups(view, timestamps_ms)
            if outcomes is not None:
                return outcomes
        raise RemoteStorageUnavailableError(
            f"{self._name}: the local log start moved during each of {TIERED_LOOKUP_ATTEMPTS_MAX} lookups by "
            "time (segments uploaded and deleted locally meanwhile); retry")

    def lookup_timestamps_without_builds(self, timestamps_ms: Sequence[int], read_bytes_max: int
                                         ) -> list[LookupOutcome] | None:
        """``lookup_timestamps`` for a caller on an event loop: the lookup's outcomes from a
        search bounded by a ``LookupBudget`` of ``read_bytes_max`` bytes (it builds and extends
        no time-step table, batch directory or record-time table, decompresses nothing, runs no
        first-use check, reads at most that many bytes of batches), or None when that search
        refused a step past it: nothing answered, the counters it moved put back, and the caller
        asks ``lookup_timestamps`` again on a thread. A tiered log's lookup searches the store,
        so it is never answered here: None, whether its tier is seen before the lock or was
        attached between that check and the lock (checked again under it). A caller on an event
        loop may hold the real lock already (``inline_lock`` chose it before a tier's attach):
        searching the store here would hold it and the loop for the store's calls."""
        if self._remote_tier is not None:  # a tiered log: the unbounded path's, on a thread
            return None
        with self._lock:
            if self._remote_tier is not None:  # attached since the check: the unbounded path's
                return None
            local = self._local
            if local.closed or local.offline_cause is not None:
                local.check_usable()
            try:
                return self._local_lookups(timestamps_ms, LookupBudget(read_bytes_max))
            except LookupRefused:
                return None

    def lookup_timestamp_inline(self, timestamp_ms: int, read_bytes_max: int) -> LookupOutcome | str:
        """One target's ``lookup_timestamps_without_builds`` for a caller on an event loop that
        must not wait: its outcome, or why it was not answered here, a string (the caller asks
        ``lookup_timestamps`` on a thread): ``INLINE_BUSY`` (a tiered log, whose calls never run
        inline, or the lock held by another thread), ``INLINE_UNLOADED`` (the segments'
        first-use checks not run yet, for a target that needs them) or ``INLINE_REFUSED`` (the
        bounded search refused a step past ``read_bytes_max``, its counters put back). Raises
        what ``lookup_timestamps`` raises for the call as a whole (the log offline or closed).
        ``timestamp_ms`` is >= 0 or one of the special targets. ``INLINE_UNLOADED`` comes
        first, read without the lock as ``timestamp_lookup_may_block`` reads it: the general
        path sends such a target to the pool without trying the lock, tiered log or not."""
        local = self._local
        if not local.timestamps.loaded and (timestamp_ms >= 0 or timestamp_ms == MAX_TIMESTAMP):
            return INLINE_UNLOADED
        if self._remote_tier is not None:
            return INLINE_BUSY
        lock = self._lock
        if not lock.acquire(blocking=False):
            return INLINE_BUSY
        try:
            if self._remote_tier is not None:  # attached since the check: the pool's
                return INLINE_BUSY
            if local.closed or local.offline_cause is not None:
                local.check_usable()
            if not local.timestamps.loaded and (timestamp_ms >= 0 or timestamp_ms == MAX_TIMESTAMP):
                return INLINE_UNLOADED
            if timestamp_ms >= 0:  # from the time-step table where it answers: no budget needed
                found = lookup_one_in_memory(local, timestamp_ms, self._log_start_offset, self._log_end_offset)
                if found is not None:
                    return found
            try:
                return lookup_one_bounded(local, timestamp_ms, self._log_start_offset, self._log_end_offset,
                                          LookupBudget(read_bytes_max))
            except LookupRefused:
                return INLINE_REFUSED
        finally:
            lock.release()

    def _local_lookups(self, timestamps_ms: Sequence[int], budget: LookupBudget | None = None) -> list[LookupOutcome]:
        """Under the lock, no remote segment below the local start known: every target over the
        local log, but those whose answer needs the tier's segment list while it is not loaded
        (``_waiting_for_the_list``), which answer a retriable RemoteStorageUnavailableError.
        With ``budget``: LookupRefused past it (``timestamp_lookups``)."""
        waiting = self._waiting_for_the_list(timestamps_ms)
        if not waiting:  # every log but a tiered one just started: the targets as they are
            return self._with_latest_tiered(
                lookup_timestamps(self._local, timestamps_ms, self._log_start_offset, self._log_end_offset, budget),
                timestamps_ms)
        check_targets(timestamps_ms, self._name)
        asked = [t for t in timestamps_ms if t not in waiting]
        found: dict[int, LookupOutcome] = dict(waiting)
        if asked:
            found.update(zip(asked, self._with_latest_tiered(
                lookup_timestamps(self._local, asked, self._log_start_offset, self._log_end_offset, budget), asked)))
        return [found[t] for t in timestamps_ms]

    def _waiting_for_the_list(self, timestamps_ms: Sequence[int]) -> dict[int, LookupOutcome]:
        """Under the lock: the targets answered UNAVAILABLE until the tier's first listing.
        LATEST_TIERED is the list's own answer, -1 without it only for a log that never had a
        closed segment to upload (nothing below its local start, one segment). While offsets below the local log start may be
        in the store (``_remote_start_unknown``) so are EARLIEST (the log start), MAX_TIMESTAMP
        and every target >= 0: timestamps need not grow with offsets, so a remote record may
        carry any timestamp and be the first to reach any target (Kafka weighs each remote
        segment's largest timestamp, which only the list gives). EARLIEST_LOCAL and LATEST
        answer from the local log whatever the store does."""
        tier = self._remote_tier
        if tier is None or tier.listed:
            return {}
        start_unknown = self._remote_start_unknown()
        nothing_uploadable = not start_unknown and len(self._segments) == 1
        waiting: dict[int, LookupOutcome] = {}
        for target in timestamps_ms:
            if target == LATEST_TIERED_TIMESTAMP:
                if not nothing_uploadable:
                    waiting[target] = self._unlisted("the highest uploaded offset (LATEST_TIERED)")
            elif start_unknown and (target >= 0 or target in (EARLIEST_TIMESTAMP, MAX_TIMESTAMP)):
                waiting[target] = self._unlisted(f"a lookup of timestamp {target} may be answered below "
                                                 f"the local log start {self._segments.first.base_offset}")
        return waiting

    def _with_latest_tiered(self, outcomes: list[LookupOutcome], timestamps_ms: Sequence[int]) -> list[LookupOutcome]:
        """LATEST_TIERED (Kafka's KIP-1005) is the tier's highest uploaded offset even while
        every uploaded segment is still on local disk: -1 only with nothing uploaded."""
        tier = self._remote_tier
        if tier is None or LATEST_TIERED_TIMESTAMP not in timestamps_ms:
            return outcomes
        latest = TimestampAndOffset(-1, tier.highest_uploaded_offset)
        return [latest if t == LATEST_TIERED_TIMESTAMP else o for t, o in zip(timestamps_ms, outcomes)]

    def _tiered_view(self) -> _TieredView | None:
        """Under the lock: what a lookup below the local log start needs, or None when no remote
        segment holds offsets the log still has (every answer is local)."""
        tier = self._remote_tier
        local_start = self._segments.first.base_offset
        if tier is None or self._log_start_offset >= local_start:
            return None
        return _TieredView(tier, remote_segments_below(tier, self._log_start_offset, local_start),
                           self._log_start_offset, local_start, self._log_end_offset)

    def _tiered_lookups(self, view: _TieredView, timestamps_ms: Sequence[int]) -> list[LookupOutcome] | None:
        """Each target over the remote segments first (outside the lock: store calls), then the
        local log from its own start for the targets the remote ones do not answer. None when
        the local log start moved since ``view`` (segments uploaded and deleted locally in
        between: their records are in neither part searched), for the caller to look again."""
        check_targets(timestamps_ms, self._name)
        found: dict[int, LookupOutcome] = {}
        for target in sorted(set(timestamps_ms)):
            if target == EARLIEST_LOCAL_TIMESTAMP:  # Kafka: the local log's start
                found[target] = TimestampAndOffset(-1, view.local_start_offset)
            elif target == LATEST_TIERED_TIMESTAMP:  # Kafka: the highest offset in the store
                found[target] = TimestampAndOffset(-1, view.tier.highest_uploaded_offset)
            elif target in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP):
                found[target] = TimestampAndOffset(
                    -1, view.log_end_offset if target == LATEST_TIMESTAMP else view.log_start_offset)
            elif target >= 0:
                try:
                    found[target] = remote_offset_for_timestamp(view.tier, view.segments, target,
                                                                view.log_start_offset)
                except StorageError as exc:
                    found[target] = exc
        local_targets = [t for t in sorted(set(timestamps_ms))
                         if t == MAX_TIMESTAMP or (t >= 0 and found[t] is None)]
        if local_targets:
            with self._lock:
                self._local.check_usable()
                if self._segments.first.base_offset != view.local_start_offset:
                    return None
                local = lookup_timestamps(self._local, local_targets, view.local_start_offset, self._log_end_offset)
            found.update(zip(local_targets, local))
        if MAX_TIMESTAMP in found and not isinstance(found[MAX_TIMESTAMP], StorageError):
            local_best = found[MAX_TIMESTAMP]
            try:
                remote_best = remote_offset_of_max_timestamp(
                    view.tier, view.segments, local_best.timestamp_ms if local_best is not None else -1)
            except StorageError as exc:
                remote_best = exc
            if remote_best is not None:
                found[MAX_TIMESTAMP] = remote_best
        return [found[t] for t in timestamps_ms]

    def offsets_for_timestamps(self, timestamps_ms: Sequence[int]) -> list[TimestampAndOffset | None]:
        """``lookup_timestamps`` for a caller that wants answers or an exception: the first
        target's error (in the targets' order) is raised for the call."""
        outcomes = self.lookup_timestamps(timestamps_ms)
        for outcome in outcomes:
            if isinstance(outcome, StorageError):
                raise outcome
        return outcomes  # type: ignore[return-value]  # (no error among them)

    def explain_timestamp(self, timestamp_ms: int, residency: ResidentPages | None = None) -> LookupExplanation:
        """The path of OffsetsForTimes for ``timestamp_ms`` (>= 0)."""
        if timestamp_ms < 0:
            raise ValueError(f"{self._name}: explain needs a timestamp >= 0, found {timestamp_ms}")
        tier = self._remote_tier
        if tier is not None:
            # Tiered: the lookup itself says whether the answer lies below the local log start;
            # then the remote segment holding that record is the one described.
            found = self.offset_for_timestamp(timestamp_ms)
            if found is not None and found.offset < self.local_log_start_offset:
                explained = tier.explain(found.offset)
                return replace(explained, found_offset=found.offset)
        with self._lock:
            self._local.check_usable()
            segments = self._segments
            reaching = self._local.timestamps.first_slot_reaching(segments, timestamp_ms)
            if self._log_start_offset == self._log_end_offset or reaching >= len(segments):
                return explain_offset_none(segments)
            slot = max(reaching, segments.floor_slot(self._log_start_offset))
            return explain_timestamp(
                segments, slot, timestamp_ms, self._log_start_offset, residency or no_residency
            )

    @property
    def timestamps_loaded(self) -> bool:
        """False until a lookup by time has asked every segment its largest timestamp once:
        after a restart that first lookup runs each inactive segment's deferred first-use
        check, three small reads a segment, so it belongs on a thread, not the event loop."""
        return self._local.timestamps.loaded
