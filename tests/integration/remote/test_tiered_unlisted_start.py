"""Until a tiered log's remote segments are listed after a start (opening it asks the store
nothing), every answer that depends on its log start offset answers a retriable
RemoteStorageUnavailableError naming the reason, never the local log's answer: EARLIEST, every
lookup by time (a remote record may carry any timestamp), MAX_TIMESTAMP, LATEST_TIERED, the log
start itself, DeleteRecords, reads and explanations below the local start. EARLIEST_LOCAL and
LATEST keep answering. Against a real weed stopped across a restart of the log manager, then
started again: every answer is then the one the log gave before the restart."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import batch
from tests.support.s3_server import CREDENTIALS_ENV, WeedServer

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import RemoteStorageUnavailableError
from seglog_server.storage.log.log_results import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from seglog_server.storage.remote import ObjectStore

from tests.integration.remote.conftest import store_config
from tests.integration.remote.test_tiered_log import TIERED, manager_for, run_passes

pytestmark = pytest.mark.integration

SPECIALS = (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP)
ALWAYS_ANSWERED = (LATEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP)
# The first records carry a timestamp far above the others' (timestamps need not grow with
# offsets): a target above every local timestamp then has its answer in the store.
FUTURE_MS = 10_000_000
RECORDS = 12
NOT_LOADED = "remote segment list of t-0 is not loaded yet"


def produce_out_of_order(log, clock) -> list[int]:
    stamps = [clock.time_ms() + (FUTURE_MS if i < 2 else i * 1_000) for i in range(RECORDS)]
    for stamp in stamps:
        log.append(batch(b"x" * 300, timestamps=stamp))
    return stamps


def targets_of(stamps: list[int]) -> list[int]:
    times = sorted({s + d for s in stamps for d in (-1, 0, 1)})
    return [*SPECIALS, 0, *times]


def answers(log, targets: list[int]) -> dict[int, object]:
    return dict(zip(targets, log.lookup_timestamps(targets)))


def test_answers_naming_the_log_start_wait_for_the_remote_list(tmp_path, monkeypatch):
    for name, value in CREDENTIALS_ENV.items():
        monkeypatch.setenv(name, value)
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    server = WeedServer.start(str(store_dir))
    clock = FakeClock()
    limits = {"attempts_max": 1, "connect_timeout_s": 0.5, "read_timeout_s": 1.0}
    try:
        ObjectStore(store_config(server.endpoint, "")).create_bucket()
        manager, _ = manager_for(tmp_path, server.endpoint, "p", clock, **limits)
        manager.create_topic("t", 1, TIERED)
        log = manager.get_log("t", 0)
        stamps = produce_out_of_order(log, clock)
        run_passes(manager)
        run_passes(manager)
        targets = targets_of(stamps)
        before = answers(log, targets)
        assert log.local_log_start_offset > 2  # the future-stamped records are in the store only
        assert before[stamps[0]].offset == 0 and before[EARLIEST_TIMESTAMP].offset == 0
        local_start = log.local_log_start_offset
        manager.shutdown()
        server.stop()
        manager, _ = manager_for(tmp_path, server.endpoint, "p", clock, **limits)
        try:
            manager.run_remote_pass()  # the listing fails: the store is down
            log = manager.get_log("t", 0)
            assert not log.remote_tier.listed and log.log_start_offset == local_start

            @settings(max_examples=60, deadline=None)
            @given(st.lists(st.sampled_from(targets), min_size=1, max_size=8))
            def unlisted_answers_or_waits(asked):
                for target, outcome in zip(asked, log.lookup_timestamps(asked)):
                    if target in ALWAYS_ANSWERED:
                        assert outcome == before[target], target
                    else:  # never the local log's answer: an offset above the tiered records
                        assert isinstance(outcome, RemoteStorageUnavailableError), (target, outcome)
                        assert NOT_LOADED in str(outcome) and "object store has not answered" in str(outcome)

            unlisted_answers_or_waits()
            for call in (log.known_log_start_offset, lambda: log.offset_for_timestamp(EARLIEST_TIMESTAMP),
                         lambda: log.delete_records(local_start + 1), lambda: log.delete_records(0),
                         lambda: log.read(0, 1 << 20), lambda: log.explain_offset(0)):
                with pytest.raises(RemoteStorageUnavailableError, match=NOT_LOADED):
                    call()
            assert log.log_start_offset == local_start  # DeleteRecords moved nothing
            described = manager.describe_topic("t").partitions[0]
            assert described.log_start_offset == -1 and described.remote_segment_count == -1
            assert described.local_log_start_offset == local_start
            assert log.read(local_start, 1 << 20).records  # local reads go on

            server.launch()
            clock.advance(120_000)  # past the backoff of the failed listing
            manager.run_remote_pass()
            assert log.remote_tier.listed and log.known_log_start_offset() == 0

            @settings(max_examples=15, deadline=None)
            @given(st.lists(st.sampled_from(targets), min_size=1, max_size=8))
            def listed_answers_as_before(asked):
                assert log.lookup_timestamps(asked) == [before[t] for t in asked]

            listed_answers_as_before()
            assert manager.describe_topic("t").partitions[0].log_start_offset == 0
            assert log.delete_records(1) == 1
        finally:
            manager.shutdown()
    finally:
        server.stop()


def test_a_new_tiered_partition_answers_before_its_first_listing(weed, prefix, tmp_path):
    """Nothing can be below a log that starts at its checkpoint's log start (a new partition):
    its answers need no listing, so a topic just created answers EARLIEST at once; LATEST_TIERED
    too while it has no closed segment, and waits for the list once it has one."""
    clock = FakeClock()
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)
    try:
        manager.create_topic("t", 1, TIERED)
        log = manager.get_log("t", 0)
        log.append(batch(b"v", timestamps=clock.time_ms()))
        assert not log.remote_tier.listed
        assert log.offsets_for_timestamps([EARLIEST_TIMESTAMP, 0, MAX_TIMESTAMP])[0].offset == 0
        assert log.known_log_start_offset() == 0
        assert manager.describe_topic("t").partitions[0].log_start_offset == 0
        assert log.offset_for_timestamp(LATEST_TIERED_TIMESTAMP).offset == -1  # nothing to upload yet
        log.roll()  # a closed segment: the uploader may have copied it, only the list says
        with pytest.raises(RemoteStorageUnavailableError, match=NOT_LOADED):
            log.offset_for_timestamp(LATEST_TIERED_TIMESTAMP)
        assert log.offset_for_timestamp(EARLIEST_TIMESTAMP).offset == 0
    finally:
        manager.shutdown()
