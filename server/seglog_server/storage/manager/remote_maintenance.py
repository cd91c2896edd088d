"""The remote tier's upkeep over every tiered log of the log manager (Kafka's RemoteLogManager
tasks): attaching a tier to a log as it opens, the remote pass (deletions of deleted topics,
removed snapshots' objects, orphans, uploads, local retention after an upload, the whole log's
retention over the remote segments), the uploader thread that runs it, and its figures.

Contract with the log manager, which builds one only when a store is configured and owns the
directories, the topic map and the admin lock:

- The manager hands in what the pass reads: ``online_partitions()`` (a snapshot), whether it is
  ``is_running()`` and whether it still ``owns_dirs()`` (running or stopping: its directories
  are still locked and writable), the shared ``counters`` (segments deleted, maintenance
  errors), and ``remove_snapshot_objects`` (the cleaner's removed exported snapshots).
- ``run_pass`` takes the admin lock only to take its snapshot; every store call (up to the
  store's deadline each) runs outside it, so a silent store never holds up a request, the
  maintenance pass or DeleteTopic. It stops between logs once the manager is no longer running.
- ``stop_uploader`` is called by shutdown outside the admin lock (the pass takes the lock to
  record a finished deletion) and waits at most ``UPLOADER_STOP_WAIT_S``; ``halt`` does not wait.
- Cluster mode (``owner_check``): only partitions this instance owns are uploaded, cleaned of
  orphans and kept by retention in the store; one becoming owned reads its remote segment list
  again first (its previous owner's uploads since the copy was opened). Every tiered copy's
  list is read once after a start, owned or not, so a copy held for another owner answers
  below its local start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base.clock import Clock
from ..base.errors import CorruptTopicMetadataError, RemoteStorageError
from ..base.topic_partition import TopicIdPartition, TopicPartition
from ..dirs.topic_registry import PartitionEntry
from ..format.topic_metadata import TOPIC_METADATA_FILE_NAME, read_topic_metadata
from ..log.unified_log import Log
from .log_manager_statistics import LogManagerCounters
from .remote_deletions import RemoteDeletions
from .remote_uploader import STORE_OPERATIONS, RemoteTierStatistics, RemoteUploader

if TYPE_CHECKING:  # boto3 is loaded only when a store is configured (the remote extra)
    from ..base.fs import FileSystem
    from ..remote.remote_storage_manager import RemoteStorageManager

__all__ = [
    "REMOTE_ORPHAN_CHECK_MS",
    "REMOTE_ORPHAN_GRACE_MS",
    "UPLOADER_STOP_WAIT_S",
    "RemoteMaintenance",
    "no_remote_statistics",
]

_log = logging.getLogger(__name__)

# How long shutdown waits for the uploader's pass to end: one store call may take the store's
# whole deadline (36 s), and a process stopping must not wait for a silent store; the copy it
# interrupts is an orphan the next start removes.
UPLOADER_STOP_WAIT_S = 5.0
# An orphan younger than 10 minutes may be a copy still in flight (a previous owner's, in a
# cluster): past it, no copy of a 1 GiB segment at a few MB/s is still running.
REMOTE_ORPHAN_GRACE_MS = 600_000
# How often the remote pass looks for orphans besides its first pass (Kafka's RLM expiration
# runs every 30 s; orphans are rare, a listing of every partition's records is not free).
REMOTE_ORPHAN_CHECK_MS = 300_000


def no_remote_statistics() -> RemoteTierStatistics:
    """The figures of a manager without a store: zeros, a zero series for every store operation."""
    return RemoteTierStatistics(store_error_counts=dict.fromkeys(STORE_OPERATIONS, 0))


class RemoteMaintenance:
    def __init__(
        self,
        storage: RemoteStorageManager,
        *,
        clock: Clock,
        fs: FileSystem,
        counters: LogManagerCounters,
        admin_lock: threading.RLock,
        is_running: Callable[[], bool],
        owns_dirs: Callable[[], bool],
        online_partitions: Callable[[], list[tuple[TopicPartition, PartitionEntry]]],
        remove_snapshot_objects: Callable[[], object],
        fetch_cache_bytes: int,
        orphan_grace_ms: int = REMOTE_ORPHAN_GRACE_MS,
    ) -> None:
        from ..remote.remote_chunk_cache import CHUNK_BYTES_DEFAULT, RemoteChunkCache

        self.storage = storage
        self._clock = clock
        self._fs = fs
        self._counters = counters
        self._admin_lock = admin_lock
        self._is_running = is_running
        self._online_partitions = online_partitions
        self._remove_snapshot_objects = remove_snapshot_objects
        # A cache below one default chunk holds one smaller chunk instead.
        self._cache: Any = RemoteChunkCache(fetch_cache_bytes, min(CHUNK_BYTES_DEFAULT, fetch_cache_bytes))
        self.deletions = RemoteDeletions(storage, admin_lock=admin_lock, owns_dirs=owns_dirs)
        self._uploader: RemoteUploader | None = None
        # Orphans (a copy a crash interrupted) older than this go at the first remote pass and
        # every REMOTE_ORPHAN_CHECK_MS; younger ones may be a copy still in flight elsewhere.
        self._orphan_grace_ms = orphan_grace_ms
        self._next_orphan_check_ms = 0
        self.orphans_deleted = 0
        self.uploaded_segments = self.uploaded_bytes = 0
        # Cluster mode: (topic, partition) -> whether this instance uploads, cleans and applies
        # the whole log's retention for the partition's remote segments now; None: every tiered
        # log here (one process). The partitions the last pass did so for: one coming back to
        # this instance reads its remote segment list again first.
        self.owner_check: Callable[[str, int], bool] | None = None
        self._owned: set[TopicPartition] = set()

    # ---------------------------------------------------------------------------------------
    # tiers and the uploader thread
    # ---------------------------------------------------------------------------------------
    def attach_tier(self, log: Log, path: str, tp: TopicPartition, log_start_offset: int) -> None:
        """Gives a tiered topic's newly opened ``log`` its remote tier, keyed by the topic id in
        ``path``'s topic.properties (CorruptTopicMetadataError without one). No store call: the
        uploader's pass reads the tier's segment list (``_list``), so a start with the store
        silent does not wait its deadline once per tiered log; until then the log answers reads
        below its local start UNAVAILABLE."""
        from ..log.remote_log_tier import RemoteLogTier

        metadata = read_topic_metadata(path, fs=self._fs)
        if metadata is None:  # a tiered topic's partition was created with its topic.id
            raise CorruptTopicMetadataError(f"{path}: no {TOPIC_METADATA_FILE_NAME}, so no topic id to "
                                            "key its remote segments by")
        tier = RemoteLogTier(self.storage, TopicIdPartition(tp.topic, tp.partition, metadata.topic_id),
                             self._clock, self._cache, checkpoint_log_start_offset=log_start_offset)
        log.attach_remote_tier(tier)

    def start_uploader(self, interval_ms: int) -> None:
        """Runs ``run_pass`` every ``interval_ms`` on a thread of its own (once)."""
        if self._uploader is None:
            self._uploader = RemoteUploader(self.run_pass, interval_ms)
            self._uploader.start()

    def stop_uploader(self) -> None:
        """Waits up to UPLOADER_STOP_WAIT_S for the pass to end (outside the admin lock)."""
        if self._uploader is not None and not self._uploader.stop(UPLOADER_STOP_WAIT_S):
            _log.warning("the remote uploader is still in a store call after %.0f s; shutting down "
                         "without it (an interrupted copy is an orphan the next start removes)",
                         UPLOADER_STOP_WAIT_S)

    def halt(self) -> None:
        """Asks the uploader to stop without waiting for its pass."""
        if self._uploader is not None:
            self._uploader.stop(0)

    # ---------------------------------------------------------------------------------------
    # the pass
    # ---------------------------------------------------------------------------------------
    def run_pass(self) -> None:
        """One pass over every tiered log (see the module's contract)."""
        with self._admin_lock:
            if not self._is_running():
                return
            tiered = [p.log for _, p in self._online_partitions() if p.log.remote_tier is not None]
            deleted = self.deletions.pending()
            now_ms = self._clock.monotonic_ns() // 1_000_000
            check_orphans = now_ms >= self._next_orphan_check_ms
            if check_orphans:
                self._next_orphan_check_ms = now_ms + REMOTE_ORPHAN_CHECK_MS
        for tp in deleted:
            self.deletions.delete(tp)
        # Objects of removed exported cleaning snapshots (expiry and DeleteTopic, under the admin
        # lock, only recorded them).
        self._remove_snapshot_objects()
        store_silent = False  # a listing failed in this pass: the others wait for the next one
        for log in tiered:
            if not self._is_running():
                return  # shutting down: the next start picks up where this pass stopped
            # Every tiered copy is listed, owned or not: a copy held for another owner (a move's
            # source in its final copy, a target about to own) answers below its local start
            # from the list; only the owner uploads, cleans orphans and applies retention.
            uploads_here = self._uploads_here(log)
            listed = self._list(log, store_silent)
            store_silent = store_silent or listed is False
            if not listed or not uploads_here:
                continue
            if check_orphans:
                self._cleanup_orphans(log)
            self._pass_over(log)

    def _list(self, log: Log, store_silent: bool) -> bool | None:
        """Reads the tier's remote segment list unless loaded (after a start, or ``reload``) and
        gives the log the log start it implies. True: loaded; None: not tried (the store failed
        earlier in this pass, or the tier backs off) or failed for this log alone (a corrupt
        record); False: the store is unavailable now. One silent listing per pass, not one per
        tiered log; a listing error of one log's own does not stop the others'."""
        tier = log.remote_tier
        assert tier is not None
        if tier.loaded and tier.listed:
            return True  # loaded but not listed: the attach failed, tried again below
        if store_silent or tier.backing_off():
            return None
        try:
            if not tier.load():
                return False  # unavailable: the store is silent for every log
        except RemoteStorageError as exc:  # this log's own (a corrupt record): the others go on
            self._counters.maintenance_errors += 1
            _log.error("%r: listing its remote segments failed (retried after a backoff): %s", log, exc)
            return None
        try:
            log.attach_remote_tier(tier)
        except Exception:
            self._counters.maintenance_errors += 1
            _log.exception("remote pass of %r failed", log)
            return None
        return True

    def _uploads_here(self, log: Log) -> bool:
        check = self.owner_check
        if check is None:
            return True
        tp = TopicPartition(log.topic, log.partition)
        if not check(log.topic, log.partition):
            self._owned.discard(tp)
            return False
        if tp not in self._owned:
            self._owned.add(tp)
            assert log.remote_tier is not None
            log.remote_tier.reload()  # loaded again by this pass, before anything is uploaded
        return True

    def _cleanup_orphans(self, log: Log) -> None:
        """Orphans of the log older than the grace: at the first pass after a start (a crash's
        interrupted copy) and every REMOTE_ORPHAN_CHECK_MS."""
        try:
            count = self.storage.cleanup_orphans(log.remote_tier.topic_id_partition,
                                                 older_than_ms=self._orphan_grace_ms)
        except Exception as exc:  # noqa: BLE001 - the next check retries
            _log.warning("orphan cleanup of %r failed: %s", log, exc)
            self._next_orphan_check_ms = 0
            return
        if count:
            self.orphans_deleted += count
            _log.info("%r: deleted %d orphan remote segments (copies a crash interrupted)", log, count)

    def _pass_over(self, log: Log) -> None:
        """Copy the log's closed segments to the store, then the whole log's retention over the
        remote ones. The store failing backs off in the tier; nothing here stops serving."""
        tier = log.remote_tier
        assert tier is not None
        try:
            if log.is_offline or log.is_closed:
                return
            bytes_before = tier.uploaded_bytes
            copied = tier.upload_pass(log.upload_candidates)
            self.uploaded_segments += copied
            self.uploaded_bytes += tier.uploaded_bytes - bytes_before
            if copied:
                self._counters.segments_deleted += log.delete_old_segments()
            log.remote_retention_pass()
        except Exception:
            self._counters.maintenance_errors += 1
            _log.exception("remote pass of %r failed", log)

    # ---------------------------------------------------------------------------------------
    # figures
    # ---------------------------------------------------------------------------------------
    def statistics(self) -> RemoteTierStatistics:
        """The remote tier's figures (the metrics' remote section)."""
        lag_bytes, oldest_ms = 0, -1
        check = self.owner_check
        for tp, partition in self._online_partitions():
            tier = partition.log.remote_tier
            if tier is None or (check is not None and not check(tp.topic, tp.partition)):
                continue  # another instance's to upload: its lag is counted there
            log_bytes, log_oldest_ms = partition.log.upload_lag(tier.highest_uploaded_offset)
            lag_bytes += log_bytes
            if log_oldest_ms >= 0 and (oldest_ms < 0 or log_oldest_ms < oldest_ms):
                oldest_ms = log_oldest_ms
        cache = self._cache.statistics()
        rsm = self.storage
        errors = dict(rsm.store.error_counts)
        if rsm.read_store is not rsm.store:
            for op, count in rsm.read_store.error_counts.items():
                errors[op] = errors.get(op, 0) + count
        return RemoteTierStatistics(
            uploaded_segment_count=self.uploaded_segments, uploaded_bytes=self.uploaded_bytes,
            upload_lag_bytes=lag_bytes,
            upload_lag_seconds=max(0.0, (self._clock.time_ms() - oldest_ms) / 1000) if oldest_ms >= 0 else 0.0,
            fetch_count=rsm.fetch_count, fetch_bytes=rsm.fetch_bytes, fetch_seconds=rsm.fetch_seconds,
            cache_hit_count=cache.hit_count, cache_miss_count=cache.miss_count,
            store_error_counts=errors, orphans_deleted=self.orphans_deleted)
