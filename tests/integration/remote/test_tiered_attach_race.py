"""A remote tier attached between a bounded lookup's check for one and its taking of the log's
lock (``UnifiedLog.lookup_timestamps_without_builds`` / ``lookup_timestamp_inline``): the lookup
checks again under the lock and leaves the log to the unbounded path, which searches the store,
never answering from the local segments alone a log whose start now lies below them. The
attach is made deterministically at the lookup's taking of the lock (the log's lock wrapped),
on a tiered log whose segments are in a real S3-compatible server (weed)."""

from __future__ import annotations

import pytest

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.log.unified_log import INLINE_BUSY

from tests.integration.remote.test_tiered_relisting import tiered_log_with_remote_segments

pytestmark = pytest.mark.integration


class _AttachingLock:
    """The log's lock, attaching ``tier`` to ``log`` the first time a lookup takes it (before it
    takes the lock: the attach takes it too, and releases it)."""

    def __init__(self, log, tier):
        self._lock, self._log, self._tier = log._lock, log, tier
        self.attached = False

    def _attach_once(self):
        if not self.attached:
            self.attached = True
            self._log.attach_remote_tier(self._tier)

    def acquire(self, blocking=True, timeout=-1):
        self._attach_once()
        return self._lock.acquire(blocking, timeout)

    def release(self):
        self._lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc_info):
        self._lock.release()


@pytest.mark.parametrize("inline", [False, True], ids=["without_builds", "inline_single"])
def test_a_tier_attached_before_the_lock_is_taken_leaves_the_lookup_to_the_unbounded_path(
    weed, prefix, tmp_path, monkeypatch, inline
):
    clock = FakeClock()
    manager, log = tiered_log_with_remote_segments(tmp_path, weed, prefix, clock)
    try:
        local_start = log.local_log_start_offset
        target = clock.time_ms()  # every record's timestamp: the first record of the log reaches it
        assert log.lookup_timestamps([target])[0].offset == 0  # (the store's)
        tier = log.remote_tier
        monkeypatch.setattr(log, "_remote_tier", None)  # the log as it was before its tier's attach
        # What the local segments alone answer (their first-use checks run, so the bounded search
        # would answer): the local start.
        assert log.lookup_timestamps([target])[0].offset == local_start > 0
        lock = _AttachingLock(log, tier)
        monkeypatch.setattr(log, "_lock", lock)
        if inline:
            answer = log.lookup_timestamp_inline(target, 1 << 16)
            assert answer == INLINE_BUSY  # (before: the local segments' answer, local_start)
        else:
            answer = log.lookup_timestamps_without_builds([target], 1 << 16)
            assert answer is None  # (before: the local segments' answer, local_start)
        assert lock.attached and log.remote_tier is tier
        assert log.lookup_timestamps([target])[0].offset == 0  # the unbounded path's: the store's
    finally:
        manager.shutdown()
