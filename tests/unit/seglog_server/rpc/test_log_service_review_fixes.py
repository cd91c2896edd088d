"""LogServicer and StorageCalls behaviours from review: no waiter left behind by failing long
polls, inline calls never wait on a Log lock held by a pool thread, bounded decode."""

from __future__ import annotations

import threading

import grpc
import pytest

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc import conversions
from seglog_server.rpc.errors import ResponseTooLargeError
from seglog_server.rpc.log_service import LogServicer, LogServicerLimits
from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.storage.base.errors import UnknownTopicOrPartitionError
from tests.support.servicer_support import Aborted, Context


class FlakyManager:
    """get_log succeeds ``ok_calls`` times, then the topic is gone (deleted mid-poll); a Log
    found reads as deleted too."""

    def __init__(self, ok_calls: int) -> None:
        self.ok_calls = ok_calls

    def set_change_listener(self, listener):
        pass  # nothing here ever changes

    def get_log(self, topic, partition):
        if self.ok_calls <= 0:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")
        self.ok_calls -= 1
        return FakeLog()

    def inline_lock(self, log):
        return None  # the fake log takes no lock: StorageCalls runs its read inline


class FakeLog:
    dir = "/tmp/none/t-0"

    def read(self, *args, **kwargs):
        raise UnknownTopicOrPartitionError("the topic was deleted during the read")


def _servicer(manager) -> tuple[LogServicer, StorageCalls]:
    calls = StorageCalls(thread_count=1, inline_io_bytes_max=1024)
    limits = LogServicerLimits(
        fetch_bytes_max=1 << 20, fetch_wait_ms_max=30_000, response_bytes_max=4 << 20,
        message_bytes_max=1 << 20,
    )
    return LogServicer(manager, calls, limits), calls


@pytest.mark.parametrize("ok_calls", [0, 1, 2])
async def test_failing_long_polls_on_unknown_topics_leave_no_waiter(ok_calls):
    servicer, calls = _servicer(FlakyManager(0))
    try:
        for i in range(50):
            servicer.core.storage = FlakyManager(ok_calls)
            context = Context()
            request = pb.FetchRequest(topic=f"gone-{i}", offset=0, max_wait_ms=10_000)
            with pytest.raises(Aborted):
                await servicer.Fetch(request, context)
            assert context.code is grpc.StatusCode.NOT_FOUND
        assert servicer.statistics().waiters.watched_partition_count == 0
    finally:
        calls.shutdown()


async def test_an_inline_call_goes_to_the_pool_while_another_thread_holds_the_lock():
    calls = StorageCalls(thread_count=1, inline_io_bytes_max=1024)
    lock = threading.RLock()
    held, release = threading.Event(), threading.Event()

    def holder():
        with lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        held.wait(10)

        def name():
            return threading.current_thread().name

        # Would block the event loop (and this test) if it waited for the lock inline.
        pending = calls.sized(10, name, lock=lock)
        release.set()  # the pooled call may now take the lock
        assert (await pending).startswith("seglog-storage")
        assert calls.statistics().busy_fallback_count == 1
        thread.join(10)
        # Free lock: inline, holding it (re-entrant for the call itself).
        assert await calls.sized(10, name, lock=lock) == threading.current_thread().name
        assert calls.statistics().busy_fallback_count == 1
    finally:
        release.set()
        thread.join(10)
        calls.shutdown()


def test_a_single_huge_compressed_batch_is_refused_before_building_messages(monkeypatch):
    builder = codec.RecordBatchBuilder(compression=codec.Compression.GZIP)
    for _ in range(64):
        builder.append(b"\0" * 65536)
    batch = builder.build()
    assert len(batch) < 64 * 65536 // 10  # compresses well: the raw bytes fit easily
    built = []
    original = conversions._decoded
    monkeypatch.setattr(conversions, "_decoded", lambda r: built.append(1) or original(r))
    with pytest.raises(ResponseTooLargeError):
        conversions.decode_batches(batch, 0, budget_bytes=1 << 20)
    assert built == []
