"""NATS JetStream: Debian's nats-server with file storage, driven through nats-py."""

from __future__ import annotations

import asyncio
import pathlib
import subprocess
import time

from bench.peers.common import (
    LATENCY_RATE_PER_S,
    free_port,
    latency_ms,
    stamped_payload,
    steady_ticks,
    stop_process,
    wait_port,
)

STREAM = "peers"
# publish_async keeps at most this many publishes waiting for their ack (nats-py's default,
# the bounded window its users get), then waits for room.
PENDING_ACKS_MAX = 4000
# Messages per pull-consumer fetch of the catch-up read.
READ_PAGE = 10_000
FETCH_TIMEOUT_S = 5
API_TIMEOUT_S = 30
# The client's outgoing buffer: big enough that a burst of publishes never blocks on it.
PENDING_BYTES = 64 * 1024 * 1024
LATENCY_JOIN_TIMEOUT_S = 60

DESCRIPTION = {
    "server": "nats-server -js (Debian package), one stream, subjects peers.<key hex>",
    "durability": "file storage; its file store fsyncs every 2 minutes by default, and 2.9 has no setting to "
                  "shorten that (sync_interval came later): a weaker promise than the others' 1 s",
    "client": f"nats-py publish_async with at most {PENDING_ACKS_MAX} pending acks (its default), "
              f"pull consumer fetching {READ_PAGE} at a time without acks",
    "lookup": "binary search over sequences with direct gets (2.9's message get has no start_time; "
              "one consumer per lookup stalled the server here)",
    "batched lookup": "the same lookups one after another: JetStream has no batched lookup by time",
    "latency": "js.publish per record (waits for the ack); an ordered push consumer reads",
}


def _epoch_ms(moment) -> int:
    """Milliseconds since the epoch of a NATS message time (a timezone-aware datetime)."""
    return int(moment.timestamp() * 1000)


class NatsSystem:
    name = "nats"
    # Its batched figure is its single lookups (no pipelined read by time): only the thousand.
    batched_lookups_max = 0
    binary = "nats-server"
    description = DESCRIPTION

    def __init__(self, root: pathlib.Path) -> None:
        self.data = root / "nats"
        self.data.mkdir()
        port = free_port()
        self.process = subprocess.Popen(
            ["nats-server", "-js", "-sd", str(self.data), "-a", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_port(port, self.process)
        self.pid = self.process.pid
        self._url = f"nats://127.0.0.1:{port}"
        self._loop = asyncio.new_event_loop()
        self._sequences: tuple[int, int] | None = None
        self._nc, self._js = self._run(self._connect())
        self._run(self._js.add_stream(name=STREAM, subjects=["peers.>"], storage="file"))

    async def _connect(self):
        import nats

        nc = await nats.connect(self._url, pending_size=PENDING_BYTES)
        return nc, nc.jetstream(publish_async_max_pending=PENDING_ACKS_MAX, timeout=API_TIMEOUT_S)

    def _run(self, coroutine):
        return self._loop.run_until_complete(coroutine)

    def produce(self, keys: list[bytes], values: list[bytes]) -> None:
        async def run() -> None:
            for key, value in zip(keys, values):
                await self._js.publish_async(f"peers.{key.hex()}", value)
            await self._js.publish_async_completed()

        self._run(run())

    def read_all(self, count: int) -> int:
        async def run() -> int:
            from nats.errors import TimeoutError as NatsTimeout
            from nats.js.api import AckPolicy, ConsumerConfig

            # No acks: a reader replaying the stream (an acking consumer stops at max_ack_pending).
            subscription = await self._js.pull_subscribe(
                "peers.>", stream=STREAM, config=ConsumerConfig(ack_policy=AckPolicy.NONE)
            )
            read = 0
            try:
                while read < count:
                    read += len(await subscription.fetch(READ_PAGE, timeout=FETCH_TIMEOUT_S))
            except NatsTimeout:
                pass
            await subscription.unsubscribe()
            return read

        return self._run(run())

    def time_range(self) -> tuple[int, int]:
        info = self._run(self._js.stream_info(STREAM))
        first = self._run(self._js.get_msg(STREAM, seq=info.state.first_seq))
        last = self._run(self._js.get_msg(STREAM, seq=info.state.last_seq))
        return _epoch_ms(first.time), _epoch_ms(last.time)

    async def _first_at(self, timestamp_ms: int) -> int:
        """The first sequence whose time is >= ``timestamp_ms``, by binary search with direct gets."""
        if self._sequences is None:
            info = await self._js.stream_info(STREAM)
            self._sequences = (info.state.first_seq, info.state.last_seq)
        low, high = self._sequences
        while low < high:
            middle = (low + high) // 2
            message = await self._js.get_msg(STREAM, seq=middle)
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

    def batched_lookups(self, times_ms: list[int]) -> None:
        self.lookups(times_ms)

    def latency(self, count: int) -> tuple[list[float], list[float], float]:
        subject = f"peers.latency{time.monotonic_ns()}"

        async def run() -> tuple[list[float], list[float], float]:
            latencies: list[float] = []
            acks: list[float] = []
            done = asyncio.Event()

            async def take(message) -> None:
                latencies.append(latency_ms(message.data))
                if len(latencies) >= count:
                    done.set()

            subscription = await self._js.subscribe(subject, cb=take, ordered_consumer=True)
            started = time.monotonic()
            async for _ in steady_ticks(count, LATENCY_RATE_PER_S):
                sent = time.perf_counter()
                await self._js.publish(subject, stamped_payload())
                acks.append((time.perf_counter() - sent) * 1000)
            rate = count / (time.monotonic() - started)
            try:
                await asyncio.wait_for(done.wait(), count / 1000 + LATENCY_JOIN_TIMEOUT_S)
            except asyncio.TimeoutError:
                pass
            await subscription.unsubscribe()
            return latencies, acks, rate

        return self._run(run())

    def stop(self) -> None:
        self._run(self._nc.close())
        self._loop.close()
        stop_process(self.process)
