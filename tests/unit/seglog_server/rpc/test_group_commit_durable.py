"""CommitOffsets answers only once the commit is on disk: the __consumer_offsets partition is
flushed up to the commit's records (on the storage pool, through the group commit of fsynced
produces, rpc/group_commit.py) before the answer, so the storage's statistics show its recovery
point past them; commits arriving together on one partition share flushes. A real LogManager and
a real grpc.aio server on loopback, in-process to read the storage's statistics."""

from __future__ import annotations

import asyncio
import tempfile

import grpc

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.groups.coordinator import GroupCoordinator
from seglog_server.groups.offsets_log import OFFSETS_TOPIC
from seglog_server.groups.partitioning import partition_for
from seglog_server.rpc.log_service import LogServicer, LogServicerLimits
from seglog_server.rpc.registration import add_log_service
from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.storage import SYSTEM_CLOCK, LogManager

PARTITIONS = 3
COMMITS = 20


def recovery_point(manager: LogManager, partition: int) -> int:
    [found] = [p for p in manager.statistics().partitions
               if (p.topic, p.partition) == (OFFSETS_TOPIC, partition)]
    return found.log.recovery_point


async def serve_and_commit(directory: str) -> None:
    manager = LogManager([directory])
    manager.startup()
    manager.create_topic("t", 1, {})
    calls = StorageCalls(2, 65536)
    coordinator = GroupCoordinator(manager, SYSTEM_CLOCK, partitions=PARTITIONS)
    coordinator.start()
    servicer = LogServicer(manager, calls, LogServicerLimits(1 << 20, 1000, 4 << 20, 1 << 20),
                           coordinator=coordinator)
    server = grpc.aio.server()
    add_log_service(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.LogServiceStub(channel)
    partition = partition_for("g", PARTITIONS)
    try:
        await stub.CommitOffsets(pb.CommitOffsetsRequest(group="g", offsets=[
            pb.OffsetToCommit(topic="t", partition=0, offset=5)]), timeout=10)
        log = manager.get_log(OFFSETS_TOPIC, partition)
        assert log.log_end_offset == 1
        assert recovery_point(manager, partition) == 1  # on disk when answered

        await asyncio.gather(*(
            stub.CommitOffsets(pb.CommitOffsetsRequest(group="g", offsets=[
                pb.OffsetToCommit(topic="t", partition=0, offset=6 + i)]), timeout=10)
            for i in range(COMMITS)))
        assert recovery_point(manager, partition) == log.log_end_offset == 1 + COMMITS
        shared = servicer.core.group_commit.statistics()
        assert shared.wait_count == 1 + COMMITS
        assert shared.flush_count <= shared.wait_count  # never more than one flush a commit
    finally:
        await channel.close()
        await server.stop(None)
        calls.shutdown()
        manager.shutdown()


def test_a_commit_is_answered_once_its_offsets_partition_is_flushed_past_it():
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(serve_and_commit(directory))
