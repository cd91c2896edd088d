"""Fsynced produces whose sync fails, through a real gRPC server on loopback (in this process, so
the storage's ``fs`` seam is a fault_fs.FaultFs): each answers a specific, retriable or
unavailable status naming the cause, never INTERNAL, and the service keeps serving.

- no descriptor for the flush's ``open`` (EMFILE/ENFILE): RESOURCE_EXHAUSTED; nothing was synced,
  the partition stays online and the next fsynced produce succeeds;
- a failed ``fdatasync`` (ENOSPC/EDQUOT included: the kernel may have dropped the pages):
  UNAVAILABLE, the directory goes offline, and no later call acknowledges those records durable.
"""

from __future__ import annotations

import errno

import grpc
import pytest
from tests.support.fault_fs import FaultFs
from tests.support.integration_helpers import error_class, make_batch

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
            await stub.CreateTopic(pb.CreateTopicRequest(topic="durable", partitions=1))
            await stub.CreateTopic(pb.CreateTopicRequest(topic="other", partitions=1))
            yield stub, fs
    finally:
        await service.stop()


def fsynced(topic: str, value: bytes) -> pb.ProduceRequest:
    return pb.ProduceRequest(topic=topic, records=make_batch([value]), acks=pb.ACKS_FSYNCED)


@pytest.mark.parametrize("error", [errno.EMFILE, errno.ENFILE])
async def test_an_fsynced_produce_short_of_descriptors_answers_resource_exhausted(served, error):
    stub, fs = served
    await stub.Produce(fsynced("durable", b"before"))
    rule = fs.fail("open", error, path=".log")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Produce(fsynced("durable", b"refused"))
    assert rule.hits == 1
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert error_class(refused.value) == "TooManyOpenFilesError"
    assert "flush partition durable-0" in refused.value.details()
    answer = await stub.Produce(fsynced("durable", b"after"))  # the resource is back
    assert answer.base_offset == 2


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EDQUOT, errno.EIO])
async def test_an_fsynced_produce_whose_sync_fails_answers_unavailable_and_the_partition_goes_offline(served, error):
    stub, fs = served
    await stub.Produce(fsynced("durable", b"before"))
    fs.fail("fdatasync", error, path="durable-0")
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Produce(fsynced("durable", b"maybe lost"))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_class(refused.value) == "LogDirOfflineError"
    fs.heal()
    with pytest.raises(grpc.aio.AioRpcError) as again:  # never acknowledged durable later
        await stub.Produce(fsynced("durable", b"retry"))
    assert again.value.code() == grpc.StatusCode.UNAVAILABLE
    listed = await stub.ListTopics(pb.ListTopicsRequest())  # the service itself keeps answering
    assert {topic.topic for topic in listed.topics} == {"durable", "other"}
