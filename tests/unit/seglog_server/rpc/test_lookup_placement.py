"""Where a lookup by time runs: a log's first one after a restart (it runs every inactive
segment's deferred first-use check: three reads a segment, a recovery when they disagree) on the
storage pool, not the event loop; the ones after it inline, as before. A real LogManager on
tmp_path behind the LogServicer."""

from __future__ import annotations

import pytest

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.manager.log_manager import LogManager
from tests.support.servicer_support import Context, servicer_over

FIRST_MS = 1_700_000_000_000
SEGMENT_COUNT = 6


def _batch(timestamp_ms: int) -> bytes:
    builder = codec.RecordBatchBuilder()
    builder.append(b"v" * 40, timestamp_ms=timestamp_ms)
    return builder.build()


@pytest.fixture
def restarted(tmp_path):
    """A manager over a partition of SEGMENT_COUNT one-batch segments, stopped and started."""
    manager = LogManager([str(tmp_path)])
    manager.startup()
    manager.create_topic("t", 1, {"segment.bytes": str(len(_batch(FIRST_MS)))})
    for number in range(SEGMENT_COUNT):
        manager.get_log("t", 0).append(_batch(FIRST_MS + number * 1000))
    manager.shutdown()
    manager = LogManager([str(tmp_path)])
    manager.startup()
    service, calls = servicer_over(manager)
    yield service, calls
    calls.shutdown()
    manager.shutdown()


def _request(*timestamps_ms: int) -> pb.OffsetsForTimesRequest:
    return pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=timestamp_ms) for timestamp_ms in timestamps_ms
    ])


@pytest.mark.parametrize("first", [(FIRST_MS + 3000,), (-3,), (FIRST_MS + 1000, FIRST_MS + 4000)],
                         ids=["one_target", "max_timestamp", "two_targets"])
async def test_the_first_lookup_by_time_after_a_restart_runs_on_the_pool_and_later_ones_inline(restarted, first):
    servicer, calls = restarted
    response = await servicer.OffsetsForTimes(_request(*first), Context())
    assert all(result.offset >= 0 and not result.error.code for result in response.results)
    assert (calls.statistics().pooled_count, calls.statistics().inline_count) == (1, 0)
    response = await servicer.OffsetsForTimes(_request(FIRST_MS + 2000), Context())
    assert [result.offset for result in response.results] == [2]
    assert (calls.statistics().pooled_count, calls.statistics().inline_count) == (1, 1)


async def test_special_targets_that_read_no_segment_stay_inline_after_a_restart(restarted):
    servicer, calls = restarted
    response = await servicer.OffsetsForTimes(_request(-1, -2), Context())  # latest, earliest
    assert [result.offset for result in response.results] == [SEGMENT_COUNT, 0]
    assert (calls.statistics().pooled_count, calls.statistics().inline_count) == (0, 1)


@pytest.mark.parametrize("packed", [False, True], ids=["old_form", "packed_form"])
async def test_up_to_the_inline_cap_a_partitions_targets_run_inline_and_more_on_the_pool(restarted, packed):
    from seglog_server.rpc.lookup_rpcs import _INLINE_LOOKUPS_MAX

    servicer, calls = restarted
    await servicer.OffsetsForTimes(_request(-1), Context())
    await servicer.OffsetsForTimes(_request(FIRST_MS), Context())  # the first-use checks, on the pool
    before = calls.statistics()
    # The first call of many targets builds the segments' time-step tables (on the pool: the
    # inline search builds nothing); then the cap alone decides.
    places = ((_INLINE_LOOKUPS_MAX, "refused"), (_INLINE_LOOKUPS_MAX, "inline"), (_INLINE_LOOKUPS_MAX + 1, "pooled"))
    for count, where in places:
        timestamps = [FIRST_MS + (n % SEGMENT_COUNT) * 1000 for n in range(count)]
        if packed:
            request = pb.OffsetsForTimesRequest(packed=[
                pb.PartitionTimestamps(topic="t", partition=0, timestamps_ms=timestamps)])
            response = await servicer.OffsetsForTimes(request, Context())
            assert list(response.packed[0].offsets) == [n % SEGMENT_COUNT for n in range(count)]
        else:
            response = await servicer.OffsetsForTimes(_request(*timestamps), Context())
            assert [r.offset for r in response.results] == [n % SEGMENT_COUNT for n in range(count)]
        after = calls.statistics()
        moved = (after.inline_count - before.inline_count, after.pooled_count - before.pooled_count)
        assert moved == {"inline": (1, 0), "pooled": (0, 1), "refused": (1, 1)}[where], (count, moved)
        before = after


@pytest.fixture
def one_large_segment(tmp_path):
    """A manager over a partition of one segment of 100 batches (about 11 KiB), stopped and
    started: its time-step table and batch directory are gone, to be built by lookups."""
    manager = LogManager([str(tmp_path)])
    manager.startup()
    manager.create_topic("t", 1)
    for number in range(100):
        manager.get_log("t", 0).append(_batch(FIRST_MS + number))
    manager.shutdown()
    manager = LogManager([str(tmp_path)])
    manager.startup()
    service, calls = servicer_over(manager)
    yield service, calls, manager.get_log("t", 0)
    calls.shutdown()
    manager.shutdown()


@pytest.mark.parametrize("built", ["table", "directory"])
async def test_an_inline_sized_call_that_builds_or_extends_a_table_or_directory_runs_on_the_pool(
    one_large_segment, monkeypatch, built
):
    """A handful of targets whose search would read the .log to build or extend a segment's
    time-step table (or its batch directory, where the table is refused) goes to the pool, each
    time it would read more than the inline bound; once built to the file's end, inline."""
    from seglog_server.storage.segment import segment_time_lookups
    from seglog_server.storage.segment.batch_directory import DirectoryBudget

    servicer, calls, log = one_large_segment
    await servicer.OffsetsForTimes(_request(-3), Context())  # the first-use checks, on the pool
    monkeypatch.setattr(segment_time_lookups, "_STEPS_EXTEND_BYTES", 4096)  # built in parts of 4 KiB
    monkeypatch.setattr(segment_time_lookups, "_DIRECTORY_EXTEND_BYTES", 4096)
    if built == "directory":
        monkeypatch.setattr(segment_time_lookups, "TIME_STEPS", DirectoryBudget(0))  # no table fits
    places = []
    for _ in range(5):
        before = calls.statistics()
        response = await servicer.OffsetsForTimes(_request(FIRST_MS + 10, FIRST_MS + 90), Context())
        assert [result.offset for result in response.results] == [10, 90]
        after = calls.statistics()
        places.append("pooled" if after.pooled_count > before.pooled_count else "inline")
    assert places == ["pooled", "pooled", "pooled", "inline", "inline"]  # 4 + 4 + 3 KiB read, then none
    for number in range(100, 120):  # about 2 KiB more: the appends feed a table, not a directory
        log.append(_batch(FIRST_MS + number))
    places = []
    for _ in range(2):  # one target: the single search extends the directory it finds
        before = calls.statistics()
        response = await servicer.OffsetsForTimes(_request(FIRST_MS + 110), Context())
        assert [result.offset for result in response.results] == [110]
        places.append("pooled" if calls.statistics().pooled_count > before.pooled_count else "inline")
    assert places == (["inline", "inline"] if built == "table" else ["pooled", "inline"])


async def test_a_tiered_logs_lookup_searches_the_store_with_the_log_lock_free(one_large_segment, monkeypatch):
    """A tiered log's lookups never run inline; on the pool, the store search (here the tier's
    search, its view of the store stood in) runs outside the log's lock: appends and fetches of
    the partition never wait on store round trips."""
    import threading

    from seglog_server.storage.log import unified_log

    servicer, calls, log = one_large_segment
    await servicer.OffsetsForTimes(_request(-3), Context())  # the first-use checks
    free = []

    def tiered_lookups(self, view, timestamps_ms):
        def probe_lock():  # another thread's try: free, or held by this one
            taken = self._lock.acquire(blocking=False)
            if taken:
                self._lock.release()
            free.append(taken)

        probe = threading.Thread(target=probe_lock)
        probe.start()
        probe.join()
        return [None] * len(timestamps_ms)

    monkeypatch.setattr(unified_log.UnifiedLog, "_tiered_view", lambda self: object())
    monkeypatch.setattr(unified_log.UnifiedLog, "_tiered_lookups", tiered_lookups)
    monkeypatch.setattr(log, "_remote_tier", object())  # a tiered log, to the lookup and inline_lock
    await servicer.OffsetsForTimes(_request(FIRST_MS + 500), Context())
    await servicer.OffsetsForTimes(_request(FIRST_MS + 500, FIRST_MS + 1500), Context())
    assert free == [True, True]


async def test_a_repeated_or_special_target_beside_one_counts_as_the_batched_search_it_is(one_large_segment, monkeypatch):
    """[T, T] and [LATEST, T] search batched (they may build a table), though one target is
    distinct: while a build is due they go to the pool as [T1, T2] does."""
    from seglog_server.storage.segment import segment_time_lookups

    servicer, calls, _ = one_large_segment
    await servicer.OffsetsForTimes(_request(-3), Context())  # the first-use checks, on the pool
    monkeypatch.setattr(segment_time_lookups, "_STEPS_EXTEND_BYTES", 4096)  # built in parts of 4 KiB
    monkeypatch.setattr(segment_time_lookups, "_DIRECTORY_EXTEND_BYTES", 4096)
    for targets in ((FIRST_MS + 10, FIRST_MS + 10), (-1, FIRST_MS + 10)):
        before = calls.statistics()
        response = await servicer.OffsetsForTimes(_request(*targets), Context())
        assert response.results[-1].offset == 10
        assert calls.statistics().pooled_count == before.pooled_count + 1, targets
