"""The time-step tables (segment/time_steps.py): lookups by time answered from them, batched and
single, equal ``Log.offset_for_timestamp`` target by target through the indexes and scans (the
oracle, which uses no table), across appends with timestamps in any order, rolls, truncation,
DeleteRecords, restarts, tables dropped, budgets too small for them, and files damaged before a
table is built from them; the build's error paths (a failing read, a short file, hostile bytes,
the budget) leave the targets past them to the per-target search."""

from __future__ import annotations

import errno
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import (
    NOW_MS,
    FailingFs,
    all_offsets,
    batch,
    batch_positions,
    budget_installer,
    config,
    open_log,
    poke,
    reopen,
    scans_only,
)

from seglog.records import HEADER, LENGTH_OFFSET, Compression, TimestampType
from seglog.records.crc import crc32c
from seglog.records.errors import CodecError
from seglog.records.varint import encode_varint, encode_varlong
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import CorruptRecordError, StorageError
from seglog_server.storage.format.file_records import TimestampAndOffset
from seglog_server.storage.segment import segment_time_lookups, time_steps
from seglog_server.storage.segment.time_steps import TimeSteps

_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35  # a batch header's maxTimestamp (HEADER's offsets)
_CRC_AT, _CRC_FROM = 17, 21
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


@pytest.fixture
def budget(monkeypatch):
    """A budget of the test's own (the process's is shared): ``budget(bytes_max)``."""

    return budget_installer(monkeypatch, "TIME_STEPS")


def described(outcome):
    return (type(outcome).__name__, str(outcome)) if isinstance(outcome, Exception) else outcome


def alone(log, target):
    try:
        return log.offset_for_timestamp(target)
    except StorageError as exc:
        return exc


def oracle(log, targets):
    with scans_only(log):
        return [described(alone(log, target)) for target in targets]


def steps_of(log, slot: int = -1) -> TimeSteps | None:
    return log.segments_snapshot()[slot]._steps_ref()


def raw_batch(values: list[bytes], base_timestamp: int, timestamp_deltas: list[int]) -> bytes:
    """A v2 batch written byte by byte with the records' own timestampDeltas (the builder gives
    its first record delta 0): its maxTimestamp the largest record's, clamped to int64."""
    area = b""
    for index, (value, delta) in enumerate(zip(values, timestamp_deltas)):
        body = (b"\x00" + encode_varlong(delta) + encode_varint(index) + encode_varint(-1)
                + encode_varint(len(value)) + value + encode_varint(0))
        area += encode_varint(len(body)) + body
    max_timestamp = min(_INT64_MAX, max(base_timestamp + delta for delta in timestamp_deltas))
    raw = bytearray(HEADER.pack(0, HEADER.size - 12 + len(area), -1, 2, 0, 0, len(values) - 1, base_timestamp,
                                max_timestamp, -1, -1, -1, len(values)) + area)
    struct.pack_into(">I", raw, _CRC_AT, crc32c(bytes(raw[_CRC_FROM:])))
    return bytes(raw)


# -- equal to the per-target search (Hypothesis) --------------------------------------------------

# A first record's timestampDelta the builder never writes (it makes the first record the base):
# the extremes of int64 and anything between, as a producer's bytes may carry them (a
# LogAppendTime topic stamps the batch and keeps the records' deltas, whatever they are).
first_delta = st.one_of(
    st.none(), st.none(),
    st.sampled_from([_INT64_MIN, _INT64_MIN + 1, -NOW_MS - 1, -1, _INT64_MAX - NOW_MS]),
    st.integers(_INT64_MIN, _INT64_MAX - NOW_MS),
)
append = st.tuples(st.just("append"), st.lists(st.integers(0, 300), min_size=1, max_size=60), st.booleans(), first_delta)
operation = st.one_of(
    append, append,
    st.tuples(st.just("lookup")),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("delete_records"), st.floats(0.05, 0.95)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("restart")),
    st.tuples(st.just("drop_tables")),
    st.tuples(st.just("damage"), st.integers(0, 1000),
              st.sampled_from(["length", "length_onto_a_later_header", "max_timestamp", "record"]),
              st.integers(-(2**31), 2**31 - 1)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    operations=st.lists(operation, min_size=1, max_size=14),
    segment_bytes=st.sampled_from([1500, 1 << 20]),
    index_interval_bytes=st.sampled_from([1, 4096]),
    append_time=st.sampled_from([False, False, True]),
    budget_bytes=st.sampled_from([1 << 30, 1 << 30, 600, 0]),
    extend_bytes=st.sampled_from([1, 300, 4 << 20]),
    targets=st.lists(st.integers(NOW_MS - 5, NOW_MS + 310), max_size=30),
)
# A second damage of a file whose first batch's length a first one zeroed: the test's own walk to
# find a batch to damage met the codec's refusal (not the log's), which ended the test in error.
@example(operations=[("append", [0], False, None), ("append", [0], False, None), ("damage", 0, "length", 0),
                     ("damage", 0, "length", 0)],
         segment_bytes=1500, index_interval_bytes=1, append_time=False, budget_bytes=1 << 30, extend_bytes=1,
         targets=[])
def test_answers_from_the_tables_equal_a_lookup_per_target_as_the_log_changes(
    tmp_path_factory, budget, monkeypatch, operations, segment_bytes, index_interval_bytes, append_time, budget_bytes,
    extend_bytes, targets,
):
    budget(budget_bytes)
    monkeypatch.setattr(segment_time_lookups, "_STEPS_EXTEND_BYTES", extend_bytes)  # tables built in parts
    clock = FakeClock(NOW_MS)
    log_config = config(segment_bytes=segment_bytes, index_interval_bytes=index_interval_bytes,
                        message_timestamp_type=TimestampType.LOG_APPEND_TIME if append_time else TimestampType.CREATE_TIME)
    log = open_log(tmp_path_factory.mktemp("steps"), clock, log_config)
    seen: list[int] = []
    damaged = False
    try:
        for kind, *arguments in operations + [("lookup",)]:
            damaged = damaged or kind == "damage"
            try:
                if kind == "append":
                    deltas, compressed, first = arguments
                    if append_time:
                        clock.advance(deltas[0] % 4)  # equal and rising append times
                    values = [b"v%d" % delta for delta in deltas]
                    if first is None:
                        log.append(batch(*values, timestamps=[NOW_MS + d for d in deltas],
                                         compression=Compression.GZIP if compressed else Compression.NONE))
                    else:  # the base NOW_MS, the first record's delta extreme
                        log.append(raw_batch(values, NOW_MS, [first, *deltas[1:]]))
                    seen.extend(deltas[:3])
                elif kind == "truncate":
                    log.truncate_to(int(log.log_end_offset * arguments[0]))
                elif kind == "delete_records":
                    log.delete_records(max(log.log_start_offset, int(log.log_end_offset * arguments[0])))
                elif kind == "roll" and log.log_end_offset > 0:
                    log.roll()
                elif kind == "restart":
                    log = reopen(log, clock)
                elif kind == "drop_tables":  # as the budget drops them
                    for segment in log.segments_snapshot():
                        segment.drop_time_steps()
                elif kind == "damage" and log.log_end_offset > log.log_start_offset:
                    victim, field, value = arguments
                    segment = log.segments_snapshot()[victim % len(log.segments_snapshot())]
                    path = segment.log.path
                    try:
                        positions = batch_positions(path)
                    except CodecError:  # damaged before, where its walk from the start stops: nothing to aim at
                        continue
                    if not positions:
                        continue
                    if field == "length_onto_a_later_header":  # another valid length, ending on a header
                        position = positions[victim % len(positions)]
                        ends = positions[victim % len(positions) + 2 :] + [segment.size_in_bytes]
                        field, value = "length", ends[value % len(ends)] - position - 12
                    at = {"length": (LENGTH_OFFSET, _INT32), "max_timestamp": (_MAX_TIMESTAMP_AT, _INT64),
                          "record": (61 + victim % 40, _INT32)}[field]
                    log.flush()
                    poke(path, positions[victim % len(positions)] + at[0], at[1], value)
                    log = reopen(log, clock)  # the tables are built from the damaged file
                elif kind == "lookup":
                    asked = targets + [NOW_MS + delta + step for delta in seen[-8:] for step in (-1, 0, 1)]
                    if append_time:
                        asked += [clock.time_ms() + step for step in (-3, -1, 0, 1)]
                    together = [described(outcome) for outcome in log.lookup_timestamps(asked)]
                    singles = [described(alone(log, target)) for target in asked]
                    expected = oracle(log, asked)
                    assert together == expected
                    assert singles == expected
            except (StorageError, CorruptRecordError):
                # A damaged file may make the log refuse a truncation, a roll or a load: not the
                # tables' business (lookups compare errors, they never raise here).
                if kind == "lookup" or not damaged:
                    raise
                if kind in ("restart", "damage"):
                    return  # no log loaded to look in
    finally:
        log.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    batches=st.lists(st.tuples(st.lists(st.integers(0, 300), min_size=1, max_size=8), first_delta, st.integers(0, 3)),
                     min_size=1, max_size=6),
    append_time=st.sampled_from([True, True, False]),
)
def test_first_records_with_any_timestamp_delta_get_the_per_target_answers(
    tmp_path_factory, budget, batches, append_time
):
    """A LogAppendTime batch's records all read its maxTimestamp whatever deltas they carry (the
    first one's INT64_MIN included): the table, fed by the appends and built again after a
    restart, answers as the scans do."""
    budget()
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path_factory.mktemp("first"), clock, config(
        message_timestamp_type=TimestampType.LOG_APPEND_TIME if append_time else TimestampType.CREATE_TIME))
    try:
        for deltas, first, advance in batches:
            clock.advance(advance)
            values = [b"v%d" % delta for delta in deltas]
            log.append(batch(*values, timestamps=[NOW_MS + d for d in deltas]) if first is None
                       else raw_batch(values, NOW_MS, [first, *deltas[1:]]))
        asked = [NOW_MS + step for step in range(-2, 310, 7)] + [clock.time_ms() + step for step in (-4, -1, 0, 1)]
        for _ in ("fed by the appends", "built from the file"):
            expected = oracle(log, asked)
            assert [described(outcome) for outcome in log.lookup_timestamps(asked)] == expected
            assert [described(alone(log, target)) for target in asked] == expected
            log = reopen(log, clock)
    finally:
        log.close()


# -- what the tables hold, and what they spare ----------------------------------------------------


def test_the_appends_feed_the_active_segment_s_table_with_the_rises_of_the_running_maximum(tmp_path, clock, budget):
    made = budget()
    log = open_log(tmp_path, clock, config())
    log.append(batch(b"a", b"b", b"c", b"d", timestamps=[NOW_MS + 5, NOW_MS + 5, NOW_MS + 3, NOW_MS + 9]))
    log.append(batch(b"e", b"f", timestamps=[NOW_MS + 9, NOW_MS + 2]))  # raises nothing: not walked
    log.append(batch(b"g", b"h", timestamps=[NOW_MS + 7, NOW_MS + 12]))
    steps = steps_of(log)
    assert list(steps.timestamps) == [NOW_MS + 5, NOW_MS + 9, NOW_MS + 12]
    assert list(steps.offsets) == [0, 3, 7] and not steps.damaged
    assert steps.end_position == log.segments_snapshot()[-1].size_in_bytes and len(made) == 1
    assert made.size == steps.size_bytes
    assert log.offsets_for_timestamps([NOW_MS + 6, NOW_MS + 9, NOW_MS + 13]) == [
        TimestampAndOffset(NOW_MS + 9, 3), TimestampAndOffset(NOW_MS + 9, 3), None]


def test_a_table_answers_without_reading_the_log_and_keeps_answering_after_the_roll(tmp_path, clock, budget):
    budget()
    fs = FailingFs()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1 << 20), fs=fs)
    for first in range(0, 200, 10):
        log.append(batch(*[b"v"] * 10, timestamps=[NOW_MS + first + i for i in range(10)]))
    log.roll()
    log.append(batch(b"late", timestamps=NOW_MS + 500))
    targets = [NOW_MS + t for t in range(0, 200, 7)] + [NOW_MS + 400]
    expected = oracle(log, targets)
    fs.preads = 0
    assert log.offsets_for_timestamps(targets) == expected
    assert [log.offset_for_timestamp(target) for target in targets] == expected
    assert fs.preads == 0
    assert steps_of(log, 0) is not None and steps_of(log, 1) is not None


def test_a_log_start_above_a_step_sends_its_targets_to_the_search(tmp_path, clock, budget):
    budget()
    log = open_log(tmp_path, clock, config())
    log.append(batch(b"a", b"b", b"c", b"d", timestamps=[NOW_MS + 10, NOW_MS + 1, NOW_MS + 2, NOW_MS + 3]))
    log.delete_records(2)
    assert list(steps_of(log).offsets) == [0]  # the step below the log start says nothing
    assert log.offsets_for_timestamps([NOW_MS + 2, NOW_MS + 10]) == [TimestampAndOffset(NOW_MS + 2, 2), None]
    assert log.offset_for_timestamp(NOW_MS + 3) == TimestampAndOffset(NOW_MS + 3, 3)


def test_truncation_and_deletion_drop_the_table_from_the_budget(tmp_path, clock, budget):
    made = budget()
    log = open_log(tmp_path, clock, config())
    for index in range(5):
        log.append(batch(b"v", timestamps=NOW_MS + index))
    assert len(made) == 1
    log.truncate_to(2)
    assert steps_of(log) is None and len(made) == 0 and made.size == 0
    assert log.offsets_for_timestamps([NOW_MS + 1, NOW_MS + 3]) == [TimestampAndOffset(NOW_MS + 1, 1), None]
    assert steps_of(log) is not None  # built again from the file (a small one: at once)
    log.close()
    assert len(made) == 0


def test_after_a_restart_batched_lookups_build_the_table_from_the_file_in_bounded_parts(
    tmp_path, clock, budget, monkeypatch
):
    budget()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1 << 20))
    for first in range(0, 200, 10):
        log.append(batch(*[b"v"] * 10, timestamps=[NOW_MS + first + i for i in range(10)]))
    log = reopen(log, clock)
    assert steps_of(log) is None
    assert log.offset_for_timestamp(NOW_MS + 5) == TimestampAndOffset(NOW_MS + 5, 5)
    assert steps_of(log) is None  # a single lookup builds none
    monkeypatch.setattr(segment_time_lookups, "_STEPS_EXTEND_BYTES", 1)  # a batch a call
    targets = [NOW_MS + 3, NOW_MS + 150]
    expected = oracle(log, targets)
    for calls in range(1, 21):
        assert log.lookup_timestamps(targets) == expected
        assert steps_of(log).end_position == batch_positions(log.segments_snapshot()[-1].log.path)[calls] \
            if calls < 20 else steps_of(log).end_position == log.segments_snapshot()[-1].size_in_bytes
    assert len(steps_of(log)) == 200


def test_a_table_larger_than_the_budget_is_refused_until_the_segment_is_truncated(tmp_path, clock, budget):
    made = budget(400 + 16 * 3)
    log = open_log(tmp_path, clock, config())
    for index in range(5):
        log.append(batch(b"v", timestamps=NOW_MS + index))
    segment = log.segments_snapshot()[-1]
    assert steps_of(log) is None and segment._steps_refused and len(made) == 0
    assert log.offsets_for_timestamps([NOW_MS + 1, NOW_MS + 4]) == oracle(log, [NOW_MS + 1, NOW_MS + 4])
    assert steps_of(log) is None
    log.truncate_to(3)
    assert not segment._steps_refused
    assert log.offsets_for_timestamps([NOW_MS + 1, NOW_MS + 4]) == [TimestampAndOffset(NOW_MS + 1, 1), None]
    assert len(steps_of(log)) == 3 and len(made) == 1


def test_the_budget_drops_the_least_recently_used_table_and_appends_stop_feeding_it(tmp_path, clock, budget):
    made = budget(2 * (400 + 16 * 5))  # two tables of four or five steps
    logs = [open_log(tmp_path / name, clock, config()) for name in "abc"]
    for log in logs:
        for index in range(4):
            log.append(batch(b"v", timestamps=NOW_MS + index))
    assert steps_of(logs[0]) is None and steps_of(logs[1]) is not None and steps_of(logs[2]) is not None
    logs[0].append(batch(b"v", timestamps=NOW_MS + 9))  # no table to feed: the file holds the batch
    assert logs[0].offsets_for_timestamps([NOW_MS + 2, NOW_MS + 9]) == [
        TimestampAndOffset(NOW_MS + 2, 2), TimestampAndOffset(NOW_MS + 9, 4)]
    assert len(made) == 2 and steps_of(logs[0]) is not None


# -- the build's error paths ------------------------------------------------------------------------


def test_a_failing_read_keeps_the_steps_entered_before_it_and_the_search_meets_the_error(tmp_path, clock, budget,
                                                                                          monkeypatch):
    budget()
    fs = FailingFs()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1 << 20), fs=fs)
    for first in range(0, 200, 10):
        log.append(batch(*[b"v"] * 10, timestamps=[NOW_MS + first + i for i in range(10)]))
    log = reopen(log, clock, fs=fs)
    monkeypatch.setattr(time_steps, "_WALK_CHUNK_BYTES", 300)  # about a batch a read
    targets = [NOW_MS + 1, NOW_MS + 150]
    original = fs.pread
    calls = []

    def pread(fd, size, position):
        calls.append(position)
        if len(calls) == 2:  # the build's second read: EIO
            raise OSError(errno.EIO, "injected")
        return original(fd, size, position)

    monkeypatch.setattr(fs, "pread", pread)
    outcomes = log.lookup_timestamps(targets)
    steps = steps_of(log)
    assert steps is not None and 0 < len(steps) < 200 and not steps.damaged  # kept, to be extended
    assert outcomes[0] == TimestampAndOffset(NOW_MS + 1, 1)
    monkeypatch.undo()
    budget()
    assert log.lookup_timestamps(targets) == oracle(log, targets)


def test_a_build_over_hostile_bytes_stops_at_the_refused_batch_and_the_search_meets_it(tmp_path, clock, budget):
    """Lengths past the file, offsets going back, records that refuse the walk, a header whose
    maxTimestamp no record carries: the table ends before the batch, answers what lies before it,
    and every other target gets the per-target search's own answer or error."""
    for harm, (at, packer, value) in {
        "length": (LENGTH_OFFSET, _INT32, 1 << 30),
        "offset": (0, _INT64, 3),
        "record": (61, _INT32, -1),
        "max_timestamp": (_MAX_TIMESTAMP_AT, _INT64, NOW_MS + 10_000),
    }.items():
        budget()
        directory = tmp_path / harm
        log = open_log(directory, clock, config())
        for first in range(0, 50, 10):
            log.append(batch(*[b"v"] * 10, timestamps=[NOW_MS + first + i for i in range(10)]))
        log.flush()
        path = log.segments_snapshot()[-1].log.path
        position = batch_positions(path)[2]
        poke(path, position + at, packer, value)
        with open(path, "rb") as file:
            data = file.read()
        reads = []

        def read(start, size, data=data, reads=reads):
            reads.append((start, size))
            return data[start: start + size]

        steps = TimeSteps(0)
        assert steps.extend(read, len(data), 1 << 62)
        assert steps.damaged and len(steps) == 20 and list(steps.offsets) == list(range(20)), harm
        assert steps.end_position == position and all(start + size <= len(data) for start, size in reads)
        log = reopen(log, clock)  # (the load may cut the damaged tail: the oracle sees the same file)
        targets = [NOW_MS + 3, NOW_MS + 25, NOW_MS + 45, NOW_MS + 20_000]
        expected = oracle(log, targets)
        assert [described(outcome) for outcome in log.lookup_timestamps(targets)] == expected, harm
        assert expected[0] == TimestampAndOffset(NOW_MS + 3, 3)
        log.close()


@pytest.mark.parametrize("onto", [5, 10])  # a later batch's header, or the file's end
def test_a_build_stops_at_a_batch_whose_length_lands_on_a_later_header_over_an_index_entry(
    tmp_path, clock, budget, onto
):
    """Batch 1 raises no step (its records all lie below batch 0's) and its length rotted into
    one ending exactly on batch ``onto``'s header: a build from the file entering it by its header
    alone jumped over batches 2.. whose steps the per-target search, starting at their index
    entries, finds. The build refuses batch 1 (it spans an entry): before, the table answered a
    target of batch 3 with a record of batch ``onto`` (or none)."""
    budget()
    log = open_log(tmp_path, clock, config(index_interval_bytes=1))
    log.append(batch(b"v", b"v", timestamps=[NOW_MS + 100, NOW_MS + 100]))
    log.append(batch(b"v", b"v", timestamps=[NOW_MS + 50, NOW_MS + 51]))
    for index in range(2, 10):
        log.append(batch(b"v", b"v", timestamps=[NOW_MS + 99 + index, NOW_MS + 99 + index]))
    log.flush()
    path = log.segments_snapshot()[-1].log.path
    positions = batch_positions(path) + [log.segments_snapshot()[-1].size_in_bytes]
    poke(path, positions[1] + LENGTH_OFFSET, _INT32, positions[onto] - positions[1] - 12)
    log = reopen(log, clock)  # the table is built from the damaged file
    targets = [NOW_MS + 100, NOW_MS + 102, NOW_MS + 104, NOW_MS + 107, NOW_MS + 108]
    expected = oracle(log, targets)
    assert expected[1] == TimestampAndOffset(NOW_MS + 102, 6)
    assert [described(outcome) for outcome in log.lookup_timestamps(targets)] == expected
    assert [described(alone(log, target)) for target in targets] == expected
    steps = steps_of(log)
    assert steps.damaged and list(steps.offsets) == [0] and steps.end_position == positions[1]
    log.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    batches=st.lists(st.tuples(st.booleans(), st.integers(1, 3)), min_size=3, max_size=14),
    victim=st.integers(0, 100),
    onto=st.integers(0, 100),
    index_interval_bytes=st.sampled_from([1, 150, 400]),
    targets=st.lists(st.integers(NOW_MS - 1, NOW_MS + 45), min_size=1, max_size=20),
)
def test_a_table_built_over_a_length_landing_on_a_later_header_answers_as_the_search(
    tmp_path_factory, budget, batches, victim, onto, index_interval_bytes, targets
):
    """Batches rising in time and late ones (raising no step), one batch's length rotted into
    one ending exactly on a later batch's header or the file's end, the table built from that
    file: every target, batched and single, gets the per-target search's answer or error."""
    budget()
    clock = FakeClock(NOW_MS)
    log = open_log(tmp_path_factory.mktemp("onto"), clock, config(index_interval_bytes=index_interval_bytes))
    for number, (rising, count) in enumerate(batches):
        first_ms = NOW_MS + 3 * number if rising else NOW_MS
        log.append(batch(*[b"v"] * count, timestamps=[first_ms + step for step in range(count)]))
    log.flush()
    path = log.segments_snapshot()[-1].log.path
    positions = batch_positions(path) + [log.segments_snapshot()[-1].size_in_bytes]
    first = victim % (len(positions) - 2)
    end = positions[first + 2 + onto % (len(positions) - first - 2)]
    poke(path, positions[first] + LENGTH_OFFSET, _INT32, end - positions[first] - 12)
    log = reopen(log, clock)  # the table is built from the damaged file
    try:
        expected = oracle(log, targets)
        assert [described(outcome) for outcome in log.lookup_timestamps(targets)] == expected
        assert [described(alone(log, target)) for target in targets] == expected
    finally:
        log.close()


def test_an_error_feeding_the_table_drops_it_and_never_fails_the_append(tmp_path, clock, budget, monkeypatch, caplog):
    """The batch is in the file when the feed runs: an error there (MemoryError, say) must not
    escape the append with the log end offset left behind the file."""
    made = budget()
    log = open_log(tmp_path, clock, config())
    log.append(batch(b"a", b"b", timestamps=[NOW_MS + 1, NOW_MS + 2]))
    assert steps_of(log) is not None and len(made) == 1

    def failing(*arguments):
        raise MemoryError

    monkeypatch.setattr(time_steps, "record_steps", failing)
    log.append(batch(b"c", b"d", timestamps=[NOW_MS + 5, NOW_MS + 4]))  # raises the maximum: walked
    assert log.log_end_offset == 4 and all_offsets(log) == [0, 1, 2, 3]
    assert steps_of(log) is None and len(made) == 0 and "time-step table dropped" in caplog.text
    log.append(batch(b"e", timestamps=NOW_MS + 9))  # no table to feed: the append goes on
    monkeypatch.undo()
    budget()
    targets = [NOW_MS + 2, NOW_MS + 3, NOW_MS + 5, NOW_MS + 9, NOW_MS + 10]
    expected = oracle(log, targets)
    assert expected[2] == TimestampAndOffset(NOW_MS + 5, 2)
    assert log.lookup_timestamps(targets) == expected
    assert steps_of(log) is not None  # built again from the file
    assert [log.offset_for_timestamp(target) for target in targets] == expected


@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_compressed_appends_feed_the_table_and_lookups_read_nothing(tmp_path, clock, budget, monkeypatch, policy):
    """A compressing producer with rising timestamps: every batch raises the maximum and is
    entered as it is appended, walked in the records its validation decompressed (a compacted
    topic's validation, which decodes the records one by one, too), so the table keeps up with
    the file and the lookups read no byte of it."""
    budget()
    fs = FailingFs()
    log = open_log(tmp_path, clock, config(cleanup_policy=frozenset({policy})), fs=fs)
    decompressions = []
    records_area = time_steps._records_area

    def counting(batch_bytes, fields):
        decompressions.append(fields)
        return records_area(batch_bytes, fields)

    monkeypatch.setattr(time_steps, "_records_area", counting)
    for number in range(50):
        log.append(batch(b"a", b"b", keys=[b"k", b"k"], timestamps=[NOW_MS + 2 * number, NOW_MS + 2 * number + 1],
                         compression=Compression.GZIP))
    steps = steps_of(log)
    assert len(steps) == 100 and not steps.damaged
    assert steps.end_position == log.segments_snapshot()[-1].size_in_bytes
    assert decompressions == []  # the validation's area: no second decompression
    targets = [NOW_MS + 1, NOW_MS + 50, NOW_MS + 90, NOW_MS + 91, NOW_MS + 200]
    fs.preads = 0
    answers = log.lookup_timestamps(targets)
    assert [log.offset_for_timestamp(target) for target in targets] == answers
    assert fs.preads == 0 and steps_of(log) is steps
    assert answers == oracle(log, targets)
