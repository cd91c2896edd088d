"""A Consume stream parked at the tail wakes for every append the storage makes, whether or not
the call that asked for it is still there: a compressed Produce cancelled while its append runs on
the storage pool still lands its batch, and the parked stream receives it without another append.

Deterministic: the storage's fs seam holds the append's write on the pool thread until the server
has seen the call cancelled (its request slot given back), then lets it finish."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from tests.support.in_process_service import HANG_S, consume_parked_at_the_tail, in_process_service, until
from tests.support.integration_helpers import records_of

from seglog.records import Compression, RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.manager.log_manager import LogManager

pytestmark = pytest.mark.integration


class HeldWrites(FileSystem):
    """The real file system; once armed, the next write to a ``.log`` blocks its thread until
    released (the append is then on its way: validated, under the log's lock, not yet written)."""

    def __init__(self) -> None:
        self._paths: dict[int, str] = {}
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self._paths[fd] = path
        return fd

    def pwritev(self, fd, buffers, position):
        if self.armed and self._paths.get(fd, "").endswith(".log"):
            self.armed = False
            self.entered.set()
            self.release.wait(HANG_S)
        return super().pwritev(fd, buffers, position)


@pytest.fixture
async def served(tmp_path):
    fs = HeldWrites()

    def manager_factory(config):
        return LogManager(list(config.data_dirs), default_config=config.log_config, fs=fs)

    async with in_process_service(tmp_path, manager_factory=manager_factory) as (service, address):
        try:
            yield service, address, fs
        finally:
            fs.release.set()


def _compressed_batch(*values: bytes) -> bytes:
    builder = RecordBatchBuilder(compression=Compression.GZIP)
    for value in values:
        builder.append(value)
    return builder.build()


async def test_a_cancelled_compressed_produce_still_wakes_a_stream_parked_at_the_tail(served):
    service, address, fs = served
    servicer = service.servicer
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(topic="tail", partitions=1))
        stream = await consume_parked_at_the_tail(stub, service, "tail")

        fs.armed = True
        produce = stub.Produce(pb.ProduceRequest(
            topic="tail", records=_compressed_batch(b"landed", b"anyway")))
        assert await asyncio.get_running_loop().run_in_executor(None, fs.entered.wait, HANG_S)
        produce.cancel()
        # The server has cut the handler: its request slot is back, nobody awaits the append.
        await until(lambda: servicer.statistics().admission.request_count == 0)
        fs.release.set()  # the append finishes on its pool thread

        response = await asyncio.wait_for(stream.read(), HANG_S)
        assert [record.value for record in records_of(response)] == [b"landed", b"anyway"]
        assert produce.cancelled()
        stream.cancel()
