"""The objects of removed exported cleaning snapshots: expiry (run_maintenance) and DeleteTopic
run under the manager's admin lock and must make no store call there; the objects go at the
remote tier's pass, a store that fails keeps them pending (logged), and the pending removal
survives a restart through its marker. A real store (weed) behind the fault proxy."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import LogDirOfflineError
from seglog_server.storage.base.fs import REAL_FS, FileSystem
from seglog_server.storage.cleaning.snapshot_removals import REMOVAL_MARKER_SUFFIX, marker_path
from seglog_server.storage.cleaning.snapshot_store import SNAPSHOTS_KEY_PREFIX
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage.remote import ObjectStore, RemoteStorageManager
from tests.integration.remote.conftest import store_config
from tests.integration.remote.test_tiered_log import EVERY_PASS
from tests.support.log_test_support import batch

pytestmark = pytest.mark.integration

TTL_MS = 60_000


def open_manager(data_dir: str, endpoint: str, prefix: str, clock: FakeClock, fs: FileSystem = REAL_FS) -> LogManager:
    # One attempt with a short deadline: a store call made where it must not be shows at once.
    store = ObjectStore(store_config(endpoint, prefix, attempts_max=1, read_timeout_s=2.0))
    manager = LogManager([data_dir], clock=clock, intervals=EVERY_PASS, fs=fs,
                         remote_storage=RemoteStorageManager(store, clock=clock),
                         remote_fetch_cache_bytes=1 << 20, snapshot_ttl_ms=TTL_MS)
    manager.startup()
    return manager


def exported_snapshot(manager: LogManager, clock: FakeClock, topic: str) -> str:
    manager.create_topic(topic, 1, {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"})
    log = manager.get_log(topic, 0)
    for n in range(3):
        log.append(batch(b"v%d" % n, keys=[b"k"], timestamps=clock.time_ms()))
        log.roll()
    taken = manager.create_snapshot(topic, 0, export=True)
    return taken.manifest.snapshot_id


def objects_of(weed, prefix: str, snapshot_id: str) -> list[str]:
    return list(ObjectStore(store_config(weed.endpoint, prefix)).list(f"{SNAPSHOTS_KEY_PREFIX}{snapshot_id}/"))


@pytest.fixture
def data_dir(tmp_path):
    return str(tmp_path / "data")


def test_expiry_on_a_silent_store_makes_no_store_call_under_the_admin_lock(weed, proxy, prefix, data_dir):
    clock = FakeClock()
    manager = open_manager(data_dir, proxy.endpoint, prefix, clock)
    try:
        snapshot_id = exported_snapshot(manager, clock, "expiring")
        assert objects_of(weed, prefix, snapshot_id)
        proxy.mode = "stall"
        clock.advance(TTL_MS)
        manager.run_maintenance()
        assert not proxy.stalled.is_set()  # expiry asked the store nothing
        assert manager.cleaner_statistics().snapshots_expired_count == 1
        assert manager.cleaner_statistics().store_removals_pending_count == 1
        assert os.path.isfile(marker_path(data_dir, snapshot_id))
        proxy.mode = "pass"
        manager.run_remote_pass()
        assert objects_of(weed, prefix, snapshot_id) == []
        assert manager.cleaner_statistics().store_removals_pending_count == 0
        assert not os.path.exists(marker_path(data_dir, snapshot_id))
    finally:
        proxy.mode = "pass"
        manager.shutdown()


def test_delete_topic_on_a_silent_store_makes_no_store_call_under_the_admin_lock(weed, proxy, prefix, data_dir):
    clock = FakeClock()
    manager = open_manager(data_dir, proxy.endpoint, prefix, clock)
    try:
        snapshot_id = exported_snapshot(manager, clock, "deleted")
        proxy.mode = "stall"
        manager.delete_topic("deleted")
        assert not proxy.stalled.is_set()
        assert manager.cleaner_statistics().store_removals_pending_count == 1
        proxy.mode = "pass"
        manager.run_remote_pass()
        assert objects_of(weed, prefix, snapshot_id) == []
    finally:
        proxy.mode = "pass"
        manager.shutdown()


def test_a_failing_store_keeps_the_removal_pending_across_a_restart(weed, proxy, prefix, data_dir, caplog):
    clock = FakeClock()
    manager = open_manager(data_dir, proxy.endpoint, prefix, clock)
    try:
        snapshot_id = exported_snapshot(manager, clock, "kept")
        proxy.mode = "503"
        assert manager.drop_snapshot(snapshot_id)  # tries at once, fails, keeps it pending
        with caplog.at_level(logging.WARNING):
            manager.run_remote_pass()
        assert f"deleting the objects of cleaning snapshot {snapshot_id} failed" in caplog.text
        assert manager.cleaner_statistics().store_removals_pending_count == 1
    finally:
        manager.shutdown()
    proxy.mode = "pass"
    assert objects_of(weed, prefix, snapshot_id)  # the leak the marker remembers
    restarted = open_manager(data_dir, proxy.endpoint, prefix, clock)
    try:
        assert restarted.cleaner_statistics().store_removals_pending_count == 1
        assert restarted.cleaner_statistics().open_snapshot_count == 0
        restarted.run_remote_pass()
        assert objects_of(weed, prefix, snapshot_id) == []
        assert not os.path.exists(marker_path(data_dir, snapshot_id))
    finally:
        restarted.shutdown()


def test_a_crash_between_the_marker_and_the_local_removal_finishes_the_removal_at_start(weed, prefix, data_dir):
    clock = FakeClock()
    manager = open_manager(data_dir, weed.endpoint, prefix, clock)
    try:
        snapshot_id = exported_snapshot(manager, clock, "crashed")
    finally:
        manager.shutdown()
    with open(marker_path(data_dir, snapshot_id), "wb"):
        pass  # the marker written, the snapshot directory not removed yet
    restarted = open_manager(data_dir, weed.endpoint, prefix, clock)
    try:
        assert restarted.cleaner_statistics().open_snapshot_count == 0
        assert not os.path.exists(os.path.join(data_dir, ".seglog-snapshots", snapshot_id))
        restarted.run_remote_pass()
        assert objects_of(weed, prefix, snapshot_id) == []
    finally:
        restarted.shutdown()


@pytest.mark.parametrize("hostile", ["[" * 100_000, '{"format": ' + "9" * 5000 + "}"], ids=["deep", "huge_int"])
def test_an_exported_snapshot_whose_manifest_is_refused_at_start_has_its_objects_removed(weed, prefix, data_dir,
                                                                                        hostile):
    """A manifest refused at start-up makes its snapshot incomplete, removed locally; an exported
    one's objects are recorded for removal first (once left in the store for good)."""
    clock = FakeClock()
    manager = open_manager(data_dir, weed.endpoint, prefix, clock)
    try:
        snapshot_id = exported_snapshot(manager, clock, "refused-manifest")
        assert objects_of(weed, prefix, snapshot_id)
    finally:
        manager.shutdown()
    with open(os.path.join(data_dir, ".seglog-snapshots", snapshot_id, "manifest.json"), "w") as file:
        file.write(hostile)
    restarted = open_manager(data_dir, weed.endpoint, prefix, clock)
    try:
        assert restarted.cleaner_statistics().open_snapshot_count == 0
        assert not os.path.exists(os.path.join(data_dir, ".seglog-snapshots", snapshot_id))
        assert restarted.cleaner_statistics().store_removals_pending_count == 1
        assert os.path.isfile(marker_path(data_dir, snapshot_id))
        restarted.run_remote_pass()
        assert objects_of(weed, prefix, snapshot_id) == []
        assert restarted.cleaner_statistics().store_removals_pending_count == 0
        assert not os.path.exists(marker_path(data_dir, snapshot_id))
    finally:
        restarted.shutdown()


class MarkerWriteFailsFS(FileSystem):
    """A disk failing the write of any store-removal marker (EIO)."""

    def write_atomically(self, path, data):
        if path.endswith(REMOVAL_MARKER_SUFFIX):
            raise OSError(errno.EIO, "injected", path)
        return super().write_atomically(path, data)


def test_a_refused_exported_manifest_whose_removal_cannot_be_recorded_keeps_the_snapshot(weed, prefix, data_dir):
    """The removal marker not written: the directory goes offline with the snapshot kept (its
    objects not forgotten; with no other directory the start fails, as for any removal the disk
    fails there), and a start on a good disk records and finishes the removal."""
    clock = FakeClock()
    manager = open_manager(data_dir, weed.endpoint, prefix, clock)
    try:
        snapshot_id = exported_snapshot(manager, clock, "unrecorded")
    finally:
        manager.shutdown()
    snapshot_dir = os.path.join(data_dir, ".seglog-snapshots", snapshot_id)
    with open(os.path.join(snapshot_dir, "manifest.json"), "w") as file:
        file.write("[" * 100_000)
    with pytest.raises(LogDirOfflineError, match="reading cleaning snapshots failed: .*injected.*store-removal"):
        open_manager(data_dir, weed.endpoint, prefix, clock, fs=MarkerWriteFailsFS())  # its only directory
    assert os.path.isdir(snapshot_dir) and objects_of(weed, prefix, snapshot_id)
    restarted = open_manager(data_dir, weed.endpoint, prefix, clock)
    try:
        assert restarted.can_serve() and not os.path.exists(snapshot_dir)
        restarted.run_remote_pass()
        assert objects_of(weed, prefix, snapshot_id) == []
    finally:
        restarted.shutdown()
