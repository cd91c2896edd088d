"""A member closed while one of its heartbeats is in flight still commits and leaves: the service
may already have moved the member to a new epoch with that heartbeat, so the close must not send
its commit and its leave with the epoch from before it. (Seen in the process tests: a survivor's
graceful close refused with "sent epoch 5, its epoch is 6" during the rebalance after a kill.)

The service is real; the member's transport holds the answer of one heartbeat (the service has
handled it) until the test lets it go. The epoch moves with the heartbeat reporting a partition
given up to a second member, and the session outlasts the test: nothing waits for a session to run
out, nor races one."""

from __future__ import annotations

import asyncio

import pytest
from group_process_support import GROUP_ARGS, produce

from seglog.group_consumer import AsyncGroupConsumer
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
BOUND_S = 30  # a bound on a hang, not a speed assertion
# A session longer than every bound here: the member is silent from the held heartbeat until the
# close's commit, and under the group tests' 2 s session a stall of the test process that long had
# the service remove it (the close's commit refused: "member ... is not in group"). The raw second
# member, which never heartbeats again, stays a member too.
HELD_SESSION_MS = 120_000
HELD_ARGS = [*GROUP_ARGS, "--group-session-timeout-ms", str(HELD_SESSION_MS)]  # the later one wins


class HoldingTransport:
    """The real transport; once ``hold`` is set, the first heartbeat the service answers with a new
    member epoch has its answer held until ``release``. The member epoch of every commit it sends
    is noted in ``commit_epochs``."""

    def __init__(self, real, hold: asyncio.Event, held: asyncio.Event, release: asyncio.Event,
                 commit_epochs: list[int]) -> None:
        self._real, self._hold, self._held, self._release = real, hold, held, release
        self._commit_epochs = commit_epochs

    def __getattr__(self, name):
        return getattr(self._real, name)

    async def commit_offsets(self, request):
        self._commit_epochs.append(request.member_epoch)
        return await self._real.commit_offsets(request)

    async def heartbeat(self, request):
        answer = await self._real.heartbeat(request)
        moved = request.member_epoch > 0 and answer.member_epoch != request.member_epoch
        if self._hold.is_set() and moved and not self._held.is_set():
            self._held.set()
            await self._release.wait()
        return answer


class HoldingConsumer(AsyncGroupConsumer):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.hold, self.held, self.release = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.closing = asyncio.Event()
        self.commit_epochs: list[int] = []

    def _open_transport(self):
        return HoldingTransport(super()._open_transport(), self.hold, self.held, self.release,
                                self.commit_epochs)

    async def close(self) -> None:
        self.closing.set()  # its waiter runs once this close is suspended, at its first wait
        await super().close()


def test_a_close_during_an_epoch_changing_heartbeat_commits_and_leaves(start_service):
    service = start_service(HELD_ARGS)
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="held-orders", partitions=2), timeout=10)
    produce(stub, "held-orders", 2, 5)

    async def run() -> None:
        consumer = HoldingConsumer(service.address, group_id="g-held", topics=["held-orders"],
                                   auto_offset_reset="earliest", auto_commit_interval_ms=3_600_000)
        await consumer.start()
        read = []
        async with asyncio.timeout(BOUND_S):
            while len(read) < 10:
                read += await consumer.poll(100)
            # The application is done with them (Kafka's rule: it polls again), so a partition the
            # service takes back is given up at once, not kept until a later poll.
            assert await consumer.poll(100) == []
        consumer.hold.set()
        # A second member joins: the first gives a partition up and, with the heartbeat reporting
        # that, is moved to the group's new epoch.
        joined = stub.Heartbeat(pb.HeartbeatRequest(group="g-held", member_id="second", member_epoch=0,
                                                    subscribed_topics=["held-orders"]), timeout=10)
        async with asyncio.timeout(BOUND_S):
            await consumer.held.wait()
        described = stub.DescribeGroup(pb.DescribeGroupRequest(group="g-held"), timeout=10)
        epochs = {m.member_id: m.member_epoch for m in described.members}
        assert epochs[consumer.member_id] > consumer.member_epoch  # the service moved it on
        # The close starts while the answer is still on its way; then the answer arrives.
        consumer.commit_epochs.clear()
        closing = asyncio.create_task(consumer.close())
        async with asyncio.timeout(BOUND_S):
            await consumer.closing.wait()
        consumer.release.set()
        async with asyncio.timeout(BOUND_S):
            await closing
        # One commit, at the epoch the held answer gave: the close waited for that answer. A close
        # that cancelled the heartbeat instead sends its commit at the old epoch, is refused as
        # fenced, heartbeats and commits again, and ends the same; only its commits tell.
        assert consumer.commit_epochs == [epochs[consumer.member_id]]
        described = stub.DescribeGroup(pb.DescribeGroupRequest(group="g-held"), timeout=10)
        # It left; the raw second member stays (its session outlasts the test).
        assert [m.member_id for m in described.members] == [joined.member_id]
        assert {(p.partition, p.committed_offset) for p in described.partitions} == {(0, 5), (1, 5)}

    asyncio.run(run())
