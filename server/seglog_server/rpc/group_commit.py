"""Group commit for ``ACKS_FSYNCED``: concurrent fsynced produces to one log share its fdatasyncs.

An fdatasync of a ``.log`` makes every byte written to it so far durable, whoever wrote it. So a
produce that must be durable before its ack does not need a sync of its own: it needs a sync that
*started after its append*. ``GroupCommit`` runs at most one flush per log at a time (on the
storage pool, to the log end offset as it was when the flush started) and lets every waiter join:

    arrive, recovery point already past my records   -> done, no sync at all
    arrive while no flush runs                       -> start one; it covers my records
    arrive while a flush runs                        -> it may have started before my append:
                                                        wait for it, then join (or start) the next
                                                        one, which covers me and everyone who
                                                        arrived meanwhile

With N producers in flight this costs about two syncs per "round" instead of N (measured in
bench/bench_group_commit.py). Everything here runs on the event loop; the flush itself runs on
the pool, where ``Log.flush`` takes the log's flush lock.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from .errors import FlushIncompleteError
from .storage_calls import StorageCalls
from .storage_port import PartitionLog

__all__ = ["GroupCommit", "GroupCommitStatistics"]


@dataclass(frozen=True)
class GroupCommitStatistics:
    flush_count: int  # flushes started (each one fdatasync per file it covers)
    wait_count: int  # waits for durability (one per fsynced produce)
    already_durable_count: int  # waits answered without any flush


class GroupCommit:
    def __init__(self, calls: StorageCalls) -> None:
        self._calls = calls
        self._running: dict[PartitionLog, asyncio.Future[None]] = {}
        self._flush_count = 0
        self._wait_count = 0
        self._already_durable_count = 0

    async def wait_durable(self, log: PartitionLog, end_offset: int) -> None:
        """Returns once every offset below ``end_offset`` of ``log`` has been fsynced."""
        self._wait_count += 1
        if log.recovery_point >= end_offset:
            self._already_durable_count += 1
            return
        earlier = self._running.get(log)
        if earlier is not None:
            # Started before our append may have been written: it may not cover us. Its outcome
            # is its own callers' business; ours is decided by the next flush.
            await asyncio.wait((earlier,))
            if log.recovery_point >= end_offset:
                return
        covering = self._running.get(log)
        if covering is None:
            covering = self._start_flush(log)
        await asyncio.shield(covering)
        if log.recovery_point < end_offset:
            # Only a truncation during the flush leaves the recovery point short of records that
            # were written before it started: they are not known to be durable.
            raise FlushIncompleteError(
                f"{log.topic}-{log.partition}: offsets below {end_offset} were not made durable "
                f"(recovery point {log.recovery_point}); the log changed during the flush"
            )

    def _start_flush(self, log: PartitionLog) -> asyncio.Future[None]:
        self._flush_count += 1
        # The target is read here, on the loop, after the appends of everyone now waiting.
        task = asyncio.ensure_future(self._calls.blocking(log.flush, log.log_end_offset))
        self._running[log] = task
        task.add_done_callback(lambda done: self._forget(log, done))
        return task

    def _forget(self, log: PartitionLog, task: asyncio.Future[None]) -> None:
        if self._running.get(log) is task:
            del self._running[log]
        if not task.cancelled():
            task.exception()  # retrieved: waiters see it through shield; no "never retrieved"

    def statistics(self) -> GroupCommitStatistics:
        return GroupCommitStatistics(
            self._flush_count, self._wait_count, self._already_durable_count
        )
