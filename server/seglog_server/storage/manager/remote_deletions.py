"""The remote segments of deleted tiered topics: recorded when the topic goes, deleted from the
object store by the remote pass (Kafka's RemoteLogManager deleting a stopped partition's segments).

Contract with the log manager (which owns the directories and the admin lock):

- ``record`` runs under the admin lock inside DeleteTopic, before anything local is deleted: the
  tiered partitions go into their directories' ``remote-deletion-checkpoint`` (a local file, not
  a marker in the store: the answer must not wait for a store that may be down), so a crash can
  no longer forget their objects. A failed write raises LogDirOfflineError and nothing is deleted.
- ``resume`` runs under the admin lock at start-up: what a crash or a shutdown left pending goes
  at the first remote pass.
- ``check_name_free`` refuses a new topic of a name whose old objects are not gone yet (its keys
  would find them).
- ``delete`` is a store call of up to the store's deadline, made by the remote pass outside the
  admin lock; it takes the lock only to record the finished deletion, and only while the manager
  still holds its directories (``owns_dirs``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..base.errors import LogDirOfflineError
from ..base.topic_partition import TopicIdPartition
from ..dirs.log_dir import LogDir
from ..dirs.topic_registry import PartitionEntry

if TYPE_CHECKING:  # boto3 is loaded only when a store is configured (the remote extra)
    from ..remote.remote_storage_manager import RemoteStorageManager

__all__ = ["RemoteDeletions"]

_log = logging.getLogger(__name__)


class RemoteDeletions:
    def __init__(
        self,
        storage: RemoteStorageManager,
        *,
        admin_lock: threading.RLock,
        owns_dirs: Callable[[], bool],
    ) -> None:
        self._storage = storage
        self._admin_lock = admin_lock
        self._owns_dirs = owns_dirs
        # Partitions (with their topic ids) whose objects the next remote pass deletes, with the
        # log directory whose remote-deletion-checkpoint records them (so a crash forgets none).
        self._pending: dict[TopicIdPartition, LogDir] = {}

    def pending(self) -> list[TopicIdPartition]:
        """The partitions still to delete, in a stable order (a snapshot: taken under the lock)."""
        return sorted(self._pending)

    def check_name_free(self, topic: str) -> None:
        """Raises RemoteStorageUnavailableError while a deleted topic named ``topic`` still has
        objects in the store."""
        if any(tp.topic == topic for tp in self._pending):
            from ..base.errors import RemoteStorageUnavailableError

            raise RemoteStorageUnavailableError(
                f"topic {topic!r}: the remote segments of the deleted topic of that name are not "
                "deleted yet (the object store is slow or down); retry once they are")

    def record(self, topic: str, partitions: Iterable[PartitionEntry | None], now_ms: int) -> None:
        """Writes the tiered ones of a topic's ``partitions`` (None: not served here) into their
        directories' remote-deletion-checkpoint. Raises LogDirOfflineError when a write fails:
        nothing is recorded in memory then, and the caller deletes nothing."""
        tiered = [(p.log.remote_tier.topic_id_partition, p.log_dir) for p in partitions
                  if p is not None and p.log.remote_tier is not None]
        for log_dir in {id(d): d for _, d in tiered}.values():
            recorded = dict(log_dir.remote_deletions)
            recorded.update((tp, now_ms) for tp, d in tiered if d is log_dir)
            try:
                log_dir.write_remote_deletions(recorded)
            except OSError as exc:
                raise LogDirOfflineError(
                    f"deleting topic {topic!r}: recording its remote segments for deletion in "
                    f"{log_dir.path} failed, nothing was deleted: {exc}") from exc
        self._pending.update(tiered)

    def resume(self, online_dirs: Iterable[LogDir], is_live_topic: Callable[[str, str], bool]) -> None:
        """At start: the deletions the directories record go at the first remote pass. A
        partition that is still loaded (``is_live_topic(topic, topic_id)``) never had its deletion
        answered (the crash came between the record and the rename): its entry is dropped."""
        for log_dir in online_dirs:
            live = {tp for tp in log_dir.remote_deletions if is_live_topic(tp.topic, tp.topic_id)}
            self._pending.update((tp, log_dir) for tp in log_dir.remote_deletions if tp not in live)
            if live:
                kept = {tp: ms for tp, ms in log_dir.remote_deletions.items() if tp not in live}
                try:
                    log_dir.write_remote_deletions(kept)
                except OSError as exc:
                    _log.warning("dropping the remote deletions of live %s from %s failed: %s",
                                 sorted(live), log_dir.path, exc)
        if self._pending:
            _log.info("resuming the remote deletion of %d partitions of deleted topics", len(self._pending))

    def delete(self, tp: TopicIdPartition) -> None:
        """Deletes ``tp``'s objects from the store (outside any lock), then records it done. A
        store failure keeps it for the next pass."""
        try:
            count = self._storage.delete_partition(tp)
        except Exception as exc:  # noqa: BLE001 - kept for the next pass
            _log.warning("deleting the remote segments of deleted %s failed (retried at the next pass): %s",
                         tp, exc)
            return
        with self._admin_lock:
            if not self._owns_dirs():
                # Stopped while the store call ran (past the stop wait): the directory is no
                # longer ours to write; the next start deletes the (now empty) prefix again.
                _log.info("deleted %d remote segments of deleted %s; recorded at the next start", count, tp)
                return
            log_dir = self._pending.pop(tp, None)
            if log_dir is not None and log_dir.online and tp in log_dir.remote_deletions:
                kept = {other: ms for other, ms in log_dir.remote_deletions.items() if other != tp}
                try:
                    log_dir.write_remote_deletions(kept)
                except OSError as exc:  # the next start deletes an empty prefix again: harmless
                    _log.warning("recording the remote deletion of %s in %s failed: %s", tp, log_dir.path, exc)
        _log.info("deleted %d remote segments of deleted %s", count, tp)
