"""A single lookup by time on a tiered log (OffsetsForTimes of one target, LookupStream's path)
never runs inline (``UnifiedLog.lookup_timestamp_inline`` answers ``busy``: a store call may take
seconds): it goes to the pool, counted as a busy fallback, and answers byte for byte as the
general path (a request of the target twice) does, below the local log start (the store's
indexes) and above it, against a real S3-compatible server (weed)."""

from __future__ import annotations

from seglog.v1 import log_service_pb2 as pb
from tests.support.log_test_support import batch
from tests.support.servicer_support import Context, servicer_over

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage.remote import ObjectStore, RemoteStorageManager

from tests.integration.remote.conftest import store_config
from tests.integration.remote.test_tiered_log import EVERY_PASS

TIERED = {"segment.bytes": "1024", "retention.ms": "-1", "remote.storage.enable": "true", "local.retention.bytes": "1"}


async def test_a_single_lookup_on_a_tiered_log_goes_to_the_pool_and_answers_as_the_general_path(weed, tmp_path, prefix):
    clock = FakeClock()
    rsm = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, prefix)), clock=clock)
    manager = LogManager([str(tmp_path / "data")], clock=clock, intervals=EVERY_PASS, remote_storage=rsm,
                         remote_fetch_cache_bytes=1 << 20)
    manager.startup()
    service, calls = servicer_over(manager)
    try:
        manager.create_topic("t", 1, TIERED)
        log = manager.get_log("t", 0)
        for first in range(0, 400, 20):
            log.append(batch(*[b"v" * 40] * 20, timestamps=[first + i for i in range(20)]))
        manager.run_remote_pass()  # uploads the closed segments, deletes them locally
        local_start = log.local_log_start_offset
        assert local_start > 0
        log.lookup_timestamps([399])  # the local first-use checks (a first lookup goes to the pool on either path)
        assert log.lookup_timestamp_inline(5, 1 << 16) == "busy"
        answers = {}
        for timestamp_ms in (5, local_start - 1, local_start + 3, 399, 400, -1, -2, -3):
            target = pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=timestamp_ms)
            before = calls.statistics()
            one = await service.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target]), Context())
            after = calls.statistics()
            both = await service.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target, target]), Context())
            assert one.results[0].SerializeToString(deterministic=True) == both.results[0].SerializeToString(
                deterministic=True)
            assert one.results[0].error.code == 0
            assert after.busy_fallback_count == before.busy_fallback_count + 1
            assert (after.inline_count, after.pooled_count) == (before.inline_count, before.pooled_count + 1)
            answers[timestamp_ms] = one.results[0].offset
        assert (answers[5], answers[local_start - 1], answers[399], answers[400]) == (5, local_start - 1, 399, -1)
    finally:
        calls.shutdown()
        manager.shutdown()


async def test_a_tiered_logs_first_lookup_after_a_restart_counts_as_the_general_path(weed, tmp_path, prefix):
    """A tiered log whose segments were not checked since a restart: the general path sends a
    target >= 0 to the pool without trying the lock (``timestamp_lookup_may_block``), and so
    does the fast path (``INLINE_UNLOADED`` before the tier's ``INLINE_BUSY``): one pooled
    call, no busy fallback, on each path after its own restart, answered alike. Before, the
    fast path counted a busy fallback the general path did not."""
    clock = FakeClock()

    def started() -> LogManager:
        rsm = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, prefix)), clock=clock)
        manager = LogManager([str(tmp_path / "data")], clock=clock, intervals=EVERY_PASS, remote_storage=rsm,
                             remote_fetch_cache_bytes=1 << 20)
        manager.startup()
        return manager

    manager = started()
    try:
        manager.create_topic("t", 1, TIERED)
        log = manager.get_log("t", 0)
        for first in range(0, 400, 20):
            log.append(batch(*[b"v" * 40] * 20, timestamps=[first + i for i in range(20)]))
        manager.run_remote_pass()  # uploads the closed segments, deletes them locally
        local_start = log.local_log_start_offset
    finally:
        manager.shutdown()
    outcomes = {}
    for targets in (1, 2):  # the fast path, then the general path (the target twice)
        manager = started()
        service, calls = servicer_over(manager)
        try:
            manager.run_remote_pass()  # the tier listed
            assert not manager.get_log("t", 0).timestamps_loaded
            target = pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=local_start + 3)
            before = calls.statistics()
            answer = await service.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target] * targets), Context())
            after = calls.statistics()
            outcomes[targets] = (answer.results[0].SerializeToString(deterministic=True), (
                after.inline_count - before.inline_count, after.pooled_count - before.pooled_count,
                after.busy_fallback_count - before.busy_fallback_count))
            assert answer.results[0].error.code == 0 and answer.results[0].offset == local_start + 3
        finally:
            calls.shutdown()
            manager.shutdown()
    assert outcomes[1] == outcomes[2]
    assert outcomes[1][1] == (0, 1, 0)
