"""The questions the gRPC adapter asks about a log before running an operation on it
(rpc/storage_port.py): whether it may run inline on the event loop or belongs on the pool.

Asked on the event loop, so each is answered from the log's public state with no I/O and no
lock held. ``LogManager`` answers through these functions (they are the storage's knowledge of
its own logs: the lock, the flush policy, the batch attributes, the deferred timestamp checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from seglog.records import ATTRIBUTES_OFFSET
from seglog.records.attributes import COMPRESSION_MASK

from ..base.log_config import LONG_MAX
from ..log.log_results import MAX_TIMESTAMP
from ..log.unified_log import Log

__all__ = ["append_may_block", "inline_lock", "timestamp_lookup_may_block"]

# A v2 batch's attributes are a big-endian int16: its low byte holds the compression codec.
_ATTRIBUTES_LOW_BYTE = ATTRIBUTES_OFFSET + 1


class _NeverInline:
    """A lock that is never free without waiting: callers on an event loop take the pool."""

    def acquire(self, blocking: bool = True) -> bool:
        assert not blocking, "only ever tried without waiting"
        return False

    def release(self) -> None:  # never acquired
        raise AssertionError("never acquired")


_NEVER_INLINE = _NeverInline()


def inline_lock(log: Log) -> Any:
    """The re-entrant lock every operation of ``log`` takes. A caller on an event loop runs an
    operation inline only if it takes this lock without waiting (and holds it while the
    operation re-enters it): a pool thread may hold it for milliseconds of disk I/O."""
    if log.remote_tier is not None:
        # A read below the local log start is a store call (seconds when the store is slow):
        # a tiered log's calls never run on the event loop.
        return _NEVER_INLINE
    return log._lock  # noqa: SLF001 - the storage answering for its own log


def append_may_block(log: Log, batch: bytes | bytearray | memoryview) -> bool:
    """Whether ``log.append(batch)`` may block for I/O or CPU: a ``flush.messages`` policy
    fsyncs inside the append, and a compressed batch is decompressed (up to the topic's
    decompressed_bytes_max) to be validated."""
    if log.config.flush_messages != LONG_MAX:
        return True
    return len(batch) > _ATTRIBUTES_LOW_BYTE and batch[_ATTRIBUTES_LOW_BYTE] & COMPRESSION_MASK != 0


def timestamp_lookup_may_block(log: Log, timestamps_ms: Sequence[int]) -> bool:
    """Whether looking ``timestamps_ms`` up may read every segment of ``log``: a log's first
    search by time (or MAX_TIMESTAMP) after a restart runs each inactive segment's deferred
    first-use check (three small reads a segment; a recovery when they disagree). The special
    targets EARLIEST and LATEST read no segment."""
    if log.timestamps_loaded:
        return False
    return any(timestamp_ms >= 0 or timestamp_ms == MAX_TIMESTAMP for timestamp_ms in timestamps_ms)
