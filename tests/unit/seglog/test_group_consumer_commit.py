"""The group consumer's commit refused at a stale member epoch (a heartbeat answer lost, the
service moved the member on), over every shape of what the application names, what the member
owns, what it still processes and what the answer to its one heartbeat assigns (Hypothesis),
against a fake coordinator that takes commits at the current epoch only and of any partition (as
the service does). The oracle: the retry commits exactly what the first attempt carried, at the
epoch answered, partitions the answer revokes included, and only then carries the answer out
(revocations, held ones kept for the application's next poll, assignments); fenced for real,
nothing is committed, ``CommitFailedError`` names it all and the member gives everything up; a
partition the member does not own is refused before anything is sent. Cancelling ``commit()``
mid-retry leaves the member consistent. The real service on loopback drives the same cases in
tests/integration/client/test_group_consumer_faults.py."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog.errors import SeglogError, TopicNotFoundError
from seglog.group_consumer import AsyncGroupConsumer, CommitFailedError, GroupConsumer
from seglog.structs import TopicPartition
from seglog.v1 import log_service_pb2 as pb

TOPIC = "t"
KNOWN_EPOCH, CURRENT_EPOCH = 3, 4  # the member's, and the service's since the lost answer
PARTITION_COUNT = 5


def _position(partition: int) -> int:
    return 10 + partition  # distinct per partition, so a commit shows whose offset it carried


def _consumed(partition: int, held: set[int]) -> int:
    """Behind the position where the latest poll returned records the application still holds."""
    return _position(partition) - (1 if partition in held else 0)


class FakeCoordinator:
    """Commits at the current epoch only, of any partition (the service's ``check_commit`` checks
    the epoch alone); a heartbeat at the known (previous) epoch answers the current one with
    ``assignment``, or is refused when ``fenced``. Every commit is recorded, refused ones too."""

    def __init__(self, assignment: set[int], fenced: bool) -> None:
        self.assignment, self.fenced = assignment, fenced
        self.commits: list[tuple[int, dict[int, int]]] = []  # each accepted commit: epoch, partition -> offset
        self.refused = 0
        self.heartbeats = 0
        self.offset_fetches = 0

    async def commit_offsets(self, request: pb.CommitOffsetsRequest) -> pb.CommitOffsetsResponse:
        if request.member_epoch != CURRENT_EPOCH:
            self.refused += 1
            raise SeglogError(f"epoch {request.member_epoch}, its epoch is {CURRENT_EPOCH}",
                              service_error="FencedMemberError")
        self.commits.append((request.member_epoch, {o.partition: o.offset for o in request.offsets}))
        return pb.CommitOffsetsResponse()

    async def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        self.heartbeats += 1
        assert request.member_epoch == KNOWN_EPOCH
        if self.fenced:
            raise SeglogError("two epochs behind", service_error="FencedMemberError")
        return pb.HeartbeatResponse(
            member_id=request.member_id, member_epoch=CURRENT_EPOCH, heartbeat_interval_ms=100,
            assignment=[pb.GroupPartition(topic=TOPIC, partition=p) for p in sorted(self.assignment)])

    async def fetch_offsets(self, request: pb.FetchOffsetsRequest) -> pb.FetchOffsetsResponse:
        self.offset_fetches += 1
        return pb.FetchOffsetsResponse(offsets=[
            pb.CommittedOffset(topic=p.topic, partition=p.partition, offset=_position(p.partition))
            for p in request.partitions])


class LeavingCoordinator(FakeCoordinator):
    """``FakeCoordinator`` that also takes the member's leave, and closes, for ``close()``."""

    def __init__(self, assignment: set[int]) -> None:
        super().__init__(assignment, fenced=False)
        self.leaves: list[int] = []

    async def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        if request.member_epoch < 0:
            self.leaves.append(request.member_epoch)
            return pb.HeartbeatResponse(member_id=request.member_id, member_epoch=request.member_epoch)
        return await super().heartbeat(request)

    async def close(self) -> None:
        pass


class FakeReader:
    """The owned partitions' reader: every position known."""

    def _position_now(self, partition: int) -> int:
        return _position(partition)

    async def position(self, partition: int) -> int:
        return _position(partition)

    async def close(self) -> None:
        pass


async def _no_rebuild(*_: object) -> None:
    pass


def _stale_member(coordinator: FakeCoordinator, owned: set[int], auto_commit: bool, revoked: list,
                  held: set[int] = frozenset()) -> AsyncGroupConsumer:  # type: ignore[assignment]
    consumer = AsyncGroupConsumer("localhost:1", group_id="g", topics=[TOPIC], enable_auto_commit=auto_commit,
                                  on_revoke=revoked.append)
    consumer._transport, consumer._lock = coordinator, asyncio.Lock()  # type: ignore[assignment]
    consumer._readers = {TOPIC: FakeReader()}  # type: ignore[dict-item]
    consumer._rebuild = _no_rebuild  # type: ignore[method-assign]
    consumer._owned = {(TOPIC, p) for p in owned}
    consumer._consumed = {(TOPIC, p): _consumed(p, held) for p in owned}
    consumer.member_epoch = KNOWN_EPOCH
    return consumer


async def _commit(consumer: AsyncGroupConsumer, offsets: dict[TopicPartition, int] | None) -> BaseException | None:
    assert consumer._lock is not None
    async with consumer._lock:
        try:
            await consumer._commit_at_current_epoch(offsets)
        except SeglogError as error:
            return error
    return None


partitions = st.sets(st.integers(0, PARTITION_COUNT - 1))


@given(owned=partitions, assignment=partitions, held=partitions, named=st.none() | partitions,
       auto_commit=st.booleans())
def test_a_stale_commit_lands_at_the_current_epoch_for_every_partition_named_then_the_answer_is_carried_out(
        owned, assignment, held, named, auto_commit):
    held &= owned
    coordinator = FakeCoordinator(assignment, fenced=False)
    revoked: list = []
    consumer = _stale_member(coordinator, owned, auto_commit, revoked, held)
    offsets = None if named is None else {TopicPartition(TOPIC, p): _position(p) for p in named}
    error = asyncio.run(_commit(consumer, offsets))

    if named is not None and named - owned:  # one not this member's: refused before anything is sent
        assert isinstance(error, CommitFailedError) and error.uncommitted == offsets
        assert error.service_error is None and all(f"{TOPIC}-{p}" in str(error) for p in named - owned)
        assert coordinator.heartbeats == coordinator.refused == 0 and coordinator.commits == []
        assert consumer._owned == {(TOPIC, p) for p in owned} and consumer.member_epoch == KNOWN_EPOCH
        return
    requested = owned if named is None else named
    if not requested:  # nothing to send: never refused, no heartbeat
        assert error is None and coordinator.commits == [] and coordinator.heartbeats == 0
        return
    assert error is None
    assert coordinator.heartbeats == 1 and consumer.member_epoch == CURRENT_EPOCH
    # The retry first, every partition the first attempt carried, those the answer revokes included.
    assert coordinator.commits[0] == (CURRENT_EPOCH, {p: _position(p) for p in requested})
    # Then the answer: a partition whose records the application still holds waits for its next poll.
    waiting = (owned - assignment) & held
    revoked_now = owned - assignment - held
    assert consumer._owned == {(TOPIC, p) for p in assignment | waiting}
    assert consumer._revoking == {(TOPIC, p) for p in waiting}
    assert revoked == ([[TopicPartition(TOPIC, p) for p in sorted(revoked_now)]] if revoked_now else [])
    # With auto-commit the revocation commits its consumed positions, after the retry.
    revocation_commits = [(CURRENT_EPOCH, {p: _position(p) for p in revoked_now})] if auto_commit and revoked_now else []
    assert coordinator.commits[1:] == revocation_commits
    assert coordinator.offset_fetches == (1 if assignment - owned else 0)
    assert consumer._wake.is_set() == bool(revoked_now)  # reported gone at once


@given(owned=partitions, named=st.none() | partitions, auto_commit=st.booleans())
def test_a_stale_commit_of_a_member_fenced_for_real_commits_nothing_and_gives_everything_up(
        owned, named, auto_commit):
    if named is not None:
        named = (named & owned) or None
    coordinator = FakeCoordinator(set(), fenced=True)
    revoked: list = []
    consumer = _stale_member(coordinator, owned, auto_commit, revoked)
    offsets = None if named is None else {TopicPartition(TOPIC, p): _position(p) for p in named}
    error = asyncio.run(_commit(consumer, offsets))

    if named is None and not owned:
        assert error is None and coordinator.heartbeats == 0
        return
    requested = owned if named is None else named
    assert isinstance(error, CommitFailedError) and error.service_error == "FencedMemberError"
    assert error.uncommitted == {TopicPartition(TOPIC, p): _position(p) for p in requested}
    assert "epoch 3, its epoch is 4" in str(error.__cause__)  # the commit's refusal
    assert "two epochs behind" in str(error.__cause__.__cause__)  # the heartbeat's
    assert "'g'" in str(error) and "fenced" in str(error)
    assert coordinator.commits == []
    assert consumer.member_epoch == 0 and consumer._owned == set()
    assert revoked == ([[TopicPartition(TOPIC, p) for p in sorted(owned)]] if owned else [])


def test_a_commit_cancelled_while_the_answer_is_carried_out_leaves_every_owned_partition_with_its_reader():
    """The answer revokes t-1 and the reader's rebuild takes a while (an old reader closing):
    ``commit()`` cancelled then (a timeout around it, Ctrl-C in the sync facade) raises the
    cancellation only once the rebuild ended, the commit landed before, and the member's
    partitions, readers and epoch agree."""
    coordinator = FakeCoordinator({0}, fenced=False)
    consumer = _stale_member(coordinator, {0, 1}, False, [])
    rebuilding, gate = asyncio.Event(), asyncio.Event()

    async def slow_rebuild(topics: set[str], starts: object = None) -> None:
        consumer._readers.pop(TOPIC)
        rebuilding.set()
        await gate.wait()
        consumer._readers[TOPIC] = FakeReader()  # type: ignore[assignment]

    consumer._rebuild = slow_rebuild  # type: ignore[method-assign]

    async def run() -> None:
        await _cancelled_while_it_runs(consumer.commit({TopicPartition(TOPIC, 0): 5, TopicPartition(TOPIC, 1): 6}),
                                       rebuilding, gate)  # the rebuild carried to its end first
        assert coordinator.commits == [(CURRENT_EPOCH, {0: 5, 1: 6})]
        assert consumer.member_epoch == CURRENT_EPOCH and consumer._owned == {(TOPIC, 0)}
        assert consumer._positions_now() == {TopicPartition(TOPIC, 0): _position(0)}  # what poll reads next
        assert not consumer._lock.locked()

    asyncio.run(run())


def _member_whose_rebuild_fails_when_let_go() -> tuple[AsyncGroupConsumer, asyncio.Event, asyncio.Event]:
    """A member whose commit's answer revokes t-1, the reader's rebuild then waiting for
    ``gate`` and failing (a reader that cannot start)."""
    consumer = _stale_member(FakeCoordinator({0}, fenced=False), {0, 1}, False, [])
    rebuilding, gate = asyncio.Event(), asyncio.Event()

    async def failing_rebuild(topics: set[str], starts: object = None) -> None:
        rebuilding.set()
        await gate.wait()
        raise RuntimeError("the reader did not start")

    consumer._rebuild = failing_rebuild  # type: ignore[method-assign]
    return consumer, rebuilding, gate


@pytest.mark.parametrize("cancel_in_the_turn_it_fails", [False, True])
def test_a_commit_cancelled_while_the_answer_is_carried_out_raises_the_cancel_when_the_carry_out_fails(
        cancel_in_the_turn_it_fails):
    """The cancellation is raised even though the carry-out failed (not swallowed with its
    error, ``commit()`` returning as if uncancelled), cancelled long before the failure or in
    the very turn the failing step ends; the failure is still handed to the next poll."""
    consumer, rebuilding, gate = _member_whose_rebuild_fails_when_let_go()

    async def run() -> None:
        commit = asyncio.create_task(consumer.commit({TopicPartition(TOPIC, 0): 5}))
        await rebuilding.wait()
        if cancel_in_the_turn_it_fails:
            gate.set()  # the rebuild wakes and raises first
            commit.cancel()  # then, in the same turn, the caller is cancelled
        else:
            commit.cancel()
            await asyncio.sleep(0.01)
            gate.set()
        with pytest.raises(asyncio.CancelledError):
            await commit
        assert not consumer._lock.locked()

    asyncio.run(run())
    assert isinstance(consumer._error, RuntimeError) and "did not start" in str(consumer._error)
    assert consumer._wake.is_set()  # the loop's heartbeat takes the answer again now


def test_a_fenced_commit_cancelled_while_it_gives_its_partitions_up_raises_the_cancel_when_that_fails():
    """Fenced for real, the member gives its partitions up; that failing after ``commit()`` was
    cancelled raises the cancellation, not the failure in its place."""
    consumer = _stale_member(FakeCoordinator(set(), fenced=True), {0, 1}, False, [])
    giving_up, gate = asyncio.Event(), asyncio.Event()

    async def failing_give_up(*_: object) -> None:
        giving_up.set()
        await gate.wait()
        raise RuntimeError("a reader did not close")

    consumer._give_up = failing_give_up  # type: ignore[method-assign]

    async def run() -> None:
        await _cancelled_while_it_runs(consumer.commit({TopicPartition(TOPIC, 0): 5}), giving_up, gate)
        assert not consumer._lock.locked()

    asyncio.run(run())


def test_a_commit_whose_answer_on_revoke_raises_lands_and_hands_the_error_to_the_next_poll():
    """Carrying the answer out fails (``on_revoke`` raises): the commit landed, so ``commit()``
    returns; the error goes where the loop's heartbeat sends it (the next poll), the partition
    kept until a later answer revokes it again."""
    coordinator = FakeCoordinator({0}, fenced=False)
    consumer = _stale_member(coordinator, {0, 1}, False, [])

    def on_revoke(_: list) -> None:
        raise RuntimeError("the application's callback")

    consumer._on_revoke = on_revoke
    error = asyncio.run(_commit(consumer, {TopicPartition(TOPIC, 0): 5}))
    assert error is None
    assert coordinator.commits == [(CURRENT_EPOCH, {0: 5})] and consumer.member_epoch == CURRENT_EPOCH
    assert isinstance(consumer._error, RuntimeError) and consumer._owned == {(TOPIC, 0), (TOPIC, 1)}


def test_a_commit_of_the_positions_refused_as_an_unknown_member_raises_not_skipped_as_a_deleted_topic():
    """UnknownMemberError is NOT_FOUND, as a deleted topic is: the member's own commit, which
    skips deleted topics, must still raise it (before, it was swallowed and nothing committed)."""

    class UnknownMember(FakeCoordinator):
        async def commit_offsets(self, request: pb.CommitOffsetsRequest) -> pb.CommitOffsetsResponse:
            raise TopicNotFoundError("member 'm' is not in group 'g'", service_error="UnknownMemberError")

        async def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
            raise TopicNotFoundError("member 'm' is not in group 'g'", service_error="UnknownMemberError")

    consumer = _stale_member(UnknownMember(set(), fenced=False), {0, 1}, True, [])
    error = asyncio.run(_commit(consumer, None))
    assert isinstance(error, CommitFailedError) and error.service_error == "UnknownMemberError"
    assert error.uncommitted == {TopicPartition(TOPIC, p): _position(p) for p in (0, 1)}
    assert consumer._owned == set() and consumer.member_epoch == 0


def test_a_commit_refused_again_after_its_heartbeat_raises_commit_failed_and_still_carries_the_answer_out():
    """The group moves again between the commit's heartbeat and its retry: the retry is refused
    too; ``commit()`` raises CommitFailedError naming every offset, the refusal's kind kept, and
    the answer it learned is still carried out (t-1 revoked), the loop woken to heartbeat."""

    class MovingOn(FakeCoordinator):
        async def commit_offsets(self, request: pb.CommitOffsetsRequest) -> pb.CommitOffsetsResponse:
            self.refused += 1
            raise SeglogError(f"epoch {request.member_epoch}, its epoch is 5", service_error="FencedMemberError")

    coordinator = MovingOn({0}, fenced=False)
    revoked: list = []
    consumer = _stale_member(coordinator, {0, 1}, False, revoked)
    offsets = {TopicPartition(TOPIC, 0): 5, TopicPartition(TOPIC, 1): 6}
    error = asyncio.run(_commit(consumer, offsets))
    assert isinstance(error, CommitFailedError) and error.service_error == "FencedMemberError"
    assert error.uncommitted == offsets and coordinator.refused == 2 and coordinator.heartbeats == 1
    assert consumer.member_epoch == CURRENT_EPOCH and consumer._owned == {(TOPIC, 0)}
    assert revoked == [[TopicPartition(TOPIC, 1)]] and consumer._wake.is_set()


def test_close_after_a_stale_commit_takes_the_epoch_and_starts_no_reader_for_partitions_just_granted():
    """Close's commit, refused, heartbeats and commits at the epoch answered but does not carry
    the answer out: no ``on_assign``, no offsets fetched for the partitions granted, no reader
    started for them; the revocation and the leave follow."""

    coordinator = LeavingCoordinator({0, 1, 2})
    revoked: list = []
    consumer = _stale_member(coordinator, {0}, True, revoked)
    assigned: list = []
    consumer._on_assign = assigned.append
    rebuilt: list = []

    async def rebuild(topics: set[str], starts: object = None) -> None:
        rebuilt.append(starts)

    consumer._rebuild = rebuild  # type: ignore[method-assign]
    asyncio.run(consumer.close())
    assert coordinator.commits == [(CURRENT_EPOCH, {0: _position(0)})]
    assert assigned == [] and coordinator.offset_fetches == 0 and rebuilt == [None]  # the revocation's only
    assert revoked == [[TopicPartition(TOPIC, 0)]] and coordinator.leaves == [-1]


def test_the_sync_group_consumer_commit_retries_at_the_current_epoch():
    """``GroupConsumer.commit`` runs the same retry on the client's loop thread."""
    coordinator = LeavingCoordinator({0, 1})
    consumer = _stale_member(coordinator, {0, 1}, False, [])
    facade = GroupConsumer.__new__(GroupConsumer)
    facade._start(consumer)  # the transport is set: start() joins nothing
    with facade:
        facade.commit({TopicPartition(TOPIC, 1): 7})
    assert coordinator.refused == 1 and coordinator.commits == [(CURRENT_EPOCH, {1: 7})]
    assert consumer.member_epoch == CURRENT_EPOCH


async def _cancelled_while_it_runs(commit_call, started: asyncio.Event, gate: asyncio.Event) -> None:
    """Cancels ``commit_call`` once the step it waits on has ``started``, checks the commit still
    waits for that step (held at ``gate``), lets the step end and expects the cancel raised."""
    commit = asyncio.create_task(commit_call)
    await started.wait()
    commit.cancel()
    await asyncio.sleep(0.01)
    assert not commit.done()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await commit


class TopicsFirstCoordinator:
    """Checks a commit's partitions before its member, as the service does (``commit`` in
    groups/coordinator.py): a deleted topic answers NOT_FOUND for the topic, then an unknown
    member NOT_FOUND ``UnknownMemberError``; accepted commits are recorded."""

    def __init__(self, deleted: set[str], member_known: bool) -> None:
        self.deleted, self.member_known = deleted, member_known
        self.commits: list[dict[tuple[str, int], int]] = []

    async def commit_offsets(self, request: pb.CommitOffsetsRequest) -> pb.CommitOffsetsResponse:
        gone = sorted({o.topic for o in request.offsets} & self.deleted)
        if gone:
            raise TopicNotFoundError(f"topic {gone[0]!r} not found", service_error="UnknownTopicOrPartitionError")
        if not self.member_known:
            raise TopicNotFoundError("member 'm' is not in group 'g'", service_error="UnknownMemberError")
        self.commits.append({(o.topic, o.partition): o.offset for o in request.offsets})
        return pb.CommitOffsetsResponse()


@given(named=st.sets(st.sampled_from(["a", "b", "c"]), min_size=1), deleted=st.sets(st.sampled_from(["a", "b", "c"])),
       member_known=st.booleans())
def test_the_members_own_commit_skips_deleted_topics_but_never_an_unknown_member(named, deleted, member_known):
    """The member's own commit (``skip_deleted_topics``) of topics some of which are deleted:
    known to the service, it commits every live topic's offsets and leaves the deleted out;
    unknown, the refusal of a live topic's commit is raised (UnknownMemberError is NOT_FOUND as a
    deleted topic is; before, it was swallowed when a deleted topic was named too)."""
    coordinator = TopicsFirstCoordinator(deleted, member_known)
    consumer = AsyncGroupConsumer("localhost:1", group_id="g", topics=sorted(named))
    consumer._transport, consumer._lock = coordinator, asyncio.Lock()  # type: ignore[assignment]
    offsets = {TopicPartition(topic, 0): 7 for topic in sorted(named)}
    live = named - deleted

    async def commit() -> BaseException | None:
        try:
            await consumer._commit_locked(offsets, skip_deleted_topics=True)
        except SeglogError as error:
            return error
        return None

    error = asyncio.run(commit())
    if member_known or not live:
        assert error is None
        assert {key for commit in coordinator.commits for key in commit} == {(topic, 0) for topic in live}
    else:
        assert isinstance(error, TopicNotFoundError) and error.service_error == "UnknownMemberError"
        assert coordinator.commits == []
