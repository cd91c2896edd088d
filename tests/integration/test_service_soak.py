"""The soak: mixed load from several processes against one service for SEGLOG_SOAK_SECONDS
(default 30 s, what CI runs; docs/reliability.md reports a 600 s run: ``SEGLOG_SOAK_SECONDS=600``),
marked slow.

Load (each a separate process running tests/support/soak_load.py): 3 producers (one partition each, batches of
50 x 100 B, every fourth call acks fsynced), 2 long-poll fetchers and 1 Consume stream following
the tails, 1 admin process (OffsetsForTimes, ListTopics, DescribeTopic, topics created and
deleted). Printed: throughput, p50/p99 latency per role, and the service's RSS and open
descriptors sampled every SAMPLE_S from start to end. Checked: every process succeeded; every
partition rolled (segments of SEGMENT_BYTES, so the shortest run rolls each several times); the
admin went round its calls; after the load every acknowledged record is stored once, in order, CRC-valid; the service
is SERVING; its descriptors, kind by kind, are what its open segments and its fixed parts hold
(nothing leaks per call, no deleted topic keeps a descriptor) and its RSS stayed bounded.

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
import urllib.request

import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families
from tests.support.integration_helpers import records_of, service_environment

from seglog.v1 import log_service_pb2 as pb

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SOAK_SECONDS = float(os.environ.get("SEGLOG_SOAK_SECONDS", "30"))
SAMPLE_S = min(10.0, max(1.0, SOAK_SECONDS / 10))  # ten samples or more, every 10 s at most
# 512 KiB: a producer writes ~450 KB/s on this machine, so a partition rolls every second or two
# and a roll needs only ~4,700 records (a 30 s run at a twentieth of that pace still rolls).
SEGMENT_BYTES = 512 * 1024
# Bounds, not timings. RSS: the allocator may keep up to 512 MiB of freed heap
# (MALLOC_TRIM_THRESHOLD_); 1 GiB means something grows without bound. Descriptors: see
# _descriptor_bounds.
RSS_CAP_MIB = 1024
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")
ROLES = [("producer", 0), ("producer", 1), ("producer", 2), ("fetcher", 0), ("fetcher", 1),
         ("streamer", 2), ("admin", 0)]


def _sample(process: psutil.Process, started: float) -> tuple[float, float, int]:
    return time.monotonic() - started, process.memory_info().rss / (1 << 20), process.num_fds()


def _descriptors(pid: int, data_dir: pathlib.Path) -> tuple[dict[str, int], list[str]]:
    """The service's open descriptors counted by kind (``segment <topic> <suffix>`` for a
    partition's segment files, ``deleted segment`` for one renamed or unlinked for deletion,
    ``socket``, ``pipe``, ``anon_inode:<what>`` such as eventfd and eventpoll, ``other file``),
    and what each other file is (for the failure's message)."""
    kinds: dict[str, int] = {}
    others: list[str] = []
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            target = os.readlink(os.path.join(base, name))
        except FileNotFoundError:  # closed between the listing and the look
            continue
        if target.startswith(("socket:", "pipe:")):
            kind = target.split(":")[0]
        elif target.startswith("anon_inode:"):
            kind = "anon_inode:" + target.removeprefix("anon_inode:").strip("[]")
        elif target.startswith(f"{data_dir}/") and any(suffix in target for suffix in SEGMENT_SUFFIXES):
            path = pathlib.Path(target.removesuffix(" (deleted)"))
            suffix = next((suffix for suffix in SEGMENT_SUFFIXES if suffix in path.name), "")
            if target != str(path) or path.parent.name.endswith("-delete") or path.name.endswith(".deleted"):
                kind = "deleted segment"
            else:
                kind = f"segment {path.parent.name.rsplit('-', 1)[0]} {suffix}"
        else:
            kind = "other file"
            others.append(target)
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds, others


def _descriptor_bounds(at_start: dict[str, int], holding: int, clients: int) -> dict[str, int]:
    """The most descriptors of each kind the service may hold once the load is over; a kind not
    named may hold none.

    - ``segment soak .log/.index/.timeindex``: one each per soak segment holding handles (its
      .log's descriptor; each index mapping's duplicate, CPython's mmap dups it), which is at
      most ``holding``: the topic's segments, within the process's open-segment budget.
    - No other topic's segment, no deleted segment: the admin's scratch topics are all deleted,
      and a deleted topic's segments close their descriptors as it is deleted (only the files
      wait for file.delete.delay.ms), as a retired segment's do.
    - ``socket``: those at the start (listeners, the test's channel, gRPC's wakeups) and one
      connection per load process not yet seen closed.
    - ``pipe``, ``anon_inode:*`` (eventfd, eventpoll, io_uring): made once by the event loop, gRPC
      and the pools: no more than at the start.
    - ``other file``: those at the start (the data directory's lock, the log, /dev/null) and one
      a flush or a checkpoint opens for a moment."""
    bounds = {f"segment soak {suffix}": holding for suffix in SEGMENT_SUFFIXES}
    for kind, count in at_start.items():
        if kind == "pipe" or kind.startswith("anon_inode:"):
            bounds[kind] = count
    bounds["socket"] = at_start.get("socket", 0) + clients
    bounds["other file"] = at_start.get("other file", 0) + 1
    return bounds


def _scrape(address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if not sample.labels}


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
    data_dir = service.data_dirs[0]
    start_kinds, _ = _descriptors(server.pid, data_dir)
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
    # Descriptors, kind by kind, against what each kind may hold (_descriptor_bounds): a leak of
    # any kind, per call or per deleted topic, is over its own bound. The segments' bound is the
    # process's one open-segment budget (open_segments.py, from RLIMIT_NOFILE: thousands of
    # segments here), never a Log's private default of 64, which a fast machine's 30 s passes.
    end_kinds, others = _descriptors(server.pid, data_dir)
    described = service.stub.DescribeTopic(pb.DescribeTopicRequest(topic="soak"), timeout=30)
    segments = sum(p.segment_count for p in described.partitions)
    # Every partition rolled during the load, whatever the run's length.
    assert all(p.segment_count >= 2 for p in described.partitions), described
    budget = _scrape(service.metrics_address)
    holding = min(segments, int(budget["seglog_open_segments"]), int(budget["seglog_open_segments_max"]))
    bounds = _descriptor_bounds(start_kinds, holding, len(ROLES))
    print(f"descriptors: {samples[0][2]} at the start, {samples[-1][2]} at the end; {segments} soak segments, "
          f"{holding} holding handles (budget {budget['seglog_open_segments_max']:.0f})")
    print("| kind | at the start | at the end | bound |")
    print("|---|---|---|---|")
    for kind in sorted(set(start_kinds) | set(end_kinds) | set(bounds)):
        print(f"| {kind} | {start_kinds.get(kind, 0)} | {end_kinds.get(kind, 0)} | {bounds.get(kind, 0)} |")
    over = {kind: (count, bounds.get(kind, 0)) for kind, count in end_kinds.items() if count > bounds.get(kind, 0)}
    assert not over, (over, others, samples)
    assert max(rss for _, rss, _ in samples) < RSS_CAP_MIB, samples
