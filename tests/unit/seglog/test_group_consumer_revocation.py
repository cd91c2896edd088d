"""The group consumer's revocations run inside ``poll()`` (a revocation held for the application's
next poll, the member's own lapse when its session ran out unheard) and at a heartbeat answer,
against the fake coordinator of test_group_consumer_commit.py: a poll cancelled while one of them
rebuilds a reader leaves every owned partition with its reader (the next poll reads on); a member
giving everything up is out of the group (epoch 0) even when a reader fails to close."""

from __future__ import annotations

import asyncio

import pytest

import seglog.group_consumer as group_consumer
from seglog.group_consumer import AsyncGroupConsumer
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

