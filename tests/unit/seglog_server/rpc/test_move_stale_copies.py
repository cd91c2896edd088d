"""The stale-copy drop (PartitionMoveRpcs.drop_stale_copies): a local copy of a partition etcd gives
another instance at a later epoch than the copy's last stamped batches is emptied, and only if it
is still stale when the truncation runs. The check is made on the event loop and the truncation
waits in the storage pool's queue (seconds when the pool is busy): meanwhile the partition can come
back to this instance at a newer epoch and a produce append (and acknowledge) a batch stamped with
it, which a truncation decided earlier would erase.

A real LogManager on tmp_path; the cluster's watched cache is a stand-in of fixed answers (etcd is
not what is under test: tests/integration/cluster/test_partition_moves.py and
test_leader_epoch_stamping.py drive the drop with a real etcd). The pool's ``blocking`` runs the
interleaving (what the owner-epoch thread and a produce do, cluster_node.py's push_epochs and
produce_rpcs.py's append) right before or right after the call it was given, which runs on a thread.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from types import SimpleNamespace

import pytest
from seglog_server.cluster.ownership import PartitionOwner
from seglog.v1 import moves_pb2 as mpb
from seglog_server.rpc.move_rpcs import PartitionMoveRpcs
from seglog_server.storage.log.leader_epoch_cache import EpochEntry

from tests.support.move_copies import InterleavedCalls as _Calls
from tests.support.move_copies import batch as _batch
from tests.support.move_copies import values_from
from tests.support.move_copies import one_partition_manager

HERE, OTHER = "a", "b"


class _Cache:
    """The watched cache's answers drop_stale_copies reads: one topic ``t`` of one partition."""

    def __init__(self, owner: str, epoch: int) -> None:
        self.owner = PartitionOwner(owner, epoch, 1)

    def topics(self) -> dict[str, int]:
        return {"t": 1}

    def owner_of(self, topic: str, partition: int) -> PartitionOwner:
        return self.owner

    def move_of(self, topic: str, partition: int) -> None:
        return None


@pytest.fixture
def manager(tmp_path):
    with one_partition_manager(tmp_path) as manager:
        yield manager


def _moves(manager, cache, calls) -> PartitionMoveRpcs:
    cluster = SimpleNamespace(cache=cache, instance_id=HERE, moves=object())
    return PartitionMoveRpcs(SimpleNamespace(cluster=cluster, storage=manager, calls=calls))


def _stale_copy(manager):
    """``t-0`` here stamped at epoch 1, etcd giving it to the other instance at epoch 2."""
    log = manager.get_log("t", 0)
    log.advance_leader_epoch(1)
    log.append(_batch(b"before the move"), leader_epoch=1)
    return log, _Cache(OTHER, 2)


def _comes_back_and_appends(log, cache):
    """The partition back here at epoch 3: the owner-epoch thread tells the log, and a produce
    admitted under it appends (the answer it acknowledges is returned)."""
    appended = []

    def interleave():
        cache.owner = PartitionOwner(HERE, 3, 2)
        log.advance_leader_epoch(3)
        appended.append(log.append(_batch(b"acknowledged at epoch 3"), leader_epoch=3))

    return interleave, appended


async def test_a_copy_still_stale_when_truncated_is_dropped(manager, caplog):
    log, cache = _stale_copy(manager)
    caplog.set_level(logging.INFO, logger="seglog_server.cluster.moves")
    assert await _moves(manager, cache, _Calls()).drop_stale_copies() == 1
    assert (log.log_start_offset, log.log_end_offset, log.size_in_bytes) == (0, 0, 0)
    assert log.leader_epoch_entries() == []
    assert "t-0: local copy dropped" in caplog.text and "instance b owns it at epoch 2" in caplog.text


async def test_a_record_appended_at_a_newer_epoch_before_the_truncation_runs_is_kept(manager, caplog):
    """The ownership came back and a batch was appended (and acknowledged) while the truncation
    waited in the pool's queue: the copy is no longer stale, nothing is dropped."""
    log, cache = _stale_copy(manager)
    interleave, appended = _comes_back_and_appends(log, cache)
    caplog.set_level(logging.INFO, logger="seglog_server.cluster.moves")
    calls = _Calls("before", interleave)
    assert await _moves(manager, cache, calls).drop_stale_copies() == 0
    assert calls.calls == 1  # the drop was decided on the loop and sent to the pool
    (acknowledged,) = appended
    assert (acknowledged.base_offset, log.log_end_offset) == (1, 2)
    assert log.leader_epoch_entries() == [EpochEntry(1, 0), EpochEntry(3, 1)]
    assert values_from(log, acknowledged.base_offset) == [b"acknowledged at epoch 3"]
    assert "local copy dropped" not in caplog.text


async def test_a_record_appended_at_a_newer_epoch_after_the_truncation_lands_on_the_emptied_log(manager):
    log, cache = _stale_copy(manager)
    interleave, appended = _comes_back_and_appends(log, cache)
    assert await _moves(manager, cache, _Calls("after", interleave)).drop_stale_copies() == 1
    (acknowledged,) = appended
    assert (acknowledged.base_offset, log.log_end_offset) == (0, 1)
    assert log.leader_epoch_entries() == [EpochEntry(3, 0)]


async def test_a_copy_whose_owner_came_back_here_without_an_append_yet_is_kept(manager):
    log, cache = _stale_copy(manager)

    def comes_back():
        cache.owner = PartitionOwner(HERE, 3, 2)

    assert await _moves(manager, cache, _Calls("before", comes_back)).drop_stale_copies() == 0
    assert log.log_end_offset == 1


class _HeldPool:
    """The storage pool with the drop's call held until ``release`` is set (a pool call that waits
    behind large reads): ``started`` once it was given."""

    def __init__(self) -> None:
        self.started, self.release = asyncio.Event(), threading.Event()

    async def blocking(self, fn, *args):
        self.started.set()
        await asyncio.to_thread(self.release.wait)
        return await asyncio.to_thread(fn, *args)


@pytest.mark.parametrize("rpc", ["MovePartition", "TakeOverPartition"])
async def test_a_move_or_takeover_here_during_the_drop_of_this_instances_stale_copy_waits_for_it(manager, rpc):
    """The partition moved away and straight back: the stale-copy pass is emptying this instance's
    old copy (a pool call) when the move back (or an unclean takeover) arrives. It waits for the
    drop and then runs; it is not refused as if a move of the partition were running here."""
    log, cache = _stale_copy(manager)
    cache.instances = lambda: {HERE: SimpleNamespace(alive=True, address="127.0.0.1:1")}
    pool = _HeldPool()
    rpcs = _moves(manager, cache, pool)
    ran = []

    async def run(cluster, topic, partition, *rest):
        ran.append((topic, partition, rpcs._running == {(topic, partition)}, log.log_end_offset))
        return "answered"

    rpcs._move = rpcs._take_over = run
    request = (mpb.MovePartitionRequest(topic="t", partition=0, to_instance=HERE) if rpc == "MovePartition"
               else mpb.TakeOverPartitionRequest(topic="t", partition=0, unclean=True))
    drop = asyncio.create_task(rpcs.drop_stale_copies())
    try:
        await pool.started.wait()
        call = asyncio.create_task(getattr(PartitionMoveRpcs, rpc).__wrapped__(rpcs, request, None))
        for _ in range(10):  # a refusal is raised at the call's first step
            await asyncio.sleep(0)
        assert not call.done() and ran == []
    finally:
        pool.release.set()  # the held pool call ends whatever the test found
    assert await drop == 1
    assert await call == "answered"
    assert ran == [("t", 0, True, 0)] and rpcs._running == set()  # after the copy was emptied


async def test_an_abort_asked_while_the_stale_copy_pass_empties_the_old_copy_is_not_refused(manager):
    """The drop touches no move record: AbortMove answers (here: no move to abort) rather than
    saying a move runs here."""
    log, cache = _stale_copy(manager)
    pool = _HeldPool()
    rpcs = _moves(manager, cache, pool)
    rpcs.core.cluster.moves = SimpleNamespace(read_move=lambda topic, partition: None)
    drop = asyncio.create_task(rpcs.drop_stale_copies())
    try:
        await pool.started.wait()
        answer = await PartitionMoveRpcs.AbortMove.__wrapped__(
            rpcs, mpb.AbortMoveRequest(topic="t", partition=0), None)
        assert not answer.aborted
    finally:
        pool.release.set()
    assert await drop == 1
