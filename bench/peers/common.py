"""What every system's driver shares: the records, the paced sender, ports, disk usage, percentiles."""

from __future__ import annotations

import pathlib
import random
import socket
import struct
import subprocess
import time
from collections.abc import Callable

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


def percentile(values: list[float], percent: float) -> float:
    """The nearest-rank percentile (p100 is the maximum)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * percent / 100))]


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
