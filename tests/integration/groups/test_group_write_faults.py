"""A heartbeat whose membership records fail to become durable, through a real gRPC server on
loopback (in this process, so the storage's ``fs`` seam is a fault_fs.FaultFs): the member gets
a retriable status (UNAVAILABLE, Kafka's COORDINATOR_NOT_AVAILABLE; RESOURCE_EXHAUSTED when the
flush found no descriptor), DescribeGroup shows the group as it was before the call, a retry
once the disk is back makes the change, and the service keeps serving."""

from __future__ import annotations

import asyncio
import errno
import threading

import grpc
import pytest
from tests.support.fault_fs import FaultFs
from tests.support.integration_helpers import error_class

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.app import SeglogService
from seglog_server.config import ServiceConfig
from seglog_server.groups.partitioning import OFFSETS_TOPIC_PARTITIONS, partition_for
from seglog_server.storage.manager.log_manager import LogManager

pytestmark = pytest.mark.integration


class HeldFs(FaultFs):
    """FaultFs that can hold the next fdatasync of an offsets partition's .log until released (it
    then succeeds): a flush in flight, outside the log's lock, while other calls append."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.held = threading.Event()
        self.release = threading.Event()

    def fdatasync(self, fd):
        if self.armed and offsets_log_file(self._path_of(fd)):
            self.armed = False
            self.held.set()
            self.release.wait(30)
        return super().fdatasync(fd)


@pytest.fixture
async def served(tmp_path):
    fs = HeldFs()
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


async def test_a_heartbeat_put_back_by_an_earlier_ones_failed_flush_answers_its_error(served):
    """Two joins of g in flight. A DeleteGroup of x (g's offsets partition) holds that partition's
    flush lock in its fdatasync; m1's join is appended and its flush (to m1's records) queues
    behind; m2's join is appended on top and waits for m1's flush. That flush finds no
    descriptor (the log stays online): both joins are put back, and m2's call answers that error
    although its own flush then succeeds; the group is as it was and a retry joins."""
    stub, fs = served
    assert partition_for("x34", OFFSETS_TOPIC_PARTITIONS) == partition_for("g", OFFSETS_TOPIC_PARTITIONS)
    await stub.Heartbeat(join("m0"))
    await stub.CommitOffsets(pb.CommitOffsetsRequest(group="x34", offsets=[
        pb.OffsetToCommit(topic="t", partition=0, offset=1)]))
    before = await members_of(stub)
    fs.armed = True
    deleting = asyncio.ensure_future(stub.DeleteGroup(pb.DeleteGroupRequest(group="x34")))
    assert await asyncio.to_thread(fs.held.wait, 30)
    first = asyncio.ensure_future(stub.Heartbeat(join("m1")))
    while "m1" not in await members_of(stub):  # appended; its flush waits for the held one
        await asyncio.sleep(0.01)
    rule = fs.fail("open", errno.EMFILE, path=offsets_log_file)
    second = asyncio.ensure_future(stub.Heartbeat(join("m2")))
    while "m2" not in await members_of(stub):
        await asyncio.sleep(0.01)
    fs.release.set()
    assert (await deleting).deleted_offsets == 1
    for call in (first, second):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert rule.hits == 1
    assert await members_of(stub) == before
    await stub.Heartbeat(join("m2"))  # a retry joins
    assert set(await members_of(stub)) == {"m0", "m2"}
