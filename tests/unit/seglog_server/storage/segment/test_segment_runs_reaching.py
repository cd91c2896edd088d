"""SegmentTimestamps.runs_reaching: a batched lookup's sorted targets cut into runs sharing their
first reaching segment, a bisection a run, equal to ``first_slots_reaching`` target by target
(the per-target answer) on logs of many segments, rolled, with the active segment's largest
timestamp above, below or equal to the inactive ones' and timestamps in any order."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, batch, config, open_log

from seglog_server.storage.base.clock import FakeClock


def runs_of(slots):
    """(start, end, slot) of each stretch of equal slots, in order."""
    runs, start = [], 0
    for slot, group in itertools.groupby(slots):
        size = len(list(group))
        runs.append((start, start + size, slot))
        start += size
    return runs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    deltas=st.lists(st.integers(0, 400), min_size=1, max_size=40),
    segment_bytes=st.sampled_from([300, 600, 2000, 1 << 20]),
    targets=st.lists(st.integers(NOW_MS - 5, NOW_MS + 410), max_size=50, unique=True),
)
def test_the_runs_are_the_per_target_first_segments_grouped(tmp_path_factory, deltas, segment_bytes, targets):
    log = open_log(tmp_path_factory.mktemp("runs"), FakeClock(NOW_MS), config(segment_bytes=segment_bytes))
    try:
        for delta in deltas:
            log.append(batch(b"v%d" % delta, timestamps=[NOW_MS + delta]))
        segments, timestamps = log._local.segments, log._local.timestamps
        targets = sorted(targets + [NOW_MS + delta + step for delta in deltas[:8] for step in (-1, 0, 1)
                                    if NOW_MS + delta + step not in targets])
        expected = runs_of(timestamps.first_slots_reaching(segments, targets))
        assert timestamps.runs_reaching(segments, targets) == expected
        assert timestamps.runs_reaching(segments, []) == []
    finally:
        log.close()
