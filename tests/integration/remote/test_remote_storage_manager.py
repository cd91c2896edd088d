"""RemoteStorageManager against a real S3-compatible server: copy, read back, delete, and a copy
or a deletion stopped at every step (an exception between steps, a store that goes silent, a
process killed with SIGKILL mid-upload): listing never returns a half segment; cleanup removes
every orphan's objects."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys

import pytest
from tests.integration.remote.conftest import EVENTS_0, EVENTS_1, TOPIC_ID, store_config
from tests.support.s3_server import CREDENTIALS_ENV

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import RemoteStorageError, RemoteStorageUnavailableError
from seglog_server.storage.remote import (
    ObjectStore,
    RemoteLogSegmentState,
    RemoteStorageManager,
)

pytestmark = pytest.mark.timeout(60)

COPY_STEPS = ["copy_started", "put .log", "put .index", "put .timeindex", "put .snapshot",
              "put .leader-epoch-checkpoint"]
DELETE_STEPS = ["delete_started", "objects_deleted", "delete_finished"]


class StopAt(Exception):
    """The injected crash."""


def stopping_at(step_name):
    def hook(step):
        if step == step_name:
            raise StopAt(step)
    return hook


def partition_objects(store, partition=0):
    return sorted(store.list(f"events-{TOPIC_ID}/{partition}/"))


def test_copy_then_list_fetch_and_indexes_equal_the_local_files(store, make_segment):
    segment = make_segment(base_offset=100)
    manager = RemoteStorageManager(store)
    copied = manager.copy_log_segment(TOPIC_ID, segment.data)
    assert copied.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    assert manager.metadata.list(EVENTS_0) == [copied]
    assert manager.metadata.orphans(EVENTS_0) == []
    log = segment.contents[".log"]
    assert manager.fetch_log_segment(copied, 0, len(log)) == log
    assert manager.fetch_log_segment(copied, 12_345, 777) == log[12_345:12_345 + 777]
    assert manager.fetch_log_segment(copied, len(log) - 5, 100) == log[-5:]
    for kind in (".index", ".timeindex", ".snapshot", ".leader-epoch-checkpoint"):
        assert manager.fetch_index(copied, kind) == segment.contents[kind]
    assert copied.files == {kind: len(data) for kind, data in segment.contents.items()}


def test_reupload_of_a_segment_takes_new_keys_and_overwrites_nothing(store, make_segment):
    segment = make_segment(base_offset=100)
    manager = RemoteStorageManager(store)
    first = manager.copy_log_segment(TOPIC_ID, segment.data)
    second = manager.copy_log_segment(TOPIC_ID, segment.data)
    assert first.segment_id != second.segment_id
    assert len(partition_objects(store)) == 2 * (len(segment.contents) + 1)
    assert {m.segment_id for m in manager.metadata.list(EVENTS_0)} == {
        first.segment_id, second.segment_id}
    assert manager.fetch_log_segment(first, 0, 50) == manager.fetch_log_segment(second, 0, 50)


def test_list_is_in_base_offset_order_and_per_partition(store, make_segment):
    manager = RemoteStorageManager(store)
    for base in (300, 100, 200):
        manager.copy_log_segment(TOPIC_ID, make_segment(base_offset=base, log_bytes=1000).data)
    manager.copy_log_segment(TOPIC_ID, make_segment(base_offset=0, log_bytes=10, partition=1).data)
    assert [m.base_offset for m in manager.metadata.list(EVENTS_0)] == [100, 200, 300]
    assert [m.base_offset for m in manager.metadata.list(EVENTS_1)] == [0]


class RemovedWhileListed(ObjectStore):
    """A real store whose listing is answered, then a record removed before the reader GETs it
    (the partition's owner deleting a segment or cleaning an orphan between the two calls)."""

    def __init__(self, config, remove) -> None:
        super().__init__(config)
        self._remove = remove

    def list(self, key_prefix):
        keys = list(super().list(key_prefix))
        self._remove()
        return iter(keys)


@pytest.mark.parametrize("removed", ["finished", "orphan"])
def test_a_record_removed_between_listing_and_reading_is_left_out(weed, prefix, make_segment, removed):
    owner = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, prefix)))
    first = owner.copy_log_segment(TOPIC_ID, make_segment(base_offset=100, log_bytes=100).data)
    if removed == "finished":
        gone = owner.copy_log_segment(TOPIC_ID, make_segment(base_offset=200, log_bytes=100).data)
    else:
        crashing = RemoteStorageManager(owner.store, step_hook=stopping_at("put .log"))
        with pytest.raises(StopAt):
            crashing.copy_log_segment(TOPIC_ID, make_segment(base_offset=200, log_bytes=100).data)
        [gone] = owner.metadata.orphans(EVENTS_0)
    third = owner.copy_log_segment(TOPIC_ID, make_segment(base_offset=300, log_bytes=100).data)
    reader = RemoteStorageManager(RemovedWhileListed(store_config(weed.endpoint, prefix),
                                                     lambda: owner.metadata.remove(gone)))
    assert [m.segment_id for m in reader.metadata.records(EVENTS_0)] == [first.segment_id, third.segment_id]
    assert reader.metadata.orphans(EVENTS_0) == []
    assert reader.metadata.list(EVENTS_0) == [first, third]


def test_delete_removes_every_object_and_the_record(store, make_segment):
    manager = RemoteStorageManager(store)
    copied = manager.copy_log_segment(TOPIC_ID, make_segment().data)
    manager.delete_log_segment(copied)
    assert partition_objects(store) == []


def test_fetch_outside_the_segment_or_of_an_unfinished_one_is_refused(store, make_segment):
    manager = RemoteStorageManager(store)
    copied = manager.copy_log_segment(TOPIC_ID, make_segment(log_bytes=1000).data)
    with pytest.raises(RemoteStorageError, match="position 1000 is outside"):
        manager.fetch_log_segment(copied, 1000, 10)
    started = copied.with_state(RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 0)
    with pytest.raises(RemoteStorageError, match="only COPY_SEGMENT_FINISHED segments are read"):
        manager.fetch_log_segment(started, 0, 10)


@pytest.mark.parametrize("step", COPY_STEPS)
def test_copy_stopped_at_any_step_is_never_listed_and_cleanup_removes_it(store, make_segment, step):
    good = RemoteStorageManager(store).copy_log_segment(TOPIC_ID, make_segment(base_offset=0, log_bytes=1000).data)
    manager = RemoteStorageManager(store, step_hook=stopping_at(step))
    with pytest.raises(StopAt):
        manager.copy_log_segment(TOPIC_ID, make_segment(base_offset=100).data)
    assert manager.metadata.list(EVENTS_0) == [good]
    [orphan] = manager.metadata.orphans(EVENTS_0)
    assert orphan.state is RemoteLogSegmentState.COPY_SEGMENT_STARTED
    assert RemoteStorageManager(store).cleanup_orphans(EVENTS_0) == 1
    assert manager.metadata.orphans(EVENTS_0) == []
    assert not [key for key in partition_objects(store) if orphan.segment_id in key]
    assert manager.metadata.list(EVENTS_0) == [good]


@pytest.mark.parametrize("step", DELETE_STEPS)
def test_delete_stopped_at_any_step_is_never_listed_and_cleanup_finishes_it(store, make_segment, step):
    copied = RemoteStorageManager(store).copy_log_segment(TOPIC_ID, make_segment().data)
    with pytest.raises(StopAt):
        RemoteStorageManager(store, step_hook=stopping_at(step)).delete_log_segment(copied)
    manager = RemoteStorageManager(store)
    assert manager.metadata.list(EVENTS_0) == []
    assert len(manager.metadata.orphans(EVENTS_0)) == 1
    assert manager.cleanup_orphans(EVENTS_0) == 1
    assert partition_objects(store) == []


def test_cleanup_with_an_age_leaves_a_fresh_copy_alone(store, make_segment):
    clock = FakeClock()
    with pytest.raises(StopAt):
        RemoteStorageManager(store, clock=clock, step_hook=stopping_at("put .log")).copy_log_segment(TOPIC_ID,
            make_segment().data)
    manager = RemoteStorageManager(store, clock=clock)
    assert manager.cleanup_orphans(EVENTS_0, older_than_ms=60_000) == 0
    clock.advance(60_000)
    assert manager.cleanup_orphans(EVENTS_0, older_than_ms=60_000) == 1
    assert partition_objects(store) == []


@pytest.mark.timeout(30)
def test_store_going_silent_mid_upload_fails_the_copy_and_leaves_a_cleanable_orphan(
        weed, proxy, prefix, make_segment):
    proxy.stall_put_matching = ".timeindex"
    fast = store_config(proxy.endpoint, prefix, connect_timeout_s=0.5, read_timeout_s=1.0,
                        attempts_max=2)
    with pytest.raises(RemoteStorageUnavailableError, match=proxy.endpoint):
        RemoteStorageManager(ObjectStore(fast)).copy_log_segment(TOPIC_ID, make_segment().data)
    store = ObjectStore(store_config(weed.endpoint, prefix))
    manager = RemoteStorageManager(store)
    assert manager.metadata.list(EVENTS_0) == []
    assert manager.cleanup_orphans(EVENTS_0) == 1
    assert partition_objects(store) == []


_UPLOADER = """
import sys
from seglog_server.storage.remote import LogSegmentData, ObjectStore, ObjectStoreConfig, RemoteStorageManager
endpoint, prefix, directory = sys.argv[1:4]
store = ObjectStore(ObjectStoreConfig(bucket="seglog-remote-test", prefix=prefix, endpoint_url=endpoint,
                                      read_timeout_s=60))
path = lambda kind: f"{directory}/00000000000000000100{kind}"
RemoteStorageManager(store).copy_log_segment("0123456789abcdef0123456789abcdef", LogSegmentData(
    topic="events", partition=0, base_offset=100, end_offset=199, max_timestamp_ms=0,
    log_path=path(".log"), offset_index_path=path(".index"), time_index_path=path(".timeindex")))
"""


@pytest.mark.timeout(40)
def test_uploader_killed_mid_upload_leaves_only_a_cleanable_orphan(weed, proxy, prefix, make_segment):
    segment = make_segment(base_offset=100)
    proxy.stall_put_matching = ".index"
    root = pathlib.Path(__file__).resolve().parents[3]
    env = {**os.environ, **CREDENTIALS_ENV,
           "PYTHONPATH": os.pathsep.join(str(root / p) for p in ("server", "client"))}
    uploader = subprocess.Popen(
        [sys.executable, "-c", _UPLOADER, proxy.endpoint, prefix,
         os.path.dirname(segment.data.log_path)], env=env)
    try:
        assert proxy.stalled.wait(timeout=30), "the uploader never reached its .index PUT"
    finally:
        uploader.send_signal(signal.SIGKILL)
        uploader.wait(timeout=10)
    store = ObjectStore(store_config(weed.endpoint, prefix))
    manager = RemoteStorageManager(store)
    assert manager.metadata.list(EVENTS_0) == []
    [orphan] = manager.metadata.orphans(EVENTS_0)
    assert any(key.endswith(".log") for key in partition_objects(store))  # half uploaded
    assert manager.cleanup_orphans(EVENTS_0) == 1
    assert partition_objects(store) == []
