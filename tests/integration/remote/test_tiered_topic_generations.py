"""A topic deleted and created again under its name is another generation (another topic id), and
its remote segments another prefix: the old generation's objects, deleted late by an instance that
was down or still present when the new one starts, are never the new one's, and the reverse.

Two LogManagers share one store (a real weed on loopback), as two instances of a cluster do; both
copies of the topic take the same topic id (the cluster's, as ``create_topic(topic_id=)``)."""

from __future__ import annotations

import pytest

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.format.topic_metadata import new_topic_id
from tests.integration.remote.conftest import remote_tp
from tests.support.log_test_support import records_of
from tests.integration.remote.test_tiered_log import TIERED, manager_for, produce, run_passes

pytestmark = pytest.mark.timeout(60)


def _values(log, offset: int) -> list[bytes]:
    return [record.value for record in records_of(log.read(offset, 1 << 20).records)]


def test_a_late_deletion_of_the_old_generation_leaves_the_new_ones_segments(weed, prefix, tmp_path):
    clock = FakeClock()
    stale, _ = manager_for(tmp_path / "stale", weed.endpoint, prefix, clock)  # holds a copy, then is down
    owner, rsm = manager_for(tmp_path / "owner", weed.endpoint, prefix, clock)
    try:
        old_id = new_topic_id()
        stale.create_topic("t", 1, TIERED, topic_id=old_id)
        owner.create_topic("t", 1, TIERED, topic_id=old_id)
        produce(owner.get_log("t", 0), clock, 6, b"old" * 100)
        run_passes(owner)
        run_passes(owner)
        old = remote_tp(owner, "t")
        assert rsm.metadata.list(old)
        stale.delete_topic("t")  # recorded for deletion; its remote pass does not run (it is down)
        owner.delete_topic("t")
        run_passes(owner)
        assert rsm.metadata.records(old) == []

        owner.create_topic("t", 1, TIERED, topic_id=new_topic_id())  # the new generation
        log = owner.get_log("t", 0)
        produce(log, clock, 12, b"new" * 100)
        run_passes(owner)
        run_passes(owner)
        new = remote_tp(owner, "t")
        uploaded = rsm.metadata.list(new)
        assert uploaded and log.local_log_start_offset > 0 and log.log_start_offset == 0

        stale.run_remote_pass()  # the old generation's deletion, at last

        assert rsm.metadata.list(new) == uploaded
        assert _values(log, 0)[0] == b"new" * 100  # offset 0 still read from the store
    finally:
        stale.shutdown()
        owner.shutdown()


def test_a_new_generation_never_takes_the_old_ones_segments_for_its_own(weed, prefix, tmp_path):
    clock = FakeClock()
    old_manager, rsm = manager_for(tmp_path / "old", weed.endpoint, prefix, clock)
    new_manager, _ = manager_for(tmp_path / "new", weed.endpoint, prefix, clock)
    try:
        old_manager.create_topic("t", 1, TIERED, topic_id=new_topic_id())
        produce(old_manager.get_log("t", 0), clock, 20, b"old" * 100)
        run_passes(old_manager)
        old_uploaded = rsm.metadata.list(remote_tp(old_manager, "t"))
        assert old_uploaded[-1].end_offset >= 10  # the old generation's objects stay in the store

        new_manager.create_topic("t", 1, TIERED, topic_id=new_topic_id())
        log = new_manager.get_log("t", 0)
        assert log.remote_tier.highest_uploaded_offset == -1
        produce(log, clock, 6, b"new" * 100)
        run_passes(new_manager)
        run_passes(new_manager)
        new_uploaded = rsm.metadata.list(remote_tp(new_manager, "t"))
        # Every closed segment of the new generation was uploaded (from offset 0) before any went.
        assert new_uploaded[0].base_offset == 0 and log.local_log_start_offset == new_uploaded[-1].end_offset + 1
        assert [v for offset in range(6) for v in _values(log, offset)[:1]] == [b"new" * 100] * 6
        assert rsm.metadata.list(remote_tp(old_manager, "t")) == old_uploaded
    finally:
        old_manager.shutdown()
        new_manager.shutdown()
