"""A remote tier attached between a bounded lookup's check for one and its taking of the log's
lock (``UnifiedLog.lookup_timestamps_without_builds`` / ``lookup_timestamp_inline``): the lookup
checks again under the lock and leaves the log to the unbounded path, which searches the store,
never answering from the local segments alone a log whose start now lies below them. The
attach is made deterministically at the lookup's taking of the lock (the log's lock wrapped),
on a tiered log whose segments are in a real S3-compatible server (weed)."""

from __future__ import annotations

import threading

import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.log.unified_log import INLINE_BUSY

from tests.integration.remote.test_tiered_relisting import tiered_log_with_remote_segments
from tests.support.servicer_support import Context, servicer_over

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


async def test_a_tier_attached_after_the_inline_lock_was_chosen_is_searched_on_the_pool(
    weed, prefix, tmp_path, monkeypatch
):
    """``log_call`` chooses the lock of an inline call (``inline_lock``: the log's real lock, no
    tier yet) before ``StorageCalls.sized`` takes it; a tier attached in between leaves that
    lock free, and the bounded lookup runs inline holding it with the tier already present
    (its check before the lock). It answers None (the pool's unbounded path), so the store is
    searched on a pool thread, never on the event loop with the lock held. The attach is made
    deterministically as the service asks for the lock, over a tiered log whose segments are
    in a real S3-compatible server (weed); a general-path request (the target twice)."""
    clock = FakeClock()
    manager, log = tiered_log_with_remote_segments(tmp_path, weed, prefix, clock)
    service, calls = servicer_over(manager)
    try:
        target = clock.time_ms()  # every record's timestamp: the first record of the log reaches it
        assert log.lookup_timestamps([target])[0].offset == 0  # (the store's; the first-use checks run)
        tier = log.remote_tier
        monkeypatch.setattr(log, "_remote_tier", None)  # the log as it was before its tier's attach
        assert log.lookup_timestamps([target])[0].offset > 0  # the local segments' first-use checks: tried inline
        assert not manager.timestamp_lookup_may_block(log, [target])
        real_inline_lock = manager.inline_lock

        def chosen_then_attached(asked_log):
            lock = real_inline_lock(asked_log)  # the real lock: no tier yet
            assert lock is log._lock
            asked_log.attach_remote_tier(tier)
            return lock

        monkeypatch.setattr(manager, "inline_lock", chosen_then_attached)
        loop_thread = threading.current_thread()
        searched_on = []
        real_tiered = log._tiered_lookups

        def tiered_lookups(*args):
            searched_on.append(threading.current_thread())
            return real_tiered(*args)

        monkeypatch.setattr(log, "_tiered_lookups", tiered_lookups)
        before = calls.statistics()
        row = pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=target)
        answer = await service.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[row, row]), Context())
        after = calls.statistics()
        assert log.remote_tier is tier
        assert [(r.error.code, r.offset) for r in answer.results] == [(0, 0), (0, 0)]  # the store's
        assert searched_on and loop_thread not in searched_on  # (before: on the loop, the lock held)
        assert (after.inline_count, after.pooled_count) == (before.inline_count + 1, before.pooled_count + 1)
        assert log.lookup_timestamps_without_builds([target], 1 << 16) is None  # the tier seen first: None
    finally:
        calls.shutdown()
        manager.shutdown()
