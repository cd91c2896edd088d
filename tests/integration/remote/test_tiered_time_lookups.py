"""OffsetsForTimes below the local log start, through the remote time and offset indexes and
ranged reads (remote_timestamps.py), against a real S3-compatible server (weed): a log whose
oldest segments live only in the store answers every target as the same log fully local does.
Hypothesis draws the batches (timestamps out of order included), a DeleteRecords point and the
targets; the lookups go one by one and all at once (LookupStream's and OffsetsForTimes' path)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import batch
from tests.support.s3_server import WeedServer

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import RemoteStorageUnavailableError
from seglog_server.storage.log.log_results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage.remote import ObjectStore, RemoteStorageManager

from tests.integration.remote.conftest import store_config
from tests.integration.remote.test_tiered_log import EVERY_PASS

SEGMENT = {"segment.bytes": "1024", "retention.ms": "-1"}
TIERED = {**SEGMENT, "remote.storage.enable": "true", "local.retention.bytes": "1"}
_names = itertools.count()


@pytest.fixture(scope="module")
def clock():
    return FakeClock()


@pytest.fixture(scope="module")
def manager(weed, tmp_path_factory, clock):
    rsm = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, "lookups")), clock=clock)
    manager = LogManager([str(tmp_path_factory.mktemp("lookups") / "data")], clock=clock, intervals=EVERY_PASS,
                         remote_storage=rsm, remote_fetch_cache_bytes=1 << 20)
    manager.startup()
    yield manager
    manager.shutdown()


def twin_logs(manager, batches):
    """A tiered log whose closed segments are only in the store, and the same log kept local."""
    number = next(_names)
    manager.create_topic(f"tiered{number}", 1, TIERED)
    manager.create_topic(f"local{number}", 1, SEGMENT)
    tiered, local = manager.get_log(f"tiered{number}", 0), manager.get_log(f"local{number}", 0)
    for values in batches:
        for log in (tiered, local):
            log.append(batch(*[b"v" * 40 for _ in values], timestamps=values))
    manager.run_remote_pass()  # uploads, then local.retention.bytes=1 deletes the local copies
    return tiered, local


batch_timestamps = st.lists(st.integers(0, 50), min_size=1, max_size=4)


@pytest.mark.slow  # about 2 s an example on a loaded machine: each uploads a few segments
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(batches=st.lists(batch_timestamps, min_size=4, max_size=24), delete_fraction=st.floats(0, 1),
       extra_targets=st.lists(st.integers(0, 60), max_size=6))
def test_a_tiered_log_answers_every_target_as_the_same_log_fully_local(manager, clock, batches, delete_fraction,
                                                                      extra_targets):
    base = clock.time_ms()
    batches = [[base + t for t in values] for values in batches]
    tiered, local = twin_logs(manager, batches)
    assert tiered.local_log_start_offset > tiered.log_start_offset or tiered.segment_count == 1
    end = tiered.log_end_offset
    delete_to = int(delete_fraction * end)
    if delete_to:  # a log start inside the remote segments; the passes drop those wholly below it
        assert tiered.delete_records(delete_to) == local.delete_records(delete_to)
        manager.run_maintenance()
        manager.run_remote_pass()
    targets = sorted({t for values in batches for t in values} | {t + 1 for values in batches for t in values}
                     | {base + t for t in extra_targets} | {0, MAX_TIMESTAMP, LATEST_TIMESTAMP, EARLIEST_TIMESTAMP})
    assert tiered.lookup_timestamps(targets) == local.lookup_timestamps(targets)
    for target in targets:
        assert tiered.offset_for_timestamp(target) == local.offset_for_timestamp(target), target


def test_a_lookup_below_the_local_start_reads_the_store_and_a_lookup_above_does_not(weed, manager, clock):
    base = clock.time_ms()
    tiered, local = twin_logs(manager, [[base + 10 * n] * 4 for n in range(20)])
    local_start = tiered.local_log_start_offset
    assert local_start > 5
    cache = tiered.remote_tier._cache  # noqa: SLF001 - the reads went through it
    before = cache.statistics().miss_count + cache.statistics().hit_count
    answer = tiered.offset_for_timestamp(base + 15)
    assert answer == local.offset_for_timestamp(base + 15) and answer.offset == 8  # the third batch
    assert cache.statistics().miss_count + cache.statistics().hit_count > before
    above = local_start // 4 + 1  # a batch of the local log
    reads = cache.statistics().miss_count + cache.statistics().hit_count
    assert tiered.offset_for_timestamp(base + 10 * above).offset == 4 * above
    assert cache.statistics().miss_count + cache.statistics().hit_count == reads


def test_a_stopped_store_fails_only_the_targets_below_the_local_start(tmp_path):
    server = WeedServer.start(str(tmp_path / "store"))
    clock = FakeClock()
    try:
        ObjectStore(store_config(server.endpoint, "")).create_bucket()
        rsm = RemoteStorageManager(ObjectStore(store_config(server.endpoint, "p")), clock=clock,
                                   read_store=ObjectStore(store_config(server.endpoint, "p").for_reads(1.0)))
        manager = LogManager([str(tmp_path / "data")], clock=clock, intervals=EVERY_PASS, remote_storage=rsm,
                             remote_fetch_cache_bytes=1 << 20)
        manager.startup()
        try:
            base = clock.time_ms()
            tiered, _ = twin_logs(manager, [[base + 10 * n] for n in range(20)])
            local_start = tiered.local_log_start_offset
            server.stop()
            above = local_start + 1
            outcomes = tiered.lookup_timestamps([base + 15, base + 10 * above, LATEST_TIMESTAMP])
            assert isinstance(outcomes[0], RemoteStorageUnavailableError)
            assert outcomes[1].offset == above and outcomes[2].offset == 20
            with pytest.raises(RemoteStorageUnavailableError, match="unavailable"):
                tiered.offset_for_timestamp(base + 15)
        finally:
            manager.shutdown()
    finally:
        server.stop()
