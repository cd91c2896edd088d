"""What every system's driver shares: the records, the paced senders, ports, disk usage, percentiles."""

from __future__ import annotations

import asyncio
import pathlib
import random
import socket
import struct
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable

# The record shape: 100-byte values and 16-byte keys, as in bench/bench_service.py.
VALUE_BYTES = 100
KEY_BYTES = 16
# Distinct keys and values cycled through the workload: enough that no system can lean on
# repetition, few enough that building a million records costs nothing.
DISTINCT_RECORDS = 1024
# The steady rate of the produce -> consume latency workload (the figure).
LATENCY_RATE_PER_S = 2000
# Latency payloads start with their creation time (CLOCK_MONOTONIC, ns), then zero padding.
CREATED = struct.Struct(">q")
_PADDING = b"\0" * (VALUE_BYTES - CREATED.size)
# How long a server gets to open its port before the benchmark gives up on it.
SERVER_START_TIMEOUT_S = 30


def workload(count: int) -> tuple[list[bytes], list[bytes]]:
    """``count`` keys and values, the same for every system."""
    rng = random.Random(7)
    keys = [rng.randbytes(KEY_BYTES) for _ in range(DISTINCT_RECORDS)]
    values = [rng.randbytes(VALUE_BYTES) for _ in range(DISTINCT_RECORDS)]
    return [keys[i % DISTINCT_RECORDS] for i in range(count)], [values[i % DISTINCT_RECORDS] for i in range(count)]


def stamped_payload() -> bytes:
    return CREATED.pack(time.monotonic_ns()) + _PADDING


def latency_ms(payload: bytes) -> float:
    """Milliseconds since ``payload`` was made by stamped_payload (in this process)."""
    return (time.monotonic_ns() - CREATED.unpack_from(payload)[0]) / 1e6


def paced(count: int, send: Callable[[bytes], object]) -> float:
    """Call ``send(payload)`` ``count`` times at LATENCY_RATE_PER_S; returns the rate achieved."""
    started = time.monotonic()
    for index in range(count):
        due = started + index / LATENCY_RATE_PER_S
        while (wait := due - time.monotonic()) > 0:
            time.sleep(min(wait, 0.0005))
        send(stamped_payload())
    return count / (time.monotonic() - started)


async def steady_ticks(count: int, rate_per_s: float = LATENCY_RATE_PER_S) -> AsyncIterator[int]:
    """Yields 0, 1, ... ``count - 1`` at ``rate_per_s``, on an event loop, on schedule.

    The loop's own timers cannot pace 2,000 a second: uvloop and asyncio both round a timer to
    whole milliseconds, so ``asyncio.sleep(0.0004)`` wakes after about 1.1 ms and the sender then
    catches up with a second record at once: pairs of records every millisecond, not one every
    0.5 ms (half the gaps measured under 0.1 ms). A thread sleeps to each due time instead
    (``time.sleep`` is precise to tens of microseconds here: gaps p10/p50/p90 489/499/511 us) and
    hands each tick to the loop. Ticks that fall due while the loop is busy wait for it, as a
    steady source's records would.
    """
    loop = asyncio.get_running_loop()
    ticks: asyncio.Queue[int] = asyncio.Queue()
    stop = threading.Event()

    def run() -> None:
        due = time.monotonic()
        for index in range(count):
            if stop.wait(max(0.0, due - time.monotonic())):
                return
            loop.call_soon_threadsafe(ticks.put_nowait, index)
            due += 1 / rate_per_s

    thread = threading.Thread(target=run, name="steady-ticks", daemon=True)
    thread.start()
    try:
        for _ in range(count):
            yield await ticks.get()
    finally:
        stop.set()
        thread.join()


def percentile(values: list[float], percent: float) -> float:
    """The nearest-rank percentile (p100 is the maximum)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * percent / 100))]


def quantiles(values: list[float], points: int = 201) -> list[float]:
    """The distribution of ``values`` in ``points`` nearest-rank percentiles, 0 to 100 evenly
    (what the CDF plot draws, without keeping every sample in the JSON)."""
    return [percentile(values, 100 * index / (points - 1)) for index in range(points)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_port(port: int, process: subprocess.Popen, timeout_s: float = SERVER_START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout_s} s")


def stop_process(process: subprocess.Popen, timeout_s: float = 30) -> None:
    """SIGTERM, then wait (every server here shuts down cleanly on SIGTERM)."""
    if process.poll() is None:
        process.terminate()
    process.wait(timeout_s)


def disk_bytes_by_kind(path: pathlib.Path) -> dict[str, int]:
    """Bytes under ``path`` per file kind (the suffix, or the name when it has none)."""
    kinds: dict[str, int] = {}
    for file in path.rglob("*"):
        if file.is_file():
            kind = file.suffix or file.name
            kinds[kind] = kinds.get(kind, 0) + file.stat().st_size
    return kinds
