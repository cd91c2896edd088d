"""A heartbeat whose membership records fail to become durable, through a real gRPC server on
loopback (in this process, so the storage's ``fs`` seam is a fault_fs.FaultFs): the member gets
a retriable status (UNAVAILABLE, Kafka's COORDINATOR_NOT_AVAILABLE; RESOURCE_EXHAUSTED when the
flush found no descriptor), DescribeGroup shows the group as it was before the call, a retry
once the disk is back makes the change, and the service keeps serving."""

from __future__ import annotations

import errno

import grpc
import pytest
from tests.support.fault_fs import FaultFs
from tests.support.integration_helpers import error_class

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.app import SeglogService
from seglog_server.config import ServiceConfig
from seglog_server.storage.manager.log_manager import LogManager

pytestmark = pytest.mark.integration


@pytest.fixture
async def served(tmp_path):
    fs = FaultFs()
    config = ServiceConfig(data_dirs=(str(tmp_path / "data"),), listen="127.0.0.1:0")
    service = SeglogService(config, manager_factory=lambda c: LogManager(
        list(c.data_dirs), default_config=c.log_config, fs=fs))
    address = await service.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.LogServiceStub(channel)
            await stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=4))
            yield stub, fs
    finally:
        await service.stop()


def offsets_log_file(path: str) -> bool:
    return "__consumer_offsets-" in path and path.endswith(".log")


def join(member: str) -> pb.HeartbeatRequest:
    return pb.HeartbeatRequest(group="g", member_id=member, member_epoch=0, subscribed_topics=["t"])


async def members_of(stub) -> dict[str, int]:
    described = await stub.DescribeGroup(pb.DescribeGroupRequest(group="g"))
    return {m.member_id: m.member_epoch for m in described.members}


async def test_a_join_whose_records_fail_to_sync_answers_unavailable_and_the_group_is_unchanged(served):
    stub, fs = served
    first = await stub.Heartbeat(join("m0"))
    before = await stub.DescribeGroup(pb.DescribeGroupRequest(group="g"))
    rule = fs.fail("fdatasync", errno.EIO, path=offsets_log_file)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Heartbeat(join("m1"))
    assert rule.hits == 1
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_class(refused.value) == "LogDirOfflineError"
    after = await stub.DescribeGroup(pb.DescribeGroupRequest(group="g"))
    assert (after.group_epoch, list(after.members)) == (before.group_epoch, list(before.members))
    assert {m.member_id for m in after.members} == {first.member_id}
    listed = await stub.ListTopics(pb.ListTopicsRequest())  # the service keeps answering
    assert "t" in {topic.topic for topic in listed.topics}


async def test_a_leave_whose_flush_finds_no_descriptor_is_undone_and_retried(served):
    stub, fs = served
    first = await stub.Heartbeat(join("m0"))
    await stub.Heartbeat(join("m1"))
    before = await members_of(stub)
    rule = fs.fail("open", errno.EMFILE, path=offsets_log_file)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Heartbeat(pb.HeartbeatRequest(group="g", member_id="m1", member_epoch=-1))
    assert rule.hits == 1
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await members_of(stub) == before  # still a member, as the error told it
    await stub.Heartbeat(pb.HeartbeatRequest(group="g", member_id="m1", member_epoch=-1))  # the retry
    assert set(await members_of(stub)) == {first.member_id}


async def committed(stub) -> dict[tuple[str, int], int]:
    fetched = await stub.FetchOffsets(pb.FetchOffsetsRequest(group="g"))
    return {(o.topic, o.partition): o.offset for o in fetched.offsets}


async def test_a_commit_whose_flush_fails_answers_its_error_and_no_read_shows_it(served):
    """CommitOffsets whose flush finds no descriptor: RESOURCE_EXHAUSTED, and neither FetchOffsets
    nor DescribeGroup (its committed offsets and lag) shows the offset; a retry commits it."""
    stub, fs = served

    def commit(offset: int) -> pb.CommitOffsetsRequest:
        return pb.CommitOffsetsRequest(group="g", offsets=[pb.OffsetToCommit(topic="t", partition=0, offset=offset)])

    await stub.CommitOffsets(commit(5))
    rule = fs.fail("open", errno.EMFILE, path=offsets_log_file)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.CommitOffsets(commit(9))
    assert rule.hits == 1
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert await committed(stub) == {("t", 0): 5}
    described = await stub.DescribeGroup(pb.DescribeGroupRequest(group="g"))
    assert [(row.committed_offset, row.lag) for row in described.partitions] == [(5, -5)]
    await stub.CommitOffsets(commit(9))  # the retry
    assert await committed(stub) == {("t", 0): 9}
