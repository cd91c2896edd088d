"""ACKS_FSYNCED through a real gRPC server (in this process, so the storage's fs seam can count
the syncs): every fsynced ack comes after an fdatasync that covered its bytes, concurrent fsynced
produces share syncs, and acks written never wait for one."""

from __future__ import annotations

import asyncio
import os
import threading

import grpc
import pytest
from tests.support.integration_helpers import make_batch

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.app import SeglogService
from seglog_server.config import ServiceConfig
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.manager.log_manager import LogManager

pytestmark = pytest.mark.integration

PRODUCERS = 16
PRODUCES_EACH = 10


class CountingFS(FileSystem):
    """The largest size of each ``.log`` an fdatasync made durable, and the count of syncs."""

    def __init__(self) -> None:
        self.paths: dict[int, str] = {}
        self.durable_bytes: dict[str, int] = {}
        self.log_sync_count = 0
        self._lock = threading.Lock()

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self.paths[fd] = path
        return fd

    def fdatasync(self, fd):
        path = self.paths[fd]
        size = self.fsize(fd)
        super().fdatasync(fd)
        if path.endswith(".log"):
            with self._lock:
                self.log_sync_count += 1
                self.durable_bytes[path] = max(self.durable_bytes.get(path, 0), size)


@pytest.fixture
async def served(tmp_path):
    fs = CountingFS()
    config = ServiceConfig(data_dirs=(str(tmp_path / "data"),), listen="127.0.0.1:0")
    service = SeglogService(config, manager_factory=lambda c: LogManager(
        list(c.data_dirs), default_config=c.log_config, fs=fs))
    address = await service.start()
    try:
        yield address, fs, tmp_path / "data"
    finally:
        await service.stop()


async def test_every_fsynced_ack_follows_a_sync_of_its_bytes_and_syncs_are_shared(served):
    address, fs, data = served
    log_path = str(data / "durable-0" / "00000000000000000000.log")
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(topic="durable", partitions=1))
        baseline = fs.log_sync_count

        batch_bytes = len(make_batch([b"00-00"]))  # every batch here has this size

        async def producer(index: int) -> None:
            for n in range(PRODUCES_EACH):
                response = await stub.Produce(pb.ProduceRequest(
                    topic="durable", records=make_batch([b"%02d-%02d" % (index, n)]),
                    acks=pb.ACKS_FSYNCED))
                # One record per batch, all batches the same size: this one ends at
                # (offset + 1) * batch_bytes, and a sync must have covered that by the ack.
                end_position = (response.base_offset + 1) * batch_bytes
                assert fs.durable_bytes.get(log_path, 0) >= end_position

        await asyncio.gather(*(producer(i) for i in range(PRODUCERS)))
        acked_size = os.path.getsize(log_path)
        # All acked: the whole file as it is now was made durable by the last sync.
        assert fs.durable_bytes[log_path] == acked_size
        syncs = fs.log_sync_count - baseline
        assert 1 <= syncs < PRODUCERS * PRODUCES_EACH  # shared, not one per produce

        before = fs.log_sync_count
        for _ in range(20):
            await stub.Produce(pb.ProduceRequest(topic="durable", records=make_batch([b"w"])))
        assert fs.log_sync_count == before  # acks written: the page cache only
