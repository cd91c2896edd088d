import threading

from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.storage.base.inline_calls import refuse_if_inline


def _thread_name():
    return threading.current_thread().name


async def test_small_calls_run_inline_and_large_ones_on_the_pool():
    calls = StorageCalls(thread_count=2, inline_io_bytes_max=1024)
    try:
        assert await calls.sized(1024, _thread_name) == threading.current_thread().name
        assert (await calls.sized(1025, _thread_name)).startswith("seglog-storage")
        assert (await calls.blocking(_thread_name)).startswith("seglog-storage")
        stats = calls.statistics()
        assert (stats.inline_count, stats.pooled_count, stats.thread_count) == (1, 2, 2)
    finally:
        calls.shutdown()


async def test_blocking_passes_keyword_arguments():
    calls = StorageCalls(thread_count=1, inline_io_bytes_max=0)
    try:
        assert await calls.blocking(dict, a=1) == {"a": 1}
        assert await calls.sized(0, divmod, 7, 2) == (3, 1)  # 0 bytes: still inline
    finally:
        calls.shutdown()


async def test_statistics_count_inline_calls_refused_and_rerun_on_the_pool():
    """A step too long for the loop refuses the inline call (refuse_if_inline); the pool runs it
    again, and statistics() says so (/metrics: seglog_storage_calls_inline_refused_total)."""
    calls = StorageCalls(thread_count=1, inline_io_bytes_max=1024)
    lock = threading.RLock()

    def refused_inline() -> str:
        refuse_if_inline("a step too long for the loop")
        return _thread_name()

    try:
        assert (await calls.sized(10, refused_inline)).startswith("seglog-storage")
        assert (await calls.sized(10, refused_inline, lock=lock)).startswith("seglog-storage")
        assert await calls.sized(10, _thread_name) == threading.current_thread().name
        stats = calls.statistics()
        assert (stats.inline_refused_count, stats.inline_count, stats.pooled_count) == (2, 3, 2)
    finally:
        calls.shutdown()
