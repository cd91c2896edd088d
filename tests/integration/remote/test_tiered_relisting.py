"""A tiered log's listing of its remote segments (remote_maintenance._list, attach_remote_tier)
against a real S3-compatible server (weed) on loopback: only the first listing since the open
may lower the log start, never below the checkpoint's; a later one (an owner change's reload)
never undoes DeleteRecords, nor does a restart; and the log counts as listed only once the
listing's start is set, so the window between load and attach and a failed attach answer
UNAVAILABLE, never the local start, and the next pass attaches."""

from __future__ import annotations

import json

import pytest

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import OffsetOutOfRangeError, RemoteStorageUnavailableError
from seglog_server.storage.log.log_results import EARLIEST_TIMESTAMP
from seglog_server.storage.remote.remote_log_metadata import metadata_key
from tests.integration.remote.test_tiered_log import TIERED, manager_for, produce, run_passes


def tiered_log_with_remote_segments(tmp_path, weed, prefix, clock):
    """A manager and its tiered log whose local log starts above several uploaded segments."""
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)
    manager.create_topic("t", 1, TIERED)
    log = manager.get_log("t", 0)
    produce(log, clock, 12)
    run_passes(manager)
    run_passes(manager)
    assert log.log_start_offset == 0 and log.local_log_start_offset > 3
    return manager, log


def test_a_relisting_never_undoes_delete_records(weed, prefix, tmp_path):
    clock = FakeClock()
    manager, log = tiered_log_with_remote_segments(tmp_path, weed, prefix, clock)
    try:
        assert log.delete_records(1) == 1
        log.remote_tier.reload()  # an owner change away and back: the next pass lists again
        manager.run_remote_pass()
        assert log.remote_tier.loaded and log.log_start_offset == 1
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 1 << 20)
        # DeleteRecords while the list is stale is kept by the next listing too.
        log.remote_tier.reload()
        assert log.delete_records(2) == 2
        manager.run_remote_pass()
        assert log.log_start_offset == 2
    finally:
        manager.shutdown()


def test_a_restart_first_listing_honours_delete_records_below_the_local_start(weed, prefix, tmp_path):
    clock = FakeClock()
    manager, log = tiered_log_with_remote_segments(tmp_path, weed, prefix, clock)
    local_start = log.local_log_start_offset
    assert log.delete_records(1) == 1
    manager.shutdown()  # writes the log-start-offset checkpoint
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)
    try:
        log = manager.get_log("t", 0)
        assert log.log_start_offset == local_start and not log.remote_tier.listed
        manager.run_remote_pass()
        assert log.log_start_offset == 1
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 1 << 20)
        assert log.read(1, 1 << 20).records
    finally:
        manager.shutdown()


def restarted(tmp_path, weed, prefix, clock):
    manager, log = tiered_log_with_remote_segments(tmp_path, weed, prefix, clock)
    local_start = log.local_log_start_offset
    manager.shutdown()
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)
    return manager, manager.get_log("t", 0), local_start


def assert_unlisted_answers(log, local_start):
    """What a log whose start is not yet set from the store answers: UNAVAILABLE below its
    local start, for EARLIEST and for DeleteRecords; never the local start nor out of range."""
    with pytest.raises(RemoteStorageUnavailableError, match="is not loaded yet"):
        log.read(0, 1 << 20)
    with pytest.raises(RemoteStorageUnavailableError, match="is not loaded yet"):
        log.known_log_start_offset()
    [earliest] = log.lookup_timestamps([EARLIEST_TIMESTAMP])
    assert isinstance(earliest, RemoteStorageUnavailableError)
    with pytest.raises(RemoteStorageUnavailableError, match="is not loaded yet"):
        log.delete_records(local_start + 1)
    assert log.log_start_offset == local_start


def test_between_load_and_attach_the_log_is_not_listed(weed, prefix, tmp_path):
    clock = FakeClock()
    manager, log, local_start = restarted(tmp_path, weed, prefix, clock)
    try:
        assert log.remote_tier.load()  # the tier has its list, the log's start is not set yet
        assert_unlisted_answers(log, local_start)
        assert not log.remote_tier.listed
        manager.run_remote_pass()
        assert log.remote_tier.listed and log.log_start_offset == 0 and log.read(0, 1 << 20).records
    finally:
        manager.shutdown()


def test_a_failed_attach_leaves_the_log_unlisted_and_the_next_pass_attaches(weed, prefix, tmp_path, monkeypatch):
    clock = FakeClock()
    manager, log, local_start = restarted(tmp_path, weed, prefix, clock)
    try:
        attach = log.attach_remote_tier
        failures = []

        def failing_once(tier):
            if not failures:
                failures.append(tier)
                raise OSError("injected: the attach failed")
            attach(tier)

        monkeypatch.setattr(log, "attach_remote_tier", failing_once)
        manager.run_remote_pass()
        assert failures and log.remote_tier.loaded
        assert_unlisted_answers(log, local_start)
        assert not log.remote_tier.listed
        manager.run_remote_pass()
        assert log.remote_tier.listed and log.log_start_offset == 0 and log.read(0, 1 << 20).records
    finally:
        manager.shutdown()


@pytest.mark.parametrize("healthy", ["a", "b", "c"])
def test_a_corrupt_state_record_fails_only_its_own_listing(weed, prefix, tmp_path, healthy):
    """A listing error that is one log's own (a state record that is not JSON) leaves that log
    unlisted with an answer naming the record; the other logs of the pass are listed (only a
    silent store makes the pass skip them)."""
    clock = FakeClock()
    manager, rsm = manager_for(tmp_path, weed.endpoint, prefix, clock)
    for topic in "abc":
        manager.create_topic(topic, 1, TIERED)
        produce(manager.get_log(topic, 0), clock, 10)
    run_passes(manager)
    run_passes(manager)
    ids = {topic: manager.get_log(topic, 0).remote_tier.topic_id_partition for topic in "abc"}
    manager.shutdown()
    damaged = {}
    for topic in "abc":
        if topic != healthy:
            key = metadata_key(rsm.metadata.list(ids[topic])[0])
            rsm.store.put(key, b"not a state record", 18, create_only=False)
            damaged[topic] = rsm.store.full_key(key)
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)
    try:
        manager.run_remote_pass()
        log = manager.get_log(healthy, 0)
        assert log.remote_tier.listed and log.log_start_offset == 0 and log.read(0, 1 << 20).records
        for topic, key in damaged.items():
            log = manager.get_log(topic, 0)
            assert not log.remote_tier.listed
            with pytest.raises(RemoteStorageUnavailableError) as raised:
                log.read(0, 1 << 20)
            assert "its last listing failed" in str(raised.value) and key in str(raised.value)
    finally:
        manager.shutdown()


def _hostile(original: bytes, kind: str) -> bytes:
    """A state record made hostile: valid JSON Python's parser or int() once failed on outside
    the reader's error (ValueError, OverflowError, RecursionError), or a wrong type."""
    record = json.loads(original)
    if kind == "huge_int":
        return original.replace(b'"base_offset": ', b'"base_offset": ' + b"9" * 5000 + b", \"x\": ", 1)
    if kind == "infinite":
        record["leader_epochs"] = "@"
        return json.dumps(record).encode().replace(b'"@"', b"[[1e400, 0]]")
    if kind == "deep":
        return b"[" * 100_000 + b"]" * 100_000
    record["files"] = [1]  # a wrong type where an object is expected
    return json.dumps(record).encode()


@pytest.mark.parametrize("kind", ["huge_int", "infinite", "deep", "wrong_type"])
def test_a_hostile_state_record_backs_off_and_names_the_record(weed, prefix, tmp_path, kind):
    """A hostile state record is the log's own listing error: the tier backs off (its _failed)
    and keeps the error naming the record for the answers; the service's pass goes on."""
    clock = FakeClock()
    manager, rsm = manager_for(tmp_path, weed.endpoint, prefix, clock)
    manager.create_topic("t", 1, TIERED)
    produce(manager.get_log("t", 0), clock, 10)
    run_passes(manager)
    run_passes(manager)
    tip = manager.get_log("t", 0).remote_tier.topic_id_partition
    manager.shutdown()
    key = metadata_key(rsm.metadata.list(tip)[0])
    data = _hostile(rsm.store.get(key, 1 << 20), kind)
    rsm.store.put(key, data, len(data), create_only=False)
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)
    try:
        manager.run_remote_pass()
        log = manager.get_log("t", 0)
        assert not log.remote_tier.listed and log.remote_tier.backing_off()
        assert rsm.store.full_key(key) in (log.remote_tier.listing_error or "")
        with pytest.raises(RemoteStorageUnavailableError, match="its last listing failed"):
            log.read(0, 1 << 20)
        assert log.read(log.local_log_start_offset, 1 << 20).records  # the local records still serve
    finally:
        manager.shutdown()
