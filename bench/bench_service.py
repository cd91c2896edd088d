"""End to end through the gRPC service: throughput, produce->consume latency, OffsetsForTimes.

    .venv/bin/python bench/bench_service.py [--runs 3] [--quick] [--skip-placement]

Starts its own service process (``python -m seglog_server`` on 127.0.0.1:0, data in a temporary
directory) and drives it from this process over loopback with the generated stubs; latency
consumers run in a second process. Every figure is the median over ``--runs`` repetitions (the
machine is shared and noisy: see bench/README.md). Measured:

- produce throughput: 100-byte values with 16-byte keys, one producer process. Each request's
  batch is encoded here with seglog.records.RecordBatchBuilder inside the timed loop (nothing is
  pre-encoded); several requests are in flight while the next batch is encoded.
- fetch catch-up: reading the whole partition from offset 0 as raw batches, with sequential
  Fetch requests and with one Consume stream.
- produce->consume latency at 2,000 records/s. Records are created on that schedule, each
  carrying its creation time (CLOCK_MONOTONIC is shared between processes); a grpc.aio producer
  sends them as a Kafka producer with linger.ms=0 does (at once when one of its 2 request slots
  is free, else together in the next request); the consumer (another process, grpc.aio) reads
  with long-poll Fetch or a Consume stream, decodes each batch and takes now - creation time.
  The "1 record/Produce" rows force one request per record instead, for comparison.
- OffsetsForTimes round trip (grpc.aio client, and the synchronous stub), on a partition of
  Kafka-default-sized batches (16 KiB, 120 records); the time spent inside the servicer (asked
  for with the ``seglog-debug-timing`` request header, returned in trailing metadata); and the
  round trip of ListTopics, which touches no storage: the gRPC floor of this machine.
- placement (inline on the event loop vs the storage thread pool) of small appends and reads:
  two more services with ``--inline-io-bytes-max`` 64 KiB (the default) and 0 (all pooled).
- the seglog client library (Producer, Consumer in fetch and stream modes) when it imports.

Like the service, this process sets glibc's MALLOC_* thresholds by re-executing itself once
(large messages are received here too); ``--no-malloc-tuning`` measures without them.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing
import os
import pathlib
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future

import grpc
from google.protobuf.message import Message

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.__main__ import malloc_environment

VALUE_BYTES = 100
KEY_BYTES = 16
# ~4000 records of ~130 bytes: a 0.5 MiB batch, half of max.message.bytes (1 MiB), so requests
# are large enough that per-request costs fade, with room under the limit.
RECORDS_PER_BATCH = 4000
PRODUCE_IN_FLIGHT = 4
# OffsetsForTimes partition: 20,000 batches of 120 records (~15 KiB, a Kafka producer's default
# batch.size of 16 KiB) = 2.4 M records, 300 MB: a time index with thousands of entries.
TIMELINE_BATCHES = 20_000
TIMELINE_RECORDS_PER_BATCH = 120
LATENCY_RATE_PER_S = 2000
LATENCY_WARMUP_RECORDS = 200
# Produce requests in flight in the latency runs: a Kafka producer's default allows 5; 2 keeps
# one request in flight while the next one fills, which is all a 2,000 records/s stream needs.
PRODUCER_IN_FLIGHT = 2
# With one record per Produce: enough senders that the producer is never the one waiting.
LATENCY_IN_FLIGHT_MAX = 16
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]
DEBUG_TIMING = (("seglog-debug-timing", "1"),)
_SEND_TIME = struct.Struct(">q")

GOALS = {
    "produce records/s": (">=", 1_000_000),
    "fetch catch-up records/s (Fetch)": (">=", 2_000_000),
    "fetch catch-up MB/s (Fetch)": (">=", 500),
    "fetch catch-up records/s (Consume)": (">=", 2_000_000),
    "fetch catch-up MB/s (Consume)": (">=", 500),
    "latency long-poll p50 ms": ("<=", 1.0),
    "latency long-poll p99 ms": ("<=", 2.0),
    "latency streaming p50 ms": ("<=", 1.0),
    "latency streaming p99 ms": ("<=", 2.0),
    "OffsetsForTimes round trip p50 us": ("<=", 400),
}


# -- the service under test ---------------------------------------------------------------------


class Service:
    def __init__(self, root: pathlib.Path, name: str, args: list[str]) -> None:
        self.workdir = root / name
        self.workdir.mkdir()
        ready = self.workdir / "ready"
        command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0",
                   "--ready-file", str(ready), "--data-dir", str(self.workdir / "data"), *args]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
        self.log = open(self.workdir / "service.log", "wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log, env=environ)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"service failed to start: {(self.workdir / 'service.log').read_text()}")
            time.sleep(0.02)
        self.address = ready.read_text().strip()
        self.channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.LogServiceStub(self.channel)

    def stop(self) -> None:
        self.channel.close()
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


def _keys_and_values(count: int = 1024) -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(7)
    keys = [rng.randbytes(KEY_BYTES) for _ in range(count)]
    values = [rng.randbytes(VALUE_BYTES) for _ in range(count)]
    return keys, values


def _count_records(records: bytes) -> int:
    count = 0
    for batch in codec.iter_batches(records):
        count += batch.records_count
    return count


# -- produce throughput -------------------------------------------------------------------------


def produce_throughput(stub: pb_grpc.LogServiceStub, topic: str, record_count: int) -> float:
    """Records/s of encode + Produce with PRODUCE_IN_FLIGHT requests in flight."""
    keys, values = _keys_and_values()
    pool = len(keys)
    in_flight: list[Future] = []
    started = time.perf_counter()
    produced = 0
    while produced < record_count:
        builder = codec.RecordBatchBuilder()
        now_ms = int(time.time() * 1000)
        for index in range(produced, produced + RECORDS_PER_BATCH):
            slot = index % pool
            builder.append(values[slot], key=keys[slot], timestamp_ms=now_ms)
        produced += RECORDS_PER_BATCH
        if len(in_flight) >= PRODUCE_IN_FLIGHT:
            in_flight.pop(0).result()
        in_flight.append(stub.Produce.future(pb.ProduceRequest(topic=topic, records=builder.build())))
    for future in in_flight:
        future.result()
    return produced / (time.perf_counter() - started)


# -- fetch catch-up -----------------------------------------------------------------------------


def fetch_catch_up(stub: pb_grpc.LogServiceStub, topic: str, end_offset: int) -> tuple[float, float]:
    """(records/s, MB/s) of sequential Fetch requests from 0 to ``end_offset``."""
    offset = 0
    record_count = 0
    byte_count = 0
    started = time.perf_counter()
    while offset < end_offset:
        response = stub.Fetch(pb.FetchRequest(topic=topic, offset=offset))
        record_count += _count_records(response.records)
        byte_count += len(response.records)
        offset = response.next_offset
    elapsed = time.perf_counter() - started
    return record_count / elapsed, byte_count / elapsed / 1e6


def consume_catch_up(stub: pb_grpc.LogServiceStub, topic: str, end_offset: int) -> tuple[float, float]:
    """(records/s, MB/s) of one Consume stream from 0 until ``end_offset``."""
    record_count = 0
    byte_count = 0
    started = time.perf_counter()
    stream = stub.Consume(pb.ConsumeRequest(topic=topic, position=pb.START_POSITION_EARLIEST))
    for response in stream:
        record_count += _count_records(response.records)
        byte_count += len(response.records)
        if response.next_offset >= end_offset:
            break
    elapsed = time.perf_counter() - started
    stream.cancel()
    return record_count / elapsed, byte_count / elapsed / 1e6


# -- produce -> consume latency -----------------------------------------------------------------


def _latency_consumer(address: str, topic: str, mode: str, start_offset: int, expected: int,
                      connection) -> None:
    """Runs in its own process: reads ``expected`` records, sends back latencies in ns."""
    import uvloop

    connection.send(uvloop.run(_consume_latencies(address, topic, mode, start_offset, expected,
                                                  connection)))


async def _consume_latencies(address: str, topic: str, mode: str, start_offset: int,
                             expected: int, connection) -> list[int]:
    latencies: list[int] = []

    def take(records: bytes) -> None:
        for batch in codec.iter_batches(records):
            for record in batch:
                latencies.append(time.monotonic_ns() - _SEND_TIME.unpack_from(record.value)[0])

    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        if mode == "streaming":
            stream = stub.Consume(pb.ConsumeRequest(topic=topic, offset=start_offset))
            await stream.initial_metadata()
            connection.send("ready")
            async for response in stream:
                take(response.records)
                if len(latencies) >= expected:
                    break
            stream.cancel()
        else:
            offset = start_offset
            connection.send("ready")
            while len(latencies) < expected:
                response = await stub.Fetch(pb.FetchRequest(
                    topic=topic, offset=offset, max_wait_ms=500))
                take(response.records)
                offset = response.next_offset
    return latencies


async def _produce_paced(address: str, topic: str, total: int, per_record: bool) -> None:
    """Creates records at LATENCY_RATE_PER_S, each carrying its creation time, and sends them.

    ``per_record``: one Produce per record (up to LATENCY_IN_FLIGHT_MAX in flight). Otherwise
    as a Kafka producer with linger.ms=0 does: a record goes out at once when a request slot is
    free, and records created while PRODUCER_IN_FLIGHT requests are outstanding share the next
    request (the time they wait is part of their latency).
    """
    key = b"k" * KEY_BYTES
    padding = b"." * (VALUE_BYTES - _SEND_TIME.size)
    interval_ns = 1_000_000_000 // LATENCY_RATE_PER_S
    pending: list[bytes] = []
    created = asyncio.Event()
    finished = False

    async def create() -> None:
        nonlocal finished
        next_ns = time.monotonic_ns()
        for _ in range(total):
            delay_ns = next_ns - time.monotonic_ns()
            if delay_ns > 0:
                await asyncio.sleep(delay_ns / 1e9)
            pending.append(_SEND_TIME.pack(time.monotonic_ns()) + padding)
            created.set()
            next_ns += interval_ns
        finished = True
        created.set()

    async def send(stub: pb_grpc.LogServiceStub) -> None:
        while pending or not finished:
            if not pending:
                created.clear()
                await created.wait()
                continue
            take = 1 if per_record else len(pending)
            builder = codec.RecordBatchBuilder()
            for value in pending[:take]:
                builder.append(value, key=key)
            del pending[:take]
            await stub.Produce(pb.ProduceRequest(topic=topic, records=builder.build()))

    senders = LATENCY_IN_FLIGHT_MAX if per_record else PRODUCER_IN_FLIGHT
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        await asyncio.gather(create(), *(send(stub) for _ in range(senders)))


def produce_consume_latency(
    service: Service, topic: str, mode: str, seconds: float, per_record: bool = False
) -> tuple[float, float]:
    """(p50 ms, p99 ms) of produce->consume at LATENCY_RATE_PER_S (see _produce_paced)."""
    import uvloop

    start_offset = service.stub.Fetch(pb.FetchRequest(topic=topic, max_bytes=1)).log_end_offset
    total = int(LATENCY_RATE_PER_S * seconds)
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    consumer = context.Process(target=_latency_consumer, args=(
        service.address, topic, mode, start_offset, total, child))
    consumer.start()
    assert parent.recv() == "ready"
    uvloop.run(_produce_paced(service.address, topic, total, per_record))
    latencies = parent.recv()
    consumer.join()
    measured = sorted(latencies[LATENCY_WARMUP_RECORDS:])
    return _percentile(measured, 50) / 1e6, _percentile(measured, 99) / 1e6


def _percentile(sorted_values: list, percent: float) -> float:
    index = min(len(sorted_values) - 1, int(len(sorted_values) * percent / 100))
    return sorted_values[index]


# -- OffsetsForTimes and small-call round trips --------------------------------------------------


def build_timeline(stub: pb_grpc.LogServiceStub, topic: str, batch_count: int) -> list[int]:
    """A partition of batches the size a Kafka producer sends by default (batch.size 16 KiB:
    TIMELINE_RECORDS_PER_BATCH records), one millisecond apart; returns random lookup targets
    inside its time range (a lookup decodes one batch to find the record, so the batch size
    matters: see the report of bench_service)."""
    stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1))
    keys, values = _keys_and_values()
    first_ms = int(time.time() * 1000) - batch_count
    in_flight: list[Future] = []
    for index in range(batch_count):
        builder = codec.RecordBatchBuilder()
        for slot in range(TIMELINE_RECORDS_PER_BATCH):
            builder.append(values[slot], key=keys[slot], timestamp_ms=first_ms + index)
        if len(in_flight) >= 16:
            in_flight.pop(0).result()
        in_flight.append(stub.Produce.future(pb.ProduceRequest(topic=topic, records=builder.build())))
    for future in in_flight:
        future.result()
    rng = random.Random(11)
    return [first_ms + rng.randrange(batch_count) for _ in range(1000)]


def round_trips(call: Callable[[], object], count: int) -> float:
    """Median round trip in microseconds of ``count`` sequential calls."""
    times = []
    for _ in range(count):
        started = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - started)
    return statistics.median(times) / 1000


def aio_round_trips(address: str, method_name: str, requests, count: int) -> float:
    """Median round trip in microseconds of ``count`` sequential calls from a grpc.aio client
    on uvloop (cheaper per call than the synchronous stub's futures and threads)."""
    import uvloop

    async def run() -> float:
        async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
            method = getattr(pb_grpc.LogServiceStub(channel), method_name)
            times = []
            for _ in range(count):
                request = next(requests)
                started = time.perf_counter_ns()
                await method(request)
                times.append(time.perf_counter_ns() - started)
            return statistics.median(times) / 1000

    return uvloop.run(run())


def server_times(method, requests, count: int) -> float:
    """Median servicer time in microseconds, from the trailing metadata. ``requests`` is one
    request or an iterator of them."""
    times = []
    for _ in range(count):
        request = requests if isinstance(requests, Message) else next(requests)
        _, call = method.with_call(request, metadata=DEBUG_TIMING)
        times.append(int(dict(call.trailing_metadata())["seglog-server-time-us"]))
    return statistics.median(times)


def concurrent_rate(method, request, in_flight: int, count: int) -> float:
    """Calls/s with ``in_flight`` calls outstanding."""
    pending: list[Future] = []
    started = time.perf_counter()
    for _ in range(count):
        if len(pending) >= in_flight:
            pending.pop(0).result()
        pending.append(method.future(request))
    for future in pending:
        future.result()
    return count / (time.perf_counter() - started)


# -- the client library ---------------------------------------------------------------------------


def client_library_produce(address: str, topic: str, record_count: int) -> float:
    from seglog import Producer

    keys, values = _keys_and_values()
    started = time.perf_counter()
    with Producer(address, linger_ms=5, batch_size=512 * 1024) as producer:
        for index in range(record_count):
            producer.send(topic, values[index % len(values)], key=keys[index % len(keys)],
                          partition=0)
        producer.flush()
    return record_count / (time.perf_counter() - started)


def client_library_consume(address: str, topic: str, end_offset: int, mode: str) -> float:
    from seglog import Consumer

    count = 0
    started = time.perf_counter()
    with Consumer(address, topic, partition=0, start="earliest", mode=mode,
                  fetch_max_bytes=2 * 1024 * 1024, max_poll_records=100_000) as consumer:
        while count < end_offset:
            count += len(consumer.poll(timeout_ms=1000))
    return count / (time.perf_counter() - started)


# -- driver -------------------------------------------------------------------------------------


def repeat(runs: int, measure: Callable[[], object]) -> list:
    return [measure() for _ in range(runs)]


def median_of(samples: list, index: int | None = None) -> float:
    values = [s[index] if index is not None else s for s in samples]
    return statistics.median(values)


def spread(samples: list, index: int | None = None) -> str:
    values = [s[index] if index is not None else s for s in samples]
    return f"{min(values):,.4g}..{max(values):,.4g}"


def print_table(rows: list[tuple[str, float, str]]) -> None:
    print()
    print(f"| {'measure':<44} | {'goal':>12} | {'median':>12} | {'runs min..max':>24} | ok |")
    print(f"|{'-' * 46}|{'-' * 14}|{'-' * 14}|{'-' * 26}|----|")
    for name, value, runs in rows:
        goal = GOALS.get(name)
        if goal is None:
            goal_text, ok = "", ""
        else:
            relation, target = goal
            goal_text = f"{relation} {target:,}"
            ok = "yes" if (value >= target if relation == ">=" else value <= target) else "NO"
        print(f"| {name:<44} | {goal_text:>12} | {value:>12,.4g} | {runs:>24} | {ok:>2} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=1_000_000, help="per produce run")
    parser.add_argument("--latency-seconds", type=float, default=3.0)
    parser.add_argument("--quick", action="store_true", help="small sizes, to check it works")
    parser.add_argument("--skip-placement", action="store_true")
    parser.add_argument("--skip-client", action="store_true")
    parser.add_argument("--no-malloc-tuning", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the data and service logs")
    args = parser.parse_args()
    if not args.no_malloc_tuning:
        environ = malloc_environment(os.environ)
        if environ is not None:
            os.execve(sys.executable, [sys.executable, *sys.argv], environ)
    if args.quick:
        args.records, args.latency_seconds, args.runs = 100_000, 1.0, 1
    root = pathlib.Path(tempfile.mkdtemp(prefix="seglog-bench-service-"))
    rows: list[tuple[str, float, str]] = []
    load_before = os.getloadavg()[0]
    try:
        run_main_suite(root, args, rows)
        if not args.skip_placement:
            run_placement(root, args, rows)
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print_table(rows)
    # The machine is shared: other work running at the same time shows up in every figure.
    print(f"\nload average (1 min): {load_before:.2f} at start, {os.getloadavg()[0]:.2f} at end; "
          f"{os.cpu_count()} CPUs")


def run_main_suite(root: pathlib.Path, args: argparse.Namespace, rows: list) -> None:
    service = Service(root, "main", [] if not args.no_malloc_tuning else ["--no-malloc-tuning"])
    stub = service.stub
    try:
        stub.CreateTopic(pb.CreateTopicRequest(topic="throughput", partitions=1))
        samples = repeat(args.runs, lambda: produce_throughput(stub, "throughput", args.records))
        rows.append(("produce records/s", median_of(samples), spread(samples)))
        rows.append(("produce MB/s (record bytes)",
                     median_of(samples) * (KEY_BYTES + VALUE_BYTES) / 1e6, ""))
        end = stub.Fetch(pb.FetchRequest(topic="throughput", max_bytes=1)).log_end_offset
        os.sync()  # let writeback of the produced data finish before reading (platform notes)
        samples = repeat(args.runs, lambda: fetch_catch_up(stub, "throughput", end))
        rows.append(("fetch catch-up records/s (Fetch)", median_of(samples, 0), spread(samples, 0)))
        rows.append(("fetch catch-up MB/s (Fetch)", median_of(samples, 1), spread(samples, 1)))
        samples = repeat(args.runs, lambda: consume_catch_up(stub, "throughput", end))
        rows.append(("fetch catch-up records/s (Consume)", median_of(samples, 0), spread(samples, 0)))
        rows.append(("fetch catch-up MB/s (Consume)", median_of(samples, 1), spread(samples, 1)))

        stub.CreateTopic(pb.CreateTopicRequest(topic="latency", partitions=1))
        for mode, per_record in (("long-poll", False), ("streaming", False),
                                 ("long-poll", True), ("streaming", True)):
            samples = repeat(args.runs, lambda mode=mode, per_record=per_record:
                             produce_consume_latency(service, "latency", mode,
                                                     args.latency_seconds, per_record))
            label = f"{mode}, 1 record/Produce" if per_record else mode
            rows.append((f"latency {label} p50 ms", median_of(samples, 0), spread(samples, 0)))
            rows.append((f"latency {label} p99 ms", median_of(samples, 1), spread(samples, 1)))

        targets = build_timeline(stub, "timeline", 1000 if args.quick else TIMELINE_BATCHES)
        calls = 300 if args.quick else 2000
        requests = [pb.OffsetsForTimesRequest(partitions=[pb.PartitionTimestamp(
            topic="timeline", timestamp_ms=target)]) for target in targets]
        cycle = itertools.cycle(requests)
        samples = repeat(args.runs, lambda: aio_round_trips(
            service.address, "OffsetsForTimes", cycle, calls))
        rows.append(("OffsetsForTimes round trip p50 us", median_of(samples), spread(samples)))
        sync_samples = repeat(args.runs, lambda: round_trips(
            lambda: stub.OffsetsForTimes(next(cycle)), calls))
        rows.append(("OffsetsForTimes round trip p50 us (sync stub)", median_of(sync_samples),
                     spread(sync_samples)))
        servers = repeat(args.runs, lambda: server_times(stub.OffsetsForTimes, cycle, calls))
        rows.append(("OffsetsForTimes servicer time p50 us", median_of(servers), spread(servers)))
        rows.append(("OffsetsForTimes servicer share %",
                     100 * median_of(servers) / median_of(samples), ""))
        empty = itertools.repeat(pb.ListTopicsRequest())
        floor = repeat(args.runs, lambda: aio_round_trips(service.address, "ListTopics", empty, calls))
        rows.append(("ListTopics round trip p50 us (gRPC floor)", median_of(floor), spread(floor)))

        if not args.skip_client:
            run_client_library(service, args, rows)
    finally:
        service.stop()


def run_client_library(service: Service, args: argparse.Namespace, rows: list) -> None:
    try:
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="client-library", partitions=1))
        samples = repeat(args.runs, lambda: client_library_produce(
            service.address, "client-library", args.records))
        rows.append(("client Producer records/s", median_of(samples), spread(samples)))
        end = service.stub.Fetch(pb.FetchRequest(topic="client-library", max_bytes=1)).log_end_offset
        for mode in ("fetch", "stream"):
            samples = repeat(args.runs, lambda mode=mode: client_library_consume(
                service.address, "client-library", end, mode))
            rows.append((f"client Consumer catch-up records/s ({mode})", median_of(samples),
                         spread(samples)))
    except Exception as exc:  # noqa: BLE001 - the client library is optional here
        print(f"client library not measured: {type(exc).__name__}: {exc}", file=sys.stderr)


def run_placement(root: pathlib.Path, args: argparse.Namespace, rows: list) -> None:
    """Small appends and reads inline on the event loop vs on the storage thread pool."""
    calls = 300 if args.quick else 2000
    for label, inline_bytes in (("inline", "65536"), ("pooled", "0")):
        service = Service(root, f"placement-{label}", ["--inline-io-bytes-max", inline_bytes])
        stub = service.stub
        try:
            stub.CreateTopic(pb.CreateTopicRequest(topic="small", partitions=1))
            builder = codec.RecordBatchBuilder()
            builder.append(b"v" * VALUE_BYTES, key=b"k" * KEY_BYTES)
            produce = pb.ProduceRequest(topic="small", records=builder.build())
            for _ in range(200):
                stub.Produce(produce)
            fetch = pb.FetchRequest(topic="small", offset=100, max_bytes=4096)
            samples = repeat(args.runs, lambda: server_times(stub.Produce, produce, calls))
            rows.append((f"small Produce servicer us ({label})", median_of(samples), spread(samples)))
            samples = repeat(args.runs, lambda: server_times(stub.Fetch, fetch, calls))
            rows.append((f"small Fetch servicer us ({label})", median_of(samples), spread(samples)))
            samples = repeat(args.runs, lambda: concurrent_rate(stub.Produce, produce, 16, calls))
            rows.append((f"small Produce/s, 16 in flight ({label})", median_of(samples), spread(samples)))
            samples = repeat(args.runs, lambda: concurrent_rate(stub.Fetch, fetch, 16, calls))
            rows.append((f"small Fetch/s, 16 in flight ({label})", median_of(samples), spread(samples)))
        finally:
            service.stop()


if __name__ == "__main__":
    main()
