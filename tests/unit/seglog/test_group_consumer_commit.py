"""The group consumer's commit refused at a stale member epoch (a heartbeat answer lost, the
service moved the member on), over every shape of what the application names, what the member
owns and what the answer to its one heartbeat assigns (Hypothesis), against a fake coordinator
that takes commits at the current epoch only. The oracle: the retry commits exactly the named
partitions the member owns after the answer; the commit raises naming the rest unless they are
the member's own positions with auto-commit (their revocation committed them); fenced for real,
nothing is committed and the member gives everything up. The real service on loopback drives
the same cases in tests/integration/client/test_group_consumer_faults.py."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from seglog.errors import FailedPreconditionError, SeglogError
from seglog.group_consumer import AsyncGroupConsumer
from seglog.structs import TopicPartition
from seglog.v1 import log_service_pb2 as pb

TOPIC = "t"
KNOWN_EPOCH, CURRENT_EPOCH = 3, 4  # the member's, and the service's since the lost answer
PARTITION_COUNT = 5


def _position(partition: int) -> int:
    return 10 + partition  # distinct per partition, so a commit shows whose offset it carried


class FakeCoordinator:
    """Commits at the current epoch only; a heartbeat at the known (previous) epoch answers the
    current one with ``assignment``, or is refused when ``fenced``."""

    def __init__(self, assignment: set[int], fenced: bool) -> None:
        self.assignment, self.fenced = assignment, fenced
        self.commits: list[dict[int, int]] = []  # each accepted commit: partition -> offset
        self.heartbeats = 0

    async def commit_offsets(self, request: pb.CommitOffsetsRequest) -> pb.CommitOffsetsResponse:
        if request.member_epoch != CURRENT_EPOCH:
            raise FailedPreconditionError(f"epoch {request.member_epoch}, its epoch is {CURRENT_EPOCH}",
                                          service_error="FencedMemberError")
        self.commits.append({o.partition: o.offset for o in request.offsets})
        return pb.CommitOffsetsResponse()

    async def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        self.heartbeats += 1
        assert request.member_epoch == KNOWN_EPOCH
        if self.fenced:
            raise FailedPreconditionError("two epochs behind", service_error="FencedMemberError")
        return pb.HeartbeatResponse(
            member_id=request.member_id, member_epoch=CURRENT_EPOCH, heartbeat_interval_ms=100,
            assignment=[pb.GroupPartition(topic=TOPIC, partition=p) for p in sorted(self.assignment)])

    async def fetch_offsets(self, request: pb.FetchOffsetsRequest) -> pb.FetchOffsetsResponse:
        return pb.FetchOffsetsResponse(offsets=[
            pb.CommittedOffset(topic=p.topic, partition=p.partition, offset=_position(p.partition))
            for p in request.partitions])


class FakeReader:
    """The owned partitions' reader: every position known, none held by the application."""

    def _position_now(self, partition: int) -> int:
        return _position(partition)

    async def position(self, partition: int) -> int:
        return _position(partition)


async def _no_rebuild(*_: object) -> None:
    pass


def _stale_member(coordinator: FakeCoordinator, owned: set[int], auto_commit: bool,
                  revoked: list) -> AsyncGroupConsumer:
    consumer = AsyncGroupConsumer("localhost:1", group_id="g", topics=[TOPIC], enable_auto_commit=auto_commit,
                                  on_revoke=revoked.append)
    consumer._transport, consumer._lock = coordinator, asyncio.Lock()  # type: ignore[assignment]
    consumer._readers = {TOPIC: FakeReader()}  # type: ignore[dict-item]
    consumer._rebuild = _no_rebuild  # type: ignore[method-assign]
    consumer._owned = {(TOPIC, p) for p in owned}
    consumer._consumed = {(TOPIC, p): _position(p) for p in owned}  # everything returned was processed
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


@given(owned=partitions, assignment=partitions, named=st.none() | partitions, auto_commit=st.booleans())
def test_a_stale_commit_lands_at_the_current_epoch_for_the_named_partitions_the_member_still_owns(
        owned, assignment, named, auto_commit):
    coordinator = FakeCoordinator(assignment, fenced=False)
    revoked: list = []
    consumer = _stale_member(coordinator, owned, auto_commit, revoked)
    offsets = None if named is None else {TopicPartition(TOPIC, p): _position(p) for p in named}
    error = asyncio.run(_commit(consumer, offsets))

    requested = owned if named is None else named
    if not requested:  # nothing to send: never refused, no heartbeat
        assert error is None and coordinator.commits == [] and coordinator.heartbeats == 0
        return
    assert coordinator.heartbeats == 1 and consumer.member_epoch == CURRENT_EPOCH
    assert consumer._owned == {(TOPIC, p) for p in assignment}  # the answer taken: revoked and added
    assert revoked == ([[TopicPartition(TOPIC, p) for p in sorted(owned - assignment)]] if owned - assignment else [])
    # With auto-commit the revocation commits its consumed positions first, at the epoch answered.
    revocation_count = 1 if auto_commit and owned - assignment else 0
    revocation_commits, retried = coordinator.commits[:revocation_count], coordinator.commits[revocation_count:]
    assert revocation_commits == [{p: _position(p) for p in sorted(owned - assignment)}] * revocation_count
    kept = requested & assignment
    assert retried == ([{p: _position(p) for p in kept}] if kept else [])
    left_out = requested - assignment
    if left_out and not (named is None and auto_commit):
        assert isinstance(error, FailedPreconditionError) and error.__cause__ is not None
        assert all(f"{TOPIC}-{p}" in str(error).split(" are not committed")[0] for p in left_out)
    else:
        assert error is None


@given(owned=partitions, named=st.none() | partitions.filter(bool), auto_commit=st.booleans())
def test_a_stale_commit_of_a_member_fenced_for_real_commits_nothing_and_gives_everything_up(
        owned, named, auto_commit):
    coordinator = FakeCoordinator(set(), fenced=True)
    revoked: list = []
    consumer = _stale_member(coordinator, owned, auto_commit, revoked)
    offsets = None if named is None else {TopicPartition(TOPIC, p): _position(p) for p in named}
    error = asyncio.run(_commit(consumer, offsets))

    if named is None and not owned:
        assert error is None and coordinator.heartbeats == 0
        return
    assert isinstance(error, FailedPreconditionError) and error.service_error == "FencedMemberError"
    assert isinstance(error.__cause__, FailedPreconditionError) and "two epochs behind" in str(error.__cause__)
    assert any("member" in note and "'g'" in note and "fenced" in note for note in error.__notes__)
    assert coordinator.commits == []
    assert consumer.member_epoch == 0 and consumer._owned == set()
    assert revoked == ([[TopicPartition(TOPIC, p) for p in sorted(owned)]] if owned else [])
