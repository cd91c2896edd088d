"""The bounded lookup by time (segment/lookup_budget.py, ``Log.lookup_timestamps_without_builds``):
over random logs (appends in any time order, gzip, large records, rolls, restarts, DeleteRecords,
tables dropped, budgets too small for a table) and random budgets, it answers exactly as the
unbounded search does or refuses; while it answers it builds and extends nothing and decompresses
nothing; and a refusal leaves the segments' build counters as they were."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, FailingFs, PhaseCalls, batch, budget_installer, config, lap_counts, open_log, reopen

from seglog.records import Compression
from seglog_server.metrics.instruments import MetricsObserver
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import CorruptRecordError
from seglog_server.storage.base.observer import install_observer
from seglog_server.storage.format import record_timestamps
from seglog_server.storage.log import log_time_lookups
from seglog_server.storage.log.log_results import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from seglog_server.storage.log.timestamp_lookups import lookup_one_in_memory
from seglog_server.storage.segment import segment_time_lookups
from seglog_server.storage.segment.batch_directory import BatchDirectory
from seglog_server.storage.segment.log_segment import LogSegment
from seglog_server.storage.segment.time_steps import TimeSteps


def described(outcomes):
    return [(type(o).__name__, str(o)) if isinstance(o, Exception) else o for o in outcomes]


def counters(log):
    return [(s.base_offset, s._steps_targets, s._directory_targets) for s in log.segments_snapshot()]


def bounded_lookup(log, work_counted, targets, read_bytes_max):
    """The bounded search's answers (described), None when it refused; checks what it did."""
    before = counters(log)
    work_counted["on"], work_counted["work"], work_counted["directory_read"] = True, 0, 0
    try:
        bounded = log.lookup_timestamps_without_builds(targets, read_bytes_max)
    finally:
        work_counted["on"] = False
    if bounded is None:
        assert counters(log) == before  # a refusal counts nothing
        return None
    assert work_counted["work"] == 0  # answered without a build, a table's extension or a decompression
    assert work_counted["directory_read"] <= read_bytes_max  # a directory's extension within the budget
    return described(bounded)


def single_lookups(log, work_counted, target, read_bytes_max):
    """The single lookup's answer on an event loop (``lookup_timestamp_inline``), described,
    [None] when it was not answered there; its in-memory step alone (``lookup_one_in_memory``,
    under the log's lock) must answer the same when it answers. Both build and decompress
    nothing."""
    before = counters(log)
    work_counted["on"], work_counted["work"] = True, 0
    try:
        inline = log.lookup_timestamp_inline(target, read_bytes_max)
        if target >= 0 and log._local.timestamps.loaded:  # noqa: SLF001 - the step the inline call takes first
            with log._lock:  # noqa: SLF001
                in_memory = lookup_one_in_memory(log._local, target, log.log_start_offset, log.log_end_offset)  # noqa: SLF001
        else:
            in_memory = None
    finally:
        work_counted["on"] = False
    assert work_counted["work"] == 0
    event("single: in memory" if in_memory is not None else "single: not in memory")
    if isinstance(inline, str):
        assert in_memory is None and counters(log) == before  # (a refusal counts nothing)
        return [None]
    assert in_memory is None or described([in_memory]) == described([inline])
    return described([inline])


@pytest.fixture
def work_counted(monkeypatch):
    """Counts the builds, the tables' extensions and decompressions made while ``counted["on"]``,
    and the bytes the batch directories' extensions read (a bounded search may extend one within
    its budget)."""
    counted = {"on": False, "work": 0, "directory_read": 0}

    def counting(original):
        def wrapper(*args, **kwargs):
            if counted["on"]:
                counted["work"] += 1
            return original(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(TimeSteps, "extend", counting(TimeSteps.extend))
    original_extend = BatchDirectory.extend

    def extend_reading(directory, read, *args, **kwargs):
        def counted_read(position, size):
            if counted["on"]:
                counted["directory_read"] += size
            return read(position, size)
        return original_extend(directory, counted_read, *args, **kwargs)

    monkeypatch.setattr(BatchDirectory, "extend", extend_reading)
    monkeypatch.setattr(record_timestamps, "decompress", counting(record_timestamps.decompress))
    return counted


_append = st.tuples(st.just("append"), st.lists(st.integers(0, 400), min_size=1, max_size=90),
                    st.booleans(), st.sampled_from([1, 1, 300]))
_operation = st.one_of(
    _append, _append, _append,
    st.tuples(st.just("roll")), st.tuples(st.just("restart")), st.tuples(st.just("drop_tables")),
    st.tuples(st.just("delete_records"), st.floats(0, 1)),
    st.tuples(st.just("lookup"), st.integers(0, 20_000),
              st.lists(st.one_of(st.integers(NOW_MS - 5, NOW_MS + 410),
                                 st.sampled_from([LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP])),
                       min_size=1, max_size=6)),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    operations=st.lists(_operation, min_size=1, max_size=14),
    segment_bytes=st.sampled_from([30_000, 1 << 20]),
    steps_budget=st.sampled_from([1 << 30, 1 << 30, 0]),
    extend_bytes=st.sampled_from([200, 4 << 20]),
    targets_per_mib=st.sampled_from([1, 16]),
)
def test_the_bounded_search_answers_as_the_unbounded_one_or_refuses(
    tmp_path_factory, monkeypatch, work_counted, operations, segment_bytes, steps_budget, extend_bytes,
    targets_per_mib,
):
    budget_installer(monkeypatch, "TIME_STEPS")(steps_budget)
    budget_installer(monkeypatch, "DIRECTORIES")()
    monkeypatch.setattr(segment_time_lookups, "_STEPS_EXTEND_BYTES", extend_bytes)
    monkeypatch.setattr(segment_time_lookups, "_DIRECTORY_EXTEND_BYTES", extend_bytes)
    monkeypatch.setattr(segment_time_lookups, "_DIRECTORY_TARGETS_PER_MIB", targets_per_mib)  # 1: builds due early
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path_factory.mktemp("bounded"), clock, config(segment_bytes=segment_bytes))
    try:
        for kind, *arguments in operations + [("lookup", 1 << 20, [NOW_MS + 7, NOW_MS + 200])]:
            if kind == "append":
                deltas, compressed, value_bytes = arguments
                log.append(batch(*[b"v" * value_bytes for _ in deltas], timestamps=[NOW_MS + d for d in deltas],
                                 compression=Compression.GZIP if compressed else Compression.NONE))
            elif kind == "roll" and log.log_end_offset > 0:
                log.roll()
            elif kind == "restart":
                log = reopen(log, clock)
            elif kind == "drop_tables":
                for segment in log.segments_snapshot():
                    segment.drop_batch_directory()
            elif kind == "delete_records":
                log.delete_records(max(log.log_start_offset, int(log.log_end_offset * arguments[0])))
            elif kind == "lookup":
                read_bytes_max, targets = arguments
                # Before the unbounded search (builds may be due), and after it (built, or not).
                bounded = bounded_lookup(log, work_counted, targets, read_bytes_max)
                unbounded = described(log.lookup_timestamps(targets))
                again = bounded_lookup(log, work_counted, targets, read_bytes_max)
                for answers in (bounded, again):
                    event("refused" if answers is None else "answered")
                    assert answers is None or answers == unbounded
                for target, answer in zip(targets, unbounded):  # the service's single lookup
                    assert single_lookups(log, work_counted, target, read_bytes_max) in ([None], [answer])
    finally:
        log.close()


def test_appends_behind_a_batch_directory_leave_small_lookups_inline(tmp_path, monkeypatch):
    """A segment with a directory and no time-step table (the tables' budget spent): the appends
    feed no directory, so each lookup after an append extends it by that append's bytes. Within
    the budget the bounded search does so itself: 40 rounds of an append and three lookups, no
    refusal (each first lookup of a round was refused before and went to the pool)."""
    budget_installer(monkeypatch, "TIME_STEPS")(0)
    budget_installer(monkeypatch, "DIRECTORIES")()
    log = open_log(tmp_path, FakeClock(NOW_MS), config())
    try:
        for n in range(100):
            log.append(batch(b"v" * 40, timestamps=[NOW_MS + 10 * n]))
        log.lookup_timestamps([MAX_TIMESTAMP])
        log.lookup_timestamps([NOW_MS + 10 * n for n in range(0, 100, 5)])  # builds the directory
        segment = log.segments_snapshot()[-1]
        assert segment._directory_ref() is not None and segment._steps_ref() is None
        outcomes = []
        for n in range(100, 140):
            log.append(batch(b"v" * 40, timestamps=[NOW_MS + 10 * n]))
            for _ in range(3):
                outcomes.append(log.lookup_timestamps_without_builds([NOW_MS + 10 * n - 5], 65536))
            assert segment._directory_ref().end_position == segment.size_in_bytes
        assert [None if o is None else o[0].offset for o in outcomes] == [n for n in range(100, 140) for _ in range(3)]
    finally:
        log.close()


@pytest.mark.parametrize("observer_type", [MetricsObserver, PhaseCalls], ids=["histograms", "phase_calls"])
@pytest.mark.parametrize("targets", [[NOW_MS + 905], [NOW_MS + 305, NOW_MS + 905]], ids=["one", "two"])
def test_a_refused_attempt_counts_no_lap(tmp_path, monkeypatch, observer_type, targets):
    """The stopwatch laps of a bounded attempt (the segment choice, the index searches, the scans
    up to the refused chunk) are held and counted only when it answers: a lookup refused, then
    searched unbounded, counts the laps of one unbounded lookup (twice before); one answered
    within its budget counts those of one too."""
    budget_installer(monkeypatch, "TIME_STEPS")(0)  # no table nor directory: the scans answer
    budget_installer(monkeypatch, "DIRECTORIES")(0)
    log = open_log(tmp_path, FakeClock(NOW_MS), config())
    try:
        for n in range(100):  # about 11 KiB of batches
            log.append(batch(b"v" * 40, timestamps=[NOW_MS + 10 * n]))
        log.lookup_timestamps([MAX_TIMESTAMP])  # the first-use checks
        counts = {}
        for name, read_bytes_max in (("unbounded", None), ("refused", 1024), ("answered", 1 << 20)):
            observer = observer_type()
            previous = install_observer(observer)
            try:
                if read_bytes_max is not None:
                    bounded = log.lookup_timestamps_without_builds(targets, read_bytes_max)
                    assert (bounded is None) == (name == "refused")
                if read_bytes_max is None or bounded is None:
                    log.lookup_timestamps(targets)
            finally:
                install_observer(previous)
            counts[name] = lap_counts(observer)
        assert counts["unbounded"][("offsets_for_times", "segment_lookup")] == len(targets)
        assert counts["refused"] == counts["unbounded"] == counts["answered"]
    finally:
        log.close()


@pytest.mark.parametrize("observer_type", [MetricsObserver, PhaseCalls], ids=["histograms", "phase_calls"])
def test_a_single_lookup_answered_from_memory_counts_the_laps_of_the_search(tmp_path, monkeypatch, observer_type):
    """The service's single lookup answered by the time-step table its appends fed
    (``lookup_one_in_memory``: no budget, no held stopwatch) answers and counts the laps an
    unbounded lookup of the target does (``segment_lookup`` and ``index_search``, once each),
    over two segments (the first one reaching the target, and the active one past the others);
    it never takes the bounded search's path to do so."""
    budget_installer(monkeypatch, "TIME_STEPS")()
    budget_installer(monkeypatch, "DIRECTORIES")(0)
    log = open_log(tmp_path, FakeClock(NOW_MS), config())
    try:
        for n in range(40):
            log.append(batch(b"v" * 40, b"w" * 40, timestamps=[NOW_MS + 10 * n, NOW_MS + 10 * n + 5]))
            if n == 19:
                log.roll()
        log.lookup_timestamps([MAX_TIMESTAMP])  # the first-use checks
        unbounded, counts = {}, {}
        for target in (NOW_MS + 52, NOW_MS + 333):
            observer = observer_type()
            previous = install_observer(observer)
            try:
                (unbounded[target],) = log.lookup_timestamps([target])
            finally:
                install_observer(previous)
            counts["unbounded", target] = lap_counts(observer)

        def not_taken(*args):
            raise AssertionError("the bounded search's path was taken")

        monkeypatch.setattr(log_time_lookups, "lookup_one_bounded", not_taken)
        for target in (NOW_MS + 52, NOW_MS + 333):
            observer = observer_type()
            previous = install_observer(observer)
            try:
                assert log.lookup_timestamp_inline(target, 1 << 20) == unbounded[target]
            finally:
                install_observer(previous)
            counts["inline", target] = lap_counts(observer)
            assert counts["inline", target] == counts["unbounded", target] == {
                ("offsets_for_times", "segment_lookup"): 1, ("offsets_for_times", "index_search"): 1}
        assert [answer.offset for answer in unbounded.values()] == [11, 67]
    finally:
        log.close()


@pytest.mark.parametrize("fault", ["eio", "corrupt"])
def test_a_single_lookup_meeting_a_fault_in_its_segment_choice_answers_as_the_search(tmp_path, monkeypatch, fault):
    """The active segment's largest timestamp, read by the segment choice of a target past the
    other segments (unknown after a restart), failing: the service's single lookup on its event
    loop answers the storage error the unbounded search answers (an EIO from the disk takes the
    log offline: LogDirOfflineError; a corrupt read: CorruptSegmentError), not the raw error."""
    outcomes = {}
    for way in ("inline", "unbounded"):
        clock, fs = FakeClock(NOW_MS), FailingFs()
        log = open_log(tmp_path / way, clock, config())
        try:
            for n in range(10):
                log.append(batch(b"v" * 40, timestamps=[NOW_MS + 10 * n]))
                if n == 4:
                    log.roll()
            log = reopen(log, clock, fs=fs)
            assert log.lookup_timestamps([NOW_MS + 12])[0].offset == 2  # loaded; the active segment not asked
            if fault == "eio":
                fs.fail = 1
            else:
                def corrupt(segment):
                    raise CorruptRecordError("injected: a torn time index entry")
                monkeypatch.setattr(LogSegment, "_last_time_index_entry", corrupt)
            if way == "inline":
                outcome = log.lookup_timestamp_inline(NOW_MS + 72, 1 << 20)
            else:
                (outcome,) = log.lookup_timestamps([NOW_MS + 72])
            monkeypatch.undo()
            outcomes[way] = (type(outcome).__name__, str(outcome).replace(str(tmp_path / way), "DIR"), log.is_offline)
        finally:
            log.close()
    assert outcomes["inline"] == outcomes["unbounded"]
    assert outcomes["inline"][0] == {"eio": "LogDirOfflineError", "corrupt": "CorruptSegmentError"}[fault]


def _index_counts(log, observer) -> tuple[dict, dict, tuple[int, int]]:
    """The observer's index lookups by (index, zone), its pages histograms by index (count, sum)
    (none without an observer) and the log's index statistics (warm, cold lookups)."""
    statistics = log.statistics()
    zones = (statistics.index_warm_lookup_count, statistics.index_cold_lookup_count)
    if observer is None:
        return {}, {}, zones
    pages = {index: (sum(histogram.counts), histogram.total)
             for index, histogram in observer._pages_by_index.items() if sum(histogram.counts)}  # noqa: SLF001
    return {key: count for key, count in observer.lookups.items() if count}, pages, zones


@pytest.mark.parametrize(("way", "targets"), [
    ("inline", [NOW_MS + 905]),
    ("without_builds", [NOW_MS + 905]),
    ("without_builds", [NOW_MS + 305, NOW_MS + 905]),
    ("without_builds", [NOW_MS + 305, NOW_MS + 505, NOW_MS + 705, NOW_MS + 905]),  # searched together
], ids=["inline", "one", "two", "four"])
@pytest.mark.parametrize("observed", [True, False], ids=["observer", "no_observer"])
def test_a_refused_attempt_counts_no_index_search(tmp_path, monkeypatch, way, targets, observed):
    """The index searches of a bounded attempt (the time index's and the offset index's, before
    the scan whose chunk is refused) are held and counted only when it answers: a lookup refused,
    then searched unbounded on the pool, counts the index lookups, their pages and the indexes'
    zone counts of one unbounded lookup (twice before); one answered within its budget those of
    one too. Inline (``lookup_timestamp_inline``, the service's single lookup) and batched; with
    no observer installed, the zone counts alone."""
    budget_installer(monkeypatch, "TIME_STEPS")(0)  # no table nor directory: the index searches and scans answer
    budget_installer(monkeypatch, "DIRECTORIES")(0)
    log = open_log(tmp_path, FakeClock(NOW_MS), config(index_interval_bytes=512))
    try:
        for n in range(100):  # about 11 KiB of batches, an index entry every few
            log.append(batch(b"v" * 40, timestamps=[NOW_MS + 10 * n]))
        log.lookup_timestamps([MAX_TIMESTAMP])  # the first-use checks
        counts = {}
        for name, read_bytes_max in (("unbounded", None), ("refused", 1024), ("answered", 1 << 20)):
            observer = MetricsObserver() if observed else None
            previous = install_observer(observer)
            try:
                lookups, pages, (warm, cold) = _index_counts(log, observer)
                answered = read_bytes_max is None
                if not answered and way == "inline":
                    answered = not isinstance(log.lookup_timestamp_inline(targets[0], read_bytes_max), str)
                elif not answered:
                    answered = log.lookup_timestamps_without_builds(targets, read_bytes_max) is not None
                assert answered == (name != "refused")
                if read_bytes_max is None or not answered:
                    log.lookup_timestamps(targets)
                after_lookups, after_pages, (after_warm, after_cold) = _index_counts(log, observer)
                assert lookups == {} and pages == {}
                counts[name] = (after_lookups, after_pages, after_warm - warm, after_cold - cold)
            finally:
                install_observer(previous)
        if observed:  # a time index and an offset index search a target
            assert sum(counts["unbounded"][0].values()) == 2 * len(targets)
        assert counts["unbounded"][2] + counts["unbounded"][3] >= len(targets)  # (an empty zone is not counted)
        assert counts["refused"] == counts["unbounded"] == counts["answered"]
    finally:
        log.close()
