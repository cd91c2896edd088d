"""A batched lookup by time answered from the time-step table of the segment its targets first
reach (``timestamp_lookups._records_in_memory``, taken by ``lookup_timestamps`` first): the same
answers as the shared search and as the per-target oracle through the indexes and scans, the same
laps counted, and none of the shared search's layers in the common case."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, PhaseCalls, batch, budget_installer, config, lap_counts, open_log, scans_only

from seglog_server.metrics.instruments import MetricsObserver
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import StorageError
from seglog_server.storage.base.observer import install_observer
from seglog_server.storage.log import timestamp_lookups
from seglog_server.storage.log.log_results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP


def described(outcome):
    return type(outcome).__name__ if isinstance(outcome, Exception) else outcome


def oracle(log, targets):
    """Each target alone, through the indexes and scans (no table, no directory)."""
    with scans_only(log):
        found = []
        for target in targets:
            try:
                found.append(described(log.offset_for_timestamp(target)))
            except StorageError as exc:
                found.append(described(exc))
        return found


def in_memory(log, targets):
    """``_records_in_memory`` under the log's lock (None: not answered there)."""
    with log._lock:  # noqa: SLF001 - the lock lookup_timestamps holds around it
        return timestamp_lookups._records_in_memory(  # noqa: SLF001
            log._local, targets, log.log_start_offset, log.log_end_offset)  # noqa: SLF001


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    batches=st.lists(st.lists(st.integers(0, 400), min_size=1, max_size=12), min_size=1, max_size=16),
    rolls=st.sets(st.integers(0, 15), max_size=3),
    deleted=st.sampled_from([0.0, 0.0, 0.3, 0.8]),
    targets=st.lists(st.one_of(st.integers(NOW_MS - 3, NOW_MS + 405), st.sampled_from(
        [LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP, NOW_MS, NOW_MS + 400])), min_size=2, max_size=40),
)
def test_the_in_memory_answers_equal_the_shared_search_and_the_oracle(
    tmp_path_factory, monkeypatch, batches, rolls, deleted, targets,
):
    """Timestamps in any order within and across batches, rolls (several segments, each its own
    table, targets reaching one or several), a log start inside the log (DeleteRecords: steps
    below it), targets in any order with repeats and special ones: where the in-memory answer is
    given it is the shared search's (``_lookup_timestamps``) and the oracle's, and
    ``lookup_timestamps`` answers the oracle's every time."""
    budget_installer(monkeypatch, "TIME_STEPS")()
    log = open_log(tmp_path_factory.mktemp("in-memory"), FakeClock(NOW_MS), config())
    try:
        for number, deltas in enumerate(batches):
            log.append(batch(*[b"v%d" % d for d in deltas], timestamps=[NOW_MS + d for d in deltas]))
            if number in rolls:
                log.roll()
        if deleted:
            log.delete_records(max(log.log_start_offset, int(log.log_end_offset * deleted)))
        log.lookup_timestamps([MAX_TIMESTAMP])  # the first-use checks: the segments' largest timestamps loaded
        expected = oracle(log, targets)
        answered = in_memory(log, targets)
        event("in memory" if answered is not None else "the shared search")
        if answered is not None:
            assert [described(outcome) for outcome in answered] == expected
        with log._lock:  # noqa: SLF001
            shared = timestamp_lookups._lookup_timestamps(  # noqa: SLF001
                log._local, targets, log.log_start_offset, log.log_end_offset, None)  # noqa: SLF001
        assert [described(outcome) for outcome in shared] == expected
        assert [described(outcome) for outcome in log.lookup_timestamps(targets)] == expected
        bounded = log.lookup_timestamps_without_builds(targets, 1 << 20)
        assert bounded is None or [described(outcome) for outcome in bounded] == expected
    finally:
        log.close()


def _log_of_two_segments(tmp_path, monkeypatch):
    budget_installer(monkeypatch, "TIME_STEPS")()
    log = open_log(tmp_path, FakeClock(NOW_MS), config())
    for n in range(40):
        log.append(batch(b"v" * 40, b"w" * 40, timestamps=[NOW_MS + 10 * n, NOW_MS + 10 * n + 5]))
        if n == 19:
            log.roll()
    log.lookup_timestamps([MAX_TIMESTAMP])  # the first-use checks
    return log


def test_targets_one_table_answers_take_none_of_the_shared_search(tmp_path, monkeypatch):
    """Targets in any order and repeated, all first reaching the active segment, answered by its
    table without the shared search (which raises here), inline and on the pool's path alike;
    targets reaching two segments, or a special one, take the shared search."""
    log = _log_of_two_segments(tmp_path, monkeypatch)
    try:
        targets = [NOW_MS + 333, NOW_MS + 201, NOW_MS + 333, NOW_MS + 390]
        expected = oracle(log, targets)
        assert [answer.offset for answer in expected] == [67, 41, 67, 78]

        def not_taken(*args):
            raise AssertionError("the shared search was taken")

        with monkeypatch.context() as patched:
            patched.setattr(timestamp_lookups, "_lookup_timestamps", not_taken)
            assert log.lookup_timestamps(targets) == expected
            assert log.lookup_timestamps_without_builds(targets, 1 << 20) == expected
            for shared in ([NOW_MS + 52, NOW_MS + 333], [NOW_MS + 333, LATEST_TIMESTAMP]):
                with pytest.raises(AssertionError, match="the shared search was taken"):
                    log.lookup_timestamps(shared)
        for shared in ([NOW_MS + 52, NOW_MS + 333], [NOW_MS + 333, LATEST_TIMESTAMP]):
            assert [described(outcome) for outcome in log.lookup_timestamps(shared)] == oracle(log, shared)
    finally:
        log.close()


def test_a_table_behind_the_file_is_left_to_the_shared_search_which_extends_it(tmp_path, monkeypatch):
    """A table that ends before its file (built in parts after a restart) answers nothing here:
    the shared search extends it, as it did before this step existed."""
    log = _log_of_two_segments(tmp_path, monkeypatch)
    try:
        active = log.segments_snapshot()[-1]
        steps = active._steps_ref()  # noqa: SLF001
        steps.end_position -= 1  # as if the last batch were not entered yet
        targets = [NOW_MS + 201, NOW_MS + 250]
        assert in_memory(log, targets) is None
        steps.end_position += 1
        assert [described(outcome) for outcome in in_memory(log, targets)] == oracle(log, targets)
    finally:
        log.close()


@pytest.mark.parametrize("observer_type", [MetricsObserver, PhaseCalls], ids=["histograms", "phase_calls"])
@pytest.mark.parametrize("bounded", [False, True], ids=["pool", "inline"])
def test_the_in_memory_answer_counts_the_laps_of_the_shared_search(tmp_path, monkeypatch, observer_type, bounded):
    """``segment_lookup`` and ``index_search`` once per distinct target, as the shared search
    counts them; an attempt that does not answer counts nothing."""
    log = _log_of_two_segments(tmp_path, monkeypatch)
    targets = [NOW_MS + 333, NOW_MS + 201, NOW_MS + 333, NOW_MS + 390]
    try:
        counts = {}
        for way in ("shared", "in memory"):
            observer = observer_type()
            previous = install_observer(observer)
            try:
                if way == "shared":
                    with log._lock:  # noqa: SLF001
                        timestamp_lookups._lookup_timestamps(  # noqa: SLF001
                            log._local, targets, log.log_start_offset, log.log_end_offset, None)  # noqa: SLF001
                elif bounded:
                    assert log.lookup_timestamps_without_builds(targets, 1 << 20) is not None
                else:
                    log.lookup_timestamps(targets)
            finally:
                install_observer(previous)
            counts[way] = lap_counts(observer)
        assert counts["in memory"] == counts["shared"] == {
            ("offsets_for_times", "segment_lookup"): 3, ("offsets_for_times", "index_search"): 3}
        observer = observer_type()
        previous = install_observer(observer)
        try:
            assert in_memory(log, [NOW_MS + 52, NOW_MS + 333]) is None  # two segments: not answered
        finally:
            install_observer(previous)
        assert lap_counts(observer) == {}
    finally:
        log.close()
