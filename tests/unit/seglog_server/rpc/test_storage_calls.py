import threading

from seglog_server.rpc.storage_calls import StorageCalls


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
