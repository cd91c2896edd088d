"""Log.offsets_for_timestamps: many targets under one lock, worked in ascending order, answering
exactly what Log.offset_for_timestamp answers target by target (the oracle), on sound logs and on
damaged ones alike."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import (
    INT32,
    INT64,
    NOW_MS,
    batch,
    batch_positions,
    config,
    open_log,
    poke,
    scans_only,
)

from seglog.records import LENGTH_OFFSET, Compression, TimestampType
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import CorruptSegmentError, StorageError
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.log.log_results import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from seglog_server.storage.base.observer import StorageObserver, install_observer
from seglog_server.storage.segment import segment_time_lookups
from seglog_server.storage.segment.batch_directory import DirectoryBudget

SPECIALS = [LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


@pytest.fixture(autouse=True)
def no_time_steps(monkeypatch):
    """The searches that read the file, without the segments' time-step tables (time_steps.py),
    which answer first from memory: their reads, walks, tables, phases and the damage their
    bytes meet when changed under the running log. test_time_steps.py holds the tables to
    these searches, damaged files included."""
    monkeypatch.setattr(segment_time_lookups, "TIME_STEPS", DirectoryBudget(0))


def per_target(log, targets):
    with scans_only(log):  # the oracle: no segment's batch directory
        return [log.offset_for_timestamp(target) for target in targets]


# -- the batched call equals the per-target calls (Hypothesis) ------------------------------------

batch_timestamps = st.lists(st.integers(0, 300), min_size=1, max_size=6)  # offsets from NOW_MS, any order
targets_strategy = st.lists(
    st.one_of(st.integers(NOW_MS - 5, NOW_MS + 310), st.sampled_from(SPECIALS)), max_size=60
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    batches=st.lists(st.tuples(batch_timestamps, st.booleans()), max_size=40),
    segment_bytes=st.sampled_from([400, 900, 4096, 1 << 20]),
    index_interval_bytes=st.sampled_from([1, 100, 4096]),
    delete_fraction=st.one_of(st.none(), st.floats(0, 1)),
    delete_segments=st.booleans(),
    targets=targets_strategy,
)
def test_the_batched_lookup_equals_a_lookup_per_target(
    tmp_path_factory, batches, segment_bytes, index_interval_bytes, delete_fraction, delete_segments, targets
):
    log = open_log(tmp_path_factory.mktemp("batched"), FakeClock(NOW_MS),
                   config(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes))
    for deltas, compressed in batches:
        values = [b"v%d" % delta for delta in deltas]
        log.append(batch(*values, timestamps=[NOW_MS + delta for delta in deltas],
                         compression=Compression.GZIP if compressed else Compression.NONE))
    if delete_fraction is not None:
        log.delete_records(int(log.log_end_offset * delete_fraction))
        if delete_segments:
            log.delete_old_segments()
    # every distinct batch-found target, and the neighbours of each record's timestamp
    targets = targets + [NOW_MS + delta + step for deltas, _ in batches[:5] for delta in deltas for step in (-1, 0, 1)]
    assert log.offsets_for_timestamps(targets) == per_target(log, targets)
    assert log.offsets_for_timestamps(sorted(targets, reverse=True)) == per_target(log, sorted(targets, reverse=True))


def test_an_empty_log_answers_none_and_the_specials(tmp_path, clock):
    log = open_log(tmp_path, clock)
    targets = [NOW_MS, 0, *SPECIALS, NOW_MS]
    assert log.offsets_for_timestamps(targets) == per_target(log, targets)
    assert log.offsets_for_timestamps(targets)[:2] == [None, None]


def test_no_targets_is_an_empty_answer(tmp_path, clock):
    assert open_log(tmp_path, clock).offsets_for_timestamps([]) == []


def test_log_append_time_batches_answer_as_per_target(tmp_path, clock):
    log = open_log(tmp_path, clock, config(message_timestamp_type=TimestampType.LOG_APPEND_TIME, segment_bytes=400))
    for step in range(30):
        clock.advance(step % 3)
        log.append(batch(b"a", b"b", timestamps=NOW_MS))
    targets = [NOW_MS + delta for delta in range(-1, 40)]
    assert log.offsets_for_timestamps(targets) == per_target(log, targets)


def test_an_unknown_special_target_is_value_error_before_any_search(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.append(batch(b"a"))
    with pytest.raises(ValueError, match="-6"):
        log.offsets_for_timestamps([NOW_MS, -6])


def test_a_closed_log_refuses_the_call(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.close()
    with pytest.raises(StorageError, match="closed"):
        log.offsets_for_timestamps([NOW_MS])


# -- damaged files: the same errors as the per-target path (Hypothesis) ---------------------------


def outcome(call):
    try:
        return call()
    except CorruptSegmentError:
        return CorruptSegmentError


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    victim=st.integers(0, 1000),
    field=st.sampled_from(["length", "base_offset", "max_timestamp", "record"]),
    value=st.integers(-(2**31), 2**31 - 1),
    targets=st.lists(st.one_of(st.integers(NOW_MS - 2, NOW_MS + 65), st.sampled_from(SPECIALS)), min_size=1, max_size=30),
)
def test_a_damaged_log_fails_the_batched_lookup_exactly_when_a_target_fails_alone(
    tmp_path_factory, victim, field, value, targets
):
    directory = tmp_path_factory.mktemp("damaged")
    log = open_log(directory, FakeClock(NOW_MS), config(segment_bytes=2048, index_interval_bytes=200))
    for index in range(60):
        log.append(batch(b"a" * 30, b"b" * 30, timestamps=[NOW_MS + index, NOW_MS + index - 3]))
    path = os.path.join(directory, "00000000000000000000.log")
    positions = batch_positions(path)
    position = positions[victim % len(positions)]
    at = {"length": (LENGTH_OFFSET, INT32), "base_offset": (0, INT64), "max_timestamp": (35, INT64),
          "record": (61 + victim % 40, INT32)}[field]
    poke(path, position + at[0], at[1], value)
    with scans_only(log):
        alone = [outcome(lambda target=target: log.offset_for_timestamp(target)) for target in targets]
    together = outcome(lambda: log.offsets_for_timestamps(targets))
    if CorruptSegmentError in alone:
        assert together is CorruptSegmentError
    else:
        assert together == alone
    # Per target: the answer, or the very error (type and message) its search alone meets.
    together = [described(found) for found in log.lookup_timestamps(targets)]
    with scans_only(log):
        assert together == [described(answer_or_error(log, target)) for target in targets]


def answer_or_error(log, target):
    try:
        return log.offset_for_timestamp(target)
    except StorageError as exc:
        return exc


def described(found):
    return (type(found), str(found)) if isinstance(found, Exception) else found


def test_a_target_whose_search_meets_damage_fails_alone_among_many(tmp_path, clock):
    """A corrupt batch in the first segment fails the targets whose scan reaches it; the
    others (a later segment, the specials) are answered in the same call."""
    log = open_log(tmp_path, clock, config(segment_bytes=2048, index_interval_bytes=1 << 20))
    for index in range(60):
        log.append(batch(b"a" * 30, timestamps=NOW_MS + index))
    path = os.path.join(tmp_path, "00000000000000000000.log")
    positions = batch_positions(path)
    poke(path, positions[3] + LENGTH_OFFSET, INT32, 5)  # the fourth batch's length: a lie
    late = NOW_MS + 59
    outcomes = log.lookup_timestamps([NOW_MS + 5, late, LATEST_TIMESTAMP, NOW_MS + 6])
    assert isinstance(outcomes[0], CorruptSegmentError) and isinstance(outcomes[3], CorruptSegmentError)
    assert f"a search for timestamp {NOW_MS + 5}" in str(outcomes[0])
    assert outcomes[1] == log.offset_for_timestamp(late) and outcomes[1].offset == 59
    assert outcomes[2].offset == 60 and not log.is_offline


def test_an_offline_or_closed_log_refuses_the_whole_call(tmp_path, clock):
    log = open_log(tmp_path, clock)
    log.close()
    with pytest.raises(StorageError, match="closed"):
        log.lookup_timestamps([NOW_MS, LATEST_TIMESTAMP])


# -- the work shared ------------------------------------------------------------------------------


class CountingFs(FileSystem):
    def __init__(self) -> None:
        self.preads = 0

    def pread(self, fd: int, size: int, position: int) -> bytes:
        self.preads += 1
        return super().pread(fd, size, position)


def test_targets_landing_in_one_batch_share_its_scan(tmp_path, clock):
    fs = CountingFs()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1 << 20), fs=fs)  # one index entry: none
    for first in range(0, 200, 10):
        log.append(batch(*[b"v"] * 10, timestamps=[NOW_MS + first + i for i in range(10)]))
    targets = [NOW_MS + 150 + i for i in range(10)]  # all in the batch of offsets 150..159
    assert [found.offset for found in log.offsets_for_timestamps(targets)] == list(range(150, 160))
    fs.preads = 0  # (the first call built the segment's batch directory: one more read)
    assert [found.offset for found in log.offsets_for_timestamps(targets)] == list(range(150, 160))
    assert fs.preads == 1
    fs.preads = 0
    per_target(log, targets)
    assert fs.preads == 10


class CountingObserver(StorageObserver):
    enabled = True

    def __init__(self) -> None:
        self.lookups: dict[tuple[str, str], int] = {}
        self.pages: dict[str, int] = {}
        self.phases: dict[tuple[str, str], int] = {}

    def index_lookup(self, index: str, zone: str, pages: int) -> None:
        self.lookups[index, zone] = self.lookups.get((index, zone), 0) + 1
        self.pages[index] = self.pages.get(index, 0) + pages

    def phase(self, operation: str, phase: str, seconds: float) -> None:
        self.phases[operation, phase] = self.phases.get((operation, phase), 0) + 1


def test_every_target_is_counted_as_one_lookup_in_its_own_zone_and_phases(tmp_path, clock, monkeypatch):
    from seglog_server.storage.segment import segment_time_lookups
    from seglog_server.storage.segment.batch_directory import DirectoryBudget

    # The index searches, as the scans make them (a batch directory answers without the indexes:
    # test_batch_directory.py counts its phases).
    monkeypatch.setattr(segment_time_lookups, "DIRECTORIES", DirectoryBudget(0))
    log = open_log(tmp_path, clock, config(index_interval_bytes=1))
    for index in range(3000):  # an index entry a batch: 3000 entries, a cold section
        log.append(batch(b"v", timestamps=NOW_MS + index))
    targets = [NOW_MS + index for index in range(0, 3000, 7)]
    observed = {}
    for name, call in (("alone", lambda: per_target(log, targets)),
                       ("together", lambda: log.offsets_for_timestamps(targets))):
        observer = CountingObserver()
        previous = install_observer(observer)
        try:
            before = log.statistics()
            call()
            after = log.statistics()
        finally:
            install_observer(previous)
        counts = (after.index_warm_lookup_count - before.index_warm_lookup_count,
                  after.index_cold_lookup_count - before.index_cold_lookup_count)
        observed[name] = (counts, observer)
    (alone_counts, alone), (together_counts, together) = observed["alone"], observed["together"]
    # The statistics count warm and cold; a target below an index's first entry searches neither.
    unsearched = sum(count for (_, zone), count in alone.lookups.items() if zone == "none")
    assert together_counts == alone_counts and sum(alone_counts) + unsearched == 2 * len(targets)
    assert together.lookups == alone.lookups
    assert set(together.lookups) >= {("time", "warm"), ("time", "cold"), ("offset", "cold")}
    for phase in ("segment_lookup", "index_search", "log_scan"):
        assert together.phases["offsets_for_times", phase] == len(targets)
    # the pages the batched search read: the decoded run of entries, each page once
    assert 0 < together.pages["offset"] <= alone.pages["offset"]


def test_targets_landing_in_one_batch_are_answered_by_one_walk_of_its_records(tmp_path, clock, monkeypatch, tables):
    """A batched lookup sends many targets to one large batch: its records are walked once for
    all of them (seek_records), not once per target, with the per-target answers (tables off:
    the walk of a batch that has none)."""
    from seglog_server.storage.format import record_timestamps

    tables(records_min=1 << 30)
    walks = []
    real = record_timestamps.seek_records

    def counted(data, position, end, count, target_deltas, offset_delta_min):
        walks.append(len(target_deltas))
        return real(data, position, end, count, target_deltas, offset_delta_min)

    monkeypatch.setattr(record_timestamps, "seek_records", counted)
    log = open_log(tmp_path, clock, config(index_interval_bytes=1 << 20))
    log.append(batch(*[b"v"] * 3000, timestamps=[NOW_MS + 2 * i for i in range(3000)]))
    targets = [NOW_MS + t for t in range(1, 6000, 97)]
    together = log.offsets_for_timestamps(targets)
    assert walks == [len(targets)]
    assert together == per_target(log, targets)


# -- per-batch record-time tables: the walk's answers, from a table (Hypothesis) ------------------


@pytest.fixture
def tables(monkeypatch):
    """Swaps the process's table cache for one the test sets up: ``tables(records_min, bytes_max)``."""
    from seglog_server.storage.format.record_timestamps import RecordTimesCache
    from seglog_server.storage.segment import segment_time_lookups

    def use(records_min: int, bytes_max: int = 1 << 30) -> RecordTimesCache:
        cache = RecordTimesCache(bytes_max=bytes_max, records_min=records_min)
        monkeypatch.setattr(segment_time_lookups, "RECORD_TIMES", cache)
        return cache

    return use


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    batches=st.lists(st.tuples(st.lists(st.integers(0, 300), min_size=1, max_size=40),
                               st.sampled_from(["plain", "gzip", "append-time"])), min_size=1, max_size=12),
    delete_fraction=st.one_of(st.none(), st.floats(0, 1)),
    bytes_max=st.sampled_from([1 << 30, 2000]),
    targets=st.lists(st.integers(NOW_MS - 5, NOW_MS + 310), max_size=40),
)
def test_batches_answered_from_their_tables_answer_as_the_walk(
    tmp_path_factory, tables, batches, delete_fraction, bytes_max, targets
):
    """Every batch gets a table (records_min 1), some evicted at once (bytes_max 2000): the
    answers, one target at a time and together, first and second time, are the walk's."""
    log = open_log(tmp_path_factory.mktemp("tables"), FakeClock(NOW_MS), config(index_interval_bytes=100))
    for deltas, kind in batches:
        log.append(batch(*[b"v%d" % delta for delta in deltas], timestamps=[NOW_MS + delta for delta in deltas],
                         compression=Compression.GZIP if kind == "gzip" else Compression.NONE,
                         timestamp_type=TimestampType.LOG_APPEND_TIME if kind == "append-time" else TimestampType.CREATE_TIME))
    if delete_fraction is not None:
        log.delete_records(int(log.log_end_offset * delete_fraction))  # a log start inside a batch
    targets = targets + [NOW_MS + delta + step for deltas, _ in batches[:4] for delta in deltas for step in (-1, 0, 1)]
    tables(records_min=1 << 30)  # no table: the walk
    walked = per_target(log, targets)
    cache = tables(records_min=1, bytes_max=bytes_max)
    for _ in range(2):
        assert per_target(log, targets) == walked
        assert log.offsets_for_timestamps(targets) == walked
    assert cache.size <= bytes_max


def test_a_large_batch_is_walked_once_then_answered_from_its_table(tmp_path, clock, tables):
    cache = tables(records_min=256)
    log = open_log(tmp_path, clock, config())
    log.append(batch(*[b"v"] * 3000, timestamps=[NOW_MS + 2 * i for i in range(3000)]))
    log.append(batch(*[b"w"] * 10, timestamps=[NOW_MS + 6000 + i for i in range(10)]))  # small: walked
    assert log.offset_for_timestamp(NOW_MS + 3).offset == 2
    assert len(cache) == 1
    assert [log.offset_for_timestamp(NOW_MS + t).offset for t in (0, 5998, 5999, 6005)] == [0, 2999, 3000, 3005]
    assert len(cache) == 1


def test_a_batch_rewritten_at_the_same_position_gets_a_new_table(tmp_path, clock, tables):
    cache = tables(records_min=2)
    log = open_log(tmp_path, clock, config())
    log.append(batch(*[b"v"] * 300, timestamps=[NOW_MS + i for i in range(300)]))
    assert log.offset_for_timestamp(NOW_MS + 100).offset == 100
    log.truncate_to(0)
    log.append(batch(*[b"v"] * 300, timestamps=[NOW_MS + 1000 + i for i in range(300)]))
    assert log.offset_for_timestamp(NOW_MS + 100) == log.offset_for_timestamp(NOW_MS + 1000)
    assert log.offset_for_timestamp(NOW_MS + 1100).offset == 100
    assert len(cache) == 1


def test_a_batch_damaged_after_its_first_records_gets_no_table_and_refuses_as_the_walk(tmp_path, clock, tables):
    """A table is built only from a batch whose every record passes the walk's checks: a lie
    after the first records leaves the early targets answered and the later ones refused, as
    the walk does, and keeps no table."""
    cache = tables(records_min=2)
    log = open_log(tmp_path, clock, config())
    log.append(batch(*[b"v"] * 300, timestamps=[NOW_MS + i for i in range(300)]))
    path = os.path.join(tmp_path, "00000000000000000000.log")
    size = os.path.getsize(path)
    with open(path, "r+b") as file:  # the last record's header count (its last byte) now claims a header
        file.seek(size - 1)
        assert file.read(1) == b"\x00"
        file.seek(size - 1)
        file.write(b"\x02")
    assert log.offset_for_timestamp(NOW_MS + 3).offset == 3
    with pytest.raises(CorruptSegmentError):
        log.offset_for_timestamp(NOW_MS + 299)
    assert len(cache) == 0


def test_a_lookup_reads_the_batch_at_its_index_entry_and_the_answer_in_one_pread(tmp_path, clock):
    """The index entry a lookup starts from points at the batch before the answer: once the
    segment has seen a batch's size, its first read covers two of them (one pread, not three:
    the entry's batch, the next header, the answer's body)."""
    fs = CountingFs()
    log = open_log(tmp_path, clock, config(index_interval_bytes=4096), fs=fs)
    for first in range(0, 2000, 100):  # 100-record batches of about 11 KB
        log.append(batch(*[b"v" * 100] * 100, timestamps=[NOW_MS + first + i for i in range(100)]))
    assert log.offset_for_timestamp(NOW_MS + 150).offset == 150  # learns the batch size
    counts = []
    for target in (NOW_MS + 450, NOW_MS + 1250, NOW_MS + 1999):
        fs.preads = 0
        found = log.offset_for_timestamp(target)
        assert found.offset == target - NOW_MS
        counts.append(fs.preads)
    assert counts == [1, 1, 1]
