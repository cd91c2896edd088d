"""Where a storage call runs: inline on the event loop, or on the bounded storage thread pool.

Page-cache appends and reads of a few KiB take microseconds, less than the hand-off to a thread
and back (measured in bench/bench_service.py: see ``inline_io_bytes_max`` in config.py), so they
run inline. Calls that can block for milliseconds run on the pool so the loop keeps serving:
fsync (acks=FSYNCED), large reads and appends, topic creation and deletion, maintenance, startup
recovery and shutdown. The pool is bounded (``storage_threads``): when every thread is busy, calls
queue there instead of piling threads onto two cores.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["StorageCalls", "StorageCallsStatistics"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class StorageCallsStatistics:
    inline_count: int
    pooled_count: int
    thread_count: int


class StorageCalls:
    def __init__(self, thread_count: int, inline_io_bytes_max: int) -> None:
        assert thread_count >= 1
        assert inline_io_bytes_max >= 0
        self._executor = ThreadPoolExecutor(thread_count, thread_name_prefix="seglog-storage")
        self._thread_count = thread_count
        self._inline_io_bytes_max = inline_io_bytes_max
        self._inline_count = 0
        self._pooled_count = 0

    @property
    def inline_io_bytes_max(self) -> int:
        return self._inline_io_bytes_max

    async def blocking(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Runs ``fn`` on the pool and awaits it."""
        self._pooled_count += 1
        call = functools.partial(fn, *args, **kwargs) if kwargs else (lambda: fn(*args))
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    async def sized(self, io_bytes: int, fn: Callable[..., _T], *args: Any) -> _T:
        """Runs ``fn`` inline when it moves at most ``inline_io_bytes_max`` bytes, else pooled."""
        if io_bytes <= self._inline_io_bytes_max:
            self._inline_count += 1
            return fn(*args)
        return await self.blocking(fn, *args)

    def shutdown(self) -> None:
        """Waits for running calls; the service calls it after the storage has shut down."""
        self._executor.shutdown(wait=True, cancel_futures=False)

    def statistics(self) -> StorageCallsStatistics:
        return StorageCallsStatistics(self._inline_count, self._pooled_count, self._thread_count)
