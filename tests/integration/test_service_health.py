"""Health follows what can be served: SERVING while any log directory is online (a full disk or
one failed directory among several included), NOT_SERVING only when none is, SERVING again never
without a restart (an offline directory stays offline). The service runs in this process on
loopback, with faults injected through the fs seam."""

from __future__ import annotations

import asyncio
import errno
import os

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from seglog.records import RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.app import SeglogService
from seglog_server.config import ServiceConfig
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.manager.log_manager import LogManager

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class FailingDirsFs(FileSystem):
    """pwritev under a chosen directory fails with ``error``."""

    def __init__(self) -> None:
        self.failing: dict[str, int] = {}
        self._paths: dict[int, str] = {}

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self._paths[fd] = os.path.abspath(path)
        return fd

    def close(self, fd):
        self._paths.pop(fd, None)
        super().close(fd)

    def pwritev(self, fd, buffers, position):
        path = self._paths.get(fd, "")
        for directory, error in self.failing.items():
            if path.startswith(directory + os.sep):
                raise OSError(error, os.strerror(error), path)
        return super().pwritev(fd, buffers, position)


def one_batch() -> bytes:
    builder = RecordBatchBuilder()
    builder.append(b"v")
    return builder.build()


async def wait_for_health(health, expected: int) -> None:
    for _ in range(200):
        status = (await health.Check(health_pb2.HealthCheckRequest(service=""))).status
        if status == expected:
            return
        await asyncio.sleep(0.05)  # the next maintenance pass updates health
    raise AssertionError(f"health stayed {status}, expected {expected}")


async def produce(stub, partition: int) -> grpc.StatusCode:
    try:
        await stub.Produce(pb.ProduceRequest(topic="t", partition=partition, records=one_batch()))
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_health_is_not_serving_only_when_no_directory_can_serve(tmp_path):
    dirs = [str(tmp_path / "d0"), str(tmp_path / "d1")]
    fs = FailingDirsFs()
    config = ServiceConfig(data_dirs=tuple(dirs), listen="127.0.0.1:0", maintenance_interval_ms=50)
    service = SeglogService(config, manager_factory=lambda c: LogManager(list(c.data_dirs), fs=fs))
    address = await service.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.LogServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            await stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=2))
            await wait_for_health(health, SERVING)

            fs.failing[os.path.abspath(dirs[0])] = errno.ENOSPC  # d0 full: not a failure
            fs.failing[os.path.abspath(dirs[1])] = errno.ENOSPC
            assert {await produce(stub, p) for p in range(2)} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
            await asyncio.sleep(0.2)
            await wait_for_health(health, SERVING)

            fs.failing[os.path.abspath(dirs[0])] = errno.EIO  # d0 fails: d1 still serves
            codes = {await produce(stub, p) for p in range(2)}
            assert grpc.StatusCode.UNAVAILABLE in codes
            await asyncio.sleep(0.2)
            await wait_for_health(health, SERVING)

            fs.failing[os.path.abspath(dirs[1])] = errno.EIO  # both failed: nothing to serve
            for partition in range(2):
                await produce(stub, partition)
            await wait_for_health(health, NOT_SERVING)
    finally:
        await service.stop()
