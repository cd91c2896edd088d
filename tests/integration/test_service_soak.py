"""The soak: mixed load from several processes against one service for SEGLOG_SOAK_SECONDS
(default 30 s, what CI runs; docs/reliability.md reports a 600 s run: ``SEGLOG_SOAK_SECONDS=600``),
marked slow.

Load (each a separate process running tests/support/soak_load.py): 3 producers (one partition each, batches of
50 x 100 B, every fourth call acks fsynced), 2 long-poll fetchers and 1 Consume stream following
the tails, 1 admin process (OffsetsForTimes, ListTopics, DescribeTopic, topics created and
deleted). Printed: throughput, p50/p99 latency per role, and the service's RSS and open
descriptors sampled every SAMPLE_S from start to end. Checked: every process succeeded; every
partition rolled (segments of SEGMENT_BYTES, so the shortest run rolls each several times and a
600 s run passes the open-segment budget, closing segments as well); the admin went round its
calls; after the load every acknowledged record is stored once, in order, CRC-valid; the service
is SERVING; its descriptors are what its open segments hold (nothing leaks per call) and its RSS
stayed bounded.

Why 30 s in CI: every phase the checks look at is driven within seconds (each producer writes
megabytes, i.e. several segment rolls; the admin creates and deletes a topic a hundred times or
more; ten or more RSS/descriptor samples), and what a longer run adds is growth over time, which
the manual 600 s run is for.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time

import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tests.support.integration_helpers import records_of, service_environment

from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.segment.open_segments import DEFAULT_OPEN_SEGMENTS_MAX

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SOAK_SECONDS = float(os.environ.get("SEGLOG_SOAK_SECONDS", "30"))
SAMPLE_S = min(10.0, max(1.0, SOAK_SECONDS / 10))  # ten samples or more, every 10 s at most
# 512 KiB: a producer writes ~450 KB/s on this machine, so a partition rolls every second or two
# and a roll needs only ~4,700 records (a 30 s run at a twentieth of that pace still rolls).
SEGMENT_BYTES = 512 * 1024
# Bounds, not timings. Descriptors: a segment holds its .log, and its .index and .timeindex
# (each open while mapped), plus one during a flush: 4. Slack of 32 for the scratch topics'
# segments and gRPC's connections. RSS: the allocator may keep up to 512 MiB of freed heap
# (MALLOC_TRIM_THRESHOLD_); 1 GiB means something grows without bound.
FDS_PER_SEGMENT = 4
FD_SLACK = 32
RSS_CAP_MIB = 1024
ROLES = [("producer", 0), ("producer", 1), ("producer", 2), ("fetcher", 0), ("fetcher", 1),
         ("streamer", 2), ("admin", 0)]


def _sample(process: psutil.Process, started: float) -> tuple[float, float, int]:
    return time.monotonic() - started, process.memory_info().rss / (1 << 20), process.num_fds()


def _stored(stub, partition: int) -> list:
    records, offset = [], 0
    while True:
        batch = records_of(stub.Fetch(pb.FetchRequest(topic="soak", partition=partition,
                                                      offset=offset), timeout=60))
        if not batch:
            return records
        records.extend(batch)
        offset = batch[-1].offset + 1


@pytest.mark.timeout(SOAK_SECONDS + 300)
def test_soak_mixed_load_from_several_processes(start_service, tmp_path):
    # Small segments: rolls all through the run, so rolling is soaked too (checked below).
    service = start_service(["--topic-default", f"segment.bytes={SEGMENT_BYTES}"])
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="soak", partitions=3))
    server = psutil.Process(service.process.pid)
    started = time.monotonic()
    samples = [_sample(server, started)]
    load = pathlib.Path(__file__).resolve().parents[1] / "support" / "soak_load.py"
    outputs = [(tmp_path / f"{role}{index}.out", tmp_path / f"{role}{index}.err")
               for role, index in ROLES]
    workers = [subprocess.Popen(
        [sys.executable, str(load), role, service.address, "soak", str(SOAK_SECONDS), str(index)],
        stdout=open(out, "wb"), stderr=open(err, "wb"), env=service_environment())
        for (role, index), (out, err) in zip(ROLES, outputs, strict=True)]
    while any(worker.poll() is None for worker in workers):
        time.sleep(SAMPLE_S)  # the sampling period: what the curves are made of
        samples.append(_sample(server, started))
    results = []
    for worker, (out, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err.read_text()[-3000:]
        results.append(json.loads(out.read_text().strip().splitlines()[-1]))
    elapsed = time.monotonic() - started
    samples.append(_sample(server, started))

    print(f"\nsoak: {SOAK_SECONDS:.0f} s of load, {elapsed:.0f} s in all, {len(ROLES)} processes")
    print("| role | index | records | records/s | calls | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|")
    for result in results:
        print(f"| {result['role']} | {result['index']} | {result['records']:,} | "
              f"{result['records'] / SOAK_SECONDS:,.0f} | {result['call_count']:,} | "
              f"{result['p50_ms']:.2f} | {result['p99_ms']:.2f} |")
    print("| t s | RSS MiB | open fds |")
    print("|---|---|---|")
    for t, rss, fds in samples:
        print(f"| {t:.0f} | {rss:.0f} | {fds} |")

    # Every acknowledged record is stored once, in order, CRC-valid (records_of checks CRCs).
    for result in results:
        if result["role"] != "producer":
            continue
        stored = _stored(service.stub, result["index"])
        assert [r.offset for r in stored] == list(range(result["records"]))
        assert [r.value[:8] for r in stored] == [b"%08d" % i for i in range(result["records"])]
    assert all(r["records"] > 0 for r in results if r["role"] != "admin")
    # The admin went round its five calls (a topic created and deleted) at least once.
    assert all(r["calls"] >= 5 for r in results if r["role"] == "admin"), results
    health = health_pb2_grpc.HealthStub(service.channel)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == \
        health_pb2.HealthCheckResponse.SERVING
    # Descriptors: what the open segments hold (each log keeps at most its open-segment budget of
    # segments open, each ~FDS_PER_SEGMENT descriptors) plus slack; a leak per call would be
    # hundreds of thousands.
    described = service.stub.DescribeTopic(pb.DescribeTopicRequest(topic="soak"), timeout=30)
    open_segments = sum(min(p.segment_count, DEFAULT_OPEN_SEGMENTS_MAX)
                        for p in described.partitions)
    # Every partition rolled during the load, whatever the run's length.
    assert all(p.segment_count >= 2 for p in described.partitions), described
    start_fds, end_fds = samples[0][2], samples[-1][2]
    print(f"descriptors: {start_fds} at the start, {end_fds} at the end, "
          f"{sum(p.segment_count for p in described.partitions)} segments "
          f"({open_segments} within the open-segment budgets)")
    # The admin's scratch topics (2 partitions, created and deleted each round of 5 calls) may
    # still hold their segment's descriptors until their delayed deletion runs.
    scratch = sum(r["calls"] // 5 for r in results if r["role"] == "admin") * 2 * FDS_PER_SEGMENT
    assert end_fds <= start_fds + open_segments * FDS_PER_SEGMENT + scratch + FD_SLACK, samples
    assert max(rss for _, rss, _ in samples) < RSS_CAP_MIB, samples
