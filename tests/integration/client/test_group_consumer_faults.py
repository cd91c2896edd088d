"""The group consumer against a real service when its heartbeats meet trouble, through a seam on
its transport (``_open_transport``, wrapped to lose answers or fail calls; the service is real):
a join whose answer was lost is retried with the client's own member id (KIP-1082), so the group
has one member holding every partition, not a phantom besides it; a member cut off from
heartbeats revokes its partitions by the session timeout and stops delivering, then rejoins when
heartbeats get through again; a member fenced after two lost answers (two epochs behind) gives
its partitions up and rejoins (heartbeats stepped one at a time by the test). The application's
commit refused at the epoch a lost answer left stale heartbeats once and lands at the current
epoch, of the partitions the member still owns; fenced for real, or its heartbeat failing, it
raises the refusal with the heartbeat's error chained."""

from __future__ import annotations

import asyncio
import time

import pytest

from seglog import Producer
from seglog.errors import SeglogError, ServiceUnavailableError
from seglog.group_consumer import AsyncGroupConsumer, CommitFailedError, RebalanceCallbackError
from seglog.structs import TopicPartition
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
SESSION_MS = 1500
GROUP_ARGS = ["--offsets-topic-partitions", "3", "--group-session-timeout-ms", str(SESSION_MS),
              "--group-heartbeat-interval-ms", "100"]
BOUND_S = 30  # a bound on a hang, not a speed assertion


class FaultyTransport:
    """The real transport, but ``lose`` heartbeats reach the service and their answers are lost,
    and while ``cut`` is set heartbeats never reach it."""

    def __init__(self, real, faults: dict) -> None:
        self._real, self._faults = real, faults

    def __getattr__(self, name):
        return getattr(self._real, name)

    async def heartbeat(self, request):
        if request.member_epoch < 0 and self._faults.get("leave_fails"):
            raise ServiceUnavailableError("the leave failed (the test)")
        if self._faults.get("cut"):
            self._faults["refused"] = self._faults.get("refused", 0) + 1
            raise ServiceUnavailableError("heartbeats cut off by the test")
        answer = await self._real.heartbeat(request)
        if self._faults.get("untold"):  # an older service: no session timeout in the answer
            answer.ClearField("session_timeout_ms")
        if self._faults.get("lose", 0) > 0:
            self._faults["lose"] -= 1
            raise ServiceUnavailableError("the answer was lost")
        return answer


class FaultyConsumer(AsyncGroupConsumer):
    def __init__(self, *args, faults: dict, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.faults = faults

    def _open_transport(self):
        return FaultyTransport(super()._open_transport(), self.faults)


def members(stub, group):
    described = stub.DescribeGroup(pb.DescribeGroupRequest(group=group), timeout=10)
    return {m.member_id: {(p.topic, p.partition) for p in m.owned_partitions} for m in described.members}


def test_a_join_whose_answer_was_lost_and_is_retried_is_one_member(start_service):
    service = start_service(GROUP_ARGS)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="retried", partitions=4), timeout=10)

    async def run() -> None:
        consumer = FaultyConsumer(service.address, group_id="g-retry", topics=["retried"],
                                  enable_auto_commit=False, faults={"lose": 1})
        chosen = consumer.member_id
        assert chosen  # the client's own, before any heartbeat
        with pytest.raises(ServiceUnavailableError):
            await consumer.start()  # the join reached the service; its answer did not come back
        await consumer.start()  # the retried join, same id
        try:
            assert consumer.member_id == chosen
            deadline = time.monotonic() + BOUND_S
            while len(consumer.assignment()) < 4:
                assert time.monotonic() < deadline
                await consumer.poll(timeout_ms=50)
            assert members(service.stub, "g-retry") == {chosen: {("retried", p) for p in range(4)}}
        finally:
            await consumer.close()

    asyncio.run(run())


def test_a_member_cut_off_from_heartbeats_stops_delivering_by_the_session_timeout_and_rejoins(start_service):
    service = start_service(GROUP_ARGS)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="cut", partitions=2), timeout=10)
    faults: dict = {}
    revoked: list = []

    def produce(values):
        with Producer(service.address) as producer:
            for index, value in enumerate(values):
                producer.send("cut", value, partition=index % 2)
            producer.flush()

    async def poll_some(consumer, seen):
        try:
            seen += [r.value for r in await consumer.poll(timeout_ms=50)]
        except ServiceUnavailableError:
            pass  # a failed heartbeat, handed to the poll

    async def run() -> None:
        # Not told the session timeout: it learns the service's from the heartbeat answers (its
        # default, 45 s, would outlast BOUND_S below).
        consumer = FaultyConsumer(service.address, group_id="g-cut", topics=["cut"], faults=faults,
                                  enable_auto_commit=False, auto_offset_reset="earliest", on_revoke=revoked.append)
        await consumer.start()
        assert consumer.session_timeout_ms == SESSION_MS
        try:
            seen: list = []
            deadline = time.monotonic() + BOUND_S
            while len(consumer.assignment()) < 2:
                assert time.monotonic() < deadline
                await poll_some(consumer, seen)
            faults["cut"] = True
            cut_at = time.monotonic()
            while not revoked:  # revoked by itself, heartbeats still failing
                assert time.monotonic() < deadline
                await poll_some(consumer, seen)
            revoked_at = time.monotonic()
            assert faults["cut"] and faults["refused"] >= 1
            assert revoked_at - cut_at >= SESSION_MS / 1000 - 0.2  # not before its session could end
            assert consumer.assignment() == [] and consumer.member_epoch == 0
            await asyncio.to_thread(produce, [b"late%d" % i for i in range(6)])
            late: list = []
            for _ in range(20):  # the records are there; a revoked member delivers none of them
                await poll_some(consumer, late)
            assert late == []

            faults["cut"] = False  # heartbeats get through: it rejoins, same id, and reads again
            while len(late) < 6:
                assert time.monotonic() < deadline
                await poll_some(consumer, late)
            assert sorted(late) == sorted(b"late%d" % i for i in range(6))
            assert members(service.stub, "g-cut") == {consumer.member_id: {("cut", 0), ("cut", 1)}}
        finally:
            await consumer.close()

    asyncio.run(run())


def test_a_member_keeps_its_configured_session_timeout_when_the_service_does_not_tell_its_own(start_service):
    service = start_service(GROUP_ARGS)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="untold", partitions=1), timeout=10)

    async def run() -> tuple[int, int]:
        told = FaultyConsumer(service.address, group_id="g-told", topics=["untold"], faults={},
                              session_timeout_ms=9000)
        untold = FaultyConsumer(service.address, group_id="g-untold", topics=["untold"], faults={"untold": True},
                                session_timeout_ms=9000)
        async with told, untold:
            return told.session_timeout_ms, untold.session_timeout_ms

    assert asyncio.run(run()) == (SESSION_MS, 9000)  # the service's wins wherever it is told


class SteppedTransport:
    """The real transport, but each heartbeat of the member (not its leave) waits for the test's
    word: a step, True to lose the answer after the service handled it; ``outcomes`` gets (the
    epoch sent, the epoch answered, "lost" or the service's error class). ``waiting``: one waits
    for its step; ``free``: none waits; ``cut``: the next ones never reach the service."""

    def __init__(self, real, steps: asyncio.Queue, outcomes: asyncio.Queue) -> None:
        self._real, self._steps, self._outcomes = real, steps, outcomes
        self.free = self.cut = self.waiting = False
        self.through_at_close = False  # the heartbeats of a closing member reach the service at once
        # This many of the next heartbeats reach the service at once.
        self.through_next = 0
        # Set before a commit: the heartbeat that follows its refusal reaches the service, and
        # only that one. Armed by the refusal itself, while the commit holds the member's lock, so
        # a loop heartbeat waiting for that lock (behind a poll, say) cannot take it first.
        self.through_after_refusal = False
        self.closing = lambda: False
        self.commits: list = []  # (the epoch a commit carried, "ok" or the service's error class)

    def __getattr__(self, name):
        return getattr(self._real, name)

    async def commit_offsets(self, request):
        try:
            answer = await self._real.commit_offsets(request)
        except SeglogError as error:
            self.commits.append((request.member_epoch, error.service_error))
            if self.through_after_refusal:
                self.through_after_refusal, self.through_next = False, 1
            raise
        self.commits.append((request.member_epoch, "ok"))
        return answer

    async def heartbeat(self, request):
        if self.free or request.member_epoch < 0 or (self.through_at_close and self.closing()):
            return await self._real.heartbeat(request)
        if self.through_next > 0:
            self.through_next -= 1
            return await self._real.heartbeat(request)
        if self.cut:
            raise ServiceUnavailableError("heartbeats cut off by the test")
        self.waiting = True
        try:
            lose = await self._steps.get()
        finally:
            self.waiting = False
        try:
            answer = await self._real.heartbeat(request)
        except SeglogError as error:
            self._outcomes.put_nowait((request.member_epoch, error.service_error))
            raise
        self._outcomes.put_nowait((request.member_epoch, "lost" if lose else answer.member_epoch))
        if lose:
            raise ServiceUnavailableError("the answer was lost")
        return answer


class SteppedConsumer(AsyncGroupConsumer):
    def __init__(self, *args, steps: asyncio.Queue, outcomes: asyncio.Queue, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._steps, self._outcomes = steps, outcomes
        self.stepped: SteppedTransport | None = None

    def _open_transport(self):
        self.stepped = SteppedTransport(super()._open_transport(), self._steps, self._outcomes)
        self.stepped.closing = lambda: self._closed
        return self.stepped


def test_a_member_two_epochs_behind_after_two_lost_answers_is_fenced_gives_its_partitions_up_and_rejoins(
        start_service):
    """KIP-848: a heartbeat whose answer was lost is sent again with the epoch the member knows,
    which the service accepts as the previous epoch and moves on from; lost twice while the group
    moves, the member is two epochs behind and fenced (FENCED_MEMBER_EPOCH, as Kafka fences it).
    The consumer gives its partitions up (on_revoke, nothing committed) and rejoins with its id,
    never holding a partition the service handed to another member meanwhile."""
    service = start_service(["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "30000",
                             "--group-heartbeat-interval-ms", "100"])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="fenced", partitions=4), timeout=10)
    every = {("fenced", p) for p in range(4)}
    with Producer(service.address) as producer:
        for partition in range(4):
            producer.send("fenced", b"r%d" % partition, partition=partition)
        producer.flush()
    revoked: list = []

    def other(epoch, owned=()):  # a second member, heartbeating by hand
        answer = service.stub.Heartbeat(pb.HeartbeatRequest(
            group="g-fenced", member_id="other", member_epoch=epoch, subscribed_topics=["fenced"],
            owned_partitions=[pb.GroupPartition(topic=t, partition=p) for t, p in sorted(owned)]), timeout=10)
        return answer.member_epoch, {(a.topic, a.partition) for a in answer.assignment}

    def owned(consumer):
        return {(tp.topic, tp.partition) for tp in consumer.assignment()}

    async def until(condition):
        deadline = time.monotonic() + BOUND_S
        while not condition():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)

    async def run() -> None:
        steps: asyncio.Queue = asyncio.Queue()
        outcomes: asyncio.Queue = asyncio.Queue()

        async def step(lose=False):
            steps.put_nowait(lose)
            return await asyncio.wait_for(outcomes.get(), BOUND_S)

        consumer = SteppedConsumer(service.address, group_id="g-fenced", topics=["fenced"], steps=steps,
                                   outcomes=outcomes, enable_auto_commit=False, auto_offset_reset="earliest",
                                   on_revoke=revoked.append)
        steps.put_nowait(False)
        await consumer.start()
        try:
            sent, first = await outcomes.get()
            assert sent == 0 and owned(consumer) == every  # alone: all four
            joined, nothing = await asyncio.to_thread(other, 0)  # joins: the consumer must give two up
            assert nothing == set() and joined > first
            assert await step() == (first, first)  # told to revoke two, at its epoch
            await until(lambda: len(owned(consumer)) == 2)
            kept = owned(consumer)
            assert await step(lose=True) == (first, "lost")  # the acknowledgement moved it to the group's epoch
            assert await asyncio.to_thread(other, joined) == (joined, every - kept)  # released: the other's now
            await asyncio.to_thread(other, -1)  # leaves: the consumer's target is all four again
            assert await step(lose=True) == (first, "lost")  # the previous epoch: accepted, moved on again
            assert consumer.member_epoch == first and owned(consumer) == kept  # it saw neither answer
            assert await step() == (first, "FencedMemberError")  # two epochs behind
            await until(lambda: consumer.member_epoch == 0)
            assert owned(consumer) == set() and [{(tp.topic, tp.partition) for tp in r} for r in revoked] == [
                every - kept, kept]
            sent, rejoined = await step()  # rejoined, same member id, owning nothing: all four
            assert sent == 0 and rejoined > joined
            await until(lambda: owned(consumer) == every)
            assert members(service.stub, "g-fenced") == {consumer.member_id: every}
            consumer.stepped.free = True
            seen: list = []
            deadline = time.monotonic() + BOUND_S
            while len(seen) < 4:  # it reads them again (nothing was committed)
                assert time.monotonic() < deadline
                seen += [r.value for r in await consumer.poll(timeout_ms=50)]
            assert sorted(seen) == [b"r0", b"r1", b"r2", b"r3"]
        finally:
            if consumer.stepped is not None:
                consumer.stepped.free = True
                steps.put_nowait(False)  # a heartbeat waiting for its step goes
            await consumer.close()

    asyncio.run(run())


async def _two_records_read(address, topic, partition, consumer, deadline) -> list:
    """Two records produced to ``partition`` and polled back by ``consumer`` before ``deadline``."""
    with Producer(address) as producer:
        producer.send(topic, b"one", partition=partition)
        producer.send(topic, b"two", partition=partition)
        producer.flush()
    seen: list = []
    while len(seen) < 2:
        assert time.monotonic() < deadline
        seen += [r.value for r in await consumer.poll(timeout_ms=50)]
    return seen


def close_after_a_lost_answer(start_service, group, fenced):
    """A member is told to give one of two partitions up; the answer to its acknowledgement is
    lost (the service moved it on) and its retries do not get through; it reads two records of
    the partition it kept and closes, its close's heartbeat reaching the service unless
    ``fenced``. Returns close's error (or None), the partition kept, its committed offset, the
    revocations and the group's members after the close, and the other member's assignment."""
    service = start_service(["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "30000",
                             "--group-heartbeat-interval-ms", "100"])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="closing", partitions=2), timeout=10)
    revoked: list = []

    def other(epoch):
        answer = service.stub.Heartbeat(pb.HeartbeatRequest(
            group=group, member_id="other", member_epoch=epoch, subscribed_topics=["closing"]), timeout=10)
        return answer.member_epoch, {(a.topic, a.partition) for a in answer.assignment}

    def committed(partition):
        answer = service.stub.FetchOffsets(pb.FetchOffsetsRequest(
            group=group, partitions=[pb.GroupPartition(topic="closing", partition=partition)]), timeout=10)
        return answer.offsets[0].offset

    async def run():
        steps: asyncio.Queue = asyncio.Queue()
        outcomes: asyncio.Queue = asyncio.Queue()
        consumer = SteppedConsumer(service.address, group_id=group, topics=["closing"], steps=steps,
                                   outcomes=outcomes, auto_offset_reset="earliest", auto_commit_interval_ms=60000,
                                   on_revoke=revoked.append)  # auto-commit: close commits
        steps.put_nowait(False)
        await consumer.start()
        sent, first = await outcomes.get()
        assert sent == 0 and len(consumer.assignment()) == 2
        joined, _ = await asyncio.to_thread(other, 0)
        steps.put_nowait(False)
        assert await outcomes.get() == (first, first)  # told to give one up
        deadline = time.monotonic() + BOUND_S
        while not (len(consumer.assignment()) == 1 and consumer.stepped.waiting):  # its acknowledgement waits
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        (kept,) = consumer.assignment()
        consumer.stepped.cut = True  # its retries will not get through
        consumer.stepped.through_at_close = not fenced
        steps.put_nowait(True)
        assert await outcomes.get() == (first, "lost")  # acknowledged: the service moved it on
        seen = await _two_records_read(service.address, "closing", kept.partition, consumer, deadline)
        assert sorted(seen) == [b"one", b"two"] and consumer.member_epoch == first
        error = None
        try:
            await consumer.close()
        except SeglogError as refused:
            error = refused
        left = members(service.stub, group)
        moved = (await asyncio.to_thread(other, joined))[1]
        return (error, (kept.topic, kept.partition), committed(kept.partition),
                [{(tp.topic, tp.partition) for tp in r} for r in revoked], left, moved)

    return asyncio.run(run())


def test_a_close_whose_commit_is_refused_after_a_lost_answer_heartbeats_commits_again_and_leaves(start_service):
    """A member closing after a heartbeat answer was lost commits at the epoch it knows, which the
    service refuses (a commit takes the member's current epoch only). As Kafka's close retries a
    commit refused STALE_MEMBER_EPOCH with the latest epoch, it heartbeats once at the epoch it
    knows (accepted as the previous one, answered with the current), commits again, then gives
    its partition up and leaves: the records it read are not read again by the next owner."""
    error, kept, offset, revoked, left, moved = close_after_a_lost_answer(start_service, "g-closing", fenced=False)
    assert error is None and offset == 2  # the two records read: committed past them
    assert revoked[-1] == {kept} and left == {"other": set()}
    assert moved == {("closing", 0), ("closing", 1)}  # and its partition moved at once


def test_a_close_whose_commit_is_refused_for_good_still_gives_the_partitions_up_and_leaves(start_service):
    """The same close whose heartbeat does not get through either (fenced, or unreachable): the
    commit's refusal stands, yet as Kafka's close it still gives its partitions up and leaves the
    group, so they move at once, not a session timeout later, and then raises the refusal."""
    error, kept, offset, revoked, left, moved = close_after_a_lost_answer(start_service, "g-fenced-close", fenced=True)
    assert error is not None and error.service_error == "FencedMemberError"
    assert offset == -1  # nothing committed
    assert revoked[-1] == {kept} and left == {"other": set()}
    assert moved == {("closing", 0), ("closing", 1)}


@pytest.mark.parametrize("leave_fails", [False, True])
def test_a_close_whose_on_revoke_raises_still_leaves_and_raises_the_first_error(start_service, leave_fails):
    """Each step of close runs whatever the one before it raised, as Kafka's close: an
    ``on_revoke`` that raises does not keep the member in the group holding its partitions until
    its session times out; the coordinator shows it gone at once. close raises the first error,
    a later one (a failed leave) noted on it."""
    service = start_service(GROUP_ARGS)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="raising", partitions=2), timeout=10)

    def on_revoke(partitions):
        if partitions:
            raise RuntimeError("on_revoke failed (the test)")

    async def run() -> None:
        faults: dict = {}
        consumer = FaultyConsumer(service.address, group_id="g-raising", topics=["raising"], faults=faults,
                                  on_revoke=on_revoke)
        await consumer.start()
        deadline = time.monotonic() + BOUND_S
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline
            await consumer.poll(timeout_ms=50)
        assert members(service.stub, "g-raising") == {consumer.member_id: {("raising", 0), ("raising", 1)}}
        faults["leave_fails"] = leave_fails
        with pytest.raises(RuntimeError, match="on_revoke failed") as raised:
            await consumer.close()
        if leave_fails:
            assert members(service.stub, "g-raising") == {consumer.member_id: {("raising", 0), ("raising", 1)}}
            assert any("the leave failed" in note for note in getattr(raised.value, "__notes__", []))
        else:
            assert members(service.stub, "g-raising") == {}  # gone at once, not a session timeout later

    asyncio.run(run())


def test_an_auto_commit_refused_at_the_epoch_a_lost_answer_left_stale_does_not_make_the_member_rejoin(
        start_service):
    """A healthy member whose heartbeat answer was lost auto-commits at the epoch it knows, which
    the service refuses (a commit takes the current epoch only). That refusal does not fence it
    (Kafka answers such a commit STALE_MEMBER_EPOCH and leaves the membership to the heartbeat):
    it keeps its partitions, its heartbeat at the previous epoch is accepted, and its next
    auto-commit, at the epoch it then knows, commits."""
    service = start_service(["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "30000",
                             "--group-heartbeat-interval-ms", "100"])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="stale", partitions=2), timeout=10)
    every = {("stale", 0), ("stale", 1)}
    revoked: list = []

    def other(epoch):
        answer = service.stub.Heartbeat(pb.HeartbeatRequest(
            group="g-stale", member_id="other", member_epoch=epoch, subscribed_topics=["stale"]), timeout=10)
        return answer.member_epoch, {(a.topic, a.partition) for a in answer.assignment}

    def committed(partition):
        answer = service.stub.FetchOffsets(pb.FetchOffsetsRequest(
            group="g-stale", partitions=[pb.GroupPartition(topic="stale", partition=partition)]), timeout=10)
        return answer.offsets[0].offset

    async def run() -> None:
        steps: asyncio.Queue = asyncio.Queue()
        outcomes: asyncio.Queue = asyncio.Queue()
        consumer = SteppedConsumer(service.address, group_id="g-stale", topics=["stale"], steps=steps,
                                   outcomes=outcomes, auto_commit_interval_ms=100, auto_offset_reset="earliest",
                                   on_revoke=revoked.append)
        steps.put_nowait(False)
        await consumer.start()
        deadline = time.monotonic() + BOUND_S

        async def until(condition):
            while not condition():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)

        try:
            sent, first = await outcomes.get()
            assert sent == 0 and len(consumer.assignment()) == 2
            joined, _ = await asyncio.to_thread(other, 0)
            steps.put_nowait(False)
            assert await outcomes.get() == (first, first)  # told to give one up
            await until(lambda: len(consumer.assignment()) == 1 and consumer.stepped.waiting)
            (kept,) = consumer.assignment()
            consumer.stepped.cut = True  # its retries will not get through for a while
            steps.put_nowait(True)
            assert await outcomes.get() == (first, "lost")  # acknowledged: the service moved it on
            await _two_records_read(service.address, "stale", kept.partition, consumer, deadline)
            await consumer.poll(timeout_ms=0)  # the two processed: auto-commit commits past them
            await until(lambda: (first, "FencedMemberError") in consumer.stepped.commits)
            assert consumer.member_epoch == first and consumer.assignment() == [kept]
            consumer.stepped.cut = False  # heartbeats get through: the previous epoch, accepted
            consumer.stepped.free = True
            await until(lambda: consumer.member_epoch > first)
            await until(lambda: committed(kept.partition) == 2)
            assert consumer.assignment() == [kept] and len(revoked) == 1  # never revoked beyond the first
            assert members(service.stub, "g-stale")[consumer.member_id] == {(kept.topic, kept.partition)}
            assert (await asyncio.to_thread(other, joined))[1] == every - {(kept.topic, kept.partition)}
        finally:
            consumer.stepped.free = True
            await consumer.close()

    asyncio.run(run())


# -- the application's own commit after a lost heartbeat answer ------------------------------------
# A member alone on "owned" (two partitions) whose service moved it to the next epoch while the
# answer saying so was lost: a bystander joined the group on another topic (the group's epoch moved,
# the member's target did not), the member's next heartbeat moved it there, and that answer was lost;
# its retries are cut off, so it knows the old epoch and the service holds the new one.


def _stale_service(start_service):
    service = start_service(["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "30000",
                             "--group-heartbeat-interval-ms", "100"])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="owned", partitions=2), timeout=10)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="elsewhere", partitions=1), timeout=10)
    return service


def _by_hand(service, group, member_id, epoch, topic):
    """A heartbeat of another member, sent by the test: its epoch and assignment."""
    answer = service.stub.Heartbeat(pb.HeartbeatRequest(
        group=group, member_id=member_id, member_epoch=epoch, subscribed_topics=[topic]), timeout=10)
    return answer.member_epoch, {(a.topic, a.partition) for a in answer.assignment}


def _committed(service, group, partition):
    answer = service.stub.FetchOffsets(pb.FetchOffsetsRequest(
        group=group, partitions=[pb.GroupPartition(topic="owned", partition=partition)]), timeout=10)
    return answer.offsets[0].offset


async def _bounded(step, what: str):
    """``step`` awaited for at most BOUND_S (a bound on a hang, as ``step()`` above): a hang fails
    naming ``what`` it waited for, not at pytest's timeout with every test's state gone."""
    try:
        return await asyncio.wait_for(step, BOUND_S)
    except TimeoutError:
        raise AssertionError(f"{what}: nothing within {BOUND_S} s") from None


async def _until(condition, deadline):
    while not condition():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


async def _stale_member(service, group, revoked, deadline, enable_auto_commit=False):
    """The member described above: returns it, the epoch it knows and the epoch the service holds."""
    steps: asyncio.Queue = asyncio.Queue()
    outcomes: asyncio.Queue = asyncio.Queue()
    consumer = SteppedConsumer(service.address, group_id=group, topics=["owned"], steps=steps, outcomes=outcomes,
                               enable_auto_commit=enable_auto_commit, auto_commit_interval_ms=60000,
                               auto_offset_reset="earliest", on_revoke=revoked.append)
    steps.put_nowait(False)
    await consumer.start()
    sent, known = await outcomes.get()
    assert sent == 0 and len(consumer.assignment()) == 2
    await _until(lambda: consumer.stepped.waiting, deadline)  # its next heartbeat waits for its step
    current, _ = await asyncio.to_thread(_by_hand, service, group, "bystander", 0, "elsewhere")
    assert current > known
    consumer.stepped.cut = True  # its retries will not get through
    steps.put_nowait(True)
    assert await outcomes.get() == (known, "lost")  # the service moved it to ``current``
    return consumer, known, current


async def _two_epochs_behind(service, group, consumer, known, deadline) -> None:
    """The stale member's next heartbeat is let through and its answer lost too, while the group
    moves again: the service accepted it at the previous epoch and moved the member on, so the
    member is two epochs behind (fenced for real). Its retries stay cut."""
    consumer.stepped.cut = False
    await _until(lambda: consumer.stepped.waiting, deadline)
    await asyncio.to_thread(_by_hand, service, group, "bystander", -1, "elsewhere")  # the group moves again
    consumer.stepped.cut = True
    consumer._steps.put_nowait(True)
    assert await consumer._outcomes.get() == (known, "lost")  # accepted at the previous epoch, moved on


async def _close_stepped(consumer) -> None:
    consumer.stepped.free = True
    consumer._steps.put_nowait(False)  # a heartbeat waiting for its step goes
    await _bounded(consumer.close(), "close() of the stepped member")


def test_a_commit_refused_at_the_epoch_a_lost_answer_left_stale_heartbeats_once_and_lands_at_the_current_epoch(
        start_service):
    """The application's commit carries the epoch the member knows, which the service refuses (a
    commit takes the current epoch only). The member is still in the group and owns its
    partitions: the commit heartbeats once at that epoch (accepted as the previous one, answered
    with the current) and commits again at the epoch answered, so the application's commit lands
    and the member keeps everything (no rejoin, no revocation)."""
    service = _stale_service(start_service)
    revoked: list = []

    async def run() -> None:
        deadline = time.monotonic() + BOUND_S
        consumer, known, current = await _stale_member(service, "g-commit-stale", revoked, deadline)
        try:
            await _two_records_read(service.address, "owned", 0, consumer, deadline)
            consumer.stepped.through_after_refusal = True  # the commit's heartbeat gets through, the loop's stay cut
            await consumer.commit()
            assert consumer.stepped.commits == [(known, "FencedMemberError"), (current, "ok")]
            assert _committed(service, "g-commit-stale", 0) == 2  # past the two records read
            assert consumer.member_epoch == current and len(consumer.assignment()) == 2 and revoked == []
        finally:
            await _close_stepped(consumer)

    asyncio.run(run())


def test_a_commit_whose_heartbeat_fails_raises_commit_failed_with_the_refusal_and_the_heartbeats_error_chained(
        start_service):
    """The commit's heartbeat does not get through (the coordinator unreachable): CommitFailedError
    is raised naming the offsets not committed, the refusal its cause and the heartbeat's error
    that one's, its ``service_error`` the refusal's; nothing is committed; the member is not
    known to be fenced, so it keeps its partitions, and once heartbeats get through its epoch is
    the current one and a commit lands."""
    service = _stale_service(start_service)
    revoked: list = []

    async def run() -> None:
        deadline = time.monotonic() + BOUND_S
        consumer, known, current = await _stale_member(service, "g-commit-unheard", revoked, deadline)
        try:
            with pytest.raises(CommitFailedError) as raised:
                await consumer.commit()
            assert raised.value.service_error == "FencedMemberError"
            assert set(raised.value.uncommitted) == {TopicPartition("owned", 0), TopicPartition("owned", 1)}
            assert raised.value.__cause__.service_error == "FencedMemberError"  # the refusal
            assert isinstance(raised.value.__cause__.__cause__, ServiceUnavailableError)
            assert "g-commit-unheard" in str(raised.value) and consumer.member_id in str(raised.value)
            assert _committed(service, "g-commit-unheard", 0) == -1
            assert consumer.member_epoch == known and len(consumer.assignment()) == 2 and revoked == []
            consumer.stepped.free = True
            await _until(lambda: consumer.member_epoch == current, deadline)  # the previous epoch, accepted
            await consumer.commit()
            assert consumer.stepped.commits[-1] == (current, "ok") and revoked == []
        finally:
            await _close_stepped(consumer)

    asyncio.run(run())


def test_a_commit_of_a_member_fenced_for_real_raises_naming_the_group_and_member_and_gives_its_partitions_up(
        start_service):
    """Two answers lost while the group moved twice: the member is two epochs behind, and the
    commit's heartbeat is refused too (fenced for real; its partitions may be another member's).
    The commit raises CommitFailedError naming the group and the member, its refusal chained and
    the heartbeat's refusal chained to that; nothing is committed; the member gives its partitions up at once (on_revoke,
    nothing delivered from them) and rejoins with its id."""
    service = _stale_service(start_service)
    revoked: list = []
    group = "g-commit-fenced"

    async def run() -> None:
        deadline = time.monotonic() + BOUND_S
        consumer, known, _ = await _stale_member(service, group, revoked, deadline)
        try:
            await _two_epochs_behind(service, group, consumer, known, deadline)
            consumer.stepped.through_after_refusal = True
            with pytest.raises(CommitFailedError) as raised:
                await consumer.commit()
            assert raised.value.service_error == "FencedMemberError"
            assert raised.value.__cause__.__cause__.service_error == "FencedMemberError"  # the heartbeat's
            assert group in str(raised.value) and consumer.member_id in str(raised.value)
            assert "fenced" in str(raised.value)
            assert [outcome for _, outcome in consumer.stepped.commits] == ["FencedMemberError"]
            assert _committed(service, group, 0) == -1
            assert consumer.member_epoch == 0 and consumer.assignment() == []
            assert [{(tp.topic, tp.partition) for tp in r} for r in revoked] == [{("owned", 0), ("owned", 1)}]
            consumer.stepped.free = True
            await _until(lambda: len(consumer.assignment()) == 2, deadline)  # rejoined, same id
            assert members(service.stub, group) == {consumer.member_id: {("owned", 0), ("owned", 1)}}
        finally:
            await _close_stepped(consumer)

    asyncio.run(run())


def test_a_commit_retried_after_a_lost_answer_commits_a_partition_the_heartbeat_revokes_then_gives_it_up(
        start_service):
    """A third member joined the topic before the commit: the answer to the commit's heartbeat
    tells the member to give one partition up. The service still holds that partition this
    member's (the third is granted nothing until the member reports it gone) and takes a commit at
    the current epoch, so the retry commits both partitions named, and only then is the answer
    carried out: on_revoke, reported gone, handed to the third member."""
    service = _stale_service(start_service)
    revoked: list = []
    group = "g-commit-revoked"

    async def run() -> None:
        deadline = time.monotonic() + BOUND_S
        consumer, known, current = await _stale_member(service, group, revoked, deadline)
        try:
            joined = await _third_joins(service, group)
            consumer.stepped.through_after_refusal = True
            await consumer.commit({TopicPartition("owned", 0): 1, TopicPartition("owned", 1): 1})
            (kept,) = consumer.assignment()
            gone = TopicPartition("owned", 1 - kept.partition)
            assert revoked == [[gone]]
            assert consumer.stepped.commits == [(known, "FencedMemberError"), (current, "ok")]
            assert _committed(service, group, kept.partition) == 1 and _committed(service, group, gone.partition) == 1
            await _handed_to_the_third(service, group, consumer, joined, gone, deadline)
        finally:
            await _close_stepped(consumer)

    asyncio.run(run())


def test_a_commit_of_the_positions_retried_with_auto_commit_commits_both_then_the_revocation_commits_its_own(
        start_service):
    """The same revocation under ``commit()`` of the member's own positions with auto-commit: the
    retry commits both positions at the epoch answered; then the revocation, carried out, commits
    the partition's consumed position (the same: the records were processed) before giving it up,
    as any revocation does."""
    service = _stale_service(start_service)
    revoked: list = []
    group = "g-commit-revoked-auto"

    async def run() -> None:
        deadline = time.monotonic() + BOUND_S
        consumer, known, current = await _stale_member(service, group, revoked, deadline, enable_auto_commit=True)
        try:
            for partition in (0, 1):
                await _two_records_read(service.address, "owned", partition, consumer, deadline)
            await consumer.poll(timeout_ms=0)  # the records processed: consumed
            joined = await _third_joins(service, group)
            consumer.stepped.through_after_refusal = True
            await consumer.commit()
            (kept,) = consumer.assignment()
            gone = TopicPartition("owned", 1 - kept.partition)
            assert revoked == [[gone]]
            assert consumer.stepped.commits == [(known, "FencedMemberError"), (current, "ok"), (current, "ok")]
            assert _committed(service, group, kept.partition) == 2 and _committed(service, group, gone.partition) == 2
            await _handed_to_the_third(service, group, consumer, joined, gone, deadline)
        finally:
            await _close_stepped(consumer)

    asyncio.run(run())


async def _third_joins(service, group) -> int:
    """A third member joins the topic: the stale member's target shrinks to one partition."""
    joined, nothing = await asyncio.to_thread(_by_hand, service, group, "third", 0, "owned")
    assert nothing == set()  # granted once the member gives one up
    return joined


async def _handed_to_the_third(service, group, consumer, joined, gone, deadline) -> None:
    """Heartbeats let through, the member reports ``gone`` given up and the third member gets it."""
    consumer.stepped.free = True
    granted: set = set()
    while granted != {(gone.topic, gone.partition)}:
        assert time.monotonic() < deadline
        granted = (await asyncio.to_thread(_by_hand, service, group, "third", joined, "owned"))[1]
        await asyncio.sleep(0.05)


# -- a member the service no longer knows ----------------------------------------------------------
# Removed by hand (a leave sent with its member id, as an operator removing it: Kafka answers the
# member UNKNOWN_MEMBER_ID afterwards), its own heartbeats held back by the test until it says.


def _remove_by_hand(service, group, member_id) -> None:
    service.stub.Heartbeat(pb.HeartbeatRequest(group=group, member_id=member_id, member_epoch=-1), timeout=10)


async def _member_with_heartbeats_cut(service, group, topics, deadline, **options):
    """A stepped member of ``topics`` past its join, its loop's heartbeats then failing at once
    (cut) so the application's calls never wait on one; returns it and its epoch."""
    steps: asyncio.Queue = asyncio.Queue()
    outcomes: asyncio.Queue = asyncio.Queue()
    consumer = SteppedConsumer(service.address, group_id=group, topics=topics, steps=steps, outcomes=outcomes,
                               auto_offset_reset="earliest", **options)
    steps.put_nowait(False)
    await _bounded(consumer.start(), "the member's join")
    sent, joined = await _bounded(outcomes.get(), "the join's outcome")
    assert sent == 0
    await _until(lambda: consumer.stepped.waiting, deadline)
    consumer.stepped.cut = True
    steps.put_nowait(False)
    assert await _bounded(outcomes.get(), "the first cut heartbeat's outcome") == (joined, joined)
    return consumer, joined


def test_a_commit_naming_a_deleted_topic_of_a_member_the_service_no_longer_knows_raises_not_swallowed(
        start_service):
    """The service checks a commit's partitions before its member: a commit naming a deleted topic
    answers NOT_FOUND for the topic, and the member's own commit then commits topic by topic,
    leaving deleted topics out. The other topic's commit is refused UnknownMemberError, NOT_FOUND
    too: that refusal is the member's, never a deleted topic to skip. ``commit()`` heartbeats
    once (refused: unknown), gives its partitions up and raises CommitFailedError, nothing
    committed, as Kafka's commitSync raises at UNKNOWN_MEMBER_ID; it rejoins with its id."""
    service = start_service(["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "30000",
                             "--group-heartbeat-interval-ms", "100"])
    for topic in ("kept", "dropped"):
        service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1), timeout=10)
    group = "g-unknown-deleted"
    revoked: list = []

    async def run() -> None:
        deadline = time.monotonic() + BOUND_S
        consumer, joined = await _member_with_heartbeats_cut(service, group, ["kept", "dropped"], deadline,
                                                             enable_auto_commit=False, on_revoke=revoked.append)
        try:
            assert len(consumer.assignment()) == 2
            for topic in ("kept", "dropped"):
                await _two_records_read(service.address, topic, 0, consumer, deadline)
            await asyncio.to_thread(_remove_by_hand, service, group, consumer.member_id)
            service.stub.DeleteTopic(pb.DeleteTopicRequest(topic="dropped"), timeout=10)
            consumer.stepped.through_after_refusal = True  # the commit's heartbeat reaches the service
            with pytest.raises(CommitFailedError) as raised:
                await _bounded(consumer.commit(), "commit() of a member the service no longer knows")
            assert raised.value.service_error == "UnknownMemberError"
            assert TopicPartition("kept", 0) in raised.value.uncommitted
            assert (joined, "UnknownMemberError") in consumer.stepped.commits
            answer = service.stub.FetchOffsets(pb.FetchOffsetsRequest(
                group=group, partitions=[pb.GroupPartition(topic="kept", partition=0)]), timeout=10)
            assert answer.offsets[0].offset == -1  # nothing committed
            assert consumer.member_epoch == 0 and consumer.assignment() == []
            assert {(tp.topic, tp.partition) for tp in revoked[-1]} == {("kept", 0), ("dropped", 0)}
            consumer.stepped.free = True
            consumer.stepped.cut = False
            await _until(lambda: consumer.assignment() == [TopicPartition("kept", 0)], deadline)  # rejoined
            assert members(service.stub, group) == {consumer.member_id: {("kept", 0)}}
        finally:
            await _close_stepped(consumer)

    asyncio.run(run())


def test_an_auto_commit_refused_at_a_held_revocation_is_logged_the_revocation_completes_and_the_member_rejoins(
        start_service, caplog):
    """A revocation held for the application (the latest poll returned records of the partition)
    completes as the next poll starts, its consumed position auto-committed first. The member is
    unknown to the service by then (removed), so that commit is refused UnknownMemberError. As
    Kafka's consumer ("will proceed with the revocation anyway"), the refusal is logged, not
    raised by poll: on_revoke is called, the partition given up, and the member heartbeats at
    once, is refused too and rejoins with its id. The partition's records after its last commit
    (here all of them) are read again by its next owner: at least once."""
    service = start_service(["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "30000",
                             "--group-heartbeat-interval-ms", "100"])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="held", partitions=2), timeout=10)
    group = "g-held-unknown"
    revoked: list = []

    def committed(partition):
        answer = service.stub.FetchOffsets(pb.FetchOffsetsRequest(
            group=group, partitions=[pb.GroupPartition(topic="held", partition=partition)]), timeout=10)
        return answer.offsets[0].offset

    async def run() -> None:
        deadline = time.monotonic() + BOUND_S
        consumer, _ = await _member_with_heartbeats_cut(service, group, ["held"], deadline,
                                                        auto_commit_interval_ms=60000, on_revoke=revoked.append)
        try:
            assert len(consumer.assignment()) == 2
            # The sticky assignor keeps a member's lowest partitions: a second member takes 1, so
            # its records are read last, and are out with the application.
            for partition in (0, 1):
                await _two_records_read(service.address, "held", partition, consumer, deadline)
            await asyncio.to_thread(_by_hand, service, group, "other", 0, "held")
            consumer.stepped.through_next = 1  # the loop's next heartbeat: told to give 1 up, held
            await _until(lambda: consumer._revoking == {("held", 1)}, deadline)
            await asyncio.to_thread(_remove_by_hand, service, group, consumer.member_id)
            with caplog.at_level("WARNING", logger="seglog.group_consumer"):
                assert await consumer.poll(timeout_ms=0) == []  # not UnknownMemberError
            assert revoked == [[TopicPartition("held", 1)]]
            assert consumer.assignment() == [TopicPartition("held", 0)]
            assert (consumer.member_epoch, "UnknownMemberError") in consumer.stepped.commits
            assert any("UnknownMemberError" in r.getMessage() and "held-1" in r.getMessage() for r in caplog.records)
            assert committed(1) == -1  # read again by its next owner
            consumer.stepped.free = True
            consumer.stepped.cut = False
            await _until(lambda: consumer.member_id in members(service.stub, group), deadline)  # rejoined
            assert revoked[-1] == [TopicPartition("held", 0)]  # the rejoin gave the rest up, uncommitted
        finally:
            await _close_stepped(consumer)

    asyncio.run(run())


# -- a fenced member whose on_revoke raises ---------------------------------------------------------
# Kafka gives the partitions of a fenced member up whatever its listener does, and raises the
# listener's exception from poll wrapped ("User rebalance callback throws an error").


def _raising_once(calls: list):
    def on_revoke(partitions):
        calls.append(partitions)
        if len(calls) == 1:
            raise RuntimeError("the application's on_revoke (the test)")
    return on_revoke


async def _poll_until_raised(consumer, deadline) -> Exception:
    while True:
        assert time.monotonic() < deadline
        try:
            await consumer.poll(timeout_ms=50)
        except RebalanceCallbackError as error:
            return error


def test_a_member_fenced_in_the_background_whose_on_revoke_raises_gives_up_rejoins_and_poll_says_what_happened(
        start_service):
    """The member removed by the service: its heartbeat is refused UnknownMemberError and it
    gives its partitions up to rejoin. Its on_revoke raising does not stop that (before, the
    error escaped the heartbeat loop, which ended: no more heartbeats, no rejoin, nothing raised):
    the next poll raises RebalanceCallbackError naming the callback, the partitions and the
    fencing, the application's exception its cause, and the member rejoins with its id."""
    service = start_service(GROUP_ARGS)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="lost", partitions=2), timeout=10)
    group = "g-lost-raising"
    calls: list = []
    every = [TopicPartition("lost", 0), TopicPartition("lost", 1)]

    async def run() -> None:
        consumer = AsyncGroupConsumer(service.address, group_id=group, topics=["lost"], enable_auto_commit=False,
                                      on_revoke=_raising_once(calls))
        await consumer.start()
        deadline = time.monotonic() + BOUND_S
        try:
            while consumer.assignment() != every:
                assert time.monotonic() < deadline
                await consumer.poll(timeout_ms=50)
            await asyncio.to_thread(_remove_by_hand, service, group, consumer.member_id)
            error = await _poll_until_raised(consumer, deadline)
            assert isinstance(error.__cause__, RuntimeError) and "the test" in str(error.__cause__)
            assert error.callback == "on_revoke" and error.partitions == every
            assert error.service_error == "UnknownMemberError"
            assert "on_revoke" in str(error) and "fenced" in str(error) and "UnknownMemberError" in str(error)
            assert group in str(error) and consumer.member_id in str(error)
            assert calls == [every]
            while consumer.assignment() != every:  # given up, then rejoined: the loop still runs
                assert time.monotonic() < deadline
                await consumer.poll(timeout_ms=50)
            assert members(service.stub, group) == {consumer.member_id: {("lost", 0), ("lost", 1)}}
        finally:
            await consumer.close()

    asyncio.run(run())


def test_a_commit_of_a_member_fenced_for_real_whose_on_revoke_raises_raises_commit_failed_then_poll_the_callbacks(
        start_service):
    """The commit's heartbeat refused too (fenced for real): the member gives its partitions up,
    and on_revoke raises. ``commit()`` still raises CommitFailedError (before, the callback's
    bare RuntimeError replaced it, saying nothing of the commit or the fencing), a note saying
    on_revoke raised; the next poll raises RebalanceCallbackError (FencedMemberError, the
    callback's error its cause), and the member rejoins."""
    service = _stale_service(start_service)
    calls: list = []
    group = "g-commit-fenced-raising"

    async def run() -> None:
        deadline = time.monotonic() + BOUND_S
        consumer, known, _ = await _stale_member(service, group, [], deadline)
        consumer._on_revoke = _raising_once(calls)
        try:
            await _two_epochs_behind(service, group, consumer, known, deadline)
            consumer.stepped.through_after_refusal = True
            with pytest.raises(CommitFailedError) as raised:
                await consumer.commit()
            assert raised.value.service_error == "FencedMemberError"
            assert any("on_revoke raised" in note for note in raised.value.__notes__)
            assert consumer.member_epoch == 0 and consumer.assignment() == []
            error = await _poll_until_raised(consumer, deadline)
            assert isinstance(error.__cause__, RuntimeError) and error.service_error == "FencedMemberError"
            assert "on_revoke" in str(error) and f"fenced at member epoch {known}" in str(error)
            consumer.stepped.free = True
            await _until(lambda: len(consumer.assignment()) == 2, deadline)  # rejoined, same id
            assert members(service.stub, group) == {consumer.member_id: {("owned", 0), ("owned", 1)}}
        finally:
            await _close_stepped(consumer)

    asyncio.run(run())
