"""In a cluster only a partition's owner keeps its remote segments: two LogManagers on one store
(a real weed on loopback) hold one topic (one topic id, the same batches, as a move's source and
target do) and an owner check says which uploads. The copy held for another owner uploads nothing
and cleans no orphan; after a change of owner the new one reads what the old one uploaded and
continues above it, so no offset is stored twice (before, both uploaded every segment: each
counted twice by retention.bytes, and non-owners deleted the owner's copies in flight)."""

from __future__ import annotations

import pytest

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.format.topic_metadata import new_topic_id
from seglog_server.storage.remote import RemoteLogSegmentMetadata, RemoteLogSegmentState
from seglog_server.storage.remote.remote_segment_metadata import new_segment_id
from tests.integration.remote.conftest import remote_tp
from tests.integration.remote.test_tiered_log import TIERED, manager_for, produce, run_passes

pytestmark = pytest.mark.timeout(60)

# Local copies kept (no local deletion), so both copies keep every segment for the comparison.
KEPT = {**TIERED, "local.retention.bytes": "-2"}


def _ranges(rsm, tp) -> list[tuple[int, int]]:
    return [(m.base_offset, m.end_offset) for m in rsm.metadata.list(tp)]


def test_only_the_owner_uploads_and_a_new_owner_continues_above_the_old_ones_uploads(weed, prefix, tmp_path):
    clock = FakeClock()
    a, rsm = manager_for(tmp_path / "a", weed.endpoint, prefix, clock)
    b, _ = manager_for(tmp_path / "b", weed.endpoint, prefix, clock)
    owner = {"t": "a"}
    a.set_remote_owner_check(lambda topic, partition: owner[topic] == "a")
    b.set_remote_owner_check(lambda topic, partition: owner[topic] == "b")
    try:
        topic_id = new_topic_id()
        for manager in (a, b):
            manager.create_topic("t", 1, KEPT, topic_id=topic_id)
        logs = [a.get_log("t", 0), b.get_log("t", 0)]

        def both(count):
            for log in logs:
                produce(log, clock, count)

        both(6)
        tp = remote_tp(a, "t")
        # An interrupted copy's record, past the orphan grace: only the owner's pass removes it.
        orphan = RemoteLogSegmentMetadata(
            topic="t", partition=0, topic_id=topic_id, segment_id=new_segment_id(), base_offset=1000,
            end_offset=1001, max_timestamp_ms=0, files={".log": 1}, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
            event_timestamp_ms=clock.time_ms() - 3_600_000)
        rsm.metadata.write(orphan)
        run_passes(b)
        assert _ranges(rsm, tp) == [] and len(rsm.metadata.orphans(tp)) == 1
        assert b.remote_statistics().upload_lag_bytes == 0  # the owner's lag, not this copy's
        run_passes(a)
        uploaded = _ranges(rsm, tp)
        assert uploaded and rsm.metadata.orphans(tp) == []

        owner["t"] = "b"  # the move commits
        both(6)
        run_passes(a)
        assert _ranges(rsm, tp) == uploaded  # the old owner uploads no more
        run_passes(b)
        after = _ranges(rsm, tp)
        assert after[:len(uploaded)] == uploaded and len(after) > len(uploaded)
        assert all(previous[1] + 1 == following[0] for previous, following in zip(after, after[1:])), after
        assert b.get_log("t", 0).remote_tier.highest_uploaded_offset == after[-1][1]
    finally:
        a.shutdown()
        b.shutdown()


def test_a_copy_held_for_another_owner_is_listed_but_uploads_nothing(weed, prefix, tmp_path):
    """A move's source after the move committed (its copy kept for the final copy), restarted:
    the pass lists its remote segments although it no longer owns them, so reads below its
    local start answer from the store instead of UNAVAILABLE; it uploads nothing more."""
    clock = FakeClock()
    manager, rsm = manager_for(tmp_path, weed.endpoint, prefix, clock)
    manager.create_topic("t", 1, TIERED)
    produce(manager.get_log("t", 0), clock, 10)
    run_passes(manager)
    run_passes(manager)
    tp = remote_tp(manager, "t")
    uploaded = _ranges(rsm, tp)
    local_start = manager.get_log("t", 0).local_log_start_offset
    assert uploaded and local_start > 0
    manager.shutdown()
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)
    manager.set_remote_owner_check(lambda topic, partition: False)  # owned elsewhere now
    try:
        log = manager.get_log("t", 0)
        produce(log, clock, 6)
        run_passes(manager)
        assert log.remote_tier.listed and log.log_start_offset == 0
        assert log.read(0, 1 << 20).records
        assert _ranges(rsm, tp) == uploaded  # listed, not uploaded
    finally:
        manager.shutdown()
