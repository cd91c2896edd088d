"""seglog.v1.PartitionMoveService (moves.proto): moving a partition to another instance, and the
unclean takeover of a dead owner's partition (docs/cluster.md, "Moving a partition").

MovePartition runs at the target (any other instance answers FAILED_PRECONDITION with the target's
address in ``seglog-owner-address``, and the client asks it there):

1. checks: cluster mode, the target known and alive, the partition's owner (etcd, not the cache)
   alive, not the target, the one ``from_instance`` names if given; no other move in progress;
2. the move record in etcd (``copying``, cluster/partition_moves.py), compared on the owner record;
3. CopyPartition from the owner while produce goes on there: every segment file as it is then
   (the active one up to its size at that moment), in chunks of at most CHUNK_BYTES, each CRC-32C
   checked on arrival, written under a staging directory ``<topic>-<partition>.<id>-future``
   beside the partition's (Kafka's replica-move name, which start-up leaves alone); then again
   what was appended meanwhile, until a pass copies at most CATCH_UP_BYTES;
4. the record goes ``final``: the owner refuses produce for the partition from the moment its
   cache sees that (cluster_routing.check_not_moving, also right before each OK), and answers
   the final CopyPartition only then: the tail appended since the last pass (a file's copy goes
   on from its end while the file's identity, its inode and the CRC of its first batch header,
   is unchanged; another file of that name is copied from its start) and the producer
   snapshots;
5. the staging files are fsynced and installed as the partition's log, loaded as after an unclean
   shutdown from offset 0 (every batch's CRC walked, indexes rebuilt, producer state from the
   copied snapshots and the batches after them); a batch cut by that walk, or a log end below the
   owner's, fails the move;
6. the owner record ``{target, epoch + 1}`` and the move record's deletion in one transaction
   compared on both. Until it commits the source owns the partition; a failure before it aborts
   the record (the source serves produce again) and discards the copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Any

import grpc

from seglog.records import crc32c
from seglog_server.storage.base.errors import StorageError
from seglog.v1 import moves_pb2 as mpb
from seglog.v1 import moves_pb2_grpc as mpb_grpc

from . import validation
from .boundary import stream_rpc, unary_rpc
from .cluster_routing import ClusterUnavailableError
from .errors import ServiceError
from .move_errors import MoveFailedError, MoveRefusedError, NotMoveTargetError, UnknownInstanceError
from .peer_security import PeerSecurity
from .service_core import ServiceCore

__all__ = [
    "CHUNK_BYTES",
    "MOVE_SERVICE_NAME",
    "MoveFailedError",
    "MoveRefusedError",
    "NotMoveTargetError",
    "PartitionMoveRpcs",
    "UnknownInstanceError",
    "add_move_service",
    "is_staging_of",
    "staging_name",
]

_log = logging.getLogger("seglog_server.cluster.moves")

MOVE_SERVICE_NAME = mpb.DESCRIPTOR.services_by_name["PartitionMoveService"].full_name
# The largest data of one CopyPartition message (well below gRPC's 4 MiB default limit).
CHUNK_BYTES = 1 << 20
# Passes copying under produce: the first copies every segment as it is (the active one up to its
# size then), each further one what was appended meanwhile, until one copies at most
# CATCH_UP_BYTES (the fenced final pass then copies about as much: at 100 MB/s 8 MiB is ~80 ms
# of refused produce) or CATCH_UP_PASSES_MAX were made (a fill rate beating the copy's).
CATCH_UP_BYTES = 8 * CHUNK_BYTES
CATCH_UP_PASSES_MAX = 4
# The bytes at a segment file's start whose CRC-32C joins its inode in the identity a resumed
# copy is checked by: a batch header's length (v2: 61 bytes), so a file of the same name made
# again, on a reused inode, with other records, is copied again from its start.
IDENTITY_PREFIX_BYTES = 61
# How long the source waits for its cache to see the record "final" before it answers.
FINAL_VIEW_TIMEOUT_S = 10.0
# How often an instance looks for local copies of partitions etcd gives another instance (a walk
# of the cache's owners, no etcd call): a moved partition's source copy goes within about this.
STALE_COPY_INTERVAL_S = 1.0
_STAGING_SUFFIX = "-future"


def staging_name(topic: str, partition: int, attempt_id: str) -> str:
    """The staging directory's name of a move's copy: ``<topic>-<partition>.<32 hex>-future``."""
    return f"{topic}-{partition}.{attempt_id}{_STAGING_SUFFIX}"


def is_staging_of(name: str, topic: str, partition: int) -> bool:
    """Whether ``name`` is a staging directory of this very partition: matched whole, since a
    topic name may hold '.' and '-' (``a-1.b-0.<id>-future`` is topic ``a-1.b``'s, not ``a``'s)."""
    pattern = rf"{re.escape(topic)}-{partition}\.[0-9a-f]{{32}}{re.escape(_STAGING_SUFFIX)}"
    return re.fullmatch(pattern, name) is not None


def _newer_owner(cluster: Any, log: Any) -> Any:
    """The owner record giving ``log``'s partition to another instance at a later epoch than its
    last batches were stamped with (the copy is stale), or None. Reads the watched cache (its own
    lock: the watch thread never waits for a log under it) and the log: safe on a pool thread and
    under the log's lock."""
    topic, partition = log.topic, log.partition
    owner = cluster.cache.owner_of(topic, partition)
    if owner is None or owner.owner == cluster.instance_id or not owner.readable:
        return None  # an unreadable owner record gives no one the partition: nothing is dropped
    move = cluster.cache.move_of(topic, partition)
    if move is not None and move.get("target") == cluster.instance_id:
        return None  # a copy being installed here: the move's, until it commits or aborts
    if not log.size_in_bytes:
        return None
    entries = log.leader_epoch_entries()
    if entries and entries[-1].epoch >= owner.epoch:
        return None  # the copy is as new as etcd's owner record: never dropped on etcd's word
    return owner


def _not_ours(cluster: Any, log: Any) -> bool:
    """Whether an abandoned move's installed copy ``log`` is to be emptied: etcd's owner record
    gives its partition to another instance and it holds records. Asked on the loop, then again
    under the log's lock (truncate_fully_and_start_at's only_if): a move cancelled while its
    commit's answer was lost is abandoned although the commit may have happened, and the watch
    can bring it (the partition this instance's at a newer epoch) and a produce append, and
    acknowledge, a batch while the truncation waits in the storage pool's queue."""
    owner = cluster.cache.owner_of(log.topic, log.partition)
    return owner is not None and owner.readable and owner.owner != cluster.instance_id and bool(
        log.log_end_offset)


def _segment_file(name: str) -> bool:
    stem, dot, suffix = name.partition(".")
    return bool(dot) and stem.isdigit() and len(stem) == 20 and suffix in ("log", "snapshot")


class PartitionMoveRpcs(mpb_grpc.PartitionMoveServiceServicer):
    def __init__(self, core: ServiceCore) -> None:
        self.core = core
        self._running: set[tuple[str, int]] = set()
        # The partitions whose stale copy here the stale-copy pass is emptying (also in _running,
        # so nothing else starts on them): set when it is done.
        self._dropping: dict[tuple[str, int], asyncio.Event] = {}

    async def _after_stale_copy_drop(self, topic: str, partition: int) -> None:
        """A move here or a takeover of a partition whose old copy the stale-copy pass is emptying
        (one pool call, after the partition moved away) waits for that, rather than be refused
        as if a move of it were running: moving a partition away and straight back is an
        operator's ordinary step."""
        while (dropping := self._dropping.get((topic, partition))) is not None:
            await dropping.wait()

    def _cluster(self, what: str) -> Any:
        cluster = self.core.cluster
        if cluster is None or getattr(cluster, "moves", None) is None:
            raise MoveRefusedError(f"{what} needs cluster mode (--etcd): a single process owns every partition")
        return cluster

    # -- MovePartition (at the target) ------------------------------------------------------------
    @unary_rpc
    async def MovePartition(self, request: mpb.MovePartitionRequest, context: Any) -> Any:
        cluster = self._cluster("moving a partition")
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        target = request.to_instance
        if not target:
            raise validation.InvalidRequestError("to_instance is required: the instance to move the partition to")
        info = cluster.cache.instances().get(target)
        if info is None:
            raise UnknownInstanceError(f"instance {target!r} is not known to cluster {cluster.cluster_name!r}; "
                                       "`seglog cluster status` lists the instances")
        if not info.alive:
            raise MoveRefusedError(f"instance {target!r} is not alive (its lease is gone): a partition is moved "
                                   "only to a live instance")
        if target != cluster.instance_id:
            raise NotMoveTargetError(f"the move of {topic}-{partition} is run by its target {target!r} at "
                                     f"{info.address}: send it there", target, info.address)
        await self._after_stale_copy_drop(topic, partition)
        if (topic, partition) in self._running:
            raise MoveRefusedError(f"{topic}-{partition}: a move to this instance is already running")
        self._running.add((topic, partition))
        try:
            return await self._move(cluster, topic, partition, request.from_instance)
        finally:
            self._running.discard((topic, partition))

    async def _move(self, cluster: Any, topic: str, partition: int, expected_source: str) -> Any:
        from seglog_server.cluster import ClusterError, EtcdUnavailableError, UnknownPartitionError
        from seglog_server.cluster.errors import MalformedRecordError

        moves, started = cluster.moves, time.monotonic()
        try:
            owner, _ = await asyncio.to_thread(moves.read_owner, topic, partition)
            existing = await asyncio.to_thread(moves.read_move, topic, partition)
        except UnknownPartitionError as exc:
            raise MoveRefusedError(f"{exc}: only a partition placed in the cluster moves") from exc
        except MalformedRecordError as exc:
            raise _unreadable(f"{topic}-{partition} not moved", exc) from exc
        except EtcdUnavailableError as exc:
            raise ClusterUnavailableError(f"{topic}-{partition} not moved: {exc}") from exc
        source = owner.owner
        if expected_source and source != expected_source:
            raise MoveRefusedError(f"{topic}-{partition} is owned by {source!r}, not by {expected_source!r}: "
                                   "not moved")
        if source == cluster.instance_id:
            raise MoveRefusedError(f"{topic}-{partition} is already owned by {source!r}")
        source_info = cluster.cache.instances().get(source)
        if source_info is None or not source_info.alive:
            raise MoveRefusedError(f"{topic}-{partition}: its owner {source!r} is not alive, so nothing can be "
                                   "copied from it; an unclean takeover (TakeOverPartition, --unclean) is the "
                                   "explicit way to give it another owner, losing its records")
        if existing is not None and existing.target != cluster.instance_id:
            raise MoveRefusedError(f"{topic}-{partition}: a move to {existing.target!r} is in progress (state "
                                   f"{existing.state}); abort it first")
        attempt = _Attempt()
        try:
            if existing is not None and existing.epoch == owner.epoch:
                move = existing  # resumed: the copy starts again from nothing
                _log.info("%s-%d: resuming the move from %s (state %s)", topic, partition, source, move.state)
            else:
                if existing is not None:  # a record of an older epoch: stale, ours
                    await asyncio.to_thread(moves.abort, existing)
                move = await asyncio.to_thread(moves.begin, topic, partition, owner, int(time.time() * 1000))
            attempt.staging = await self.core.calls.blocking(self._new_staging, topic, partition)
            peers = getattr(cluster, "peer_security", None) or PeerSecurity()
            copy = _Copy(attempt.staging, peers.metadata())
            channel = peers.channel(source_info.address, [
                ("grpc.max_receive_message_length", 2 * CHUNK_BYTES + 65536)])
            try:
                stub = mpb_grpc.PartitionMoveServiceStub(channel)
                await self._catch_up(copy, stub, topic, partition, owner.epoch)
                if move.state != "final":
                    move = await asyncio.to_thread(moves.finalize, move)
                fenced_at, unfenced_bytes = time.monotonic(), copy.bytes
                summary = await copy.pull(stub, topic, partition, owner.epoch, final=True,
                                          final_revision=move.mod_revision)
            finally:
                await channel.close(grace=None)
            assert summary is not None
            await self.core.calls.blocking(copy.finish, summary)
            log = await _uncancelled(self._install(attempt, topic, partition, summary.log_start_offset),
                                     f"{topic}-{partition}: move cancelled while its copy is installed")
            self._check_installed(topic, partition, log, summary)
            new_owner = await _uncancelled(self._commit(attempt, move, owner, summary.log_end_offset),
                                           f"{topic}-{partition}: move cancelled while it commits")
        except EtcdUnavailableError as exc:
            if attempt.committing:
                raise ClusterUnavailableError(
                    f"{topic}-{partition}: the commit's answer was lost ({exc}): the move may or may not have "
                    "committed; `seglog cluster status` shows the owner, and the move again (or --abort) settles "
                    "it") from exc
            await asyncio.shield(self._abandon(cluster, topic, partition, attempt, exc))
            raise ClusterUnavailableError(f"{topic}-{partition} not moved: {exc}") from exc
        except (grpc.aio.AioRpcError, ServiceError, StorageError, ClusterError, OSError) as exc:
            await asyncio.shield(self._abandon(cluster, topic, partition, attempt, exc))
            if isinstance(exc, ServiceError):
                raise
            raise MoveFailedError(f"{topic}-{partition} not moved, {source!r} still owns it: "
                                  f"{_describe(exc)}") from exc
        except BaseException as exc:  # cancelled (the client's deadline or cancel, a stop), or a bug
            if not attempt.committed:  # the record goes even so: a "final" one fences the source
                await asyncio.shield(self._abandon(cluster, topic, partition, attempt, exc))
            raise
        elapsed = time.monotonic() - started
        fenced_bytes = copy.bytes - unfenced_bytes
        _log.info("%s-%d moved from %s to %s at epoch %d: offsets %d..%d, %d bytes in %.1f s (fenced %.0f ms, "
                  "%d bytes)", topic, partition, source, cluster.instance_id, new_owner.epoch,
                  summary.log_start_offset, log.log_end_offset, copy.bytes, elapsed,
                  (time.monotonic() - fenced_at) * 1000, fenced_bytes)
        return mpb.MovePartitionResponse(
            from_instance=source, to_instance=cluster.instance_id, epoch=new_owner.epoch,
            log_start_offset=log.log_start_offset, log_end_offset=log.log_end_offset, bytes_copied=copy.bytes,
            batch_count=copy.chunks, fenced_ms=int((time.monotonic() - fenced_at) * 1000),
            elapsed_ms=int(elapsed * 1000), bytes_copied_fenced=fenced_bytes)

    @staticmethod
    def _check_installed(topic: str, partition: int, log: Any, summary: Any) -> None:
        if log.loaded_truncated_bytes:
            raise MoveFailedError(f"{topic}-{partition}: {log.loaded_truncated_bytes} bytes of the copy failed "
                                  "their batch checks when loaded: not moved")
        if log.log_end_offset < summary.log_end_offset:
            raise MoveFailedError(f"{topic}-{partition}: the copy ends at offset {log.log_end_offset}, the owner's "
                                  f"log at {summary.log_end_offset}: not moved")

    @staticmethod
    async def _catch_up(copy: _Copy, stub: Any, topic: str, partition: int, epoch: int) -> None:
        """The passes before the fence (CATCH_UP_BYTES)."""
        for _ in range(CATCH_UP_PASSES_MAX):
            before = copy.bytes
            await copy.pull(stub, topic, partition, epoch, final=False, final_revision=0)
            if copy.bytes - before <= CATCH_UP_BYTES:
                return

    async def _install(self, attempt: _Attempt, topic: str, partition: int, log_start_offset: int) -> Any:
        assert attempt.staging is not None
        log = await self.core.calls.blocking(self.core.storage.install_partition, topic, partition,
                                             attempt.staging, log_start_offset)
        attempt.installed = True  # the staging directory is the partition's now
        return log

    async def _commit(self, attempt: _Attempt, move: Any, owner: Any, log_end_offset: int) -> Any:
        from seglog_server.cluster import ClusterError, EtcdUnavailableError

        attempt.committing = True
        try:
            new_owner = await asyncio.to_thread(self.core.cluster.moves.commit, move, owner, log_end_offset)
        except ClusterError as exc:
            if not isinstance(exc, EtcdUnavailableError):
                attempt.committing = False  # etcd's definite no (MoveConflictError): not committed
            raise
        attempt.committed = True
        return new_owner

    async def _abandon(self, cluster: Any, topic: str, partition: int, attempt: _Attempt,
                       cause: BaseException) -> None:
        """Aborts the move record (the source serves produce again) and discards the copy: the
        staging directory, or once installed, the partition's log here (not this instance's to
        serve). Never raises: it runs on every failure path, a cancellation's included. A commit
        whose answer was lost (``attempt.committing`` still set) may be in etcd, this instance the
        owner: the record and the copy stay, as in _move's EtcdUnavailableError branch."""
        from seglog_server.cluster import ClusterError

        if attempt.committing and not attempt.committed:
            _log.warning("%s-%d: move to %s ended while its commit's outcome is unknown (%s): the move record "
                         "and the copy are kept; `seglog cluster status` shows the owner, and the move again (or "
                         "--abort) settles it", topic, partition, cluster.instance_id, _describe(cause))
            return
        _log.warning("%s-%d: move to %s abandoned: %s", topic, partition, cluster.instance_id, _describe(cause))
        try:
            move = await asyncio.to_thread(cluster.moves.read_move, topic, partition)
            if move is not None and move.target == cluster.instance_id:
                await asyncio.to_thread(cluster.moves.abort, move)
        except ClusterError as exc:
            _log.warning("%s-%d: move record not aborted (%s): `seglog partition move --abort` ends it", topic,
                         partition, exc)
        try:
            if not attempt.installed:
                if attempt.staging is not None:
                    await self.core.calls.blocking(shutil.rmtree, attempt.staging, True)
                return
            log = self.core.storage.get_log(topic, partition)
            if _not_ours(cluster, log):  # asked again under the log's lock: the commit may show up meanwhile
                await self.core.calls.blocking(functools.partial(
                    log.truncate_fully_and_start_at, 0, only_if=lambda: _not_ours(cluster, log)))
        except (StorageError, OSError) as exc:  # the stale-copy pass drops an installed copy later
            _log.warning("%s-%d: the abandoned copy not discarded yet: %s", topic, partition, exc)

    def _new_staging(self, topic: str, partition: int) -> str:
        home = os.path.dirname(self.core.storage.partition_dir(topic, partition))
        for name in os.listdir(home):  # an earlier attempt's copy (a crash mid-move): discarded
            if is_staging_of(name, topic, partition):
                shutil.rmtree(os.path.join(home, name), ignore_errors=True)
        path = os.path.join(home, staging_name(topic, partition, uuid.uuid4().hex))
        os.makedirs(path)
        return path

    # -- stale copies (at every instance) --------------------------------------------------------
    async def drop_stale_copies_forever(self, interval_s: float = STALE_COPY_INTERVAL_S) -> None:
        """A task (app.py, cluster mode): ``drop_stale_copies`` at start, then every interval."""
        while True:
            try:
                await self.drop_stale_copies()
            except (StorageError, OSError) as exc:  # a log directory failing: the next pass retries
                _log.warning("stale partition copies not dropped: %s", exc)
            await asyncio.sleep(interval_s)

    async def drop_stale_copies(self) -> int:
        """Empties every local copy of a partition etcd gives another instance at a later epoch
        than the copy's last batches were stamped with: the source's copy once a move committed,
        and at start one a crash kept between the commit and this (or an unclean takeover's old
        owner's, back). A partition being moved here, or one empty already, is left alone.
        Returns how many were emptied."""
        cluster = self.core.cluster
        if cluster is None or getattr(cluster, "moves", None) is None:
            return 0
        dropped = 0
        for topic, partition_count in cluster.cache.topics().items():
            for partition in range(partition_count):
                if (topic, partition) in self._running or self._stale_copy(cluster, topic, partition) is None:
                    continue
                self._running.add((topic, partition))  # no move or takeover of it meanwhile: they wait
                done = self._dropping[topic, partition] = asyncio.Event()
                try:
                    log = self._stale_copy(cluster, topic, partition)
                    if log is not None and await self.core.calls.blocking(self._drop_if_stale, cluster, log):
                        dropped += 1
                finally:
                    self._running.discard((topic, partition))
                    done.set()
                    self._dropping.pop((topic, partition), None)
        return dropped

    def _stale_copy(self, cluster: Any, topic: str, partition: int) -> Any:
        try:
            log = self.core.storage.get_log(topic, partition)
        except StorageError:  # not held here (yet), or its directory offline: nothing to drop now
            return None
        return log if _newer_owner(cluster, log) is not None else None

    @staticmethod
    def _drop_if_stale(cluster: Any, log: Any) -> bool:
        """On the pool: empties ``log`` if it is still a stale copy, asked again under its lock.
        The call may wait seconds in the pool's queue (large reads), while the partition comes
        back here at a newer epoch and a produce appends, and acknowledges, a batch stamped with
        it: the question asked on the loop before is no answer then. An append before this one
        stamped the newer epoch (the copy is not stale); one after it lands on the emptied log."""
        found: list[tuple[Any, int]] = []  # the owner and the size the drop met, for its log line

        def still_stale() -> bool:
            owner = _newer_owner(cluster, log)
            if owner is not None:
                found.append((owner, log.size_in_bytes))
            return owner is not None

        if not log.truncate_fully_and_start_at(0, only_if=still_stale):
            return False
        (owner, size), = found
        _log.info("%s-%d: local copy dropped (%d bytes): instance %s owns it at epoch %d", log.topic,
                  log.partition, size, owner.owner, owner.epoch)
        return True

    # -- CopyPartition (at the owner) ------------------------------------------------------------
    @stream_rpc
    async def CopyPartition(self, request: mpb.CopyPartitionRequest, context: Any) -> None:
        cluster = self._cluster("copying a partition")
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        owner = cluster.cache.owner_of(topic, partition)
        if owner is None or owner.owner != cluster.instance_id or owner.epoch != request.epoch:
            raise MoveRefusedError(f"{topic}-{partition} is not owned by {cluster.instance_id!r} at epoch "
                                   f"{request.epoch}: nothing to copy from here")
        if request.final:
            seen = await asyncio.to_thread(
                cluster.cache.wait_until, lambda cache: cache.statistics().revision >= request.final_revision,
                FINAL_VIEW_TIMEOUT_S)
            move = cluster.cache.move_of(topic, partition)
            if not seen or move is None or move.get("state") != "final" or move.get("source") != cluster.instance_id:
                raise MoveRefusedError(f"{topic}-{partition}: no final move record from this instance seen: "
                                       "the tail is copied only once produce is fenced here")
        log = self.core.storage.get_log(topic, partition)
        log_end_offset = log.log_end_offset  # before the files: every byte up to it is in them
        files = await self.core.calls.blocking(_files_of, log, request.final)
        copied = {c.name: c for c in request.copied}
        for name, path, size, identity in files:
            position = _resume_position(copied.get(name), size, identity)
            with open(path, "rb") as source:
                while position < size:
                    data = await self.core.calls.blocking(os.pread, source.fileno(),
                                                          min(CHUNK_BYTES, size - position), position)
                    if not data:
                        raise MoveFailedError(f"{path} ended at {position} of {size} bytes while copied")
                    await context.write(mpb.CopyPartitionChunk(name=name, position=position, data=data,
                                                               crc32c=crc32c(data), identity=identity))
                    position += len(data)
        if request.final:
            await context.write(mpb.CopyPartitionChunk(
                # A tiered source not listed since its start knows only its local log start: the
                # move waits (UNAVAILABLE) rather than give the target a start above the store's.
                summary=True, log_start_offset=log.known_log_start_offset(), log_end_offset=log_end_offset,
                files=[mpb.CopiedFile(name=name, size=size, identity=identity) for name, _, size, identity in files]))

    # -- AbortMove ---------------------------------------------------------------------------------
    @unary_rpc
    async def AbortMove(self, request: mpb.AbortMoveRequest, context: Any) -> Any:
        from seglog_server.cluster import EtcdUnavailableError
        from seglog_server.cluster.errors import MalformedRecordError

        cluster = self._cluster("aborting a move")
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        # (The stale-copy pass emptying this instance's old copy touches no move record.)
        if (topic, partition) in self._running and (topic, partition) not in self._dropping:
            raise MoveRefusedError(f"{topic}-{partition}: the move is running on this instance; it aborts "
                                   "itself if it fails")
        try:
            move = await asyncio.to_thread(cluster.moves.read_move, topic, partition)
            if move is None:
                return mpb.AbortMoveResponse(aborted=False)
            aborted = await asyncio.to_thread(cluster.moves.abort, move)
        except MalformedRecordError as exc:
            raise _unreadable(f"{topic}-{partition}: move not aborted", exc) from exc
        except EtcdUnavailableError as exc:
            raise ClusterUnavailableError(f"{topic}-{partition}: move not aborted: {exc}") from exc
        _log.warning("%s-%d: move to %s aborted by request", topic, partition, move.target)
        return mpb.AbortMoveResponse(aborted=aborted, to_instance=move.target)

    # -- TakeOverPartition (at the new owner) ------------------------------------------------------
    @unary_rpc
    async def TakeOverPartition(self, request: mpb.TakeOverPartitionRequest, context: Any) -> Any:
        cluster = self._cluster("taking over a partition")
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        if not request.unclean:
            raise MoveRefusedError(f"{topic}-{partition}: a takeover loses the records of the old owner; it is "
                                   "done only when asked for as unclean (--unclean)")
        await self._after_stale_copy_drop(topic, partition)
        if (topic, partition) in self._running:
            raise MoveRefusedError(f"{topic}-{partition}: a move, takeover or cleanup of it is running here")
        self._running.add((topic, partition))
        try:
            return await self._take_over(cluster, topic, partition)
        finally:
            self._running.discard((topic, partition))

    async def _take_over(self, cluster: Any, topic: str, partition: int) -> Any:
        from seglog_server.cluster import EtcdUnavailableError, OwnershipConflictError, UnknownPartitionError
        from seglog_server.cluster.errors import MalformedRecordError
        from seglog_server.cluster.partition_moves import OwnerStillAliveError

        try:
            owner, _ = await asyncio.to_thread(cluster.moves.read_owner, topic, partition)
            if owner.owner == cluster.instance_id:
                raise MoveRefusedError(f"{topic}-{partition} is already owned by {owner.owner!r}")
            # Empty at the old epoch's offset ceiling (above every offset the old owner may have
            # acknowledged), before anyone may route here.
            start_offset, ceiling_revision = await asyncio.to_thread(cluster.moves.takeover_start, topic, partition,
                                                                     owner)
            log = self.core.storage.get_log(topic, partition)
            await self.core.calls.blocking(log.truncate_fully_and_start_at, start_offset)
            new_owner = await asyncio.to_thread(cluster.moves.take_over, topic, partition, owner, start_offset,
                                                ceiling_revision)
        except UnknownPartitionError as exc:
            raise MoveRefusedError(str(exc)) from exc
        except OwnerStillAliveError as exc:
            raise MoveRefusedError(str(exc)) from exc
        except MalformedRecordError as exc:
            raise _unreadable(f"{topic}-{partition} not taken over", exc) from exc
        except OwnershipConflictError as exc:
            raise MoveFailedError(str(exc)) from exc
        except EtcdUnavailableError as exc:
            raise ClusterUnavailableError(f"{topic}-{partition} not taken over: {exc}") from exc
        _log.warning("%s-%d: UNCLEAN takeover from %s (lease gone) at epoch %d, starting empty at offset %d: the "
                     "records %s held are lost to readers", topic, partition, owner.owner,
                     new_owner.epoch, start_offset, owner.owner)
        return mpb.TakeOverPartitionResponse(from_instance=owner.owner, epoch=new_owner.epoch,
                                             start_offset=start_offset)

    # -- DescribeCluster (any instance) ----------------------------------------------------------
    @unary_rpc
    async def DescribeCluster(self, request: mpb.DescribeClusterRequest, context: Any) -> Any:
        cluster = self._cluster("describing the cluster")
        return describe_cluster(cluster.cluster_name, cluster.instance_id, cluster.cache)


def describe_cluster(cluster_name: str, instance_id: str, cache: Any) -> mpb.DescribeClusterResponse:
    """The watched cache as an operator reads it: each instance with the partitions etcd gives it
    and the bytes its registration reports, the partitions whose owner is gone, the moves."""
    instances = cache.instances()
    owned: dict[str, int] = {}
    response = mpb.DescribeClusterResponse(cluster_name=cluster_name, instance_id=instance_id,
                                           current=cache.statistics().connected)
    topics = cache.topics()
    for topic in sorted(topics):
        for partition in range(topics[topic]):
            owner = cache.owner_of(topic, partition)
            if owner is None:
                continue
            owned[owner.owner] = owned.get(owner.owner, 0) + 1
            info = instances.get(owner.owner)
            if info is None or not info.alive:
                response.offline_partitions.add(topic=topic, partition=partition, owner_id=owner.owner,
                                                gone_since_ms=(info.gone_since_ms or 0) if info else 0)
    for info in sorted(instances.values(), key=lambda info: info.instance_id):
        response.instances.add(instance_id=info.instance_id, address=info.address, alive=info.alive,
                               gone_since_ms=info.gone_since_ms or 0, partition_count=owned.get(info.instance_id, 0),
                               bytes=info.bytes)
    for (topic, partition), move in sorted(cache.moves().items()):
        response.moves.add(topic=topic, partition=partition, from_instance=str(move.get("source", "")),
                           to_instance=str(move.get("target", "")), state=str(move.get("state", "")),
                           started_ms=int(move.get("started_ms", 0)))
    return response


def _unreadable(what: str, exc: Any) -> MoveRefusedError:
    """A record of the partition in etcd is malformed (cluster/records.py's MalformedRecordError):
    FAILED_PRECONDITION naming the key; nothing is done until an operator repairs it as
    ``repair_advice`` says for its kind (an owner or ceiling record is never deleted)."""
    from seglog_server.cluster.records import repair_advice

    return MoveRefusedError(f"{what}: {exc}; {repair_advice(exc.key)}, then retry")


@dataclass
class _Attempt:
    """How far a move at its target got: what its failure has to undo."""

    staging: str | None = None  # the copy's directory, once made
    installed: bool = False  # the copy is the partition's log here (install_partition returned)
    committing: bool = False  # the commit transaction was sent: its outcome may be unknown (cleared on a no)
    committed: bool = False


async def _uncancelled(step: Any, what: str) -> Any:
    """Awaits ``step`` (a coroutine) to its end even when the caller is cancelled meanwhile, then
    lets the cancellation through: a thread installing a copy or a commit in flight is not
    stopped by a cancellation, and what to undo depends on how it ended."""
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        _log.warning("%s: waiting for that step to end", what)
        with contextlib.suppress(Exception):
            await asyncio.shield(task)
        raise


class _Copy:
    """The target's side of CopyPartition: staged files, their sizes and identities."""

    def __init__(self, staging: str, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.staging = staging
        self.metadata = metadata  # this instance's credentials (peer_security.py)
        self.files: dict[str, mpb.CopiedFile] = {}
        self.bytes = 0
        self.chunks = 0

    async def pull(self, stub: Any, topic: str, partition: int, epoch: int, *, final: bool,
                   final_revision: int) -> Any:
        request = mpb.CopyPartitionRequest(topic=topic, partition=partition, epoch=epoch, final=final,
                                           final_revision=final_revision, copied=list(self.files.values()))
        summary = None
        async for chunk in stub.CopyPartition(request, metadata=self.metadata):
            if chunk.summary:
                summary = chunk
                continue
            if crc32c(chunk.data) != chunk.crc32c:
                raise MoveFailedError(f"chunk of {chunk.name} at {chunk.position}: CRC-32C mismatch "
                                      f"({crc32c(chunk.data):#010x}, sent {chunk.crc32c:#010x})")
            await asyncio.to_thread(self._write, chunk)
        if final and summary is None:
            raise MoveFailedError("the owner's copy ended without its summary")
        return summary

    def _write(self, chunk: Any) -> None:
        if not _segment_file(chunk.name):
            raise MoveFailedError(f"unexpected file name {chunk.name!r} in a partition copy")
        have = self.files.get(chunk.name)
        size = have.size if have is not None and have.identity == chunk.identity else 0
        if chunk.position != size and chunk.position != 0:
            raise MoveFailedError(f"{chunk.name}: chunk at {chunk.position}, the copy holds {size} bytes")
        path = os.path.join(self.staging, chunk.name)
        with open(path, "r+b" if chunk.position else "wb") as out:
            out.truncate(chunk.position)
            out.seek(chunk.position)
            out.write(chunk.data)
        self.files[chunk.name] = mpb.CopiedFile(name=chunk.name, size=chunk.position + len(chunk.data),
                                                identity=chunk.identity)
        self.bytes += len(chunk.data)
        self.chunks += 1

    def finish(self, summary: Any) -> None:
        """Keeps exactly the owner's files at its sizes (a segment its retention deleted meanwhile
        goes), fsyncs every file and the directory."""
        wanted = {f.name: f.size for f in summary.files}
        for name in os.listdir(self.staging):
            path = os.path.join(self.staging, name)
            if name not in wanted:
                os.unlink(path)
                continue
            if os.path.getsize(path) != wanted[name]:
                raise MoveFailedError(f"{name}: copied {os.path.getsize(path)} bytes, the owner has {wanted[name]}")
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for name, size in wanted.items():
            if size and not os.path.exists(os.path.join(self.staging, name)):
                raise MoveFailedError(f"{name} ({size} bytes) missing from the copy")
            if not size:  # an empty active segment: created empty
                open(os.path.join(self.staging, name), "ab").close()
        fd = os.open(self.staging, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _files_of(log: Any, final: bool) -> list[tuple[str, str, int, str]]:
    """(name, path, size, identity) of the segment files to copy: every segment's log at its size
    now (the active one's grows on; the next pass copies the rest), and for the final copy the
    producer snapshots too."""
    files = []
    for segment in log.segments_snapshot():
        path = segment.log.path
        size = segment.size_in_bytes
        files.append((os.path.basename(path), path, size, _identity(path, size)))
    if final:
        for name in sorted(os.listdir(log.dir)):
            if name.endswith(".snapshot") and _segment_file(name):
                path = os.path.join(log.dir, name)
                size = os.stat(path).st_size
                files.append((name, path, size, _identity(path, size)))
    return files


def _identity(path: str, size: int) -> str:
    """The file's inode and the CRC-32C of its first IDENTITY_PREFIX_BYTES (fewer in a shorter
    file): a copy of it is resumed only while both hold (``_resume_position``)."""
    with open(path, "rb") as source:
        head = os.pread(source.fileno(), min(size, IDENTITY_PREFIX_BYTES), 0)
        return f"{os.fstat(source.fileno()).st_ino}:{crc32c(head):08x}"


def _resume_position(have: Any, size: int, identity: str) -> int:
    """Where the copy of a file of ``size`` bytes and ``identity`` goes on from, the caller
    holding ``have`` (a CopiedFile, or None): the end of what it holds of the same file, or 0
    (another file of that name, or one shorter than the copy: made again)."""
    if have is None or have.identity != identity or have.size > size:
        return 0
    return have.size


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"the owner answered {exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}"


def add_move_service(servicer: PartitionMoveRpcs, server: grpc.aio.Server) -> None:
    mpb_grpc.add_PartitionMoveServiceServicer_to_server(servicer, server)
