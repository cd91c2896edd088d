"""The injected clock.

Every piece of storage that reads the time (segment roll by time, retention, flush.ms, created
times) takes a ``Clock`` so tests move a ``FakeClock`` instead of sleeping (Kafka's ``Time`` /
``MockTime``, trio's ``MockClock``).
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    def time_ms(self) -> int:
        """Wall-clock milliseconds since the Unix epoch."""
        ...

    def monotonic_ns(self) -> int:
        """A monotonic reading for measuring durations."""
        ...


class SystemClock:
    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, time_ms: int = 1_700_000_000_000) -> None:
        assert time_ms >= 0
        self._time_ms = time_ms
        self._monotonic_ns = 0

    def time_ms(self) -> int:
        return self._time_ms

    def monotonic_ns(self) -> int:
        return self._monotonic_ns

    def advance(self, ms: int) -> None:
        assert ms >= 0, "time never goes backwards"
        self._time_ms += ms
        self._monotonic_ns += ms * 1_000_000


SYSTEM_CLOCK = SystemClock()
