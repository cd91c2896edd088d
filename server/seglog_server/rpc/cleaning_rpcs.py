"""The offline-cleaning RPCs of seglog.v1.LogService: ListCleanable, CreateSnapshot, CommitCleaned
and DropSnapshot. Each is convert -> one storage call (on the pool: they read, link, checksum and
rename files) -> convert; errors go through ``status.py`` like every other RPC's.

A family over the service core (service_core.py), kept apart so the data-plane families do not
grow with the cleaning loop.

In cluster mode CommitCleaned installs only into a partition this instance still owns at the
ownership epoch its snapshot was taken at: the partition moved away since (to an instance named in
the refusal's owner hint, FAILED_PRECONDITION) or away and back (a new epoch: the copy the
snapshot was taken of is not the one served) is refused before anything is installed, rather than
installed into a copy nobody reads. CreateSnapshot notes each snapshot's epoch in memory; a
snapshot taken before a restart is checked for ownership only.
"""

from __future__ import annotations

import os
from typing import Any

from seglog.v1 import log_service_pb2 as pb

from . import validation
from .boundary import unary_rpc
from seglog_server.storage.base.errors import StaleCleaningResultError

from .errors import InvalidRequestError
from .service_core import ServiceCore

__all__ = ["CleaningRpcs"]

# Snapshots whose ownership epoch is remembered (cluster mode): a cleaner keeps a few open at a
# time and commits or drops each within snapshot_ttl_ms; the oldest are forgotten past this many
# (their commit is then checked for ownership only).
_SNAPSHOT_EPOCHS_MAX = 4096


class CleaningRpcs:
    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self._snapshot_epochs: dict[str, int] = {}  # snapshot id -> the epoch it was taken at

    @unary_rpc
    async def ListCleanable(self, request: pb.ListCleanableRequest, context: Any) -> Any:
        core = self.core
        found = await core.calls.blocking(core.storage.list_cleanable, request.topic or None)
        if core.cluster is not None:  # only the partitions served here: the others' copies are empty
            found = [c for c in found if core.cluster.owns(c.topic, c.partition)]
        label = core.log_dir_names.label  # log directories as labels, never server paths
        return pb.ListCleanableResponse(partitions=[_cleanable_partition(label, c) for c in found])

    @unary_rpc
    async def CreateSnapshot(self, request: pb.CreateSnapshotRequest, context: Any) -> Any:
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        core = self.core
        # With export_to_store the segments are copied to the store too (on the pool, like the links).
        export = request.export_to_store
        taken = await core.calls.blocking(core.storage.create_snapshot, topic, partition, export=export)
        store_url = core.storage.snapshot_store_url(taken.manifest.snapshot_id) if export else ""
        manifest = taken.manifest
        self._note_epoch(manifest.snapshot_id, topic, partition)
        return pb.CreateSnapshotResponse(
            snapshot_id=manifest.snapshot_id,
            # Its log dir's label, never a server path; the one absolute path is local_path,
            # only when asked for (a cleaner sharing the service's filesystem needs it).
            log_dir=core.log_dir_names.label(taken.log_dir),
            relative_path=os.path.relpath(taken.path, taken.log_dir),
            local_path=taken.path if request.include_local_path else "",
            manifest_json=manifest.to_json_bytes().decode("utf-8"),
            segment_count=len(manifest.segments),
            size_bytes=manifest.size_bytes,
            first_dirty_offset=manifest.first_dirty_offset,
            first_uncleanable_offset=manifest.first_uncleanable_offset,
            store_url=store_url,
        )

    @unary_rpc
    async def CommitCleaned(self, request: pb.CommitCleanedRequest, context: Any) -> Any:
        core = self.core
        snapshot_id = _snapshot_id(request.snapshot_id)
        if core.cluster is not None:
            await core.calls.blocking(self._check_still_owned, snapshot_id)
        outcome = await core.calls.blocking(core.storage.commit_cleaned, snapshot_id)
        self._snapshot_epochs.pop(snapshot_id, None)
        return pb.CommitCleanedResponse(
            topic=outcome.topic,
            partition=outcome.partition,
            replaced_segment_count=outcome.replaced_segment_count,
            installed_segment_count=outcome.installed_segment_count,
            bytes_before=outcome.bytes_before,
            bytes_after=outcome.bytes_after,
            cleaned_up_to_offset=outcome.cleaned_up_to_offset,
        )

    @unary_rpc
    async def DropSnapshot(self, request: pb.DropSnapshotRequest, context: Any) -> Any:
        core = self.core
        dropped = await core.calls.blocking(core.storage.drop_snapshot, _snapshot_id(request.snapshot_id))
        self._snapshot_epochs.pop(request.snapshot_id, None)
        return pb.DropSnapshotResponse(dropped=dropped)

    def _note_epoch(self, snapshot_id: str, topic: str, partition: int) -> None:
        cluster = self.core.cluster
        owner = None if cluster is None else cluster.partition_owner(topic, partition)
        if owner is None:
            return
        self._snapshot_epochs[snapshot_id] = owner.epoch
        while len(self._snapshot_epochs) > _SNAPSHOT_EPOCHS_MAX:
            self._snapshot_epochs.pop(next(iter(self._snapshot_epochs)))

    def _check_still_owned(self, snapshot_id: str) -> None:
        """Blocking (the snapshot's partition is asked of the storage). Raises the owner's hint
        (another owner now) or StaleCleaningResultError (owned again, at another epoch)."""
        core = self.core
        tp = core.storage.snapshot_partition(snapshot_id)
        if tp is None:
            return  # not open here: the commit says why
        core.cluster.check_owner(tp.topic, tp.partition)
        owner = core.cluster.partition_owner(tp.topic, tp.partition)
        taken_at = self._snapshot_epochs.get(snapshot_id)
        if owner is not None and taken_at is not None and owner.epoch != taken_at:
            raise StaleCleaningResultError(
                f"snapshot {snapshot_id} is stale: {tp.topic}-{tp.partition} was taken at ownership epoch {taken_at} "
                f"and is at epoch {owner.epoch} now (it changed owner since); take a new snapshot")


def _snapshot_id(value: str) -> str:
    if not value:
        raise InvalidRequestError("snapshot_id is empty")
    return value


def _cleanable_partition(log_dir_label: Any, cleanable: Any) -> pb.CleanablePartition:
    to_clean = cleanable.to_clean
    return pb.CleanablePartition(
        topic=cleanable.topic,
        partition=cleanable.partition,
        log_dir=log_dir_label(cleanable.log_dir),
        dirty_ratio=to_clean.dirty_ratio,
        min_cleanable_dirty_ratio=to_clean.min_cleanable_dirty_ratio,
        cleanable_bytes=to_clean.cleanable_bytes,
        clean_bytes=to_clean.clean_bytes,
        first_dirty_offset=to_clean.first_dirty_offset,
        first_uncleanable_offset=to_clean.first_uncleanable_offset,
        log_start_offset=to_clean.log_start_offset,
        log_end_offset=to_clean.log_end_offset,
        compaction_delay_ms=to_clean.compaction_delay_ms,
        must_clean=to_clean.must_clean,
        eligible=to_clean.eligible,
        open_snapshot_ids=list(cleanable.open_snapshot_ids),
    )
