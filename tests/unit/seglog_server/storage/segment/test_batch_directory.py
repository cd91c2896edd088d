"""The batch directory (segment/batch_directory.py): batched lookups by time answered from it equal
``Log.offset_for_timestamp`` target by target (the oracle, which never uses it), across appends
after it was built, truncation, a log start offset inside the log, rolls and damaged files; its
error paths (a failing read, a changed file, the budget) fall back to the per-target scans."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import (
    NOW_MS,
    FailingFs,
    batch,
    batch_positions,
    budget_installer,
    config,
    open_log,
    poke,
    scans_only,
)

from seglog.records import LENGTH_OFFSET, Compression
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import CorruptSegmentError, StorageError
from seglog_server.storage.base.observer import StorageObserver, install_observer
from seglog_server.storage.segment import batch_directory, segment_time_lookups
from seglog_server.storage.segment.batch_directory import BatchDirectory, DirectoryBudget

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


@pytest.fixture(autouse=True)
def no_time_steps(monkeypatch):
    """The directory's tests run without time-step tables (time_steps.py), which answer first:
    a budget of no bytes refuses every table."""
    monkeypatch.setattr(segment_time_lookups, "TIME_STEPS", DirectoryBudget(0))


@pytest.fixture
def budget(monkeypatch):
    """A budget of the test's own (the process's is shared): ``budget(bytes_max)``."""

    return budget_installer(monkeypatch, "DIRECTORIES")


def per_target(log, targets):
    with scans_only(log):
        return [log.offset_for_timestamp(target) for target in targets]


def outcomes_alone(log, targets):
    found = []
    with scans_only(log):
        for target in targets:
            try:
                found.append(log.offset_for_timestamp(target))
            except StorageError as exc:
                found.append(type(exc))
    return found


def directory_of(log, slot: int = -1) -> BatchDirectory | None:
    return log._local.segments.at(slot)._directory_ref()


# -- equal to the per-target search (Hypothesis) --------------------------------------------------

operation = st.one_of(
    st.tuples(st.just("append"), st.lists(st.integers(0, 300), min_size=1, max_size=80), st.booleans()),
    st.tuples(st.just("lookup")),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("delete_records"), st.floats(0, 1)),
    st.tuples(st.just("roll")),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    operations=st.lists(operation, min_size=1, max_size=14),
    segment_bytes=st.sampled_from([1500, 1 << 20]),
    index_interval_bytes=st.sampled_from([1, 4096]),
    targets=st.lists(st.integers(NOW_MS - 5, NOW_MS + 310), max_size=40),
    extend_bytes=st.sampled_from([1, 300, 4 << 20]),
)
def test_answers_from_the_directory_equal_a_lookup_per_target_as_the_log_changes(
    tmp_path_factory, budget, monkeypatch, operations, segment_bytes, index_interval_bytes, targets, extend_bytes
):
    budget()
    monkeypatch.setattr(segment_time_lookups, "_DIRECTORY_EXTEND_BYTES", extend_bytes)  # directories entered in parts
    log = open_log(tmp_path_factory.mktemp("directory"), FakeClock(NOW_MS),
                   config(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes))
    seen: list[int] = []
    for kind, *arguments in operations + [("lookup",)]:
        if kind == "append":
            deltas, compressed = arguments
            log.append(batch(*[b"v%d" % delta for delta in deltas], timestamps=[NOW_MS + delta for delta in deltas],
                             compression=Compression.GZIP if compressed else Compression.NONE))
            seen.extend(deltas[:3])
        elif kind == "truncate":
            log.truncate_to(int(log.log_end_offset * arguments[0]))
        elif kind == "delete_records":
            log.delete_records(max(log.log_start_offset, int(log.log_end_offset * arguments[0])))
        elif kind == "roll" and log.log_end_offset > 0:
            log.roll()
        else:
            asked = targets + [NOW_MS + delta + step for delta in seen[-8:] for step in (-1, 0, 1)]
            assert log.offsets_for_timestamps(asked) == per_target(log, asked)


def test_a_batched_lookup_builds_the_directory_and_extends_it_as_the_segment_grows(tmp_path, clock, budget):
    made = budget()
    fs = FailingFs()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1 << 20), fs=fs)
    for first in range(0, 200, 10):
        log.append(batch(*[b"v"] * 10, timestamps=[NOW_MS + first + i for i in range(10)]))
    targets = [NOW_MS + t for t in range(0, 200, 7)]
    assert log.offsets_for_timestamps(targets) == per_target(log, targets)
    directory = directory_of(log)
    assert len(directory) == 20 and len(made) == 1 and made.size == directory.size_bytes
    log.append(batch(*[b"w"] * 10, timestamps=[NOW_MS + 200 + i for i in range(10)]))
    late = [NOW_MS + 150, NOW_MS + 205]
    fs.preads = 0
    assert [found.offset for found in log.offsets_for_timestamps(late)] == [150, 205]
    assert directory_of(log) is directory and len(directory) == 21
    assert fs.preads == 3  # the new batch's header, then one read for each target's (small) batch


def test_a_truncation_drops_the_directory(tmp_path, clock, budget):
    made = budget()
    log = open_log(tmp_path, clock, config())
    for first in range(0, 100, 10):
        log.append(batch(*[b"v"] * 10, timestamps=[NOW_MS + first + i for i in range(10)]))
    log.offsets_for_timestamps([NOW_MS + 5, NOW_MS + 55])
    assert directory_of(log) is not None
    log.truncate_to(35)
    assert directory_of(log) is None and len(made) == 0
    log.append(batch(*[b"w"] * 10, timestamps=[NOW_MS + 500 + i for i in range(10)]))
    targets = [NOW_MS + 5, NOW_MS + 39, NOW_MS + 45, NOW_MS + 505]
    assert log.offsets_for_timestamps(targets) == per_target(log, targets)
    assert log.offsets_for_timestamps(targets)[3].offset == log.log_end_offset - 5
    assert directory_of(log).last_offsets[-1] == log.log_end_offset - 1


def test_a_large_segment_waits_for_enough_targets_before_building_one(tmp_path, clock, budget):
    budget()
    log = open_log(tmp_path, clock, config())
    for first in range(0, 4000, 100):  # about 440 KB: 16 targets a MiB is 7 targets
        log.append(batch(*[b"v" * 100] * 100, timestamps=[NOW_MS + first + i for i in range(100)]))
    assert log.offsets_for_timestamps([NOW_MS + 1, NOW_MS + 2]) == per_target(log, [NOW_MS + 1, NOW_MS + 2])
    assert directory_of(log) is None
    targets = [NOW_MS + t for t in range(0, 4000, 500)]
    assert log.offsets_for_timestamps(targets) == per_target(log, targets)
    assert directory_of(log) is not None


# -- damaged files ---------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    victim=st.integers(0, 1000),
    field=st.sampled_from(["length", "length_onto_a_later_header", "base_offset", "max_timestamp", "record"]),
    value=st.integers(-(2**31), 2**31 - 1),
    built_first=st.booleans(),
    targets=st.lists(st.integers(NOW_MS - 2, NOW_MS + 65), min_size=2, max_size=30),
)
# Found in CI: the per-target search for 6 rebuilt the offset index, which stopped at the rotted
# base offset; the search for 8 then failed where alone it answers (test_search_history.py).
@example(victim=126, field="base_offset", value=-1, built_first=False, targets=[NOW_MS + 8, NOW_MS + 6])
def test_a_damaged_file_answers_or_fails_as_the_per_target_search(
    tmp_path_factory, budget, victim, field, value, built_first, targets
):
    """Damage found by the directory's own walk: every target's outcome is the per-target
    search's (answer, or error class). Damage made after the directory was built: a target
    whose own batch changed fails as alone; one whose batch is intact may be answered where
    the per-target scan, starting at an index entry before the damage, fails: then its answer
    is the one the undamaged file gave. A length rotted onto a later header after the build
    misleads that scan without failing it (it jumps over the intact batch): the directory
    answers what the file held when it was entered there too."""
    budget()
    directory = tmp_path_factory.mktemp("damaged")
    log = open_log(directory, FakeClock(NOW_MS), config(segment_bytes=1 << 20, index_interval_bytes=200))
    for index in range(60):
        log.append(batch(b"a" * 30, b"b" * 30, timestamps=[NOW_MS + index, NOW_MS + index - 3]))
    clean = per_target(log, targets)
    if built_first:
        log.offsets_for_timestamps([NOW_MS, NOW_MS + 30])
        assert directory_of(log) is not None
    path = os.path.join(directory, "00000000000000000000.log")
    positions = batch_positions(path)
    position = positions[victim % len(positions)]
    onto_a_header = field == "length_onto_a_later_header"
    if onto_a_header:  # another valid length: the batch ends on a later header
        ends = positions[victim % len(positions) + 2 :] + [os.path.getsize(path)]
        field, value = "length", ends[value % len(ends)] - position - 12
    at = {"length": (LENGTH_OFFSET, _INT32), "base_offset": (0, _INT64), "max_timestamp": (35, _INT64),
          "record": (61 + victim % 40, _INT32)}[field]
    poke(path, position + at[0], at[1], value)
    alone = outcomes_alone(log, targets)
    together = log.lookup_timestamps(targets)
    together = [type(found) if isinstance(found, StorageError) else found for found in together]
    for answer, reference, undamaged in zip(together, alone, clean):
        if built_first and answer != reference:
            assert (reference is CorruptSegmentError or onto_a_header) and answer == undamaged
        else:
            assert answer == reference


@pytest.mark.parametrize("onto", [4, 14, 60])  # a later batch's header, or the file's end
def test_a_length_landing_on_a_later_header_ends_the_directory_where_an_index_entry_is_skipped(
    tmp_path, clock, budget, onto
):
    """Batch 1's length rotted into one ending exactly on batch ``onto``'s header: a walk from
    the segment's start jumps over batches 2.. whose index entries the per-target search starts
    at. The directory refuses batch 1 (it spans an entry), so every target from there is the
    search's: the same answers (before, targets in the skipped batches answered a later record:
    offset 28 where the search answers 4)."""
    budget()
    log = open_log(tmp_path, clock, config(segment_bytes=1 << 20, index_interval_bytes=200))
    for index in range(60):
        log.append(batch(b"a" * 30, b"b" * 30, timestamps=[NOW_MS + index, NOW_MS + index - 3]))
    path = os.path.join(tmp_path, "00000000000000000000.log")
    positions = batch_positions(path) + [os.path.getsize(path)]
    poke(path, positions[1] + LENGTH_OFFSET, _INT32, positions[onto] - positions[1] - 12)
    targets = [NOW_MS + t for t in (0, 1, 2, 3, 5, 9, 13, 20, 40, 59)]
    alone = outcomes_alone(log, targets)
    together = [type(found) if isinstance(found, StorageError) else found for found in log.lookup_timestamps(targets)]
    assert together == alone
    assert alone[2].offset == 4
    directory = directory_of(log)
    assert directory.damaged and len(directory) == 1 and directory.end_position == positions[1]


def test_the_index_entries_a_walk_checks_are_the_offset_index_s_past_each_position(tmp_path, clock):
    """OffsetIndex.positions_after pages through the entries past a position; IndexEntries answers
    the first entry past each position asked, across pages, and none past the last."""
    log = open_log(tmp_path, clock, config(index_interval_bytes=1))
    for index in range(600):
        log.append(batch(b"v", timestamps=NOW_MS + index))
    index = log._local.segments.at(-1)._offset_index
    everything = [index.entry(slot).position for slot in range(index.entry_count)]
    assert len(everything) == 599  # every batch after the first
    assert index.positions_after(-1, 3) == everything[:3]
    assert index.positions_after(everything[10], 2) == everything[11:13]
    assert index.positions_after(everything[10] + 1, 2) == everything[11:13]
    assert index.positions_after(everything[-1], 5) == []
    entries = batch_directory.IndexEntries(index.positions_after)
    asked = [0, *everything[::7], everything[-1]]
    assert [entries.after(position) for position in asked] == [
        *(everything[everything.index(position) + 1] if position else everything[0] for position in asked[:-1]),
        1 << 62,
    ]
    assert batch_directory.IndexEntries(None).after(0) == 1 << 62


def test_a_batch_refused_by_the_walk_ends_the_directory_and_later_targets_fail_as_alone(tmp_path, clock, budget):
    budget()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1 << 20))
    for index in range(30):
        log.append(batch(b"a" * 30, timestamps=NOW_MS + index))
    path = os.path.join(tmp_path, "00000000000000000000.log")
    poke(path, batch_positions(path)[20] + LENGTH_OFFSET, _INT32, 5)
    outcomes = log.lookup_timestamps([NOW_MS + 3, NOW_MS + 19, NOW_MS + 25])
    directory = directory_of(log)
    assert directory.damaged and len(directory) == 20
    assert [found.offset for found in outcomes[:2]] == [3, 19]
    assert isinstance(outcomes[2], CorruptSegmentError)
    with pytest.raises(CorruptSegmentError):
        log.offset_for_timestamp(NOW_MS + 25)  # from the directory too: past its end, the scans


# -- failing reads and the budget ------------------------------------------------------------------


def small_log(tmp_path, clock, fs=None):
    log = open_log(tmp_path, clock, config(index_interval_bytes=1 << 20), **({"fs": fs} if fs else {}))
    for first in range(0, 300, 10):
        log.append(batch(*[b"v"] * 10, timestamps=[NOW_MS + first + i for i in range(10)]))
    return log


def test_a_failing_read_while_building_leaves_the_call_to_the_scans(tmp_path, clock, budget):
    budget()
    fs = FailingFs()
    log = small_log(tmp_path, clock, fs)
    targets = [NOW_MS + t for t in range(0, 300, 13)]
    expected = per_target(log, targets)
    fs.fail = 1  # the directory's first read
    assert log.offsets_for_timestamps(targets) == expected
    assert not log.is_offline and len(directory_of(log)) == 0
    assert log.offsets_for_timestamps(targets) == expected
    assert len(directory_of(log)) == 30 and not directory_of(log).damaged


def test_a_failing_read_of_a_batch_leaves_the_rest_of_the_call_to_the_scans(tmp_path, clock, budget):
    budget()
    fs = FailingFs()
    log = small_log(tmp_path, clock, fs)
    targets = [NOW_MS + t for t in range(0, 300, 13)]
    expected = per_target(log, targets)
    log.offsets_for_timestamps(targets[:2])  # built
    fs.fail = 1  # the first batch read from the directory
    assert log.offsets_for_timestamps(targets) == expected
    assert not log.is_offline and len(directory_of(log)) == 30


def test_a_directory_larger_than_the_budget_is_not_kept(tmp_path, clock, budget):
    made = budget(bytes_max=1000)  # 30 batches: 720 bytes of entries and the object's 400
    log = small_log(tmp_path, clock)
    targets = [NOW_MS + t for t in range(0, 300, 13)]
    assert log.offsets_for_timestamps(targets) == per_target(log, targets)
    assert directory_of(log) is None and len(made) == 0
    assert log.offsets_for_timestamps(targets) == per_target(log, targets)
    assert log._local.segments.at(-1)._directory_refused


def test_the_budget_drops_the_least_recently_used_directory(tmp_path, clock, budget):
    made = budget(bytes_max=1200)  # one directory of 30 batches (1,120 bytes), not two
    first, second = small_log(tmp_path / "a", clock), small_log(tmp_path / "b", clock)
    targets = [NOW_MS + t for t in range(0, 300, 13)]
    first.offsets_for_timestamps(targets)
    assert directory_of(first) is not None
    second.offsets_for_timestamps(targets)
    assert directory_of(second) is not None and directory_of(first) is None and len(made) == 1
    assert first.offsets_for_timestamps(targets) == per_target(first, targets)  # built again
    assert directory_of(first) is not None and directory_of(second) is None


def test_the_directory_walk_checks_lengths_and_offsets_as_every_walk(tmp_path, clock):
    """The walk itself, over a file whose third batch's base offset went back: two entered,
    damaged, and nothing past the refused batch read."""
    small_log(tmp_path, clock).close()
    path = os.path.join(tmp_path, "00000000000000000000.log")
    poke(path, batch_positions(path)[2], _INT64, 3)
    with open(path, "rb") as file:
        data = file.read()
    reads = []

    def read(position, size):
        reads.append((position, size))
        return data[position : position + size]

    directory = BatchDirectory(0)
    directory.extend(read, len(data), 1 << 62)
    assert directory.damaged and len(directory) == 2
    assert list(directory.last_offsets) == [9, 19] and directory.end_position == batch_positions(path)[2]
    assert all(position + size <= len(data) for position, size in reads)
    assert batch_directory.DIRECTORY_BYTES_MAX == 16 * 1024 * 1024


class PhaseCounter(StorageObserver):
    enabled = True

    def __init__(self) -> None:
        self.phases: dict[tuple[str, str], int] = {}

    def phase(self, operation: str, phase: str, seconds: float) -> None:
        self.phases[operation, phase] = self.phases.get((operation, phase), 0) + 1


def test_a_lookup_from_the_directory_counts_each_target_in_each_phase(tmp_path, clock, budget):
    budget()
    log = small_log(tmp_path, clock)
    targets = [NOW_MS + t for t in range(0, 300, 7)]
    log.offsets_for_timestamps(targets)
    observer = PhaseCounter()
    previous = install_observer(observer)
    try:
        log.offsets_for_timestamps(targets)
    finally:
        install_observer(previous)
    assert directory_of(log) is not None
    for phase in ("segment_lookup", "index_search", "log_scan"):
        assert observer.phases["offsets_for_times", phase] == len(targets)


def test_the_walk_stops_once_the_directory_outgrows_its_cap(tmp_path, clock, budget):
    made = budget(bytes_max=10_000)
    log = open_log(tmp_path, clock, config())
    for index in range(5000):  # 5,000 one-record batches: 120,000 bytes of entries
        log.append(batch(b"v", timestamps=NOW_MS + index))
    with open(os.path.join(tmp_path, "00000000000000000000.log"), "rb") as file:
        data = file.read()
    directory = BatchDirectory(0)
    assert not directory.extend(lambda position, size: data[position : position + size], len(data), 1 << 62, 10_000)
    assert 10_000 < directory.size_bytes < 10_000 + 24 * (256 * 1024 // 61 + 1)  # within a chunk of the cap
    assert directory.end_position < len(data) and not directory.damaged
    targets = [NOW_MS + t for t in range(0, 5000, 37)]
    assert log.offsets_for_timestamps(targets) == per_target(log, targets)
    assert log._local.segments.at(-1)._directory_refused and len(made) == 0


def test_a_single_lookup_uses_a_directory_batched_lookups_built_and_builds_none(tmp_path, clock, budget):
    budget()
    fs = FailingFs()
    log = small_log(tmp_path, clock, fs)
    assert [log.offset_for_timestamp(NOW_MS + t).offset for t in (5, 155)] == [5, 155]
    assert directory_of(log) is None  # single lookups alone build none
    targets = [NOW_MS + t for t in range(0, 300, 13)]
    log.offsets_for_timestamps(targets)
    assert directory_of(log) is not None
    fs.preads = 0
    assert [log.offset_for_timestamp(target) for target in targets] == per_target(log, targets)
    assert fs.preads == 2 * len(targets)  # the directory's: one read of each (small) batch; the oracle's: one too
    fs.fail = 1
    assert log.offset_for_timestamp(NOW_MS + 77) == per_target(log, [NOW_MS + 77])[0]  # a failed read: the scans


def test_one_call_enters_a_bounded_part_of_the_file_and_later_calls_the_rest(tmp_path, clock, budget, monkeypatch):
    """A lookup walks at most _DIRECTORY_EXTEND_BYTES (and one header) of the .log into the
    directory, building it or extending it over what was appended since, batched or single:
    the targets past the part entered are the scans', with the same answers."""
    budget()
    monkeypatch.setattr(segment_time_lookups, "_DIRECTORY_EXTEND_BYTES", 1000)
    fs = FailingFs()
    log = small_log(tmp_path, clock, fs)
    segment = log._local.segments.at(-1)
    file_end = segment.size_in_bytes
    targets = [NOW_MS + t for t in range(0, 300, 13)] + [NOW_MS + 299, NOW_MS + 400]
    expected = per_target(log, targets)
    ends = []
    for _ in range(file_end // 1000 + 2):
        assert log.offsets_for_timestamps(targets) == expected
        ends.append(directory_of(log).end_position)
    steps = [after - before for before, after in zip([0] + ends, ends)]
    assert ends[-1] == file_end and len(directory_of(log)) == 30
    assert all(step <= 1000 + 61 for step in steps) and steps[0] > 0 and ends[0] < file_end
    # The active segment grown by many batches since: a single lookup enters one part of them.
    for first in range(300, 600, 10):
        log.append(batch(*[b"w"] * 10, timestamps=[NOW_MS + first + i for i in range(10)]))
    before, grown = directory_of(log).end_position, segment.size_in_bytes
    assert log.offset_for_timestamp(NOW_MS + 590) == per_target(log, [NOW_MS + 590])[0]
    assert 0 < directory_of(log).end_position - before <= 1000 + 61 < grown - before


@pytest.mark.timeout(30)  # before, both walks asked for the missing bytes forever under the log's lock
@pytest.mark.parametrize("built_first", [False, True])
def test_a_log_file_shorter_than_its_size_fails_the_targets_past_its_end_in_both_walks(
    tmp_path, clock, budget, built_first
):
    """The .log cut under the open segment (outside seglog): a read returning fewer bytes than
    the segment's size promised is damage, for the directory's walk and for the per-target scan
    alike: the targets before the cut are answered, those past it fail, nothing waits."""
    budget()
    log = small_log(tmp_path, clock)
    targets = [NOW_MS + t for t in range(0, 300, 13)]
    clean = per_target(log, targets)
    if built_first:
        log.offsets_for_timestamps(targets[:1])
        log.append(batch(*[b"w"] * 10, timestamps=[NOW_MS + 300 + i for i in range(10)]))  # to be entered
        targets.append(NOW_MS + 305)
        clean.append(per_target(log, [NOW_MS + 305])[0])
    path = os.path.join(tmp_path, "00000000000000000000.log")
    cut = batch_positions(path)[15] + 10
    os.truncate(path, cut)
    alone = outcomes_alone(log, targets)
    together = [type(found) if isinstance(found, StorageError) else found for found in log.lookup_timestamps(targets)]
    assert alone == together
    assert alone == [CorruptSegmentError if target >= NOW_MS + 150 else found for target, found in zip(targets, clean)]
    assert not log.is_offline


@pytest.mark.timeout(30)  # before, the walk asked for the missing bytes forever
def test_the_directory_walk_marks_a_read_shorter_than_the_file_damaged(tmp_path, clock):
    small_log(tmp_path, clock).close()
    path = os.path.join(tmp_path, "00000000000000000000.log")
    with open(path, "rb") as file:
        data = file.read()
    cut = batch_positions(path)[7] + 5
    directory = BatchDirectory(0)
    assert directory.extend(lambda position, size: data[position : min(position + size, cut)], len(data), 1 << 62)
    assert directory.damaged and len(directory) < 8 and directory.end_position <= cut


@pytest.mark.parametrize("how", ["truncate_fully", "retention"])
def test_a_segment_scheduled_for_deletion_leaves_the_budget_at_once(tmp_path, clock, budget, how):
    """A replaced or retired segment's directory is out of the budget when its files are renamed
    to .deleted, not file.delete.delay.ms later when they are unlinked."""
    made = budget()
    log = small_log(tmp_path, clock)
    log.roll()
    log.append(batch(*[b"w"] * 10, timestamps=[NOW_MS + 300 + i for i in range(10)]))
    log.offsets_for_timestamps([NOW_MS + t for t in range(0, 300, 13)])
    assert directory_of(log, 0) is not None and len(made) == 1 and made.size > 0
    if how == "truncate_fully":
        log.truncate_fully_and_start_at(log.log_end_offset)
    else:
        log.delete_records(300)
        assert log.delete_old_segments() == 1
    assert len(made) == 0 and made.size == 0


def test_a_file_shrunk_under_its_directory_leaves_the_budget(tmp_path, clock, budget):
    """The .log cut to fewer bytes than the directory entered, by a way other than the segment's
    own truncation (which drops it first): the old directory leaves the budget as it is replaced."""
    made = budget()
    log = small_log(tmp_path, clock)
    targets = [NOW_MS + t for t in range(0, 300, 13)]
    log.offsets_for_timestamps(targets)
    segment = log._local.segments.at(-1)
    old = directory_of(log)
    segment.log.truncate_to(batch_positions(segment.log.path)[20])
    assert log.offsets_for_timestamps(targets) == per_target(log, targets)
    assert directory_of(log) is not old
    assert made.size == (directory_of(log).size_bytes if directory_of(log) is not None else 0) and len(made) <= 1
