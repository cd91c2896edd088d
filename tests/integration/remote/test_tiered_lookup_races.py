"""Lookups by time on a tiered log while the remote tier moves the local log start, and
LATEST_TIERED (-5) before any local deletion, against a real S3-compatible server (weed).

The lookup searches the store outside the log's lock and the local log after: an upload and its
local deletion in between must not hide the records moved (the lookup looks again), and a log
whose uploader outruns every attempt answers a retriable error instead of a wrong offset."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import batch

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import RemoteStorageUnavailableError
from seglog_server.storage.log import log_time_lookups
from seglog_server.storage.log.log_results import LATEST_TIERED_TIMESTAMP, MAX_TIMESTAMP
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage.remote import ObjectStore, RemoteStorageManager

from tests.integration.remote.conftest import store_config
from tests.integration.remote.test_tiered_log import EVERY_PASS

pytestmark = pytest.mark.integration

SEGMENT = {"segment.bytes": "1024", "retention.ms": "-1"}
TIERED = {**SEGMENT, "remote.storage.enable": "true", "local.retention.bytes": "1"}
T0 = 1_700_000_000_000
_names = itertools.count()


@pytest.fixture(scope="module")
def manager(weed, tmp_path_factory):
    clock = FakeClock()
    rsm = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, "lookup-races")), clock=clock)
    manager = LogManager([str(tmp_path_factory.mktemp("races") / "data")], clock=clock, intervals=EVERY_PASS,
                         remote_storage=rsm, remote_fetch_cache_bytes=1 << 20)
    manager.startup()
    yield manager
    manager.shutdown()


def append(logs, first: int, count: int) -> None:
    for i in range(first, first + count):
        for log in logs:
            log.append(batch(b"x" * 300, timestamps=T0 + i))  # about 3 batches a 1 KiB segment


def racing_logs(manager, uploaded: int, local: int):
    """A tiered log with ``uploaded`` batches already in the store only and ``local`` more on
    disk (closed segments the next remote pass uploads and deletes), and the same log kept
    local."""
    number = next(_names)
    manager.create_topic(f"tiered{number}", 1, TIERED)
    manager.create_topic(f"local{number}", 1, SEGMENT)
    tiered, twin = manager.get_log(f"tiered{number}", 0), manager.get_log(f"local{number}", 0)
    append((tiered, twin), 0, uploaded)
    manager.run_remote_pass()
    append((tiered, twin), uploaded, local)
    return tiered, twin


def race_each_remote_search(monkeypatch, manager, times: int) -> list[int]:
    """The first ``times`` remote searches each let a remote pass run first (upload, then local
    deletion): the lookup's local part then starts above where its view said. Returns the
    local log starts seen, one a race."""
    original = log_time_lookups.remote_offset_for_timestamp
    seen: list[int] = []

    def racing(tier, segments, target, log_start_offset):
        if len(seen) < times:
            manager.run_remote_pass()
            seen.append(tier.highest_uploaded_offset)
        return original(tier, segments, target, log_start_offset)

    monkeypatch.setattr(log_time_lookups, "remote_offset_for_timestamp", racing)
    return seen


def test_a_lookup_racing_an_upload_and_local_deletion_finds_the_moved_record(manager, monkeypatch):
    tiered, twin = racing_logs(manager, uploaded=6, local=8)
    local_start = tiered.local_log_start_offset
    assert local_start > 0
    target = T0 + local_start  # the record at the local start: local, not uploaded yet
    race_each_remote_search(monkeypatch, manager, times=1)
    assert tiered.offset_for_timestamp(target).offset == local_start == twin.offset_for_timestamp(target).offset
    assert tiered.local_log_start_offset > local_start  # the race did move it


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(uploaded=st.integers(1, 8), local=st.integers(4, 10), races=st.integers(0, 2),
       targets=st.lists(st.integers(-1, 20), min_size=1, max_size=5))
def test_lookups_racing_the_remote_tier_answer_as_the_local_twin(manager, monkeypatch, uploaded, local, races,
                                                                 targets):
    tiered, twin = racing_logs(manager, uploaded, local)
    times = [T0 + t if t >= 0 else MAX_TIMESTAMP for t in targets]
    with monkeypatch.context() as patch:
        race_each_remote_search(patch, manager, races)
        got = tiered.offsets_for_timestamps(times)
    assert got == twin.offsets_for_timestamps(times)


def test_a_lookup_the_uploader_outruns_every_time_is_a_retriable_error(manager, monkeypatch):
    tiered, _ = racing_logs(manager, uploaded=3, local=0)
    original = log_time_lookups.remote_offset_for_timestamp
    appended = itertools.count(100)

    def always_racing(tier, segments, target, log_start_offset):
        append((tiered,), next(appended) * 4, 4)  # a new closed segment or more each time
        manager.run_remote_pass()
        return original(tier, segments, target, log_start_offset)

    monkeypatch.setattr(log_time_lookups, "remote_offset_for_timestamp", always_racing)
    with pytest.raises(RemoteStorageUnavailableError, match="local log start moved"):
        tiered.offset_for_timestamp(T0 + 10_000)  # past every record: the local part is searched
    monkeypatch.undo()
    assert tiered.offset_for_timestamp(T0 + 1).offset == 1  # the log keeps answering


def test_latest_tiered_is_the_highest_uploaded_offset_while_the_segments_are_still_local(manager):
    manager.create_topic("kept-local", 1, {**SEGMENT, "remote.storage.enable": "true"})
    log = manager.get_log("kept-local", 0)
    assert log.offset_for_timestamp(LATEST_TIERED_TIMESTAMP).offset == -1  # nothing uploaded
    append((log,), 0, 10)
    manager.run_remote_pass()
    tier = log.remote_tier
    assert tier.highest_uploaded_offset > 0 and log.local_log_start_offset == log.log_start_offset == 0
    assert log.offset_for_timestamp(LATEST_TIERED_TIMESTAMP).offset == tier.highest_uploaded_offset
    assert log.offsets_for_timestamps([LATEST_TIERED_TIMESTAMP, T0 + 2]) == [
        (-1, tier.highest_uploaded_offset), log.offset_for_timestamp(T0 + 2)]


def test_latest_tiered_on_a_log_without_a_tier_is_minus_one(manager):
    manager.create_topic("never-tiered", 1, SEGMENT)
    log = manager.get_log("never-tiered", 0)
    append((log,), 0, 5)
    assert log.offsets_for_timestamps([LATEST_TIERED_TIMESTAMP]) == [(-1, -1)]
