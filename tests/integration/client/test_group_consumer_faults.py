"""The group consumer against a real service when its heartbeats meet trouble, through a seam on
its transport (``_open_transport``, wrapped to lose answers or fail calls; the service is real):
a join whose answer was lost is retried with the client's own member id (KIP-1082), so the group
has one member holding every partition, not a phantom besides it; a member cut off from
heartbeats revokes its partitions by the session timeout and stops delivering, then rejoins when
heartbeats get through again."""

from __future__ import annotations

import asyncio
import time

import pytest

from seglog.errors import ServiceUnavailableError
from seglog.group_consumer import AsyncGroupConsumer
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
        if self._faults.get("cut"):
            self._faults["refused"] = self._faults.get("refused", 0) + 1
            raise ServiceUnavailableError("heartbeats cut off by the test")
        answer = await self._real.heartbeat(request)
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
