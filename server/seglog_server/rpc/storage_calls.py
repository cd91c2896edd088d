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

from seglog_server.storage import INLINE_CALL, InlineRefused

__all__ = ["StorageCalls", "StorageCallsStatistics"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class StorageCallsStatistics:
    inline_count: int
    pooled_count: int
    thread_count: int
    busy_fallback_count: int = 0  # inline-sized calls sent to the pool: their lock was busy
    inline_refused_count: int = 0  # inline calls that met a step too long for the loop, rerun pooled


class StorageCalls:
    def __init__(self, thread_count: int, inline_io_bytes_max: int) -> None:
        assert thread_count >= 1
        assert inline_io_bytes_max >= 0
        self._executor = ThreadPoolExecutor(thread_count, thread_name_prefix="seglog-storage")
        self._thread_count = thread_count
        self._inline_io_bytes_max = inline_io_bytes_max
        self._inline_count = 0
        self._pooled_count = 0
        self._busy_fallback_count = 0
        self._inline_refused_count = 0  # inline calls that met a step too long for the loop

    @property
    def inline_io_bytes_max(self) -> int:
        return self._inline_io_bytes_max

    async def blocking(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Runs ``fn`` on the pool and awaits it."""
        self._pooled_count += 1
        call = functools.partial(fn, *args, **kwargs) if kwargs else (lambda: fn(*args))
        return await asyncio.get_running_loop().run_in_executor(self._executor, call)

    @property
    def inline_refused_count(self) -> int:
        """Inline calls refused part-way (InlineRefused) and run again on the pool."""
        return self._inline_refused_count

    def count_inline(self) -> None:
        """Counts a call its caller ran inline itself (as ``sized`` counts its own)."""
        self._inline_count += 1

    def count_busy_fallback(self) -> None:
        """Counts an inline-sized call its caller sends to the pool: the lock it needs was busy."""
        self._busy_fallback_count += 1

    async def sized(
        self, io_bytes: int, fn: Callable[..., _T], *args: Any, lock: Any = None
    ) -> _T:
        """Runs ``fn`` inline when it moves at most ``inline_io_bytes_max`` bytes, else pooled.

        ``lock`` is the (re-entrant) lock ``fn`` will take, when the caller knows it: a pool
        thread may hold it for milliseconds of disk I/O (a large read, a retention pass), and
        blocking on it would freeze the event loop. So the call runs inline only if the lock can
        be taken without waiting, and inline while holding it (``fn`` re-enters it in this same
        thread); when the lock is busy the call goes to the pool instead.
        """
        if io_bytes > self._inline_io_bytes_max:
            return await self.blocking(fn, *args)
        if lock is None:
            self._inline_count += 1
            INLINE_CALL.running = True
            try:
                return fn(*args)
            except InlineRefused:  # a step too long for the loop (an index rebuild): the pool's
                self._inline_refused_count += 1
            finally:
                INLINE_CALL.running = False
            return await self.blocking(fn, *args)
        if not lock.acquire(blocking=False):
            self._busy_fallback_count += 1
            return await self.blocking(fn, *args)
        self._inline_count += 1
        INLINE_CALL.running = True
        try:
            return fn(*args)
        except InlineRefused:
            self._inline_refused_count += 1
        finally:
            INLINE_CALL.running = False
            lock.release()
        return await self.blocking(fn, *args)  # refused inline, taken again on the pool

    def shutdown(self) -> None:
        """Waits for running calls; the service calls it after the storage has shut down."""
        self._executor.shutdown(wait=True, cancel_futures=False)

    def statistics(self) -> StorageCallsStatistics:
        return StorageCallsStatistics(
            self._inline_count, self._pooled_count, self._thread_count, self._busy_fallback_count,
            self._inline_refused_count,
        )
