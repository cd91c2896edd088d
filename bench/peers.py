"""seglog side by side with Redis Streams and NATS JetStream, on this machine, in one run.

    .venv/bin/python bench/peers.py [--records 1000000] [--runs 3] [--quick] [--only seglog,redis,nats]

Each system runs as its own server process on loopback, started here with durable settings as
close to one another as the servers allow, and is driven by the Python client its users reach for:

| system | server | durability | client |
|---|---|---|---|
| seglog | ``python -m seglog_server`` | ``flush.ms=1000`` (fdatasync at most 1 s after a write) | ``seglog`` (Producer.send_many, Consumer, Admin) |
| Redis Streams | Debian ``redis-server`` | AOF, ``appendfsync everysec`` | ``redis`` with ``hiredis``, pipelined |
| NATS JetStream | Debian ``nats-server -js`` | file storage; 2.9 has no ``sync_interval``: its own default | ``nats-py``, ``publish_async`` |

A peer whose server binary is missing is skipped with a message (``scripts/peers-setup`` installs
both Debian packages as root). The systems take turns within each run (interleaved), and every
figure is the median over ``--runs``. Workloads, with 100-byte values and 16-byte keys:

- produce ``--records`` records, batched as each system's users would (seglog: send_many slices of
  10,000; Redis: XADD pipelines of 1,000; NATS: publish_async with 10,000 pending acks at most);
- catch-up read of all of them (seglog: Consumer.poll decoded; Redis: XRANGE pages of 10,000;
  NATS: a pull consumer fetching 10,000 at a time);
- 1,000 random "first record at or after time T" lookups, one call each (p50/p99: seglog
  OffsetsForTimes; Redis XRANGE T + COUNT 1; NATS a binary search over sequences with direct
  gets), and
  the batched-lookup rate (seglog: 100 timestamps per OffsetsForTimes call; Redis: pipelines of
  100 XRANGEs; NATS: one after another, as JetStream has no batched form);
- produce -> consume latency at a steady 2,000 records/s (p50/p99/max), one record per send;
- disk bytes per record, server RSS after the reads, server and client CPU seconds for the
  produce and read.

Also measured in the same run, as the machine's limits: the round trip of an empty gRPC call
(gRPC health Check), sequential page-cache write and read, and crc32c.

Writes ``bench/results/peers.json`` and ``bench/results/peers.png``; docs/performance.md holds
the table of the latest run and what bounds each figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import random
import resource
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
import psutil

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import bench_service  # noqa: E402  (the seglog service runner)

from seglog import Admin, Consumer, Producer, TopicPartition  # noqa: E402
from seglog.v1 import log_service_pb2 as pb  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
LOOKUPS = 1000
LOOKUP_BATCH = 100
LATENCY_RATE_PER_S = 2000
SEND_SLICE = 10_000
REDIS_PIPELINE = 1000
NATS_PENDING_MAX = 10_000
READ_PAGE = 10_000
_CREATED = struct.Struct(">q")  # latency payloads start with their creation time (monotonic ns)


# -- helpers ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_port(port: int, process: subprocess.Popen, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s} s")


def _dir_bytes(path: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _percentile(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * percent / 100))]


def _workload(count: int) -> tuple[list[bytes], list[bytes]]:
    rng = random.Random(7)
    keys = [rng.randbytes(bench_service.KEY_BYTES) for _ in range(1024)]
    values = [rng.randbytes(bench_service.VALUE_BYTES) for _ in range(1024)]
    return [keys[i % 1024] for i in range(count)], [values[i % 1024] for i in range(count)]


def _paced(count: int, send: Callable[[bytes], None]) -> None:
    """Call send(payload) ``count`` times at LATENCY_RATE_PER_S; payloads carry their creation time."""
    padding = b"\0" * (bench_service.VALUE_BYTES - _CREATED.size)
    start = time.monotonic()
    for index in range(count):
        due = start + index / LATENCY_RATE_PER_S
        while (wait := due - time.monotonic()) > 0:
            time.sleep(min(wait, 0.0005))
        send(_CREATED.pack(time.monotonic_ns()) + padding)


def _epoch_ms(moment) -> int:
    """Milliseconds since the epoch of a NATS message time (a timezone-aware datetime)."""
    return int(moment.timestamp() * 1000)


def _latency_ms(payload: bytes) -> float:
    return (time.monotonic_ns() - _CREATED.unpack_from(payload)[0]) / 1e6


class Measured:
    """Server CPU and client CPU around a block, for one peer."""

    def __init__(self, pid: int) -> None:
        self._server = psutil.Process(pid)

    def __enter__(self) -> Measured:
        times = self._server.cpu_times()
        self._server_cpu = times.user + times.system
        self._client_cpu = _client_cpu_s()
        self._wall = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._wall
        times = self._server.cpu_times()
        self.server_cpu_s = times.user + times.system - self._server_cpu
        self.client_cpu_s = _client_cpu_s() - self._client_cpu


# -- seglog -------------------------------------------------------------------------------------


class SeglogPeer:
    name = "seglog"
    TOPIC = "peers"

    def __init__(self, root: pathlib.Path) -> None:
        self.service = bench_service.Service(root, "seglog", ["--topic-default", "flush.ms=1000"])
        self.address = self.service.address
        self.pid = self.service.process.pid
        self.data = root / "seglog" / "data"
        with Admin(self.address) as admin:
            admin.create_topic(self.TOPIC, 1)
        self._timestamps: tuple[int, int] = (0, 0)

    def produce(self, keys: list[bytes], values: list[bytes]) -> None:
        first = int(time.time() * 1000)
        with Producer(self.address, linger_ms=5, batch_size=512 * 1024) as producer:
            for start in range(0, len(values), SEND_SLICE):
                producer.send_many(self.TOPIC, values[start : start + SEND_SLICE], keys[start : start + SEND_SLICE],
                                   partition=0)
            producer.flush()
        with Admin(self.address) as admin:
            newest = admin.max_timestamp_offsets(self.TOPIC)[0]
        self._timestamps = (first, newest.timestamp_ms)

    def read_all(self, count: int) -> int:
        read = 0
        with Consumer(self.address, self.TOPIC, partition=0, start="earliest", fetch_max_bytes=2 * 1024 * 1024,
                      max_poll_records=100_000) as consumer:
            while read < count:
                read += len(consumer.poll(timeout_ms=2000))
        return read

    def lookups(self, times_ms: list[int]) -> list[float]:
        latencies = []
        with Admin(self.address) as admin:
            for timestamp_ms in times_ms:
                started = time.perf_counter()
                found = admin.offsets_for_times({TopicPartition(self.TOPIC, 0): timestamp_ms})
                latencies.append((time.perf_counter() - started) * 1000)
                assert found[TopicPartition(self.TOPIC, 0)] is not None
        return latencies

    def batched_lookup_rate(self, times_ms: list[int]) -> float:
        started = time.perf_counter()
        for start in range(0, len(times_ms), LOOKUP_BATCH):
            request = pb.OffsetsForTimesRequest(partitions=[
                pb.PartitionTimestamp(topic=self.TOPIC, partition=0, timestamp_ms=t)
                for t in times_ms[start : start + LOOKUP_BATCH]
            ])
            response = self.service.stub.OffsetsForTimes(request)
            assert all(result.offset >= 0 for result in response.results)
        return len(times_ms) / (time.perf_counter() - started)

    def latency(self, count: int) -> list[float]:
        topic = f"latency-{time.monotonic_ns()}"
        with Admin(self.address) as admin:
            admin.create_topic(topic, 1)
        latencies: list[float] = []

        def consume() -> None:
            with Consumer(self.address, topic, partition=0, start="earliest", mode="stream") as consumer:
                while len(latencies) < count:
                    latencies.extend(_latency_ms(r.value) for r in consumer.poll(timeout_ms=1000))

        reader = threading.Thread(target=consume)
        reader.start()
        with Producer(self.address, linger_ms=0) as producer:
            _paced(count, lambda payload: producer.send(topic, payload, partition=0))
            producer.flush()
        reader.join(60)
        return latencies

    def time_range(self) -> tuple[int, int]:
        return self._timestamps

    def empty_call_ms(self, count: int = 1000) -> float:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        stub = health_pb2_grpc.HealthStub(self.service.channel)
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            stub.Check(health_pb2.HealthCheckRequest())
            samples.append((time.perf_counter() - started) * 1000)
        return statistics.median(samples)

    def stop(self) -> None:
        self.service.stop()


# -- Redis Streams ------------------------------------------------------------------------------


class RedisPeer:
    name = "redis"
    STREAM = "peers"

    def __init__(self, root: pathlib.Path) -> None:
        import redis

        self.data = root / "redis"
        self.data.mkdir()
        port = _free_port()
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.data),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        _wait_port(port, self.process)
        self.pid = self.process.pid
        self.client = redis.Redis(port=port)  # hiredis parses replies when it is installed
        self._redis = redis
        self._port = port

    def produce(self, keys: list[bytes], values: list[bytes]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for index, (key, value) in enumerate(zip(keys, values)):
            pipe.xadd(self.STREAM, {b"k": key, b"v": value})
            if index % REDIS_PIPELINE == REDIS_PIPELINE - 1:
                pipe.execute()
        pipe.execute()

    def read_all(self, count: int) -> int:
        read, start = 0, "-"
        while read < count:
            page = self.client.xrange(self.STREAM, start, "+", count=READ_PAGE)
            if not page:
                break
            read += len(page)
            start = "(" + page[-1][0].decode()
        return read

    def lookups(self, times_ms: list[int]) -> list[float]:
        latencies = []
        for timestamp_ms in times_ms:
            started = time.perf_counter()
            found = self.client.xrange(self.STREAM, f"{timestamp_ms}-0", "+", count=1)
            latencies.append((time.perf_counter() - started) * 1000)
            assert found
        return latencies

    def batched_lookup_rate(self, times_ms: list[int]) -> float:
        started = time.perf_counter()
        for start in range(0, len(times_ms), LOOKUP_BATCH):
            pipe = self.client.pipeline(transaction=False)
            for timestamp_ms in times_ms[start : start + LOOKUP_BATCH]:
                pipe.xrange(self.STREAM, f"{timestamp_ms}-0", "+", count=1)
            assert all(pipe.execute())
        return len(times_ms) / (time.perf_counter() - started)

    def latency(self, count: int) -> list[float]:
        stream = f"latency-{time.monotonic_ns()}"
        latencies: list[float] = []
        reader_client = self._redis.Redis(port=self._port)
        ready = threading.Event()

        def consume() -> None:
            last = "0-0"
            ready.set()
            while len(latencies) < count:
                for _, entries in reader_client.xread({stream: last}, block=1000, count=1000) or ():
                    for entry_id, fields in entries:
                        latencies.append(_latency_ms(fields[b"v"]))
                        last = entry_id

        reader = threading.Thread(target=consume)
        reader.start()
        ready.wait()
        _paced(count, lambda payload: self.client.xadd(stream, {b"k": b"", b"v": payload}))
        reader.join(60)
        reader_client.close()
        return latencies

    def time_range(self) -> tuple[int, int]:
        first = self.client.xrange(self.STREAM, "-", "+", count=1)[0][0]
        last = self.client.xrevrange(self.STREAM, "+", "-", count=1)[0][0]
        return int(first.split(b"-")[0]), int(last.split(b"-")[0])

    def stop(self) -> None:
        self.client.close()
        self.process.terminate()
        self.process.wait(30)


# -- NATS JetStream -----------------------------------------------------------------------------


class NatsPeer:
    name = "nats"
    STREAM = "peers"

    def __init__(self, root: pathlib.Path) -> None:
        self.data = root / "nats"
        self.data.mkdir()
        port = _free_port()
        self.process = subprocess.Popen(
            ["nats-server", "-js", "-sd", str(self.data), "-a", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        _wait_port(port, self.process)
        self.pid = self.process.pid
        self.url = f"nats://127.0.0.1:{port}"
        self.loop = asyncio.new_event_loop()
        self._sequences: tuple[int, int] | None = None
        self.nc, self.js = self.loop.run_until_complete(self._connect())
        self.loop.run_until_complete(self.js.add_stream(name=self.STREAM, subjects=["peers.>"], storage="file"))

    async def _connect(self):
        import nats

        nc = await nats.connect(self.url, pending_size=64 * 1024 * 1024)
        return nc, nc.jetstream(publish_async_max_pending=NATS_PENDING_MAX, timeout=30)

    def _run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def produce(self, keys: list[bytes], values: list[bytes]) -> None:
        async def run() -> None:
            for key, value in zip(keys, values):
                await self.js.publish_async(f"peers.{key.hex()}", value)
            await self.js.publish_async_completed()

        self._run(run())

    def read_all(self, count: int) -> int:
        async def run() -> int:
            from nats.js.api import AckPolicy, ConsumerConfig

            # No acks: a reader that replays the stream (an acking consumer stops at max_ack_pending).
            subscription = await self.js.pull_subscribe(
                "peers.>", stream=self.STREAM, config=ConsumerConfig(ack_policy=AckPolicy.NONE)
            )
            read = 0
            while read < count:
                read += len(await subscription.fetch(READ_PAGE, timeout=5))
            await subscription.unsubscribe()
            return read

        return self._run(run())

    async def _first_at(self, timestamp_ms: int) -> int:
        """The first sequence whose time is >= ``timestamp_ms``: a binary search with direct
        gets. (An ephemeral consumer started BY_START_TIME is the other way; a few thousand of
        them in a row stalled the 2.9.10 server here, so the benchmark does not use them.)"""
        if self._sequences is None:
            info = await self.js.stream_info(self.STREAM)
            self._sequences = (info.state.first_seq, info.state.last_seq)
        low, high = self._sequences
        while low < high:
            middle = (low + high) // 2
            message = await self.js.get_msg(self.STREAM, seq=middle)
            if _epoch_ms(message.time) < timestamp_ms:
                low = middle + 1
            else:
                high = middle
        return low

    def lookups(self, times_ms: list[int]) -> list[float]:
        async def run() -> list[float]:
            latencies = []
            for timestamp_ms in times_ms:
                started = time.perf_counter()
                await self._first_at(timestamp_ms)
                latencies.append((time.perf_counter() - started) * 1000)
            return latencies

        return self._run(run())

    def batched_lookup_rate(self, times_ms: list[int]) -> float:
        # JetStream has no batched lookup by time, and concurrent consumer creations from one
        # nats-py connection stalled here (2.9.10 server): lookups go one after another.
        started = time.perf_counter()
        self.lookups(times_ms)
        return len(times_ms) / (time.perf_counter() - started)

    def latency(self, count: int) -> list[float]:
        subject = f"peers.latency{time.monotonic_ns()}"

        async def run() -> list[float]:
            latencies: list[float] = []
            done = asyncio.Event()

            async def take(message) -> None:
                latencies.append(_latency_ms(message.data))
                if len(latencies) >= count:
                    done.set()

            subscription = await self.js.subscribe(subject, cb=take, ordered_consumer=True)
            start = time.monotonic()
            padding = b"\0" * (bench_service.VALUE_BYTES - _CREATED.size)
            for index in range(count):
                due = start + index / LATENCY_RATE_PER_S
                if (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                await self.js.publish(subject, _CREATED.pack(time.monotonic_ns()) + padding)
            await asyncio.wait_for(done.wait(), 60)
            await subscription.unsubscribe()
            return latencies

        return self._run(run())

    def time_range(self) -> tuple[int, int]:
        info = self._run(self.js.stream_info(self.STREAM))
        first = self._run(self.js.get_msg(self.STREAM, seq=info.state.first_seq))
        last = self._run(self.js.get_msg(self.STREAM, seq=info.state.last_seq))
        return _epoch_ms(first.time), _epoch_ms(last.time)

    def stop(self) -> None:
        self._run(self.nc.close())
        self.loop.close()
        self.process.terminate()
        self.process.wait(30)


# -- the machine's limits -----------------------------------------------------------------------


def machine_limits(root: pathlib.Path) -> dict[str, float]:
    import crc32c

    path = root / "raw-write"
    block = os.urandom(1 << 20)
    started = time.perf_counter()
    with open(path, "wb") as file:
        for _ in range(256):
            file.write(block)
    write_s = time.perf_counter() - started
    started = time.perf_counter()
    with open(path, "rb") as file:
        while file.read(1 << 20):
            pass
    read_s = time.perf_counter() - started
    path.unlink()
    data = os.urandom(64 << 20)
    started = time.perf_counter()
    crc32c.crc32c(data)
    crc_s = time.perf_counter() - started
    return {
        "page-cache write MB/s": 256 * 1.048576 / write_s,
        "page-cache read MB/s": 256 * 1.048576 / read_s,
        "crc32c GB/s": 64 * 1.048576 / 1000 / crc_s,
    }


# -- the run ------------------------------------------------------------------------------------

PEERS = {"seglog": (SeglogPeer, None), "redis": (RedisPeer, "redis-server"), "nats": (NatsPeer, "nats-server")}


def _phase(peer, text: str) -> None:
    print(f"  {peer.name}: {text}", file=sys.stderr, flush=True)


def run_peer(factory, root: pathlib.Path, keys: list[bytes], values: list[bytes], latency_records: int) -> dict[str, float]:
    peer = factory(root)
    out: dict[str, float] = {}
    try:
        _phase(peer, "produce")
        with Measured(peer.pid) as produced:
            peer.produce(keys, values)
        out["produce records/s"] = len(values) / produced.wall_s
        out["produce client CPU s"] = produced.client_cpu_s
        out["produce server CPU s"] = produced.server_cpu_s
        _phase(peer, "read")
        with Measured(peer.pid) as read:
            count = peer.read_all(len(values))
        assert count >= len(values), (peer.name, count)
        out["read records/s"] = len(values) / read.wall_s
        out["read client CPU s"] = read.client_cpu_s
        out["read server CPU s"] = read.server_cpu_s
        _phase(peer, "lookups")
        first, last = peer.time_range()
        rng = random.Random(11)
        times = [rng.randint(first, last) for _ in range(LOOKUPS)]
        latencies = peer.lookups(times)
        out["lookup p50 ms"] = _percentile(latencies, 50)
        out["lookup p99 ms"] = _percentile(latencies, 99)
        _phase(peer, "batched lookups")
        out["batched lookups/s"] = peer.batched_lookup_rate(times)
        _phase(peer, "latency")
        latencies = peer.latency(latency_records)
        out["latency p50 ms"] = _percentile(latencies, 50)
        out["latency p99 ms"] = _percentile(latencies, 99)
        out["latency max ms"] = max(latencies)
        out["server RSS MB"] = psutil.Process(peer.pid).memory_info().rss / 1e6
        if isinstance(peer, SeglogPeer):
            out["empty gRPC call ms"] = peer.empty_call_ms()
    finally:
        peer.stop()
    out["disk bytes/record"] = _dir_bytes(peer.data) / len(values)
    return out


def plot(summary: dict[str, dict[str, float]], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("produce records/s", "produce, records/s (higher is better)"),
        ("read records/s", "catch-up read, records/s (higher is better)"),
        ("lookup p50 ms", "time lookup p50, ms (lower is better)"),
        ("batched lookups/s", "batched time lookups/s (higher is better)"),
        ("latency p50 ms", "produce->consume p50 at 2,000/s, ms (lower)"),
        ("disk bytes/record", "disk bytes per record (lower is better)"),
        ("server RSS MB", "server RSS, MB (lower is better)"),
        ("produce client CPU s", "client CPU s for the produce (lower)"),
    ]
    names = list(summary)
    colors = {"seglog": "#2a6fdb", "redis": "#d9534f", "nats": "#5cb85c"}
    figure, axes = plt.subplots(2, 4, figsize=(16, 7))
    for axis, (key, title) in zip(axes.flat, panels):
        heights = [summary[name].get(key, 0) for name in names]
        bars = axis.bar(names, heights, color=[colors.get(n, "grey") for n in names])
        axis.set_title(title, fontsize=9)
        axis.bar_label(bars, labels=[f"{h:,.3g}" for h in heights], fontsize=8)
        axis.tick_params(labelsize=8)
    figure.suptitle("seglog, Redis Streams and NATS JetStream on one 2-core machine (medians)", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--latency-records", type=int, default=10_000, help="records in the 2,000/s latency run")
    parser.add_argument("--quick", action="store_true", help="100,000 records, 2,000 latency records, 1 run")
    parser.add_argument("--only", default="seglog,redis,nats", help="comma-separated peers to run")
    args = parser.parse_args()
    if args.quick:
        args.records, args.latency_records, args.runs = 100_000, 2_000, 1
    chosen = []
    for name in args.only.split(","):
        factory, binary = PEERS[name]
        if binary and shutil.which(binary) is None:
            print(f"skipping {name}: `{binary}` is not installed (scripts/peers-setup installs it)", file=sys.stderr)
            continue
        chosen.append((name, factory))
    keys, values = _workload(args.records)
    samples: dict[str, list[dict[str, float]]] = {name: [] for name, _ in chosen}
    with tempfile.TemporaryDirectory(prefix="seglog-peers-") as tmp:
        limits = machine_limits(pathlib.Path(tmp))
        for run in range(args.runs):
            for name, factory in chosen:  # interleaved: every peer once per run
                root = pathlib.Path(tmp) / f"{name}-{run}"
                root.mkdir()
                print(f"run {run + 1}/{args.runs}: {name} ...", file=sys.stderr, flush=True)
                samples[name].append(run_peer(factory, root, keys, values, args.latency_records))
                shutil.rmtree(root, ignore_errors=True)
    summary = {
        name: {key: statistics.median(s[key] for s in runs) for key in runs[0]} for name, runs in samples.items() if runs
    }
    if "seglog" in summary and "empty gRPC call ms" in summary["seglog"]:
        limits["empty gRPC call ms"] = summary["seglog"].pop("empty gRPC call ms")
    report = {
        "records": args.records, "runs": args.runs, "latency_records": args.latency_records,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "kernel": platform.release(),
                    "memory GB": round(psutil.virtual_memory().total / 1e9, 1)},
        "limits": limits, "median": summary, "samples": samples,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "peers.json").write_text(json.dumps(report, indent=2) + "\n")
    plot(summary, RESULTS / "peers.png")
    keys_order = list(next(iter(summary.values())))
    names = list(summary)
    print(f"{args.records:,} records, medians of {args.runs} runs; ratio = seglog / peer where higher is better")
    print(f"{'measure':<24}" + "".join(f"{n:>14}" for n in names))
    for key in keys_order:
        print(f"{key:<24}" + "".join(f"{summary[n][key]:>14,.3f}" for n in names))
    print("machine: " + ", ".join(f"{k} {v:,.2f}" for k, v in limits.items()))


if __name__ == "__main__":
    main()
