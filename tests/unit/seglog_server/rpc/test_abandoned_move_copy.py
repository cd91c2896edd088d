"""A failed move's discard of its installed copy (PartitionMoveRpcs._abandon): the copy is emptied
only if the partition is still another instance's when the truncation runs, asked under the log's
lock. The owner is read on the event loop and the truncation waits in the storage pool's queue:
a move cancelled while its commit's answer was lost (the commit may have happened) abandons, and
meanwhile the watch can bring the commit (this instance owns the partition at a newer epoch) and a
produce append, and acknowledge, a batch, which a truncation decided earlier would erase.

As tests/unit/seglog_server/rpc/test_move_stale_copies.py: a real LogManager on tmp_path, a stand-in
for the watched cache, a pool whose ``blocking`` runs the interleaving first (tests/support/move_copies.py).
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest
from seglog_server.cluster.ownership import PartitionOwner
from seglog_server.rpc.move_rpcs import PartitionMoveRpcs, _Attempt, _uncancelled
from seglog_server.storage.log.leader_epoch_cache import EpochEntry

from tests.support.move_copies import InterleavedCalls, one_partition_manager
from tests.support.move_copies import batch as _batch
from tests.support.move_copies import values_from

HERE, OTHER = "a", "b"


class _Cache:
    def __init__(self) -> None:
        self.owner = PartitionOwner(OTHER, 1, 1)  # the source's, as before the commit

    def owner_of(self, topic: str, partition: int) -> PartitionOwner:
        return self.owner


class _Moves:
    def read_move(self, topic: str, partition: int) -> None:
        return None  # the commit deleted the move record (or an abort did)


@pytest.fixture
def manager(tmp_path):
    with one_partition_manager(tmp_path) as manager:
        yield manager


async def _abandon(manager, cache, calls) -> None:
    cluster = SimpleNamespace(cache=cache, instance_id=HERE, moves=_Moves())
    rpcs = PartitionMoveRpcs(SimpleNamespace(cluster=cluster, storage=manager, calls=calls))
    await rpcs._abandon(cluster, "t", 0, _Attempt(staging="unused", installed=True), asyncio.CancelledError())


def _installed_copy(manager):
    log = manager.get_log("t", 0)
    log.advance_leader_epoch(1)
    log.append(_batch(b"copied from the source"), leader_epoch=1)
    return log


async def test_an_installed_copy_of_a_partition_still_the_sources_is_emptied(manager):
    log = _installed_copy(manager)
    calls = InterleavedCalls()
    await _abandon(manager, _Cache(), calls)
    assert calls.calls == 1
    assert (log.log_end_offset, log.size_in_bytes, log.leader_epoch_entries()) == (0, 0, [])


async def test_a_record_appended_after_the_commit_showed_up_before_the_truncation_ran_is_kept(manager):
    log, cache, appended = _installed_copy(manager), _Cache(), []

    def committed_and_appended():  # the watch brings the commit; a produce appends under it
        cache.owner = PartitionOwner(HERE, 2, 2)
        log.advance_leader_epoch(2)
        appended.append(log.append(_batch(b"acknowledged at epoch 2"), leader_epoch=2))

    calls = InterleavedCalls("before", committed_and_appended)
    await _abandon(manager, cache, calls)
    assert calls.calls == 1  # the discard was decided on the loop and sent to the pool
    (acknowledged,) = appended
    assert (acknowledged.base_offset, log.log_end_offset) == (1, 2)
    assert log.leader_epoch_entries() == [EpochEntry(1, 0), EpochEntry(2, 1)]
    assert values_from(log, acknowledged.base_offset) == [b"acknowledged at epoch 2"]


async def test_an_installed_copy_whose_partition_became_this_instances_meanwhile_is_kept(manager):
    log, cache = _installed_copy(manager), _Cache()

    def committed():
        cache.owner = PartitionOwner(HERE, 2, 2)

    await _abandon(manager, cache, InterleavedCalls("before", committed))
    assert log.log_end_offset == 1


class _Commit:
    """The move transactions at the commit: ``commit`` waits until the test lets it end, then
    raises ``error`` (EtcdUnavailableError: the answer lost, the commit may be in etcd)."""

    def __init__(self, error: Exception) -> None:
        self.error, self.sent, self.release, self.aborted = error, threading.Event(), threading.Event(), []

    def commit(self, move, owner, start_offset):
        self.sent.set()
        self.release.wait()
        raise self.error

    def read_move(self, topic: str, partition: int) -> SimpleNamespace:
        return SimpleNamespace(target=HERE)  # the move record, if the commit did not delete it

    def abort(self, move) -> bool:
        self.aborted.append(move)
        return True


async def _cancelled_while_committing(manager, error: Exception) -> _Commit:
    """_move's last steps, the commit run through _uncancelled, cancelled while the transaction is
    in flight, then its BaseException branch (abandon unless committed)."""
    moves = _Commit(error)
    cluster = SimpleNamespace(cache=_Cache(), instance_id=HERE, moves=moves)  # the watch has no commit yet
    rpcs = PartitionMoveRpcs(SimpleNamespace(cluster=cluster, storage=manager, calls=InterleavedCalls()))
    attempt = _Attempt(staging="unused", installed=True)

    async def moving():
        try:
            await _uncancelled(rpcs._commit(attempt, object(), PartitionOwner(OTHER, 1, 1), 1), "cancelled")
        except BaseException as exc:
            if not attempt.committed:
                await asyncio.shield(rpcs._abandon(cluster, "t", 0, attempt, exc))
            raise

    task = asyncio.ensure_future(moving())
    await asyncio.to_thread(moves.sent.wait)
    task.cancel()
    await asyncio.sleep(0)
    moves.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    return moves


async def test_a_move_cancelled_while_its_commits_answer_is_lost_keeps_its_copy_and_record(manager):
    """etcd may hold the commit (this instance the owner at epoch 2): emptying the copy would leave
    the owner an empty log and the source drops its older copy."""
    from seglog_server.cluster import EtcdUnavailableError

    log = _installed_copy(manager)
    moves = await _cancelled_while_committing(manager, EtcdUnavailableError("no etcd endpoint answered"))
    assert (log.log_end_offset, log.leader_epoch_entries()) == (1, [EpochEntry(1, 0)])
    assert values_from(log, 0) == [b"copied from the source"]
    assert moves.aborted == []  # the record is the evidence `seglog partition move` (or --abort) settles


async def test_a_move_cancelled_while_its_commit_is_refused_abandons_its_copy(manager):
    from seglog_server.cluster.partition_moves import MoveConflictError

    log = _installed_copy(manager)
    moves = await _cancelled_while_committing(manager, MoveConflictError("the move record changed"))
    assert (log.log_end_offset, log.size_in_bytes) == (0, 0)
    assert len(moves.aborted) == 1
