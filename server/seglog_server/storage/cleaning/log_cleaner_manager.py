"""The service's side of offline cleaning (Kafka's LogCleanerManager, without the cleaner threads).

seglog does not clean inside the service: a scheduled job cleans immutable snapshots and the
service installs the result. This class owns everything of that loop that lives here:

- **snapshots**: ``create_snapshot`` (``log_snapshot.take_snapshot``), ``drop_snapshot``, and their
  registry: every complete snapshot on disk, found again at start-up (incomplete ones, without
  ``manifest.json``, are removed then); ``expire_snapshots`` (run by maintenance) removes those
  older than ``snapshot_ttl_ms`` so an abandoned one cannot pin disk space for ever;
- **choosing**: ``list_cleanable``, each compacted partition's range and dirty ratio
  (``log_to_clean``) against its cleaner checkpoint;
- **installing**: ``commit`` (``log_cleaning_install.install_cleaned``), then the
  ``cleaner-offset-checkpoint`` of the partition's directory advances to the result's
  ``cleaned_up_to_offset`` (Kafka's format, atomic) and the snapshot goes;
- **figures**: per partition, the last run's statistics as the job reported them, bytes
  reclaimed, refusals and the last success time (``statistics``).

A snapshot is worked on by one call at a time (commit, drop or expiry claim it); commits of one
partition are serialised, so two results can never both be checked against the same log state.
An I/O error in the log directory takes it offline (the manager's rule, through
``take_dir_offline``), except an exhausted resource (a full disk, no descriptors): the snapshot or
commit that met it removes what it made and fails alone with a retriable ResourceExhaustedError,
and the directory keeps serving (DeleteTopic frees space). A swap that fails half done takes its
log offline whatever the errno (``Log.replace_segments``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..format.checkpoint import CorruptCheckpointError
from ..base.clock import Clock
from ..base.errors import (
    LogDirOfflineError,
    NotCleanableError,
    RemoteStorageError,
    ResourceExhaustedError,
    SnapshotNotFoundError,
    StaleCleaningResultError,
    StorageError,
)
from ..base.fs import FileSystem
from ..base.io_errors import exhaustion_error, is_exhaustion
from .log_cleaning_install import InstallOutcome, install_cleaned
from ..dirs.log_dir import LogDir
from .log_snapshot import (
    MANIFEST_FILE_NAME,
    TakenSnapshot,
    check_snapshot_id,
    new_snapshot_id,
    read_manifest,
    remove_snapshot,
    snapshots_root,
    take_snapshot,
)
from .cleaning_manifest import SnapshotManifest
from .log_to_clean import LogToClean, log_to_clean
from ..base.topic_partition import TopicPartition
from ..dirs.topic_registry import IO_ERRORS, PartitionEntry

from .snapshot_removals import SnapshotRemovals

if TYPE_CHECKING:
    from ..log.unified_log import Log
    from .snapshot_store import SnapshotStore

__all__ = [
    "DEFAULT_SNAPSHOT_TTL_MS",
    "CleanableLog",
    "CleanerStatistics",
    "CommitOutcome",
    "LogCleanerManager",
    "PartitionCleanerStatistics",
]

_log = logging.getLogger(__name__)

# snapshot_ttl_ms default: 6 hours. A cleaning reads its snapshot at tens of MB/s, so even a
# partition of hundreds of GiB is done well within it; an abandoned snapshot (a scheduler killed
# mid-run) pins the disk space of the segments it links for at most that long.
DEFAULT_SNAPSHOT_TTL_MS = 6 * 3600 * 1000
# How many committed snapshot ids are remembered, so a second commit of one is answered "already
# committed" rather than "unknown". A scheduler retries within seconds; 4096 ids cost ~1 MiB.
_COMMITTED_IDS_MAX = 4096


@dataclass(frozen=True)
class CleanableLog:
    """One compacted partition as ``list_cleanable`` sees it."""

    topic: str
    partition: int
    log_dir: str
    to_clean: LogToClean
    open_snapshot_ids: tuple[str, ...]


@dataclass(frozen=True)
class CommitOutcome:
    snapshot_id: str
    topic: str
    partition: int
    replaced_segment_count: int
    installed_segment_count: int
    bytes_before: int
    bytes_after: int
    cleaned_up_to_offset: int


@dataclass(frozen=True)
class PartitionCleanerStatistics:
    topic: str
    partition: int
    log_dir: str
    dirty_ratio: float
    cleanable_bytes: int
    first_dirty_offset: int
    must_clean: bool
    open_snapshot_count: int
    run_count: int  # results installed since start
    refused_count: int  # stale or damaged results refused since start
    bytes_reclaimed_total: int  # replaced bytes minus installed bytes, summed over runs
    last_success_time_ms: int  # 0: no run installed since start
    last_records_read: int
    last_records_kept: int
    last_bytes_read: int
    last_bytes_written: int
    last_distinct_keys: int
    last_tombstones_dropped: int
    last_map_utilization: float
    last_collision_rate: float
    last_duration_s: float
    last_engine: str


@dataclass(frozen=True)
class CleanerStatistics:
    snapshot_ttl_ms: int
    open_snapshot_count: int
    snapshots_created_count: int
    snapshots_committed_count: int
    snapshots_dropped_count: int
    snapshots_expired_count: int
    incomplete_snapshots_removed_count: int
    commits_refused_count: int
    partitions: tuple[PartitionCleanerStatistics, ...]
    # Compacted partitions left out of ``partitions`` because describing them raised (logged):
    # one partition's error must not cost the whole /metrics scrape.
    skipped_partition_count: int = 0
    # Removed exported snapshots whose objects the store has not let go yet (snapshot_removals.py).
    store_removals_pending_count: int = 0

    # Service-wide views (the metrics module's cleaner hook reads these names).
    @property
    def dirty_ratios(self) -> dict[tuple[str, int], float]:
        return {(p.topic, p.partition): p.dirty_ratio for p in self.partitions}

    @property
    def bytes_reclaimed_total(self) -> int:
        return sum(p.bytes_reclaimed_total for p in self.partitions)

    @property
    def last_commit_time_ms(self) -> int:
        return max((p.last_success_time_ms for p in self.partitions), default=0)

    @property
    def offset_map_utilization(self) -> float:
        """The most recent run's offset-map fill (Kafka's max-buffer-utilization, one run)."""
        latest = self._latest_run()
        return latest.last_map_utilization if latest is not None else 0.0

    @property
    def offset_map_collision_ratio(self) -> float:
        latest = self._latest_run()
        return latest.last_collision_rate if latest is not None else 0.0

    def _latest_run(self) -> PartitionCleanerStatistics | None:
        runs = [p for p in self.partitions if p.last_success_time_ms > 0]
        return max(runs, key=lambda p: p.last_success_time_ms) if runs else None


@dataclass
class _OpenSnapshot:
    manifest: SnapshotManifest
    log_dir: LogDir
    path: str
    segments: tuple | None  # the live segments linked; None for one found at start-up
    # The call working on it (commit, drop, expiry), if any: only that call's claim releases it,
    # so a call releasing twice (an error path, then its finally) never frees another's claim.
    holder: _Claim | None = None

    @property
    def busy(self) -> bool:
        return self.holder is not None


@dataclass(eq=False)
class _Claim:
    """One call's hold on an open snapshot (compared by identity)."""

    entry: _OpenSnapshot


@dataclass
class _RunFigures:
    run_count: int = 0
    refused_count: int = 0
    bytes_reclaimed_total: int = 0
    last_success_time_ms: int = 0
    last: dict[str, float | int | str] = field(default_factory=dict)


class LogCleanerManager:
    def __init__(
        self,
        *,
        fs: FileSystem,
        clock: Clock,
        snapshot_ttl_ms: int,
        find_partition: Callable[[TopicPartition], PartitionEntry | None],
        missing_error: Callable[[TopicPartition], StorageError],
        all_partitions: Callable[[], list[tuple[TopicPartition, PartitionEntry]]],
        take_dir_offline: Callable[[LogDir, str], None],
        snapshot_store: SnapshotStore | None = None,
    ) -> None:
        assert snapshot_ttl_ms >= 1
        # Where snapshots are exported for a cleaner without the service's disk (the service's
        # --remote-storage); None: only shared-disk snapshots.
        self._snapshot_store = snapshot_store
        # The objects of removed exported snapshots, deleted by remove_store_objects (off the
        # callers' locks: expiry and DeleteTopic hold the manager's admin lock).
        self._removals = SnapshotRemovals(snapshot_store, fs) if snapshot_store is not None else None
        self._fs = fs
        self._clock = clock
        self._snapshot_ttl_ms = snapshot_ttl_ms
        self._find_partition = find_partition
        self._missing_error = missing_error
        self._all_partitions = all_partitions
        self._take_dir_offline = take_dir_offline
        self._lock = threading.Lock()  # the registry, the figures and the committed ids
        self._checkpoint_lock = threading.Lock()  # read-modify-write of cleaner checkpoints
        self._partition_locks: dict[TopicPartition, threading.Lock] = {}
        self._snapshots: dict[str, _OpenSnapshot] = {}
        self._committed: deque[str] = deque(maxlen=_COMMITTED_IDS_MAX)
        self._figures: dict[TopicPartition, _RunFigures] = {}
        self._created_count = 0
        self._committed_count = 0
        self._dropped_count = 0
        self._expired_count = 0
        self._incomplete_removed_count = 0
        self._refused_count = 0

    # -- start-up ------------------------------------------------------------------------------
    def load_snapshots(self, log_dirs: Iterable[LogDir]) -> None:
        """Registers the complete snapshots of each online directory; removes the others."""
        for log_dir in log_dirs:
            if not log_dir.online:
                continue
            try:
                self._load_dir(log_dir)
            except OSError as exc:
                self._take_dir_offline(log_dir, f"reading cleaning snapshots failed: {exc}")

    def _load_dir(self, log_dir: LogDir) -> None:
        root = snapshots_root(log_dir.path)
        if not self._fs.exists(root):
            return
        names = sorted(self._fs.listdir(root))
        removed = self._load_removals(log_dir, root, names)
        for name in names:
            path = os.path.join(root, name)
            if name in removed:
                if os.path.isdir(path):  # a crash came between the marker and the directory's removal
                    remove_snapshot(path, self._fs)
                continue
            manifest = self._complete_manifest(path, name)
            if manifest is None:
                _log.warning("removing incomplete cleaning snapshot %s", path)
                self._record_store_removal_if_exported(log_dir, path, name)
                remove_snapshot(path, self._fs) if os.path.isdir(path) else self._fs.unlink(path)
                self._incomplete_removed_count += 1
                continue
            self._snapshots[name] = _OpenSnapshot(manifest, log_dir, path, None)

    def _record_store_removal_if_exported(self, log_dir: LogDir, path: str, name: str) -> None:
        """An exported snapshot removed at start-up as incomplete (its manifest refused) still
        has its objects in the store: their removal is recorded first, as ``_remove`` does, so
        the remote tier's pass deletes them (an OSError here takes the directory offline with the
        snapshot kept, as a failed removal does)."""
        if self._removals is None or not os.path.isdir(path) or not self._snapshot_store.is_exported(path):
            return
        try:
            check_snapshot_id(name)
        except StorageError:
            return  # seglog names what it exports by a valid id; nothing of ours under this one
        _log.warning("cleaning snapshot %s was exported: its objects are deleted from the store by the "
                     "remote tier's next pass", name)
        self._removals.record(log_dir.path, name)

    def _load_removals(self, log_dir: LogDir, root: str, names: list[str]) -> set[str]:
        """The store-removal markers among ``names`` (pending again), and their snapshot ids."""
        found: set[str] = set()
        if self._removals is None:
            return found
        for name in names:
            if not os.path.isfile(os.path.join(root, name)):
                continue
            snapshot_id = self._removals.load(log_dir.path, name)
            if snapshot_id is not None:
                found.update((name, snapshot_id))
        if found:
            _log.warning("%d exported cleaning snapshots in %s still have objects in the store; the remote "
                         "tier's next pass deletes them", len(found) // 2, log_dir.path)
        return found

    def _complete_manifest(self, path: str, name: str) -> SnapshotManifest | None:
        try:
            check_snapshot_id(name)
        except StorageError:
            return None
        if not os.path.isdir(path) or not self._fs.exists(os.path.join(path, MANIFEST_FILE_NAME)):
            return None
        try:
            manifest = read_manifest(path, self._fs)
        except StorageError as exc:
            _log.warning("cleaning snapshot %s has an unreadable manifest: %s", path, exc)
            return None
        return manifest if manifest.snapshot_id == name else None

    # -- snapshots -----------------------------------------------------------------------------
    def create_snapshot(self, topic: str, partition: int, *, export: bool = False) -> TakenSnapshot:
        """Raises UnknownTopicOrPartitionError, NotCleanableError, LogDirOfflineError; with
        ``export`` (the snapshot copied to the object store) also RemoteStorageError."""
        if export and self._snapshot_store is None:
            raise NotCleanableError(
                "this service has no object store (--remote-storage s3://BUCKET[/PREFIX]): a cleaning "
                "snapshot cannot be exported to one; clean on a shared disk instead")
        tp = TopicPartition(topic, partition)
        entry = self._partition(tp)
        now_ms = self._clock.time_ms()
        checkpoint = self._checkpoint(entry.log_dir, tp)
        snapshot_id = new_snapshot_id(topic, partition, now_ms)
        try:
            taken = take_snapshot(
                entry.log, entry.log_dir.path, checkpoint=checkpoint, now_ms=now_ms, snapshot_id=snapshot_id, fs=self._fs
            )
        except IO_ERRORS as exc:
            # take_snapshot removed what it made: a full disk fails this snapshot alone.
            raise self._failed(entry.log_dir, f"taking cleaning snapshot {snapshot_id}", exc) from exc
        if export:
            self._export(entry.log_dir, taken)
        with self._lock:
            self._snapshots[snapshot_id] = _OpenSnapshot(taken.manifest, entry.log_dir, taken.path, taken.segments)
            self._created_count += 1
        _log.info(
            "cleaning snapshot %s: %d segments, %d bytes, offsets [%d, %d), first dirty %d",
            snapshot_id, len(taken.manifest.segments), taken.manifest.size_bytes,
            taken.manifest.log_start_offset, taken.manifest.first_uncleanable_offset, taken.manifest.first_dirty_offset,
        )
        return taken

    def _export(self, log_dir: LogDir, taken: TakenSnapshot) -> None:
        """Copies a taken snapshot to the store; on any failure the local snapshot goes too, so
        a failed export leaves nothing behind but objects without a manifest (never read)."""
        assert self._snapshot_store is not None and self._removals is not None
        snapshot_id = taken.manifest.snapshot_id
        try:
            self._snapshot_store.export(taken)
        except BaseException:
            try:
                # The objects already written go now if the store lets them, else by a later pass.
                self._removals.record(log_dir.path, snapshot_id)
                remove_snapshot(taken.path, self._fs)
            except OSError as exc:
                _log.warning("removing cleaning snapshot %s after a failed export: %s", taken.path, exc)
            self._removals.remove_due(only=snapshot_id)
            raise
        _log.info("cleaning snapshot %s exported to %s", taken.manifest.snapshot_id,
                  self._snapshot_store.url(taken.manifest.snapshot_id))

    def store_url(self, snapshot_id: str) -> str:
        """The object-store URL of an exported snapshot ("" when it was not exported)."""
        store = self._snapshot_store
        if store is None or not store.is_exported(self.snapshot_path(snapshot_id)):
            return ""
        return store.url(snapshot_id)

    def drop_snapshot(self, snapshot_id: str, *, remove_objects_now: bool = True) -> bool:
        """Removes a snapshot; False when there was none (dropping is idempotent). An exported
        one's objects go at once when the store answers, else at a later remote pass; a caller
        holding a lock passes ``remove_objects_now=False`` (no store call at all)."""
        check_snapshot_id(snapshot_id)
        try:
            claim = self._claim(snapshot_id)
        except SnapshotNotFoundError:
            return False
        try:
            self._remove(claim, snapshot_id)
        finally:
            self._release(claim)  # whatever _remove raised: a claim never outlives its call
        with self._lock:
            self._dropped_count += 1
        if remove_objects_now:
            self.remove_store_objects(only=snapshot_id)
        return True

    def drop_snapshots_of(self, topic: str) -> int:
        """Removes the snapshots of a deleted topic that nothing is working on."""
        with self._lock:
            ids = [i for i, entry in self._snapshots.items() if entry.manifest.topic == topic and not entry.busy]
        dropped = 0
        for snapshot_id in ids:
            try:
                dropped += self.drop_snapshot(snapshot_id, remove_objects_now=False)
            except (StaleCleaningResultError, LogDirOfflineError):
                continue  # claimed meanwhile, or its directory failed: expiry or start-up finishes
        return dropped

    def expire_snapshots(self) -> int:
        """Removes snapshots older than snapshot_ttl_ms that nothing is working on."""
        now_ms = self._clock.time_ms()
        with self._lock:
            due = [
                (snapshot_id, entry) for snapshot_id, entry in self._snapshots.items()
                if not entry.busy and now_ms - entry.manifest.created_ms >= self._snapshot_ttl_ms
            ]
            claims = [(snapshot_id, self._hold(entry)) for snapshot_id, entry in due]
        removed = 0
        try:
            for snapshot_id, claim in claims:
                _log.warning("cleaning snapshot %s expired after snapshot_ttl_ms=%d; removing it", snapshot_id,
                             self._snapshot_ttl_ms)
                try:
                    self._remove(claim, snapshot_id)
                except LogDirOfflineError:
                    continue  # the directory went offline; start-up deals with what is left
                removed += 1
        finally:
            for _, claim in claims:  # whatever a removal raised: no claim outlives this call
                self._release(claim)
        with self._lock:
            self._expired_count += removed
        return removed

    def snapshot_path(self, snapshot_id: str) -> str:
        with self._lock:
            entry = self._snapshots.get(check_snapshot_id(snapshot_id))
            if entry is None:
                raise SnapshotNotFoundError(f"no cleaning snapshot {snapshot_id!r}")
            return entry.path

    def snapshot_partition(self, snapshot_id: str) -> TopicPartition | None:
        """The partition an open snapshot was taken of; None for an id not open here (``commit``
        says why)."""
        with self._lock:
            entry = self._snapshots.get(snapshot_id)
        return None if entry is None else TopicPartition(entry.manifest.topic, entry.manifest.partition)

    def _claim(self, snapshot_id: str) -> _Claim:
        with self._lock:
            entry = self._snapshots.get(snapshot_id)
            if entry is None:
                if snapshot_id in self._committed:
                    raise StaleCleaningResultError(f"snapshot {snapshot_id} was already committed")
                raise SnapshotNotFoundError(
                    f"no cleaning snapshot {snapshot_id!r} (never made, dropped, or expired after "
                    f"snapshot_ttl_ms={self._snapshot_ttl_ms})"
                )
            if entry.busy:
                raise StaleCleaningResultError(f"snapshot {snapshot_id} is being committed or removed by another call")
            return self._hold(entry)

    @staticmethod
    def _hold(entry: _OpenSnapshot) -> _Claim:
        """Claims a free entry (under ``_lock``)."""
        claim = _Claim(entry)
        entry.holder = claim
        return claim

    def _release(self, claim: _Claim) -> None:
        """Frees the snapshot if ``claim`` still holds it (releasing twice is harmless)."""
        with self._lock:
            if claim.entry.holder is claim:
                claim.entry.holder = None

    def remove_store_objects(self, only: str | None = None) -> int:
        """Deletes the objects of removed exported snapshots (all, or ``only``'s): store calls of
        up to the store's deadline each, so never under a lock (the remote tier's thread runs it
        each pass). Returns how many snapshots' objects went; failures stay pending."""
        return 0 if self._removals is None else self._removals.remove_due(only)

    def pending_store_removals(self) -> list[str]:
        """Removed exported snapshots whose objects are still in the store."""
        return [] if self._removals is None else self._removals.pending()

    def _remove(self, claim: _Claim, snapshot_id: str) -> None:
        """Removes the local snapshot; an exported one's objects are recorded for
        remove_store_objects first (a durable marker: a crash cannot forget them)."""
        entry = claim.entry
        removals = self._removals
        exported = removals is not None and self._snapshot_store.is_exported(entry.path)
        try:
            if exported:
                removals.record(entry.log_dir.path, snapshot_id)
            remove_snapshot(entry.path, self._fs)
            self._fs.fsync_dir(snapshots_root(entry.log_dir.path))
        except FileNotFoundError:
            pass
        except OSError as exc:
            self._release(claim)
            raise self._dir_failed(entry.log_dir, f"removing cleaning snapshot {snapshot_id}", exc) from exc
        with self._lock:
            self._snapshots.pop(snapshot_id, None)

    # -- commit --------------------------------------------------------------------------------
    def commit(self, snapshot_id: str) -> CommitOutcome:
        """Installs the snapshot's result. Raises SnapshotNotFoundError, StaleCleaningResultError,
        InvalidCleaningResultError (nothing changed), LogDirOfflineError."""
        check_snapshot_id(snapshot_id)
        try:
            claim = self._claim(snapshot_id)
        except StaleCleaningResultError:
            with self._lock:
                self._refused_count += 1
            raise
        manifest = claim.entry.manifest
        try:  # released on every path, whatever it raises: a claim never outlives its call
            outcome = self._commit_claimed(claim, snapshot_id)
            self._note_success(TopicPartition(manifest.topic, manifest.partition), outcome)
            self._remove(claim, snapshot_id)
        finally:
            # A no-op once released (_remove's error path) or removed: never another call's claim.
            self._release(claim)
        with self._lock:
            self._committed.append(snapshot_id)
            self._committed_count += 1
        self.remove_store_objects(only=snapshot_id)
        _log.info(
            "installed cleaning %s: %d segments (%d bytes) replaced by %d (%d bytes); cleaner checkpoint %d",
            snapshot_id, outcome.replaced_segment_count, outcome.bytes_before, outcome.installed_segment_count,
            outcome.bytes_after, outcome.result.cleaned_up_to_offset,
        )
        return CommitOutcome(
            snapshot_id=snapshot_id,
            topic=manifest.topic,
            partition=manifest.partition,
            replaced_segment_count=outcome.replaced_segment_count,
            installed_segment_count=outcome.installed_segment_count,
            bytes_before=outcome.bytes_before,
            bytes_after=outcome.bytes_after,
            cleaned_up_to_offset=outcome.result.cleaned_up_to_offset,
        )

    def _commit_claimed(self, claim: _Claim, snapshot_id: str) -> InstallOutcome:
        """The commit of a claimed snapshot; the caller releases the claim whatever happens."""
        entry = claim.entry
        manifest = entry.manifest
        tp = TopicPartition(manifest.topic, manifest.partition)
        partition: PartitionEntry | None = None
        try:
            partition = self._find_partition(tp)
            if partition is None or partition.log_dir is not entry.log_dir:
                raise StaleCleaningResultError(
                    f"snapshot {snapshot_id} is stale: partition {tp} no longer lives in {entry.log_dir.path}"
                )
            with self._partition_lock(tp):
                _check_still_compacted(partition.log, snapshot_id)
                outcome = self._install(entry, partition)
                self._advance_checkpoint_or_warn(entry.log_dir, tp, outcome.result.cleaned_up_to_offset)
        except IO_ERRORS as exc:
            # install_cleaned removed the .cleaned files it made (or, half swapped, took the log
            # offline, which LogDirOfflineError reports): a full disk fails this commit alone.
            raise self._failed(entry.log_dir, f"installing cleaning {snapshot_id}", exc) from exc
        except (ResourceExhaustedError, RemoteStorageError):
            raise  # not a refusal: the same result may be committed again
        except StorageError:
            self._note_refusal(tp)
            if partition is not None and not partition.log.config.is_compacted:
                # Never installable while the policy is delete: its links would only hold the
                # superseded segments' bytes on disk until the snapshot expired.
                self._remove(claim, snapshot_id)
            raise
        return outcome

    def _install(self, entry: _OpenSnapshot, partition: PartitionEntry) -> InstallOutcome:
        store = self._snapshot_store
        if store is not None and store.is_exported(entry.path):
            # The job's output comes from the store into the snapshot directory; from there the
            # install checks and swaps it exactly as a shared-disk result.
            store.fetch_result(entry.path, entry.manifest)
        return install_cleaned(
            partition.log, entry.path, entry.manifest, expected_segments=entry.segments, fs=self._fs
        )

    def _partition_lock(self, tp: TopicPartition) -> threading.Lock:
        with self._lock:
            return self._partition_locks.setdefault(tp, threading.Lock())

    # -- the cleaner checkpoint ----------------------------------------------------------------
    def _checkpoint(self, log_dir: LogDir, tp: TopicPartition) -> int | None:
        return self._read_checkpoints_or_raise(log_dir).get(tp)

    def _read_checkpoints(self, log_dir: LogDir) -> dict[TopicPartition, int]:
        try:
            return log_dir.cleaner_offset_file.read()
        except CorruptCheckpointError as exc:
            _log.warning("%s; treating it as empty (every compacted log is dirty from its start)", exc)
            return {}

    def _read_checkpoints_or_raise(self, log_dir: LogDir) -> dict[TopicPartition, int]:
        """``_read_checkpoints`` with its OSError translated (io_errors.py): a retriable error
        when a resource ran out, else the directory goes offline."""
        try:
            return self._read_checkpoints(log_dir)
        except OSError as exc:
            exhausted = exhaustion_error(exc, f"reading the cleaner checkpoint of {log_dir.path}")
            if exhausted is not None:
                raise exhausted from exc
            raise self._dir_failed(log_dir, "reading the cleaner checkpoint", exc) from exc

    def _advance_checkpoint_or_warn(self, log_dir: LogDir, tp: TopicPartition, offset: int) -> None:
        """After an install: on a full disk the checkpoint stays behind (the next round finds
        the cleaned range dirty again and recopies it, losing nothing); a commit that is in the
        log is not reported failed for it."""
        try:
            self._advance_checkpoint(log_dir, tp, offset)
        except OSError as exc:
            if not is_exhaustion(exc):
                raise
            _log.warning("cleaner checkpoint of %s not advanced to %d: %s (retried by the next commit)", tp, offset, exc)

    def _advance_checkpoint(self, log_dir: LogDir, tp: TopicPartition, offset: int) -> None:
        with self._checkpoint_lock:
            offsets = self._read_checkpoints(log_dir)
            offsets[tp] = offset
            log_dir.cleaner_offset_file.write(offsets)

    def drop_checkpoints(self, log_dir: LogDir, gone: Iterable[TopicPartition]) -> None:
        """Forgets deleted partitions (raises OSError when the write fails)."""
        gone = set(gone)
        with self._checkpoint_lock:
            offsets = self._read_checkpoints(log_dir)
            if gone & offsets.keys():
                log_dir.cleaner_offset_file.write({tp: o for tp, o in offsets.items() if tp not in gone})

    # -- choosing ------------------------------------------------------------------------------
    def list_cleanable(self, topic: str | None = None) -> list[CleanableLog]:
        """Every online compacted partition (of ``topic``, if given), dirtiest first. A partition
        that went offline meanwhile is left out; another error is the call's (a retriable
        ResourceExhaustedError when descriptors ran out)."""
        found, _ = self._list_cleanable(topic, skip_failures=False)
        return found

    def _list_cleanable(self, topic: str | None, *, skip_failures: bool) -> tuple[list[CleanableLog], int]:
        """``list_cleanable``; with ``skip_failures``, a partition whose description raises is
        logged and counted (the second value) instead, for the figures of a scrape."""
        now_ms = self._clock.time_ms()
        checkpoints: dict[str, dict[TopicPartition, int]] = {}
        with self._lock:
            open_ids: dict[TopicPartition, list[str]] = {}
            for snapshot_id, entry in self._snapshots.items():
                open_ids.setdefault(TopicPartition(entry.manifest.topic, entry.manifest.partition), []).append(snapshot_id)
        found = []
        skipped = 0
        for tp, partition in self._all_partitions():
            log = partition.log
            if (topic is not None and tp.topic != topic) or not log.config.is_compacted or log.is_offline:
                continue
            if partition.log_dir.path not in checkpoints:
                checkpoints[partition.log_dir.path] = self._read_checkpoints_or_raise(partition.log_dir)
            checkpoint = checkpoints[partition.log_dir.path].get(tp)
            try:
                view = log.cleanable_view(timestamps_from=checkpoint)
                to_clean = log_to_clean(view, checkpoint=checkpoint, now_ms=now_ms)
            except LogDirOfflineError:
                continue  # (the log manager's next pass takes its directory offline)
            except Exception as exc:
                if not skip_failures:
                    raise
                skipped += 1
                _log.warning("cleaner figures: partition %s left out: %s", tp, exc)
                continue
            found.append(CleanableLog(tp.topic, tp.partition, partition.log_dir.path, to_clean,
                                      tuple(sorted(open_ids.get(tp, ())))))
        found.sort(key=lambda c: (not c.to_clean.eligible, -c.to_clean.dirty_ratio, c.topic, c.partition))
        return found, skipped

    # -- figures -------------------------------------------------------------------------------
    def _note_refusal(self, tp: TopicPartition) -> None:
        with self._lock:
            self._refused_count += 1
            self._figures.setdefault(tp, _RunFigures()).refused_count += 1

    def _note_success(self, tp: TopicPartition, outcome: InstallOutcome) -> None:
        result = outcome.result
        last: dict[str, float | int | str] = {
            name: result.stat_int(name)
            for name in ("records_read", "records_kept", "bytes_read", "bytes_written", "distinct_keys", "tombstones_dropped")
        }
        for name in ("map_utilization", "collision_rate", "duration_s"):
            last[name] = result.stat_float(name)
        last["engine"] = result.stat_str("engine")
        with self._lock:
            figures = self._figures.setdefault(tp, _RunFigures())
            figures.run_count += 1
            figures.bytes_reclaimed_total += max(0, outcome.bytes_before - outcome.bytes_after)
            figures.last_success_time_ms = self._clock.time_ms()
            figures.last = last

    def statistics(self) -> CleanerStatistics:
        partitions = []
        cleanables, skipped = self._list_cleanable(None, skip_failures=True)
        for cleanable in cleanables:
            tp = TopicPartition(cleanable.topic, cleanable.partition)
            with self._lock:
                figures = self._figures.get(tp, _RunFigures())
                last = dict(figures.last)
            to_clean = cleanable.to_clean
            partitions.append(
                PartitionCleanerStatistics(
                    topic=cleanable.topic,
                    partition=cleanable.partition,
                    log_dir=cleanable.log_dir,
                    dirty_ratio=to_clean.dirty_ratio,
                    cleanable_bytes=to_clean.cleanable_bytes,
                    first_dirty_offset=to_clean.first_dirty_offset,
                    must_clean=to_clean.must_clean,
                    open_snapshot_count=len(cleanable.open_snapshot_ids),
                    run_count=figures.run_count,
                    refused_count=figures.refused_count,
                    bytes_reclaimed_total=figures.bytes_reclaimed_total,
                    last_success_time_ms=figures.last_success_time_ms,
                    last_records_read=int(last.get("records_read", 0)),
                    last_records_kept=int(last.get("records_kept", 0)),
                    last_bytes_read=int(last.get("bytes_read", 0)),
                    last_bytes_written=int(last.get("bytes_written", 0)),
                    last_distinct_keys=int(last.get("distinct_keys", 0)),
                    last_tombstones_dropped=int(last.get("tombstones_dropped", 0)),
                    last_map_utilization=float(last.get("map_utilization", 0.0)),
                    last_collision_rate=float(last.get("collision_rate", 0.0)),
                    last_duration_s=float(last.get("duration_s", 0.0)),
                    last_engine=str(last.get("engine", "")),
                )
            )
        with self._lock:
            return CleanerStatistics(
                snapshot_ttl_ms=self._snapshot_ttl_ms,
                open_snapshot_count=len(self._snapshots),
                snapshots_created_count=self._created_count,
                snapshots_committed_count=self._committed_count,
                snapshots_dropped_count=self._dropped_count,
                snapshots_expired_count=self._expired_count,
                incomplete_snapshots_removed_count=self._incomplete_removed_count,
                commits_refused_count=self._refused_count,
                partitions=tuple(partitions),
                skipped_partition_count=skipped,
                store_removals_pending_count=len(self.pending_store_removals()),
            )

    # -- helpers -------------------------------------------------------------------------------
    def _partition(self, tp: TopicPartition) -> PartitionEntry:
        entry = self._find_partition(tp)
        if entry is None or entry.log.is_offline:
            raise self._missing_error(tp)
        return entry

    def _failed(self, log_dir: LogDir, action: str, exc: BaseException) -> StorageError:
        """A cleaning step's I/O error: retriable when a resource ran out (the step cleaned up
        after itself, the directory keeps serving; io_errors.py), else the directory failed."""
        exhausted = exhaustion_error(exc, action)
        if exhausted is not None:
            _log.warning("%s: %s", action, exhausted)
            return exhausted
        return self._dir_failed(log_dir, action, exc)

    def _dir_failed(self, log_dir: LogDir, action: str, exc: BaseException) -> LogDirOfflineError:
        self._take_dir_offline(log_dir, f"{action} failed: {exc}")
        if isinstance(exc, LogDirOfflineError):
            return exc
        return LogDirOfflineError(f"log directory {log_dir.path} failed while {action}: {exc}")


def _check_still_compacted(log: Log, snapshot_id: str) -> None:
    """The snapshot was taken of a compacted log; its policy may have changed since (a topic's
    configs change after creation). ``UnifiedLog.swap_segments`` checks again under the lock that
    orders it with the change; this early check spares fetching and building the result."""
    if not log.config.is_compacted:
        raise StaleCleaningResultError(
            f"snapshot {snapshot_id} is stale: {log.topic}-{log.partition} is no longer compacted "
            f"(cleanup.policy={','.join(sorted(log.config.cleanup_policy))}); the result is not installed "
            f"and the snapshot is dropped"
        )
