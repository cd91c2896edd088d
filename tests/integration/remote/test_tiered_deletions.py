"""What leaves the store, against a real weed: a deleted topic's objects and state records (at
the next remote pass, a topic of the same name refused until then, a store answering 503 retried),
remote segments below a DeleteRecords log start (at the next remote pass), and orphans of an
interrupted copy (once older than the grace, never read before); the pending deletions of deleted
topics kept in remote-deletion-checkpoint across a restart."""

from __future__ import annotations

import errno

import pytest
from tests.support.fault_fs import FaultFs

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import LogDirOfflineError, RemoteStorageUnavailableError
from seglog_server.storage.format.checkpoint import REMOTE_DELETION_CHECKPOINT
from seglog_server.storage.manager.log_manager import LogManager
from seglog_server.storage.remote import ObjectStore, RemoteLogSegmentState, RemoteStorageManager

from seglog_server.storage.remote.remote_log_metadata import partition_prefix
from tests.integration.remote.conftest import stored, store_config
from tests.integration.remote.test_tiered_log import EVERY_PASS, TIERED, produce


class StopAfter(Exception):
    pass


def manager_at(tmp_path, endpoint, prefix, clock, *, step_hook=None, **limits):
    rsm = RemoteStorageManager(ObjectStore(store_config(endpoint, prefix, **limits)), clock=clock,
                               step_hook=step_hook)
    manager = LogManager([str(tmp_path / "data")], clock=clock, intervals=EVERY_PASS, remote_storage=rsm,
                         remote_fetch_cache_bytes=1 << 20, remote_orphan_grace_ms=60_000)
    manager.startup()
    return manager, rsm


def test_a_deleted_topics_objects_go_at_the_next_pass_and_its_name_waits_for_them(weed, proxy, prefix, tmp_path):
    clock = FakeClock()
    manager, rsm = manager_at(tmp_path, proxy.endpoint, prefix, clock, attempts_max=1)
    try:
        manager.create_topic("t", 2, TIERED)
        for partition in (0, 1):
            produce(manager.get_log("t", partition), clock, 8)
        manager.run_remote_pass()
        assert rsm.metadata.list(stored(rsm, "t", 0)) and rsm.metadata.list(stored(rsm, "t", 1))
        manager.delete_topic("t")
        proxy.mode = "503"  # the store refuses: the objects stay, the name stays taken
        manager.run_remote_pass()
        with pytest.raises(RemoteStorageUnavailableError, match="not deleted yet"):
            manager.create_topic("t", 1, TIERED)
        proxy.mode = "pass"
        manager.run_remote_pass()
        assert list(rsm.store.list("t-")) == []
        manager.create_topic("t", 1, TIERED)  # a new topic of that name starts empty
        log = manager.get_log("t", 0)
        assert log.log_start_offset == 0 and log.log_end_offset == 0 and log.remote_tier.segments() == []
    finally:
        manager.shutdown()


def test_delete_records_past_remote_segments_deletes_them_at_the_next_pass(weed, prefix, tmp_path):
    clock = FakeClock()
    manager, rsm = manager_at(tmp_path, weed.endpoint, prefix, clock)
    try:
        manager.create_topic("t", 1, TIERED)
        log = manager.get_log("t", 0)
        produce(log, clock, 12)
        manager.run_remote_pass()
        remote = rsm.metadata.list(stored(rsm, "t", 0))
        assert len(remote) >= 3
        cut = remote[1].end_offset + 1  # past the first two remote segments
        assert log.delete_records(cut) == cut and log.log_start_offset == cut
        assert rsm.metadata.list(stored(rsm, "t", 0)) == remote  # still there until the pass
        manager.run_remote_pass()
        assert rsm.metadata.list(stored(rsm, "t", 0)) == remote[2:] and rsm.metadata.orphans(stored(rsm, "t", 0)) == []
        gone = {m.segment_id for m in remote[:2]}
        assert not [key for key in rsm.store.list(partition_prefix(stored(rsm, "t", 0))) if any(g in key for g in gone)]
        assert log.log_start_offset == cut and log.read(cut, 1 << 20).records
    finally:
        manager.shutdown()


def test_an_interrupted_copy_is_never_read_and_goes_once_older_than_the_grace(weed, prefix, tmp_path):
    clock = FakeClock()
    stop = {"at": "put .log"}

    def step_hook(step):
        if step == stop["at"]:
            raise StopAfter(step)

    manager, rsm = manager_at(tmp_path, weed.endpoint, prefix, clock, step_hook=step_hook)
    try:
        manager.create_topic("t", 1, TIERED)
        log = manager.get_log("t", 0)
        produce(log, clock, 6)
        manager.run_remote_pass()  # the copy stops after its .log object: an orphan
        orphans = rsm.metadata.orphans(stored(rsm, "t", 0))
        assert [m.state for m in orphans] == [RemoteLogSegmentState.COPY_SEGMENT_STARTED]
        assert rsm.metadata.list(stored(rsm, "t", 0)) == [] and log.remote_tier.segments() == []
        assert log.read(0, 1 << 20).records  # read locally, never from the orphan
        stop["at"] = None
        manager.run_remote_pass()  # the orphan is younger than the grace: it stays
        assert rsm.metadata.orphans(stored(rsm, "t", 0)) == orphans
        clock.advance(400_000)  # past the grace and the next orphan check
        manager.run_remote_pass()
        assert rsm.metadata.orphans(stored(rsm, "t", 0)) == [] and manager.remote_orphans_deleted == 1
        assert not [key for key in rsm.store.list(partition_prefix(stored(rsm, "t", 0))) if orphans[0].segment_id in key]
        assert rsm.metadata.list(stored(rsm, "t", 0))  # the segment itself was copied again, under a new id
    finally:
        manager.shutdown()


def test_a_failed_record_of_the_remote_deletion_deletes_nothing(weed, prefix, tmp_path):
    # The record goes to disk before anything is deleted: when it cannot be written (the fs seam
    # fails its rename), DeleteTopic fails whole and the topic, its files and its objects stay.
    clock, fs = FakeClock(), FaultFs()
    rsm = RemoteStorageManager(ObjectStore(store_config(weed.endpoint, prefix)), clock=clock)
    manager = LogManager([str(tmp_path / "data")], clock=clock, intervals=EVERY_PASS, remote_storage=rsm,
                         remote_fetch_cache_bytes=1 << 20, fs=fs)
    manager.startup()
    try:
        manager.create_topic("t", 1, TIERED)
        produce(manager.get_log("t", 0), clock, 8)
        manager.run_remote_pass()
        remote = rsm.metadata.list(stored(rsm, "t", 0))
        assert remote
        fs.fail("replace", errno.EIO, path=REMOTE_DELETION_CHECKPOINT)
        with pytest.raises(LogDirOfflineError, match="recording its remote segments for deletion"):
            manager.delete_topic("t")
        assert manager.get_log("t", 0).log_end_offset == 8
        manager.run_remote_pass()
        assert rsm.metadata.list(stored(rsm, "t", 0)) == remote
        manager.delete_topic("t")  # the disk is back (the rule failed once): now it goes
        assert (tmp_path / "data" / REMOTE_DELETION_CHECKPOINT).read_text().startswith("1\n1\nt 0 ")
        manager.run_remote_pass()
        assert list(rsm.store.list("t-")) == []
        assert (tmp_path / "data" / REMOTE_DELETION_CHECKPOINT).read_text() == "1\n0\n"
    finally:
        manager.shutdown()


def test_pending_deletions_outlive_a_restart_and_a_live_partitions_entry_is_dropped(weed, prefix, tmp_path):
    clock = FakeClock()
    manager, rsm = manager_at(tmp_path, weed.endpoint, prefix, clock)
    try:
        for topic in ("gone", "kept"):
            manager.create_topic(topic, 1, TIERED)
            produce(manager.get_log(topic, 0), clock, 8)
        manager.run_remote_pass()
        kept = rsm.metadata.list(stored(rsm, "kept", 0))
        assert kept and rsm.metadata.list(stored(rsm, "gone", 0))
        manager.delete_topic("gone")  # no remote pass before the shutdown
    finally:
        manager.shutdown()
    # A crash between the record and the rename leaves a live partition recorded: DeleteTopic never
    # answered for it, so the next start must not delete its objects.
    checkpoint = tmp_path / "data" / REMOTE_DELETION_CHECKPOINT
    lines = checkpoint.read_text().splitlines()
    kept_id = stored(rsm, "kept", 0).topic_id
    checkpoint.write_text("\n".join(["1", "2", *lines[2:], f"kept 0 1 {kept_id}"]) + "\n")
    restarted, rsm = manager_at(tmp_path, weed.endpoint, prefix, clock)
    try:
        with pytest.raises(RemoteStorageUnavailableError, match="not deleted yet"):
            restarted.create_topic("gone", 1, TIERED)
        restarted.run_remote_pass()
        assert list(rsm.store.list("gone-")) == []
        assert rsm.metadata.list(stored(rsm, "kept", 0))[:len(kept)] == kept
        assert checkpoint.read_text() == "1\n0\n"
        restarted.create_topic("gone", 1, TIERED)
    finally:
        restarted.shutdown()
