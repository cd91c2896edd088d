"""The storage observer: index lookups report their zone and the distinct pages their probes read,
checked against the recording search (the oracle) over random indexes, and nothing is measured
while no observer listens."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.storage.format.index_search import LARGEST_LOWER_BOUND, Zone, recording, slot_and_zone_for
from seglog_server.storage.base.observer import (
    PAGE_BYTES,
    StorageObserver,
    held_stopwatch,
    install_observer,
    release_held,
    stopwatch,
)
from seglog_server.storage.format.offset_index import LAYOUT, OffsetIndex
from seglog_server.storage.format.time_index import TimeIndex


class Recorder(StorageObserver):
    """Keeps what the storage reports (faults are reported by segment reads, not by indexes)."""

    enabled = True

    def __init__(self) -> None:
        self.lookups: list[tuple[str, str, int]] = []
        self.phases: list[tuple[str, str, float]] = []
        self.faults: list[tuple[str, int, int]] = []

    def index_lookup(self, index, zone, pages):
        self.lookups.append((index, zone, pages))

    def phase(self, operation, phase, seconds):
        self.phases.append((operation, phase, seconds))

    def page_faults(self, path, minor, major):
        self.faults.append((path, minor, major))


def filled_index(tmp_path, entry_count: int) -> OffsetIndex:
    index = OffsetIndex(str(tmp_path / "00000000000000000000.index"), 0, max_index_bytes=8 * 3_000)
    for number in range(entry_count):
        index.append(number * 3, number * 100)
    return index


@settings(max_examples=40, deadline=None)
@given(entry_count=st.integers(1, 3000), target=st.integers(0, 10_000))
def test_lookup_reports_its_zone_and_the_distinct_pages_its_probes_read(tmp_path_factory, entry_count, target):
    index = filled_index(tmp_path_factory.mktemp("index"), entry_count)
    recorder = Recorder()
    previous = install_observer(recorder)
    try:
        index.lookup(target)
    finally:
        install_observer(previous)
        probes: list[int] = []
        with open(index.path, "rb") as file:
            buffer = file.read()
        _, zone = slot_and_zone_for(buffer, entry_count, target, recording(LAYOUT.key, probes), LARGEST_LOWER_BOUND)
        index.close()
    expected_pages = len({slot * LAYOUT.entry_bytes // PAGE_BYTES for slot in probes})
    assert recorder.lookups == [("offset", zone.value, expected_pages)]
    if zone.value == "warm":
        assert expected_pages <= 3  # the warm section spans at most three pages


def test_explain_lookup_lists_probes_and_pages_and_counts_as_a_lookup(tmp_path):
    index = filled_index(tmp_path, 3000)  # 24,000 bytes: the cold section spans pages 0-3
    explanation, entry = index.explain_lookup(30)
    assert explanation.zone.value == "cold" and entry.offset == 30
    assert explanation.pages == tuple(dict.fromkeys(s * 8 // PAGE_BYTES for s in explanation.probed_slots))
    assert index.statistics().cold_lookup_count == 1
    index.close()


def test_lookups_that_search_no_section_report_zone_none_and_count_neither_warm_nor_cold(tmp_path):
    """An empty index, or a target below the first entry (every lookup into a young segment):
    zone "none", so a small setup does not read as all cold. Searched lookups keep their zone."""
    empty = OffsetIndex(str(tmp_path / "00000000000000000100.index"), 100, max_index_bytes=8 * 100)
    offsets = OffsetIndex(str(tmp_path / "00000000000000000200.index"), 200, max_index_bytes=8 * 3_000)
    for number in range(2_000):
        offsets.append(210 + number, number * 10)
    times = TimeIndex(str(tmp_path / "00000000000000000200.timeindex"), 200, max_index_bytes=12 * 100)
    times.maybe_append(1_000, 210)
    recorder = Recorder()
    previous = install_observer(recorder)
    try:
        empty.lookup(150)
        offsets.lookup(205)  # below the first entry (210)
        times.lookup(999)  # below the first timestamp
        offsets.lookup(211)  # cold: the first entry of many is not in the warm section
        offsets.lookup(2_100)  # warm
        explanation, _ = offsets.explain_lookup(201)
    finally:
        install_observer(previous)
    assert [(index, zone) for index, zone, _ in recorder.lookups] == [
        ("offset", "none"), ("offset", "none"), ("time", "none"), ("offset", "cold"), ("offset", "warm"),
        ("offset", "none")]
    assert explanation.zone is Zone.NONE
    statistics = [index.statistics() for index in (empty, offsets, times)]
    assert [(s.warm_lookup_count, s.cold_lookup_count) for s in statistics] == [(0, 0), (1, 1), (0, 0)]
    for index in (empty, offsets, times):
        index.close()


@settings(max_examples=30, deadline=None)
@given(
    entry_count=st.sampled_from([0, 1, 5, 1026, 2000]),
    offsets=st.lists(st.integers(0, 4_500), min_size=3, max_size=40),
)
def test_lookups_searched_together_report_the_zones_of_lookups_one_by_one(tmp_path_factory, entry_count, offsets):
    """``lookup_positions`` answers the targets between its first and last from one decoded run:
    each still reports the zone its own search would have (none, cold or warm)."""
    index = OffsetIndex(str(tmp_path_factory.mktemp("zones") / "00000000000000000000.index"), 0,
                        max_index_bytes=8 * 3_000)
    for number in range(entry_count):
        index.append(100 + 2 * number, number * 10)
    offsets = sorted(offsets)
    one_by_one, together = Recorder(), Recorder()
    previous = install_observer(one_by_one)
    try:
        for offset in offsets:
            index.lookup(offset)
        install_observer(together)
        index.lookup_positions(offsets)
    finally:
        install_observer(previous)
        index.close()
    zones = Counter(zone for _, zone, _ in one_by_one.lookups)
    assert Counter(zone for _, zone, _ in together.lookups) == zones
    assert zones["none"] == sum(1 for offset in offsets if entry_count == 0 or offset < 100)


def test_nothing_is_measured_while_no_observer_listens(tmp_path):
    index = filled_index(tmp_path, 10)
    recorder = Recorder()
    recorder.enabled = False
    previous = install_observer(recorder)
    try:
        index.lookup(5)
        watch = stopwatch("fetch")
        watch.lap("log_read")
        watch.mark_faults()
        watch.faults("log_read")
    finally:
        install_observer(previous)
    assert recorder.lookups == [] and recorder.phases == [] and recorder.faults == []
    assert index.statistics().warm_lookup_count == 1  # the statistics count regardless
    index.close()


def test_stopwatch_reports_laps_in_order(tmp_path):
    recorder = Recorder()
    previous = install_observer(recorder)
    try:
        watch = stopwatch("produce")
        watch.lap("validation")
        watch.lap("append")
    finally:
        install_observer(previous)
    assert [(op, phase) for op, phase, _ in recorder.phases] == [("produce", "validation"), ("produce", "append")]
    assert all(seconds >= 0 for _, _, seconds in recorder.phases)


def test_a_lap_shared_by_several_operations_is_one_observation_of_the_mean_each(tmp_path):
    recorder = Recorder()
    previous = install_observer(recorder)
    try:
        watch = stopwatch("offsets_for_times")
        watch.lap_each("index_search", 4)
        watch.lap_each("log_scan", 0)  # nothing done: no observation
        watch.lap("log_scan")
    finally:
        install_observer(previous)
    assert [(op, phase) for op, phase, _ in recorder.phases] == [("offsets_for_times", "index_search")] * 4 + [
        ("offsets_for_times", "log_scan")]
    assert len({seconds for _, phase, seconds in recorder.phases if phase == "index_search"}) == 1


def test_a_segment_restarts_the_callers_stopwatch_after_its_first_use_check(tmp_path, monkeypatch):
    """A time lookup's one stopwatch (the log's) is handed to the segment searched, which restarts
    it after its first-use check: a check that takes long (it may recover the segment) is in no
    phase and its faults in no path, as a fetch's first use is not. The clock is a fake one that
    only the check moves."""
    from tests.support.log_test_support import batch, open_log

    from seglog_server.storage.base import observer as observer_module
    from seglog_server.storage.base.clock import FakeClock

    log = open_log(tmp_path, FakeClock(1_700_000_000_000))
    log.append(batch(b"a", b"b", b"c", timestamps=[100, 200, 300]))
    segment = log._segments.active
    segment.drop_time_steps()  # the search below scans (its appends fed a table that answers from memory)
    now = [0.0]
    monkeypatch.setattr(observer_module, "_perf_counter", lambda: now[0])
    checked = []

    def slow_check() -> None:
        segment._pending_check = None
        now[0] += 1000.0  # a first-use check (a recovery, say) that took 1,000 s
        checked.append(True)

    segment._pending_check = (None, 0)
    monkeypatch.setattr(segment, "_check_once", slow_check)
    recorder = Recorder()
    previous = install_observer(recorder)
    try:
        watch = stopwatch("offsets_for_times")  # the caller's, as Log._search_timestamp makes it
        found = segment.find_offset_by_timestamp(150, 0, watch)
    finally:
        install_observer(previous)
        log.close()
    assert checked and (found.offset, found.timestamp_ms) == (1, 200)
    assert recorder.phases == [("offsets_for_times", "index_search", 0.0), ("offsets_for_times", "log_scan", 0.0)]


def test_held_laps_count_only_when_released_and_as_they_came(tmp_path):
    """A bounded lookup's stopwatches (HeldStopwatch): their laps and fault counts reach the
    installed observer only at ``release_held``, in order, once; a list dropped, nothing."""
    from seglog_server.metrics.instruments import MetricsObserver

    recorder = Recorder()
    previous = install_observer(recorder)
    try:
        held, dropped = [], []
        for figures in (held, dropped):
            watch = held_stopwatch("offsets_for_times", figures, mark_faults=True)
            watch.lap_each("segment_lookup", 2)
            watch.lap_each("log_scan", 0)  # nothing done: no observation
            watch._minor -= 3  # (three faults since the mark, as a read would take them)
            watch.lap_faults("index_search", "log_read")
        assert recorder.phases == [] and recorder.faults == []
        release_held(held)
        release_held(held)  # (once)
        del dropped
    finally:
        install_observer(previous)
    assert [(op, phase) for op, phase, _ in recorder.phases] == [("offsets_for_times", "segment_lookup")] * 2 + [
        ("offsets_for_times", "index_search")]
    assert [(path, minor >= 3) for path, minor, _ in recorder.faults] == [("log_read", True)]
    metrics = MetricsObserver()
    previous = install_observer(metrics)
    try:
        held = []
        held_stopwatch("offsets_for_times", held).lap_each("log_scan", 3)
        assert sum(metrics.phase_histograms["offsets_for_times"]["log_scan"].counts) == 0
        release_held(held)
    finally:
        install_observer(previous)
    assert sum(metrics.phase_histograms["offsets_for_times"]["log_scan"].counts) == 3


def test_held_laps_hold_nothing_while_no_observer_listens():
    held = []
    watch = held_stopwatch("offsets_for_times", held)
    watch.lap("index_search")
    assert held == [] and watch.observing is False
