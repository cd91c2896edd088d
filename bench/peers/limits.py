"""The machine's limits, measured at the start of every repeat: the figures the systems'
figures are read against (an empty gRPC call, raw sequential disk write and read, crc32c)."""

from __future__ import annotations

import os
import pathlib
import statistics
import time

from bench import bench_service
from bench.peers.common import percentile

MIB = 1 << 20
# 1 MiB writes: large enough that per-call cost fades, as a log's segment writes are.
BLOCK_BYTES = MIB
DISK_MIB_DEFAULT = 256
CRC_MIB_DEFAULT = 64
EMPTY_CALLS_DEFAULT = 1000


def disk_mb_s(directory: pathlib.Path, size_mib: int) -> dict[str, float]:
    """Sequential write + fsync, then the read of the same file from the disk (its pages dropped
    from the page cache first) and again from the page cache, MB/s (10^6 bytes)."""
    path = directory / "limits-disk"
    block = os.urandom(BLOCK_BYTES)
    size_mb = size_mib * MIB / 1e6
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        for _ in range(size_mib):
            os.write(fd, block)
        os.fsync(fd)
        write_s = time.perf_counter() - started
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages: dropped at once
    finally:
        os.close(fd)
    reads = []
    for _ in range(2):  # first from the disk, then from the page cache
        fd = os.open(path, os.O_RDONLY)
        try:
            started = time.perf_counter()
            while os.read(fd, BLOCK_BYTES):
                pass
            reads.append(time.perf_counter() - started)
        finally:
            os.close(fd)
    path.unlink()
    return {
        "disk_write_fsync_mb_s": size_mb / write_s,
        "disk_read_mb_s": size_mb / reads[0],
        "page_cache_read_mb_s": size_mb / reads[1],
    }


def crc32c_mb_s(size_mib: int) -> float:
    import crc32c

    data = os.urandom(size_mib * MIB)
    started = time.perf_counter()
    crc32c.crc32c(data)
    return size_mib * MIB / 1e6 / (time.perf_counter() - started)


def empty_call_ms(root: pathlib.Path, calls: int) -> dict[str, float]:
    """Round trips of an empty unary call (gRPC Health Check) to a seglog server on loopback,
    through a synchronous stub: the floor under every seglog RPC on this machine."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    service = bench_service.Service(root, "limits-seglog", [])
    try:
        stub = health_pb2_grpc.HealthStub(service.channel)
        request = health_pb2.HealthCheckRequest()
        stub.Check(request)  # the channel connects on the first call
        samples = []
        for _ in range(calls):
            started = time.perf_counter()
            stub.Check(request)
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        service.stop()
    return {"empty_grpc_call_p50_ms": statistics.median(samples), "empty_grpc_call_p99_ms": percentile(samples, 99)}


def measure(root: pathlib.Path, disk_mib: int = DISK_MIB_DEFAULT, crc_mib: int = CRC_MIB_DEFAULT,
            calls: int = EMPTY_CALLS_DEFAULT) -> dict[str, float]:
    return {**empty_call_ms(root, calls), **disk_mb_s(root, disk_mib), "crc32c_mb_s": crc32c_mb_s(crc_mib)}
