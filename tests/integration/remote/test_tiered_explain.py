"""ExplainLookup and position_of below the local log start of a tiered log, against a real weed:
the explanation names the remote segment and gives the positions the local one gave before it
was uploaded and deleted locally; position_of answers clearly that the offset is in the store."""

from __future__ import annotations

import pytest

from seglog_server.rpc import conversions
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import OffsetOutOfRangeError, RemoteStorageUnavailableError

from tests.integration.remote.test_tiered_log import TIERED, manager_for, produce, run_passes


def _explained(explanation):
    return (explanation.segment_base_offset, explanation.index_position, explanation.found_offset,
            explanation.found_position, explanation.scanned_bytes)


def test_explain_below_the_local_start_describes_the_remote_segment(weed, prefix, tmp_path):
    clock = FakeClock()
    manager, _ = manager_for(tmp_path, weed.endpoint, prefix, clock)
    try:
        manager.create_topic("t", 1, {**TIERED, "index.interval.bytes": "1"})
        log = manager.get_log("t", 0)
        stamps = []
        for _ in range(14):
            stamps.append(clock.time_ms())
            produce(log, clock, 1)
            clock.advance(1_000)
        local = {offset: _explained(log.explain_offset(offset)) for offset in range(14)}
        by_time = {stamp: _explained(log.explain_timestamp(stamp)) for stamp in stamps}
        assert len({base for base, *_ in local.values()}) >= 4  # several segments to tier
        run_passes(manager)
        local_start = log.local_log_start_offset
        assert log.log_start_offset == 0 and local_start >= 6

        tier = log.remote_tier
        for offset in range(local_start):
            explanation = log.explain_offset(offset)
            assert explanation.remote_segment_id == tier.segment_for(offset).segment_id
            assert explanation.searches == () and explanation.segment_count == len(tier.segments())
            assert _explained(explanation) == local[offset], offset
            assert conversions.explain_lookup_response(explanation).remote_segment_id == explanation.remote_segment_id
            with pytest.raises(OffsetOutOfRangeError, match="is below the local log start .* object store"):
                log.position_of(offset)
        for stamp, offset in zip(stamps, range(14), strict=True):
            explanation = log.explain_timestamp(stamp)
            assert _explained(explanation) == by_time[stamp], stamp
            assert bool(explanation.remote_segment_id) == (offset < local_start)
        explanation = log.explain_offset(local_start)  # the local log answers as before
        assert explanation.remote_segment_id == "" and _explained(explanation) == local[local_start]
        assert log.position_of(local_start) == (local_start, 0)
    finally:
        manager.shutdown()


def test_explain_below_the_local_start_with_the_store_down_answers_unavailable(weed, proxy, prefix, tmp_path):
    clock = FakeClock()
    manager, _ = manager_for(tmp_path, proxy.endpoint, prefix, clock, attempts_max=1)
    try:
        manager.create_topic("t", 1, TIERED)
        log = manager.get_log("t", 0)
        produce(log, clock, 12)
        run_passes(manager)
        assert log.local_log_start_offset > 0
        proxy.mode = "503"  # nothing of the remote segment is cached yet: its index is a GET
        with pytest.raises(RemoteStorageUnavailableError):
            log.explain_offset(0)
        assert log.explain_offset(log.local_log_start_offset).remote_segment_id == ""
    finally:
        proxy.mode = "pass"
        manager.shutdown()
