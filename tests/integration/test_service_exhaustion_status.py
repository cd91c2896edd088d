"""An exhausted resource met anywhere in a call (no descriptor left, a full disk) answers
RESOURCE_EXHAUSTED with its seglog-error class, never INTERNAL with a traceback; the service keeps
serving once the resource is back. Driven through a real gRPC server whose storage's fs seam
fails the chosen call."""

from __future__ import annotations

import errno

import grpc
import pytest
from tests.support.fault_fs import FaultFs
from tests.support.in_process_service import in_process_service
from tests.support.integration_helpers import make_batch

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.storage.manager.log_manager import LogManager

pytestmark = pytest.mark.integration


@pytest.fixture
async def served(tmp_path):
    fs = FaultFs()

    def manager(c):
        return LogManager(list(c.data_dirs), default_config=c.log_config, fs=fs)

    async with in_process_service(tmp_path, manager) as (service, address):
        try:
            yield service, address, fs
        finally:
            fs.heal()


@pytest.mark.parametrize(("operation", "error", "error_class"), [
    ("fdatasync", errno.EMFILE, "TooManyOpenFilesError"),
    ("open", errno.ENFILE, "TooManyOpenFilesError"),
])
async def test_an_fsynced_produce_out_of_descriptors_answers_resource_exhausted(served, operation, error, error_class):
    service, address, fs = served
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(topic="sync", partitions=1))
        await stub.Produce(pb.ProduceRequest(topic="sync", records=make_batch([b"warm"])))
        fs.fail(operation, error, path=".log", times=None)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Produce(pb.ProduceRequest(topic="sync", records=make_batch([b"a"]), acks=pb.ACKS_FSYNCED))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, info.value.details()
        assert dict(info.value.trailing_metadata())["seglog-error"] == error_class
        assert service.servicer.statistics().rpc.internal_error_count == 0
        fs.heal()
        response = await stub.Produce(pb.ProduceRequest(topic="sync", records=make_batch([b"b"]), acks=pb.ACKS_FSYNCED))
        assert response.base_offset >= 1
