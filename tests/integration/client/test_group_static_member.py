"""A static group member's heartbeats against a real service (Kafka's group.instance.id, KIP-848):
every heartbeat names the instance id, and close() leaves with member epoch -2 (the service keeps
the member's partitions for the session timeout, so a restart gets them back) where a dynamic
member leaves with -1. The requests are recorded at the consumer's transport seam on their way to
the real service; a service that refuses -2 (before static membership) is stood in for there, and
the member then leaves with -1."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from tests.support.integration_helpers import ServiceProcess

from seglog.errors import ServiceError
from seglog.group_consumer import AsyncGroupConsumer
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration
GROUP_ARGS = ["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "3000",
              "--group-heartbeat-interval-ms", "100"]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("static-member")
    process = ServiceProcess(workdir, [workdir / "data0"], GROUP_ARGS).start()
    process.stub.CreateTopic(pb.CreateTopicRequest(topic="static", partitions=2), timeout=10)
    yield process
    assert process.stop() == 0, process.log()


class RecordingTransport:
    """The real transport; heartbeat requests are recorded, and with ``refuse_static_leave`` a
    -2 leave is answered as a service without static membership answers it."""

    def __init__(self, real, sent: list, refuse_static_leave: bool) -> None:
        self._real, self._sent, self._refuse = real, sent, refuse_static_leave

    def __getattr__(self, name):
        return getattr(self._real, name)

    async def heartbeat(self, request):
        self._sent.append(request)
        if self._refuse and request.member_epoch == -2:
            raise ServiceError("member epoch -2: 0 joins, -1 leaves, else the last answer's",
                               code=grpc.StatusCode.INVALID_ARGUMENT, service_error="InvalidGroupRequestError")
        return await self._real.heartbeat(request)


class RecordingConsumer(AsyncGroupConsumer):
    def __init__(self, *args, sent: list, refuse_static_leave: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._sent, self._refuse = sent, refuse_static_leave

    def _open_transport(self):
        return RecordingTransport(super()._open_transport(), self._sent, self._refuse)


def run_member(address, group, sent, **options):
    async def main():
        consumer = RecordingConsumer(address, group_id=group, topics=["static"], sent=sent, **options)
        async with consumer:
            while len(sent) < 3:  # the join and a couple of heartbeats
                await consumer.poll(timeout_ms=50)
            return consumer.member_id

    return asyncio.run(main())


def test_a_static_member_names_its_instance_in_every_heartbeat_and_leaves_with_minus_two(service):
    sent: list = []
    member_id = run_member(service.address, "static-g1", sent, group_instance_id="host-7")
    assert {r.instance_id for r in sent} == {"host-7"}
    assert {r.member_id for r in sent} == {member_id}
    epochs = [r.member_epoch for r in sent]
    assert epochs[0] == 0
    # The leave is -2 (what the service does with it is the service's side: it keeps the member's
    # partitions for the session timeout, or, before static membership, refuses it and a -1 follows).
    assert [e for e in epochs if e < 0][0] == -2 and epochs.count(-2) == 1


def test_a_dynamic_member_sends_no_instance_id_and_leaves_with_minus_one(service):
    sent: list = []
    run_member(service.address, "static-g2", sent)
    assert {r.instance_id for r in sent} == {""}
    assert sent[-1].member_epoch == -1 and -2 not in [r.member_epoch for r in sent]
    described = service.stub.DescribeGroup(pb.DescribeGroupRequest(group="static-g2"), timeout=10)
    assert not described.members  # gone at once: its partitions are free


def test_a_static_member_leaves_with_minus_one_when_the_service_refuses_minus_two(service):
    sent: list = []
    run_member(service.address, "static-g3", sent, group_instance_id="host-8", refuse_static_leave=True)
    assert [r.member_epoch for r in sent[-2:]] == [-2, -1]
    assert sent[-1].instance_id == "host-8"
    described = service.stub.DescribeGroup(pb.DescribeGroupRequest(group="static-g3"), timeout=10)
    assert not described.members  # left the dynamic way
