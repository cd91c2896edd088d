"""Free loopback ports for the processes a test must tell their port before they start (an etcd,
the S3 server, Spark, a cluster instance's advertised address, a service restarted on its port).

A port the kernel gives ``bind(("127.0.0.1", 0))`` comes from the ephemeral range, the range every
outgoing connection also takes its local port from: between the probe's close and the server's
own bind, a connection or a probe of the other pytest-xdist worker could take it (a cluster
instance once failed to start so, "the port is in use"). These ports come from below Linux's
default ephemeral range (32768-60999), from a block of their own for each xdist worker
(PYTEST_XDIST_WORKER: gw0, gw1, ...), handed out in turn from a random start, each checked free
by a bind: no connection takes them, and two workers never hand out the same one."""

from __future__ import annotations

import os
import random
import socket
import threading

__all__ = ["free_port"]

_LOW, _HIGH = 20_000, 32_000
_BLOCKS = 8
_lock = threading.Lock()
_next: int | None = None


def _block() -> tuple[int, int]:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    size = (_HIGH - _LOW) // _BLOCKS
    low = _LOW + (index % _BLOCKS) * size
    return low, low + size


def free_port() -> int:
    """A loopback port no one listens on now, from this worker's block."""
    global _next
    low, high = _block()
    with _lock:
        if _next is None or not low <= _next < high:
            _next = random.randrange(low, high)
        for _ in range(high - low):
            port, _next = _next, low + (_next + 1 - low) % (high - low)
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    raise RuntimeError(f"no free loopback port in {low}-{high - 1}")
