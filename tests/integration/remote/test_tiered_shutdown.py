"""Shutdown while the uploader's pass is deleting a deleted topic's objects (a real weed; the
pass held inside the store call by the remote storage manager's step hook).

Shutdown waits for the pass outside the admin lock, so the pass records the finished deletion in
remote-deletion-checkpoint while the directory is still locked and shutdown goes on at once (it
held the lock the pass needed: it waited out its whole stop wait, warned of a store call still
running, and the pass wrote the checkpoint after the directory was unlocked). A pass still in its
store call when the stop wait ends writes nothing any more: the next start finishes the deletion."""

from __future__ import annotations

import logging
import threading

import pytest

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.format.checkpoint import REMOTE_DELETION_CHECKPOINT
from seglog_server.storage.manager import remote_maintenance
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage.remote import ObjectStore, RemoteStorageManager
from tests.integration.remote.conftest import store_config
from tests.integration.remote.test_tiered_log import EVERY_PASS, TIERED, produce, run_passes
from tests.support.integration_helpers import wait_until

pytestmark = pytest.mark.timeout(60)
_STILL_IN_A_STORE_CALL = "still in a store call"


class _HeldDeletion:
    """A step hook holding the first segment deletion until ``release``."""

    def __init__(self) -> None:
        self.entered, self.released = threading.Event(), threading.Event()

    def __call__(self, step: str) -> None:
        if step == "delete_started" and not self.entered.is_set():
            self.entered.set()
            assert self.released.wait(30), "the test never released the deletion"


def _manager(tmp_path, weed, prefix, clock, hook=None):
    rsm = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, prefix)), clock=clock, step_hook=hook)
    manager = LogManager([str(tmp_path / "data")], clock=clock, intervals=EVERY_PASS, remote_storage=rsm,
                         remote_fetch_cache_bytes=1 << 20)
    manager.startup()
    return manager, rsm


def _deleted_tiered_topic(manager, clock):
    manager.create_topic("t", 1, TIERED)
    produce(manager.get_log("t", 0), clock, 6)
    run_passes(manager)
    manager.delete_topic("t")  # its objects go at the uploader's next pass


def test_shutdown_lets_the_pass_record_its_deletion_and_does_not_wait_it_out(weed, prefix, tmp_path, caplog):
    clock, hold = FakeClock(), _HeldDeletion()
    manager, rsm = _manager(tmp_path, weed, prefix, clock, hold)
    _deleted_tiered_topic(manager, clock)
    checkpoint = tmp_path / "data" / REMOTE_DELETION_CHECKPOINT
    assert checkpoint.read_text().startswith("1\n1\nt 0 ")
    manager.start_remote_uploader(10)
    assert hold.entered.wait(20), "the pass never reached the deletion"
    stopper = threading.Thread(target=manager.shutdown)
    with caplog.at_level(logging.WARNING, logger="seglog_server.storage.manager.remote_maintenance"):
        stopper.start()
        wait_until(lambda: manager._state == "stopping", "the shutdown beginning", timeout_s=20, poll_s=0.01)
        hold.released.set()
        stopper.join(30)
    assert not stopper.is_alive()
    assert not [r for r in caplog.records if _STILL_IN_A_STORE_CALL in r.getMessage()]
    assert checkpoint.read_text() == "1\n0\n"  # recorded before the directory was released
    assert list(rsm.store.list("t-")) == []


def test_a_pass_outlasting_the_stop_wait_writes_nothing_and_the_next_start_finishes(
        weed, prefix, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(remote_maintenance, "UPLOADER_STOP_WAIT_S", 0.05)
    clock, hold = FakeClock(), _HeldDeletion()
    manager, rsm = _manager(tmp_path, weed, prefix, clock, hold)
    _deleted_tiered_topic(manager, clock)
    checkpoint = tmp_path / "data" / REMOTE_DELETION_CHECKPOINT
    pending = checkpoint.read_text()
    manager.start_remote_uploader(10)
    uploader = manager._remote._uploader
    assert hold.entered.wait(20), "the pass never reached the deletion"
    with caplog.at_level(logging.WARNING, logger="seglog_server.storage.manager.remote_maintenance"):
        manager.shutdown()  # the pass is still held: shutdown goes on without it
    assert [r for r in caplog.records if _STILL_IN_A_STORE_CALL in r.getMessage()]
    hold.released.set()
    assert uploader.stop(30)
    assert checkpoint.read_text() == pending  # not rewritten once the directory was released
    restarted, _ = _manager(tmp_path, weed, prefix, clock)
    try:
        restarted.run_remote_pass()
        assert checkpoint.read_text() == "1\n0\n"
        assert list(rsm.store.list("t-")) == []
    finally:
        restarted.shutdown()
