"""Tiered topics through the log manager against a real S3-compatible server (weed) on loopback:
closed segments copied by the maintenance pass, local deletion only once uploaded and by
local.retention.*, the whole log's retention over the remote segments, reads below the local
log start answered from the store with the bytes the local read gave, and a stopped store that
stalls neither produce nor local reads."""

from __future__ import annotations

import pytest
from tests.support.log_test_support import batch
from tests.support.s3_server import WeedServer

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import InvalidConfigError, RemoteStorageUnavailableError
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals
from seglog_server.storage.remote import ObjectStore, RemoteLogSegmentState, RemoteStorageManager

from seglog_server.storage.remote.remote_log_metadata import partition_prefix
from tests.integration.remote.conftest import stored, store_config

EVERY_PASS = MaintenanceIntervals(initial_delay_ms=0, retention_check_ms=0, flush_check_ms=0,
                                  recovery_point_checkpoint_ms=0, log_start_offset_checkpoint_ms=0)
TIERED = {"remote.storage.enable": "true", "segment.bytes": "1024", "local.retention.bytes": "1"}


def manager_for(tmp_path, endpoint, prefix, clock, **store_limits):
    rsm = RemoteStorageManager(ObjectStore(store_config(endpoint, prefix, **store_limits)), clock=clock)
    manager = LogManager([str(tmp_path / "data")], clock=clock, intervals=EVERY_PASS, remote_storage=rsm,
                         remote_fetch_cache_bytes=1 << 20)
    manager.startup()
    return manager, rsm


def run_passes(manager):
    """The maintenance pass (retention, flush) and the remote tier's pass (its own thread in the
    service), one after the other."""
    manager.run_maintenance()
    manager.run_remote_pass()


def produce(log, clock, count, value=b"x" * 300):
    for _ in range(count):
        log.append(batch(value, timestamps=clock.time_ms()))


def test_closed_segments_are_uploaded_and_local_ones_deleted_only_once_uploaded(weed, prefix, tmp_path):
    clock = FakeClock()
    manager, rsm = manager_for(tmp_path, weed.endpoint, prefix, clock)
    try:
        manager.create_topic("t", 1, TIERED)
        log = manager.get_log("t", 0)
        produce(log, clock, 12)
        assert log.segment_count > 2
        before = {offset: log.read(offset, 1 << 20) for offset in range(0, 12)}
        run_passes(manager)  # uploads every closed segment (local retention needs them first)
        run_passes(manager)  # then local.retention.bytes=1 deletes the uploaded local ones
        remote = rsm.metadata.list(stored(rsm, "t", 0))
        assert remote and all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in remote)
        assert [m.base_offset for m in remote] == sorted(m.base_offset for m in remote)
        assert log.remote_tier.highest_uploaded_offset == remote[-1].end_offset
        assert log.segment_count == 1 and log.local_log_start_offset == remote[-1].end_offset + 1
        assert log.log_start_offset == 0  # the remote copy still holds offsets 0..
        for offset, local in before.items():  # the same bytes below the local log, from the store
            answer = log.read(offset, 1 << 20)
            if offset < log.local_log_start_offset:
                first = local.records[:len(answer.records)]
                assert answer.records == first and answer.records and answer.log_start_offset == 0
            else:
                assert answer.records == local.records
    finally:
        manager.shutdown()


def test_a_restart_derives_the_uploaded_offset_and_log_start_from_the_store(weed, prefix, tmp_path):
    clock = FakeClock()
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)
    manager.create_topic("t", 1, TIERED)
    produce(manager.get_log("t", 0), clock, 10)
    run_passes(manager)
    run_passes(manager)
    uploaded = manager.get_log("t", 0).remote_tier.highest_uploaded_offset
    local_start = manager.get_log("t", 0).local_log_start_offset
    assert local_start > 0
    manager.shutdown()
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)
    try:
        log = manager.get_log("t", 0)
        # Opening the log asks the store nothing: until the remote pass lists its segments, the
        # log start is the local one and what lies below it is unknown (UNAVAILABLE), not gone.
        assert not log.remote_tier.listed and log.log_start_offset == local_start
        with pytest.raises(RemoteStorageUnavailableError, match="is not loaded yet"):
            log.read(0, 1 << 20)
        assert log.read(local_start, 1 << 20).records
        manager.run_remote_pass()
        assert log.remote_tier.highest_uploaded_offset == uploaded
        assert log.log_start_offset == 0 and log.local_log_start_offset == local_start
        assert log.read(0, 1 << 20).records
    finally:
        manager.shutdown()


def test_whole_log_retention_deletes_remote_segments_and_moves_the_log_start(weed, prefix, tmp_path):
    clock = FakeClock()
    manager, rsm = manager_for(tmp_path, weed.endpoint, prefix, clock)
    try:
        manager.create_topic("t", 1, {**TIERED, "retention.ms": "60000", "local.retention.ms": "1000"})
        log = manager.get_log("t", 0)
        produce(log, clock, 10)
        run_passes(manager)
        run_passes(manager)
        remote_before = rsm.metadata.list(stored(rsm, "t", 0))
        assert remote_before and log.log_start_offset == 0
        clock.advance(30_000)  # local retention passed, the whole log's not: nothing remote goes
        run_passes(manager)
        assert rsm.metadata.list(stored(rsm, "t", 0)) == remote_before and log.log_start_offset == 0
        clock.advance(60_000)  # past retention.ms: remote segments below the local log go
        run_passes(manager)
        assert rsm.metadata.list(stored(rsm, "t", 0)) == [] and rsm.metadata.orphans(stored(rsm, "t", 0)) == []
        assert log.log_start_offset == log.local_log_start_offset > 0
        keys = list(rsm.store.list(partition_prefix(stored(rsm, "t", 0))))
        assert keys == []
    finally:
        manager.shutdown()


def test_a_stopped_store_stalls_nothing_and_uploads_resume_when_it_is_back(tmp_path):
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    server = WeedServer.start(str(store_dir))
    clock = FakeClock()
    try:
        ObjectStore(store_config(server.endpoint, "")).create_bucket()
        manager, rsm = manager_for(tmp_path, server.endpoint, "p", clock, attempts_max=1,
                                   connect_timeout_s=0.5, read_timeout_s=1.0)
        try:
            manager.create_topic("t", 1, TIERED)
            log = manager.get_log("t", 0)
            server.stop()
            produce(log, clock, 8)
            run_passes(manager)  # the copy fails (refused): nothing deleted locally
            assert log.remote_tier.last_error and "unavailable" in log.remote_tier.last_error
            assert log.remote_tier.backing_off()
            produce(log, clock, 2)  # produce and local reads go on
            assert log.read(0, 1 << 20).records and log.log_start_offset == 0
            segments_before = log.segment_count
            run_passes(manager)
            assert log.segment_count == segments_before  # nothing uploaded, nothing deleted
            server.launch()
            clock.advance(120_000)  # past the backoff
            run_passes(manager)
            run_passes(manager)
            assert rsm.metadata.list(stored(rsm, "t", 0)) and log.segment_count == 1
            assert log.remote_tier.last_error is None
        finally:
            manager.shutdown()
    finally:
        server.stop()


def test_a_start_with_the_store_down_asks_it_nothing_and_a_pass_lists_once(tmp_path):
    """Opening tiered logs makes no store call; a remote pass with the store down tries one
    listing, not one per tiered log; once it is back, the next pass lists every log."""
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    server = WeedServer.start(str(store_dir))
    clock = FakeClock()
    topics = ["a", "b", "c"]
    try:
        ObjectStore(store_config(server.endpoint, "")).create_bucket()
        limits = {"attempts_max": 1, "connect_timeout_s": 0.5, "read_timeout_s": 1.0}
        manager, _ = manager_for(tmp_path, server.endpoint, "p", clock, **limits)
        for topic in topics:
            manager.create_topic(topic, 1, TIERED)
            produce(manager.get_log(topic, 0), clock, 10)
        run_passes(manager)
        run_passes(manager)
        local_starts = {t: manager.get_log(t, 0).local_log_start_offset for t in topics}
        assert all(start > 0 for start in local_starts.values())
        manager.shutdown()
        server.stop()
        manager, rsm = manager_for(tmp_path, server.endpoint, "p", clock, **limits)
        try:
            assert sum(rsm.store.error_counts.values()) == 0  # the start asked the store nothing
            manager.run_remote_pass()
            assert sum(rsm.store.error_counts.values()) == 1  # one listing tried, for three logs
            for topic in topics:
                log = manager.get_log(topic, 0)
                assert not log.remote_tier.listed
                with pytest.raises(RemoteStorageUnavailableError):
                    log.read(0, 1 << 20)
                log.append(batch(b"more", timestamps=clock.time_ms()))  # produce goes on
                assert log.read(local_starts[topic], 1 << 20).records  # and local reads
            server.launch()
            clock.advance(120_000)  # past the backoff of the tier whose listing failed
            manager.run_remote_pass()
            for topic in topics:
                log = manager.get_log(topic, 0)
                assert log.remote_tier.listed and log.log_start_offset == 0
                assert log.read(0, 1 << 20).records
        finally:
            manager.shutdown()
    finally:
        server.stop()


def test_a_compacted_topic_cannot_be_tiered(weed, prefix, tmp_path):
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, FakeClock())
    try:
        with pytest.raises(InvalidConfigError, match="not supported on a compacted topic"):
            manager.create_topic("t", 1, {"remote.storage.enable": "true", "cleanup.policy": "compact"})
    finally:
        manager.shutdown()




def test_a_tiered_logs_calls_never_run_on_the_event_loop(weed, prefix, tmp_path):
    """A read below the local start is a store call: the storage makes the adapter pool it."""
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, FakeClock())
    try:
        manager.create_topic("t", 1, TIERED)
        manager.create_topic("plain", 1)
        assert manager.inline_lock(manager.get_log("t", 0)).acquire(blocking=False) is False
        plain = manager.inline_lock(manager.get_log("plain", 0))
        assert plain.acquire(blocking=False) is True
        plain.release()
    finally:
        manager.shutdown()


def test_each_uploaded_segment_carries_the_leader_epochs_up_to_its_end(weed, prefix, tmp_path):
    """Kafka's copy of a segment: its leader-epoch data is the partition's epoch entries cut at the
    segment's end, in leader-epoch-checkpoint's own format; a log whose batches carry no epoch (a
    single process) uploads none."""
    from seglog_server.storage.format.leader_epoch_checkpoint import parse_epochs

    clock = FakeClock()
    manager, rsm = manager_for(tmp_path, weed.endpoint, prefix, clock)
    try:
        manager.create_topic("t", 1, TIERED)
        manager.create_topic("plain", 1, TIERED)
        log = manager.get_log("t", 0)
        for epoch in (3, 3, 3, 3, 5, 5, 5, 5, 5, 5, 5, 5):
            log.append(batch(b"x" * 300, timestamps=clock.time_ms()), leader_epoch=epoch)
        produce(manager.get_log("plain", 0), clock, 12)
        run_passes(manager)
        remote = rsm.metadata.list(stored(rsm, "t", 0))
        assert len(remote) > 2
        for segment in remote:
            data = rsm.fetch_index(segment, ".leader-epoch-checkpoint")
            expected = [(3, 0)] + ([(5, 4)] if segment.end_offset >= 4 else [])
            assert [(e.epoch, e.start_offset) for e in parse_epochs(data, "remote")] == expected
            assert [tuple(e) for e in segment.leader_epochs] == expected
        plain = rsm.metadata.list(stored(rsm, "plain", 0))
        assert plain and all(".leader-epoch-checkpoint" not in m.files and not m.leader_epochs for m in plain)
    finally:
        manager.shutdown()
