"""A seglog service started in the test's own process and event loop (SeglogService on loopback,
no metrics listener), for tests that watch or patch the server's internals while a real gRPC
client talks to it; a bare LogServicer served the same way, for tests that patch it before it
serves; and the waits those tests share."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator, Callable, Iterator

import grpc

from seglog.v1 import log_service_pb2 as pb
from seglog_server.app import SeglogService
from seglog_server.config import ServiceConfig
from seglog_server.rpc.log_service import LogServicer, LogServicerLimits
from seglog_server.rpc.registration import add_log_service
from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.storage.manager.log_manager import LogManager

# Bounds a hang, not speed: each wait ends as soon as its condition holds.
HANG_S = 30
_POLL_S = 0.01


@contextlib.asynccontextmanager
async def in_process_service(directory: pathlib.Path, manager_factory: Callable | None = None
                             ) -> AsyncIterator[tuple[SeglogService, str]]:
    """The started service over ``directory``/data and its address; stopped after the block."""
    config = ServiceConfig(data_dirs=(str(directory / "data"),), listen="127.0.0.1:0", metrics_listen=None)
    service = SeglogService(config) if manager_factory is None else SeglogService(config, manager_factory=manager_factory)
    address = await service.start()
    try:
        yield service, address
    finally:
        await service.stop()


@contextlib.contextmanager
def servicer_in(directory: str, limits: LogServicerLimits) -> Iterator[tuple[LogManager, LogServicer]]:
    """A started LogManager over ``directory`` and a LogServicer over it with ``limits`` (two
    storage pool threads, 64 KiB inline); the manager, then the pool, shut down after the block."""
    manager = LogManager([directory])
    manager.startup()
    calls = StorageCalls(2, 65536)
    try:
        yield manager, LogServicer(manager, calls, limits)
    finally:
        manager.shutdown()
        calls.shutdown()


@contextlib.asynccontextmanager
async def served_on_loopback(servicer: LogServicer) -> AsyncIterator[str]:
    """``servicer`` served by a grpc.aio server on loopback, and its address; the server is
    stopped without grace after the block."""
    server = grpc.aio.server()
    add_log_service(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def until(condition: Callable[[], bool]) -> None:
    """Returns once ``condition()`` holds; fails after HANG_S."""
    for _ in range(round(HANG_S / _POLL_S)):
        if condition():
            return
        await asyncio.sleep(_POLL_S)
    raise AssertionError("the condition never held")


async def consume_parked_at_the_tail(stub, service: SeglogService, topic: str):
    """A Consume stream of ``topic``'s partition 0 from its end, once the service has parked it
    (the only stream waiting)."""
    stream = stub.Consume(pb.ConsumeRequest(topic=topic, partition=0, position=pb.START_POSITION_LATEST))
    await stream.initial_metadata()
    await until(lambda: service.servicer.statistics().waiters.waiting_count == 1)
    return stream
