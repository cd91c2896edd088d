"""A ProduceStream message of several batches that fails partway, through a real gRPC server in
this process (so the storage's fs seam can hold an fdatasync and the append can be made to fail
as a bug would): the answer still owed to an earlier ACKS_FSYNCED batch of the message ends with
the stream instead of living on after it."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from tests.support.integration_helpers import make_batch

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.app import SeglogService
from seglog_server.config import ServiceConfig
from seglog_server.rpc.produce_rpcs import ProduceRpcs
from seglog_server.rpc.streams import StreamRpcs
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.manager.log_manager import LogManager

pytestmark = pytest.mark.integration

_WAIT_S = 20  # bounds waits that must end; never a speed assertion


class HeldSyncFS(FileSystem):
    """Once ``hold`` is set, an fdatasync of a ``.log`` waits until ``release`` is set."""

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.hold = threading.Event()
        self.release = threading.Event()

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self.paths[fd] = path
        return fd

    def fdatasync(self, fd):
        if self.hold.is_set() and self.paths.get(fd, "").endswith(".log"):
            self.release.wait(_WAIT_S)
        super().fdatasync(fd)


async def test_a_batch_failing_inside_a_message_ends_the_answers_owed_to_the_batches_before(tmp_path, monkeypatch):
    fs = HeldSyncFS()
    config = ServiceConfig(data_dirs=(str(tmp_path / "data"),), listen="127.0.0.1:0")
    service = SeglogService(config, manager_factory=lambda c: LogManager(
        list(c.data_dirs), default_config=c.log_config, fs=fs))
    real_append = ProduceRpcs.append
    appends = 0

    async def append(self, request):
        nonlocal appends
        appends += 1
        if fs.hold.is_set() and appends >= 2:
            for _ in range(3):  # the first batch's answer is under way, waiting for its sync
                await asyncio.sleep(0)
            raise RuntimeError("injected: a bug in the second batch's append")
        return await real_append(self, request)

    monkeypatch.setattr(ProduceRpcs, "append", append)
    outcomes: list[str] = []
    real_later = StreamRpcs._produce_answer_later

    async def answer_later(self, *args):
        try:
            reply = await real_later(self, *args)
        except asyncio.CancelledError:
            outcomes.append("cancelled")
            raise
        outcomes.append("answered")
        return reply

    monkeypatch.setattr(StreamRpcs, "_produce_answer_later", answer_later)
    address = await service.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.LogServiceStub(channel)
            await stub.CreateTopic(pb.CreateTopicRequest(topic="held", partitions=1))
            appends = 0
            fs.hold.set()
            message = pb.ProduceStreamRequest(correlation_id=1)
            message.produce.CopyFrom(pb.ProduceRequest(
                topic="held", records=make_batch([b"fsynced"]), acks=pb.ACKS_FSYNCED))
            message.more.add().CopyFrom(pb.ProduceRequest(topic="held", records=make_batch([b"bug"])))
            call = stub.ProduceStream()
            await call.write(message)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call.read()
            assert info.value.code() == grpc.StatusCode.INTERNAL
            fs.release.set()
            async with asyncio.timeout(_WAIT_S):
                while not outcomes:
                    await asyncio.sleep(0.01)
            assert outcomes == ["cancelled"]
    finally:
        fs.release.set()
        await service.stop()
