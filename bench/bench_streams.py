"""Hot paths on open streams against the empty unary call, in one run, interleaved.

Baseline: the **empty unary call** is grpc.health.v1 ``Health.Check`` on the same service and
channel (no storage, no seglog handler: one HTTP/2 stream opened, one tiny message each way).

Measured each repeat, in this order (so every row sees the same machine load), medians over the
repeats, and each row's ratio to the same repeat's empty unary p50:

  empty unary p50              Health.Check, one at a time
  lookup p50, unary            OffsetsForTimes with one timestamp, one at a time (raw stub)
  lookup p50, stream           the same request on an open LookupStream (raw stub)
  lookup p50, client           AsyncAdmin.offsets_for_times (the client, on its LookupStream)
  produce->consume p50/p99     AsyncProducer(linger_ms=0) at a steady 2,000 records/s, one record
                               per send() (paced by a thread, bench.peers.common.steady_ticks: the
                               loop's timers round to 1 ms); a consumer process (a bare Consume
                               stream: the cheapest reader) stamps each arrival; latency = arrival -
                               creation (monotonic clock, shared by the processes). On
                               ProduceStream with 5 and with 1 batch in flight per partition,
                               and on the unary path (one in flight). With each, the CPU time
                               per record of the producer, the service and the consumer: at
                               2,000/s they share two cores, and what one spends the others wait
                               for.
  batched lookups/s            OffsetsForTimes of 4 partitions x 250 timestamps (1,000 lookups
                               per request): unary one request at a time, and on LookupStream
                               with every request written ahead (the service reads 64 ahead)
  produce cost                 4,000 one-record Produce requests, unary with 5 in flight and on
                               one ProduceStream: the service process's CPU time per request
                               (/proc utime+stime) and requests/s

Goals (issue 10): lookup stream p50 <= 0.7x; produce->consume p50 at 2,000/s <= 1.2x; batched
lookups >= 50,000/s. ``--json`` writes every sample. The service runs with its metrics off unless
``--metrics`` turns them on (bench/README.md has figures both ways; what they add to one call in
process: bench_metrics_cost.py).

    .venv/bin/python bench/bench_streams.py [--repeats 5] [--calls 2000] [--seconds 3] [--metrics]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import pathlib
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from seglog import AsyncAdmin, AsyncProducer, TopicPartition
from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository root: bench.peers
from bench.peers.common import steady_ticks  # noqa: E402 - after the path it needs

CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
LOOKUP_TOPIC = "lookups"
LOOKUP_PARTITIONS = 4
# 20,000 records per partition, 10 to a batch, 1 ms apart: a few segments' worth of index entries.
LOOKUP_RECORDS = 20_000
BATCH_TIMESTAMPS_PER_PARTITION = 250
LATENCY_RATE_PER_S = 2_000
PRODUCE_COST_IN_FLIGHT = 5  # unary calls in flight for the per-request cost rows
_SEND_TIME = struct.Struct(">q")


class Service:
    def __init__(self, root: pathlib.Path, metrics: bool = False) -> None:
        ready = root / "ready"
        command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
                   "--metrics-listen", "127.0.0.1:0" if metrics else "none", "--data-dir", str(root / "data")]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
        self.log = open(root / "service.log", "wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log, env=environ)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"service failed to start: {(root / 'service.log').read_text()}")
            time.sleep(0.02)
        self.address = ready.read_text().strip()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


# -- set-up -----------------------------------------------------------------------------------------


async def load_lookup_topic(stub: pb_grpc.LogServiceStub, base_ms: int) -> None:
    await stub.CreateTopic(pb.CreateTopicRequest(topic=LOOKUP_TOPIC, partitions=LOOKUP_PARTITIONS))
    for partition in range(LOOKUP_PARTITIONS):
        for first in range(0, LOOKUP_RECORDS, 10):
            builder = codec.RecordBatchBuilder()
            for i in range(first, first + 10):
                builder.append(b"v" * 100, key=b"k%d" % i, timestamp_ms=base_ms + i)
            await stub.Produce(pb.ProduceRequest(topic=LOOKUP_TOPIC, partition=partition, records=builder.build()))


def one_lookup(base_ms: int, i: int) -> pb.OffsetsForTimesRequest:
    return pb.OffsetsForTimesRequest(partitions=[pb.PartitionTimestamp(
        topic=LOOKUP_TOPIC, partition=i % LOOKUP_PARTITIONS, timestamp_ms=base_ms + (i * 7919) % LOOKUP_RECORDS,
    )])


def batched_lookup(base_ms: int, seed: int) -> pb.OffsetsForTimesRequest:
    return pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic=LOOKUP_TOPIC, partition=p, timestamp_ms=base_ms + (seed + k * 7919) % LOOKUP_RECORDS)
        for p in range(LOOKUP_PARTITIONS) for k in range(BATCH_TIMESTAMPS_PER_PARTITION)
    ])


# -- measurements -----------------------------------------------------------------------------------


async def p50_us(call, count: int) -> float:
    samples = []
    for i in range(count):
        started = time.perf_counter_ns()
        await call(i)
        samples.append(time.perf_counter_ns() - started)
    return statistics.median(samples) / 1000


async def stream_lookup_p50_us(stub: pb_grpc.LogServiceStub, base_ms: int, count: int) -> float:
    call = stub.LookupStream()
    await call.write(pb.LookupStreamRequest(correlation_id=0, offsets_for_times=one_lookup(base_ms, 0)))
    await call.read()  # open and warm

    async def ping(i: int) -> None:
        await call.write(pb.LookupStreamRequest(correlation_id=i, offsets_for_times=one_lookup(base_ms, i)))
        answer = await call.read()
        assert answer.correlation_id == i and answer.offsets_for_times.results[0].offset >= 0

    try:
        return await p50_us(ping, count)
    finally:
        call.cancel()


async def unary_batched_rate(stub: pb_grpc.LogServiceStub, base_ms: int, requests: int) -> float:
    started = time.perf_counter()
    for seed in range(requests):
        response = await stub.OffsetsForTimes(batched_lookup(base_ms, seed))
        assert len(response.results) == LOOKUP_PARTITIONS * BATCH_TIMESTAMPS_PER_PARTITION
        assert all(result.offset >= 0 for result in response.results)  # every one found
    return requests * LOOKUP_PARTITIONS * BATCH_TIMESTAMPS_PER_PARTITION / (time.perf_counter() - started)


async def stream_batched_rate(stub: pb_grpc.LogServiceStub, base_ms: int, requests: int) -> float:
    call = stub.LookupStream()
    started = time.perf_counter()

    async def write_all() -> None:
        for seed in range(requests):
            await call.write(pb.LookupStreamRequest(correlation_id=seed, offsets_for_times=batched_lookup(base_ms, seed)))
        await call.done_writing()

    writer = asyncio.ensure_future(write_all())
    answered = 0
    async for answer in call:
        assert answer.correlation_id == answered
        assert len(answer.offsets_for_times.results) == LOOKUP_PARTITIONS * BATCH_TIMESTAMPS_PER_PARTITION
        assert all(result.offset >= 0 for result in answer.offsets_for_times.results)
        answered += 1
    await writer
    return requests * LOOKUP_PARTITIONS * BATCH_TIMESTAMPS_PER_PARTITION / (time.perf_counter() - started)


def _process_cpu_s(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _one_record_batch() -> bytes:
    builder = codec.RecordBatchBuilder()
    builder.append(b"v" * 100, key=b"k" * 16)
    return builder.build()


async def unary_produce_cost(stub: pb_grpc.LogServiceStub, pid: int, count: int) -> tuple[float, float]:
    """(service CPU us per request, requests/s): one-record Produce calls, 5 in flight."""
    request = pb.ProduceRequest(topic="cost", partition=0, records=_one_record_batch())
    slots = asyncio.Semaphore(PRODUCE_COST_IN_FLIGHT)

    async def one() -> None:
        async with slots:
            await stub.Produce(request)

    cpu_s, started = _process_cpu_s(pid), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return (_process_cpu_s(pid) - cpu_s) / count * 1e6, count / (time.perf_counter() - started)


async def stream_produce_cost(stub: pb_grpc.LogServiceStub, pid: int, count: int) -> tuple[float, float]:
    """(service CPU us per request, requests/s): the same requests on one ProduceStream."""
    request = pb.ProduceRequest(topic="cost", partition=0, records=_one_record_batch())
    call = stub.ProduceStream()
    cpu_s, started = _process_cpu_s(pid), time.perf_counter()

    async def write_all() -> None:
        for i in range(count):
            await call.write(pb.ProduceStreamRequest(correlation_id=i, produce=request))
        await call.done_writing()

    writer = asyncio.ensure_future(write_all())
    answered = sum([1 async for answer in call if not answer.HasField("error")])
    await writer
    assert answered == count
    return (_process_cpu_s(pid) - cpu_s) / count * 1e6, count / (time.perf_counter() - started)


def _cpu_s() -> float:
    """This process's CPU time (every thread: gRPC's pollers too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _latency_consumer(address: str, topic: str, expected: int, connection) -> None:
    import uvloop

    cpu_s = _cpu_s()
    latencies = uvloop.run(_consume_latencies(address, topic, expected, connection))
    connection.send((latencies, _cpu_s() - cpu_s))


async def _consume_latencies(address: str, topic: str, expected: int, connection) -> list[int]:
    """The cheapest reader there is (a bare Consume stream, batches walked by seglog.records), so
    the figure is the produce path's: the client consumer's own cost is bench_client.py's."""
    latencies: list[int] = []
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stream = pb_grpc.LogServiceStub(channel).Consume(
            pb.ConsumeRequest(topic=topic, partition=0, position=pb.START_POSITION_LATEST)
        )
        await stream.initial_metadata()
        connection.send("ready")
        async for response in stream:
            now_ns = time.monotonic_ns()
            for batch in codec.iter_batches(response.records):
                for record in batch:
                    if len(record.value) == 100:  # not the warm-up record
                        latencies.append(now_ns - _SEND_TIME.unpack_from(record.value)[0])
            if len(latencies) >= expected:
                break
        stream.cancel()
    return latencies


async def _produce_paced(address: str, topic: str, total: int, streaming: bool, in_flight: int) -> None:
    padding = b"." * (100 - _SEND_TIME.size)
    async with AsyncProducer(address, linger_ms=0, max_in_flight_per_partition=in_flight) as producer:
        if not streaming:
            producer._sender.streaming = False  # the unary path, as against a service without the stream
        await (await producer.send(topic, b"warm-up", partition=1))  # the stream is open and confirmed
        futures = []
        async for _ in steady_ticks(total, LATENCY_RATE_PER_S):
            futures.append(await producer.send(topic, _SEND_TIME.pack(time.monotonic_ns()) + padding, partition=0))
        for future in futures:
            await future


def produce_consume_latency(
    address: str, pid: int, topic: str, seconds: float, streaming: bool, in_flight: int = 5
) -> dict[str, float]:
    """p50 and p99 in ms, and the CPU microseconds each process spent per record: producer,
    service, consumer (what the 2,000 records/s cost the machine's two cores)."""
    import uvloop

    total = int(LATENCY_RATE_PER_S * seconds)
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    consumer = context.Process(target=_latency_consumer, args=(address, topic, total, child))
    consumer.start()
    assert parent.poll(60) and parent.recv() == "ready"
    producer_cpu_s, service_cpu_s = _cpu_s(), _process_cpu_s(pid)
    uvloop.run(_produce_paced(address, topic, total, streaming, in_flight))
    producer_cpu_s, service_cpu_s = _cpu_s() - producer_cpu_s, _process_cpu_s(pid) - service_cpu_s
    assert parent.poll(120), "the consumer did not finish"
    latencies, consumer_cpu_s = parent.recv()
    latencies.sort()
    consumer.join(30)
    return {
        "p50_ms": latencies[len(latencies) // 2] / 1e6,
        "p99_ms": latencies[int(len(latencies) * 0.99)] / 1e6,
        "producer_cpu_us": producer_cpu_s / total * 1e6,
        "service_cpu_us": service_cpu_s / total * 1e6,
        "consumer_cpu_us": consumer_cpu_s / total * 1e6,
    }


# -- the run ------------------------------------------------------------------------------------------


async def one_repeat(address: str, pid: int, base_ms: int, args: argparse.Namespace, repeat: int) -> dict[str, float]:
    row: dict[str, float] = {}
    async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        check = health_pb2.HealthCheckRequest()

        async def empty(i: int) -> None:
            await health.Check(check)

        async def unary_lookup(i: int) -> None:
            await stub.OffsetsForTimes(one_lookup(base_ms, i))

        await p50_us(empty, 200)  # warm the channel
        row["empty_unary_p50_us"] = await p50_us(empty, args.calls)
        row["lookup_unary_p50_us"] = await p50_us(unary_lookup, args.calls)
        row["lookup_stream_p50_us"] = await stream_lookup_p50_us(stub, base_ms, args.calls)
        async with AsyncAdmin(address) as admin:
            await admin.offsets_for_times({TopicPartition(LOOKUP_TOPIC, 0): base_ms})

            async def client_lookup(i: int) -> None:
                await admin.offsets_for_times({TopicPartition(LOOKUP_TOPIC, i % LOOKUP_PARTITIONS): base_ms + i % LOOKUP_RECORDS})

            row["lookup_client_p50_us"] = await p50_us(client_lookup, args.calls)
        row["batched_unary_lookups_per_s"] = await unary_batched_rate(stub, base_ms, args.batched_requests)
        row["batched_stream_lookups_per_s"] = await stream_batched_rate(stub, base_ms, args.batched_requests)
        row["produce_unary_cpu_us"], row["produce_unary_per_s"] = await unary_produce_cost(stub, pid, args.cost_requests)
        row["produce_stream_cpu_us"], row["produce_stream_per_s"] = await stream_produce_cost(stub, pid, args.cost_requests)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000, help="calls per p50")
    parser.add_argument("--batched-requests", type=int, default=40, help="1,000-lookup requests per rate")
    parser.add_argument("--seconds", type=float, default=3.0, help="per produce->consume latency run")
    parser.add_argument("--cost-requests", type=int, default=4000, help="one-record produces per cost row")
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--metrics", action="store_true",
                        help="the service with its metrics on (a /metrics endpoint on loopback); default off")
    args = parser.parse_args()
    import uvloop

    with tempfile.TemporaryDirectory(prefix="bench-streams-") as tmp:
        service = Service(pathlib.Path(tmp), metrics=args.metrics)
        try:
            # An hour ago: well inside the default retention (7 days), which would empty the log.
            base_ms = int(time.time() * 1000) - 3_600_000
            rows = run(service.address, service.process.pid, base_ms, args, uvloop)
        finally:
            service.stop()
    report(rows, args)


def run(address: str, pid: int, base_ms: int, args: argparse.Namespace, uvloop) -> list[dict[str, float]]:
    async def setup() -> None:
        async with grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
            stub = pb_grpc.LogServiceStub(channel)
            await load_lookup_topic(stub, base_ms)
            await stub.CreateTopic(pb.CreateTopicRequest(topic="latency", partitions=2))
            await stub.CreateTopic(pb.CreateTopicRequest(topic="cost", partitions=1))

    uvloop.run(setup())
    rows = []
    for repeat in range(args.repeats):
        row = uvloop.run(one_repeat(address, pid, base_ms, args, repeat))
        for name, streaming, in_flight in (("stream", True, 5), ("stream1", True, 1), ("unary", False, 1)):
            figures = produce_consume_latency(address, pid, "latency", args.seconds, streaming, in_flight)
            row.update({f"produce_consume_{name}_{key}": value for key, value in figures.items()})
        print(f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(f"{k}={v:.1f}" for k, v in row.items()), flush=True)
        rows.append(row)
    return rows


def report(rows: list[dict[str, float]], args: argparse.Namespace) -> None:
    def median(key: str) -> float:
        return statistics.median(row[key] for row in rows)

    def ratio(key: str, scale: float = 1.0) -> float:
        return statistics.median(row[key] * scale / row["empty_unary_p50_us"] for row in rows)

    print(f"\nmedians over {len(rows)} repeats; ratio = the row / the same repeat's empty unary p50\n")
    print(f"{'measure':<48} {'median':>12} {'ratio':>7}  goal")
    lines = [
        ("empty unary call p50 (Health.Check)", f"{median('empty_unary_p50_us'):.0f} us", 1.0, ""),
        ("single time lookup p50, unary OffsetsForTimes", f"{median('lookup_unary_p50_us'):.0f} us", ratio("lookup_unary_p50_us"), ""),
        ("single time lookup p50, LookupStream", f"{median('lookup_stream_p50_us'):.0f} us", ratio("lookup_stream_p50_us"), "<= 0.7"),
        ("single time lookup p50, client AsyncAdmin", f"{median('lookup_client_p50_us'):.0f} us", ratio("lookup_client_p50_us"), ""),
        ("produce->consume p50 @2,000/s, ProduceStream", f"{median('produce_consume_stream_p50_ms'):.3f} ms", ratio("produce_consume_stream_p50_ms", 1000), "<= 1.2"),
        ("produce->consume p99 @2,000/s, ProduceStream", f"{median('produce_consume_stream_p99_ms'):.3f} ms", ratio("produce_consume_stream_p99_ms", 1000), ""),
        ("produce->consume p50 @2,000/s, stream, 1 in flight", f"{median('produce_consume_stream1_p50_ms'):.3f} ms", ratio("produce_consume_stream1_p50_ms", 1000), ""),
        ("produce->consume p99 @2,000/s, stream, 1 in flight", f"{median('produce_consume_stream1_p99_ms'):.3f} ms", ratio("produce_consume_stream1_p99_ms", 1000), ""),
        ("produce->consume p50 @2,000/s, unary Produce", f"{median('produce_consume_unary_p50_ms'):.3f} ms", ratio("produce_consume_unary_p50_ms", 1000), ""),
        ("produce->consume p99 @2,000/s, unary Produce", f"{median('produce_consume_unary_p99_ms'):.3f} ms", ratio("produce_consume_unary_p99_ms", 1000), ""),
    ]
    for name, value, r, goal in lines:
        print(f"{name:<48} {value:>12} {r:>6.2f}x  {goal}")
    cpu_us = {who: median(f"produce_consume_stream_{who}_cpu_us") for who in ("producer", "service", "consumer")}
    print(f"{'produce->consume, ProduceStream: CPU per record':<48} " + ", ".join(
        f"{who} {us:.0f} us" for who, us in cpu_us.items()
    ) + f" = {sum(cpu_us.values()) * LATENCY_RATE_PER_S / 1e6 / (os.cpu_count() or 1):.0%} of the machine's "
        f"{os.cpu_count()} cores at {LATENCY_RATE_PER_S:,}/s")
    print(f"{'batched OffsetsForTimes, unary (lookups/s)':<48} {median('batched_unary_lookups_per_s'):>12,.0f}")
    print(f"{'batched OffsetsForTimes, LookupStream (lookups/s)':<48} {median('batched_stream_lookups_per_s'):>12,.0f}  goal >= 50,000")
    print(f"{'one-record produce, unary (5 in flight): service CPU':<48} {median('produce_unary_cpu_us'):>9.0f} us  "
          f"{median('produce_unary_per_s'):,.0f}/s")
    print(f"{'one-record produce, ProduceStream: service CPU':<48} {median('produce_stream_cpu_us'):>9.0f} us  "
          f"{median('produce_stream_per_s'):,.0f}/s")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
