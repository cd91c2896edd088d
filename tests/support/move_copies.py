"""What the move path's unit tests on a real log share (tests/unit/seglog_server/rpc/
test_move_stale_copies.py, test_abandoned_move_copy.py): a LogManager of one topic ``t`` of one
partition, one-record batches, and a storage pool that runs the test's interleaving on the loop
before or after the function it was given."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from seglog import records as codec
from seglog_server.storage.manager.log_manager import LogManager

FIRST_MS = 1_700_000_000_000


def batch(value: bytes) -> bytes:
    """One record of ``value``, stamped FIRST_MS."""
    builder = codec.RecordBatchBuilder()
    builder.append(value, timestamp_ms=FIRST_MS)
    return builder.build()


def values_from(log, offset: int) -> list[bytes]:
    """The values of the records ``log`` holds from ``offset`` on (up to 1 MiB of them)."""
    records = log.read(offset, 1 << 20).records
    return [record.value for batch in codec.iter_batches(records) for record in batch]


@contextmanager
def one_partition_manager(path) -> Iterator[LogManager]:
    """A started LogManager on ``path`` holding topic ``t`` of one partition; shut down after."""
    manager = LogManager([str(path)])
    manager.startup()
    manager.create_topic("t", 1)
    try:
        yield manager
    finally:
        manager.shutdown()


class InterleavedCalls:
    """The storage pool: ``interleave`` runs on the loop at ``when`` ("before" or "after" the
    function it was given, which runs on a thread as on the pool); ``calls`` counts them."""

    def __init__(self, when: str | None = None, interleave: Callable[[], None] | None = None) -> None:
        self.when, self.interleave, self.calls = when, interleave, 0

    async def blocking(self, fn, *args):
        self.calls += 1
        if self.when == "before":
            self.interleave()
        answer = await asyncio.to_thread(fn, *args)
        if self.when == "after":
            self.interleave()
        return answer
