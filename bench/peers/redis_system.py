"""Redis Streams: Debian's redis-server with AOF everysec, driven through redis-py + hiredis."""

from __future__ import annotations

import pathlib
import subprocess
import threading
import time

from bench.peers.common import free_port, latency_ms, paced, stop_process, wait_port

STREAM = "peers"
# XADDs per pipeline round trip: the usual bulk-load advice for redis-py (hundreds to a few
# thousand commands per execute).
PIPELINE = 1000
# Entries per XRANGE page of the catch-up read.
READ_PAGE = 10_000
# XRANGEs per pipeline in the batched-lookup workload (seglog's batch is the same size).
LOOKUP_BATCH = 100
XREAD_BLOCK_MS = 1000
LATENCY_JOIN_TIMEOUT_S = 60

DESCRIPTION = {
    "server": "redis-server (Debian package), one stream",
    "durability": "appendonly yes, appendfsync everysec (fsync at most 1 s after a write); RDB off",
    "client": f"redis-py with hiredis, XADD pipelines of {PIPELINE} (transaction=False), XRANGE pages of {READ_PAGE}",
    "lookup": "XRANGE stream T-0 + COUNT 1 (entry ids start with their time in ms)",
    "batched lookup": f"pipelines of {LOOKUP_BATCH} such XRANGEs",
    "latency": "XADD per record; a second connection reads with XREAD BLOCK",
}


class RedisSystem:
    name = "redis"
    binary = "redis-server"
    description = DESCRIPTION

    def __init__(self, root: pathlib.Path) -> None:
        import redis

        self.data = root / "redis"
        self.data.mkdir()
        self._port = free_port()
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self._port), "--bind", "127.0.0.1", "--dir", str(self.data),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_port(self._port, self.process)
        self.pid = self.process.pid
        self._redis = redis
        self.client = redis.Redis(port=self._port)  # hiredis parses the replies when it is installed

    def produce(self, keys: list[bytes], values: list[bytes]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for index, (key, value) in enumerate(zip(keys, values)):
            pipe.xadd(STREAM, {b"k": key, b"v": value})
            if index % PIPELINE == PIPELINE - 1:
                pipe.execute()
        pipe.execute()

    def read_all(self, count: int) -> int:
        read, start = 0, "-"
        while read < count:
            page = self.client.xrange(STREAM, start, "+", count=READ_PAGE)
            if not page:
                break
            read += len(page)
            start = "(" + page[-1][0].decode()
        return read

    def time_range(self) -> tuple[int, int]:
        first = self.client.xrange(STREAM, "-", "+", count=1)[0][0]
        last = self.client.xrevrange(STREAM, "+", "-", count=1)[0][0]
        return int(first.split(b"-")[0]), int(last.split(b"-")[0])

    def lookups(self, times_ms: list[int]) -> list[float]:
        latencies = []
        for timestamp_ms in times_ms:
            started = time.perf_counter()
            found = self.client.xrange(STREAM, f"{timestamp_ms}-0", "+", count=1)
            latencies.append((time.perf_counter() - started) * 1000)
            assert found, timestamp_ms
        return latencies

    def batched_lookups(self, times_ms: list[int]) -> None:
        for start in range(0, len(times_ms), LOOKUP_BATCH):
            pipe = self.client.pipeline(transaction=False)
            for timestamp_ms in times_ms[start : start + LOOKUP_BATCH]:
                pipe.xrange(STREAM, f"{timestamp_ms}-0", "+", count=1)
            assert all(pipe.execute())

    def latency(self, count: int) -> tuple[list[float], list[float], float]:
        stream = f"latency-{time.monotonic_ns()}"
        latencies: list[float] = []
        reader_client = self._redis.Redis(port=self._port)
        reader_client.ping()

        def consume() -> None:
            last = "0-0"
            deadline = time.monotonic() + count / 1000 + LATENCY_JOIN_TIMEOUT_S
            while len(latencies) < count and time.monotonic() < deadline:
                for _, entries in reader_client.xread({stream: last}, block=XREAD_BLOCK_MS, count=1000) or ():
                    for entry_id, fields in entries:
                        latencies.append(latency_ms(fields[b"v"]))
                        last = entry_id

        reader = threading.Thread(target=consume, name="redis-latency-reader")
        reader.start()
        acks: list[float] = []

        def send(payload: bytes) -> None:
            started = time.perf_counter()
            self.client.xadd(stream, {b"k": b"", b"v": payload})
            acks.append((time.perf_counter() - started) * 1000)

        rate = paced(count, send)
        reader.join()
        reader_client.close()
        return latencies, acks, rate

    def stop(self) -> None:
        self.client.close()
        stop_process(self.process)
