"""The group consumer's revocations run inside ``poll()`` (a revocation held for the application's
next poll, the member's own lapse when its session ran out unheard) and at a heartbeat answer,
against the fake coordinator of test_group_consumer_commit.py: a poll cancelled while one of them
rebuilds a reader leaves every owned partition with its reader (the next poll reads on); a member
giving everything up is out of the group (epoch 0) even when a reader fails to close; the
auto-commit before a revocation, refused at a stale epoch, lands at the current one; refused the
member, none of the same answer's new partitions is taken."""

from __future__ import annotations

import asyncio

import pytest

import seglog.group_consumer as group_consumer
from seglog.errors import TopicNotFoundError
from seglog.group_consumer import AsyncGroupConsumer
from seglog.structs import TopicPartition
from seglog.v1 import log_service_pb2 as pb
from tests.unit.seglog.test_group_consumer_commit import (
    CURRENT_EPOCH,
    TOPIC,
    FakeCoordinator,
    FakeReader,
    _position,
    _stale_member,
)


class GatedReader:
    """The new reader a rebuild starts: its start waits for ``gate`` (a slow connection)."""

    started: asyncio.Event
    gate: asyncio.Event

    def __init__(self, *_: object, **__: object) -> None:
        pass

    async def start(self) -> None:
        GatedReader.started.set()
        await GatedReader.gate.wait()

    async def seek(self, *_: object) -> None:
        pass

    def _position_now(self, partition: int) -> int:
        return _position(partition)

    async def poll(self, *_: object) -> list:
        return []

    async def close(self) -> None:
        pass


class ClosingReader(FakeReader):
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


def _member_with_a_real_rebuild(monkeypatch: pytest.MonkeyPatch, owned: set[int]) -> tuple[AsyncGroupConsumer,
                                                                                            ClosingReader]:
    consumer = _stale_member(FakeCoordinator(set(owned), fenced=False), owned, False, [])
    del consumer._rebuild  # the real one, starting GatedReader
    old = ClosingReader()
    consumer._readers = {TOPIC: old}  # type: ignore[dict-item]
    consumer.member_epoch = CURRENT_EPOCH
    monkeypatch.setattr(group_consumer, "AsyncConsumer", GatedReader)
    return consumer, old


async def _cancel_once_the_reader_starts(poll: asyncio.Task) -> None:
    await GatedReader.started.wait()
    poll.cancel()
    await asyncio.sleep(0.01)
    GatedReader.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await poll


def test_a_poll_cancelled_while_a_held_revocation_rebuilds_the_reader_leaves_the_kept_partition_read(monkeypatch):
    """t-1's revocation, held for this poll, rebuilds t's reader over t-0; the poll cancelled
    while the new reader starts still finishes the rebuild, so t-0 has its reader and the next
    poll reads (before: no reader for t, and every later poll raised KeyError)."""
    consumer, old = _member_with_a_real_rebuild(monkeypatch, {0, 1})
    consumer._revoking = {(TOPIC, 1)}

    async def run() -> None:
        GatedReader.started, GatedReader.gate = asyncio.Event(), asyncio.Event()
        consumer._last_heartbeat_ok = asyncio.get_running_loop().time()
        await _cancel_once_the_reader_starts(asyncio.create_task(consumer.poll(0)))
        assert consumer._owned == {(TOPIC, 0)} and isinstance(consumer._readers[TOPIC], GatedReader)
        assert old.closed and not consumer._lock.locked()
        assert await consumer.poll(0) == []
        assert consumer._consumed == {(TOPIC, 0): _position(0)}

    asyncio.run(run())


def test_a_poll_cancelled_while_a_lapsed_member_gives_up_leaves_it_out_of_the_group_with_no_reader(monkeypatch):
    """The session ran out unheard: the poll gives every partition up; cancelled while that
    closes the old reader and rebuilds, the member still ends at epoch 0 (the next heartbeat
    rejoins), owning nothing, its old reader closed."""
    consumer, old = _member_with_a_real_rebuild(monkeypatch, {0, 1})
    consumer.session_timeout_ms = 1
    started = asyncio.Event()

    async def slow_close() -> None:
        started.set()
        await GatedReader.gate.wait()
        old.closed = True

    old.close = slow_close  # type: ignore[method-assign]

    async def run() -> None:
        GatedReader.started, GatedReader.gate = started, asyncio.Event()
        await _cancel_once_the_reader_starts(asyncio.create_task(consumer.poll(0)))
        assert consumer.member_epoch == 0 and consumer._owned == set() and consumer._readers == {}
        assert old.closed and not consumer._lock.locked()

    asyncio.run(run())


def test_a_member_giving_up_is_out_of_the_group_even_when_its_reader_fails_to_close():
    """``_give_up`` whose drop fails (a reader that cannot close): the failure is raised, and the
    member is at epoch 0 all the same, so the next heartbeat rejoins instead of heartbeating at
    the epoch of the membership it gave up."""
    consumer = _stale_member(FakeCoordinator(set(), fenced=False), {0, 1}, False, [])
    consumer.member_epoch = CURRENT_EPOCH

    async def failing_rebuild(*_: object) -> None:
        raise RuntimeError("the reader did not close")

    consumer._rebuild = failing_rebuild  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="did not close"):
        asyncio.run(consumer._give_up("fenced", "FencedMemberError"))
    assert consumer.member_epoch == 0 and consumer._owned == set()


class UnknownMemberCommits(FakeCoordinator):
    """Refuses every commit UnknownMemberError: the service removed the member."""

    async def commit_offsets(self, request: pb.CommitOffsetsRequest) -> pb.CommitOffsetsResponse:
        raise TopicNotFoundError("member 'm' is not in group 'g'", service_error="UnknownMemberError")


def _poll_completes_the_held_revocation(consumer: AsyncGroupConsumer) -> None:
    async def run() -> None:
        async with consumer._lock:
            await consumer._mark_consumed()  # what a poll does first

    asyncio.run(run())


def test_a_held_revocations_auto_commit_refused_at_a_stale_epoch_lands_at_the_current_one():
    """A lost heartbeat answer left the member's epoch stale: the auto-commit before t-1 is given
    up is refused FencedMemberError, but the member is still in the group (its heartbeat at the
    previous epoch is accepted). One heartbeat learns the epoch and the commit lands at it before
    t-1 goes (before: t-1 was given up uncommitted, its next owner re-reading from the last
    commit); the answer is left to the loop's heartbeat, woken."""
    coordinator = FakeCoordinator(assignment={0}, fenced=False)
    revoked: list = []
    consumer = _stale_member(coordinator, {0, 1}, True, revoked)
    consumer._revoking = {(TOPIC, 1)}
    _poll_completes_the_held_revocation(consumer)
    assert coordinator.refused == 1 and coordinator.heartbeats == 1
    assert coordinator.commits == [(CURRENT_EPOCH, {1: _position(1)})]
    assert revoked == [[TopicPartition(TOPIC, 1)]] and consumer._owned == {(TOPIC, 0)}
    assert consumer.member_epoch == CURRENT_EPOCH and consumer._wake.is_set()


def test_a_held_revocations_auto_commit_of_a_member_fenced_for_real_gives_everything_up_once():
    """The commit and its heartbeat both refused: fenced for real, the member gives every
    partition up uncommitted (``on_revoke`` once, t-1 with the rest) and rejoins."""
    coordinator = FakeCoordinator(assignment=set(), fenced=True)
    revoked: list = []
    consumer = _stale_member(coordinator, {0, 1}, True, revoked)
    consumer._revoking = {(TOPIC, 1)}
    _poll_completes_the_held_revocation(consumer)
    assert coordinator.commits == [] and coordinator.heartbeats == 1
    assert revoked == [[TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)]]
    assert consumer._owned == set() and consumer.member_epoch == 0 and consumer._wake.is_set()


def test_a_held_revocations_auto_commit_of_an_unknown_member_gives_the_partition_up_uncommitted():
    """Refused UnknownMemberError (the service removed the member): no heartbeat can bring the
    commit back; t-1 is given up uncommitted and the loop, woken, rejoins."""
    coordinator = UnknownMemberCommits(assignment={0}, fenced=False)
    revoked: list = []
    consumer = _stale_member(coordinator, {0, 1}, True, revoked)
    consumer._revoking = {(TOPIC, 1)}
    _poll_completes_the_held_revocation(consumer)
    assert coordinator.heartbeats == 0 and coordinator.commits == []
    assert revoked == [[TopicPartition(TOPIC, 1)]] and consumer._owned == {(TOPIC, 0)} and consumer._wake.is_set()


def test_an_answer_whose_revocation_commit_is_refused_unknown_assigns_none_of_its_new_partitions():
    """The answer revokes t-1 and grants t-2; the auto-commit before t-1 goes is refused
    UnknownMemberError. t-1 is given up uncommitted, and t-2 is not taken (no offsets fetched,
    no ``on_assign``, no reader) by a member the service no longer knows: the next heartbeat is
    now (wait 0), and rejoins (before: t-2 was assigned all the same)."""
    coordinator = UnknownMemberCommits(assignment=set(), fenced=False)
    revoked: list = []
    assigned: list = []
    consumer = _stale_member(coordinator, {0, 1}, True, revoked)
    consumer._on_assign = assigned.append
    consumer.member_epoch = CURRENT_EPOCH
    answer = pb.HeartbeatResponse(member_id=consumer.member_id, member_epoch=CURRENT_EPOCH, heartbeat_interval_ms=100,
                                  assignment=[pb.GroupPartition(topic=TOPIC, partition=p) for p in (0, 2)])

    async def run() -> float:
        async with consumer._lock:
            return await consumer._carry_out(answer)

    assert asyncio.run(run()) == 0.0
    assert revoked == [[TopicPartition(TOPIC, 1)]] and assigned == [] and coordinator.offset_fetches == 0
    assert consumer._owned == {(TOPIC, 0)} and consumer._wake.is_set()
