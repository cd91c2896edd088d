"""LogSegment: appends and index entries, reads, timestamps, recovery, truncation, roll decisions
(ports of Kafka's LogSegmentTest; Kafka's v1 one-record batches become v2 batches)."""

from __future__ import annotations

import os
import random

import pytest
from tests.support.log_test_support import NOW_MS, batch, batch_offsets, config, new_segment, offsets_of, sized_batch, values_of

from seglog.records import iter_batches
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import OffsetOverflowError
from seglog_server.storage.segment.log_segment import LogSegment, RollReason

INT_MAX = 2**31 - 1


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


def segment(tmp_path, clock, base_offset=40, **overrides) -> LogSegment:
    overrides.setdefault("index_interval_bytes", 10)
    return new_segment(tmp_path, base_offset, clock, config(**overrides))


def records(offset: int, *values: str, timestamp_ms: int | None = None) -> bytes:
    ts = offset * 10 if timestamp_ms is None else timestamp_ms
    return batch(*(v.encode() for v in values), base_offset=offset, timestamps=ts)


def fill_with_nonsense(path: str, position: int, size: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(rng.randbytes(size))


# -- append and offsets ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "base_offset, largest_offset",
    [(0, 2**31), (1, 0), (100, 10), (2**31, 0), (2**31, 2**32 + 2**31)],
)
def test_append_beyond_the_relative_offset_range_raises_offset_overflow(tmp_path, clock, base_offset, largest_offset):
    seg = segment(tmp_path, clock, base_offset)
    with pytest.raises(OffsetOverflowError, match="not representable"):
        seg.append(records(largest_offset, "hello"))
    if largest_offset >= base_offset:
        with pytest.raises(OffsetOverflowError, match="not representable"):
            seg.append_batch(memoryview(records(0, "hello")), base_offset, largest_offset, NOW_MS)
    assert seg.size_in_bytes == 0


def test_append_batch_writes_the_assigned_base_offset_and_leaves_the_rest_untouched(tmp_path, clock):
    seg = segment(tmp_path, clock, 40)
    produced = batch(b"a", b"b")
    seg.append_batch(memoryview(produced), 45, 46, NOW_MS)
    stored = seg.log.read(0, seg.size_in_bytes)
    assert stored[8:] == produced[8:]
    only = next(iter(iter_batches(stored)))
    assert (only.base_offset, only.last_offset) == (45, 46)
    assert only.is_valid()


def test_next_offset_is_the_base_offset_until_something_is_appended(tmp_path, clock):
    seg = segment(tmp_path, clock)
    assert seg.read_next_offset() == 40
    seg.append(records(50, "hello", "there", "you"))
    assert seg.read_next_offset() == 53


def test_first_append_never_adds_an_index_entry(tmp_path, clock):
    seg = segment(tmp_path, clock, 0, index_interval_bytes=1)
    seg.append(records(0, "a"))
    assert seg.offset_index.entry_count == 0


def test_interval_one_byte_gives_an_entry_per_append_but_the_first(tmp_path, clock):
    seg = segment(tmp_path, clock, 0, index_interval_bytes=1)
    for offset in range(10):
        seg.append(records(offset, "a", timestamp_ms=NOW_MS + offset))
    assert seg.offset_index.entry_count == 9
    assert seg.time_index.entry_count == 9
    assert seg.offset_index.entry(0).offset == 1


def test_entries_are_added_before_counting_the_batch_so_every_other_equal_batch_is_indexed(tmp_path, clock):
    size = len(records(0, "msg00"))
    seg = segment(tmp_path, clock, 0, index_interval_bytes=2 * size - 1)
    for offset in range(8):
        seg.append(records(offset, f"msg{offset:02d}"))
    # appends #3, #5, #7 (offsets 2, 4, 6) get entries
    assert [seg.offset_index.entry(slot).offset for slot in range(seg.offset_index.entry_count)] == [2, 4, 6]


def test_multi_batch_append_indexes_per_batch_like_single_appends(tmp_path, clock):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one_by_one = segment(tmp_path / "a", clock, 0, index_interval_bytes=100)
    together = segment(tmp_path / "b", clock, 0, index_interval_bytes=100)
    batches = [records(offset, "x" * (offset * 7 % 50)) for offset in range(20)]
    for one in batches:
        one_by_one.append(one)
    together.append(b"".join(batches))
    entries = lambda seg: [seg.offset_index.entry(s) for s in range(seg.offset_index.entry_count)]
    assert entries(one_by_one) == entries(together)
    assert entries(together)


# -- reads -----------------------------------------------------------------------------------


def test_read_on_an_empty_segment_returns_none(tmp_path, clock):
    assert segment(tmp_path, clock).read(40, 300) is None


def test_read_before_the_first_offset_starts_at_the_first_batch(tmp_path, clock):
    seg = segment(tmp_path, clock)
    ms = records(50, "hello", "there", "little", "bee")
    seg.append(ms)
    assert seg.read(41, 300) == ms


def test_read_after_the_last_offset_returns_none(tmp_path, clock):
    seg = segment(tmp_path, clock)
    seg.append(records(50, "hello", "there"))
    assert seg.read(52, 200) is None


def test_read_inside_a_gap_starts_at_the_next_batch(tmp_path, clock):
    seg = segment(tmp_path, clock)
    seg.append(records(50, "hello", "there"))
    ms2 = records(60, "alpha", "beta")
    seg.append(ms2)
    assert seg.read(55, 200) == ms2


def test_read_of_an_offset_inside_a_batch_returns_the_whole_batch(tmp_path, clock):
    seg = segment(tmp_path, clock)
    ms = records(50, "hello", "there")
    seg.append(ms)
    assert seg.read(51, 1000) == ms


@pytest.mark.parametrize("min_one_batch", [True, False])
def test_read_with_max_position_at_the_start_returns_nothing(tmp_path, clock, min_one_batch):
    seg = segment(tmp_path, clock)
    seg.append(records(50, "hello", "there"))
    assert seg.read(48, 1, max_position=0, min_one_batch=min_one_batch) == b""
    assert seg.read(52, 1, max_position=0, min_one_batch=min_one_batch) is None


def test_read_returns_only_whole_batches_within_max_bytes(tmp_path, clock):
    seg = segment(tmp_path, clock)
    first, second = records(40, "aaaa"), records(41, "bbbb")
    seg.append(first + second)
    assert seg.read(40, len(first) + len(second) - 1) == first
    assert seg.read(40, len(first) - 1, min_one_batch=False) == b""
    assert seg.read(40, 1, min_one_batch=True) == first


def test_read_stops_at_max_position(tmp_path, clock):
    seg = segment(tmp_path, clock)
    first, second = records(40, "aaaa"), records(41, "bbbb")
    seg.append(first + second)
    assert seg.read(40, 10_000, max_position=len(first)) == first


# -- truncation ------------------------------------------------------------------------------


def test_truncate_removes_the_last_batch_and_keeps_the_first(tmp_path, clock):
    seg = segment(tmp_path, clock)
    offset = 40
    for _ in range(30):
        ms1, ms2 = records(offset, "hello"), records(offset + 1, "hello")
        seg.append(ms1)
        seg.append(ms2)
        assert seg.read(offset, 10_000) == ms1 + ms2
        seg.truncate_to(offset + 1)
        assert seg.read(offset, 10_000) == ms1
        offset += 1


def test_truncate_to_an_offset_inside_a_gap_removes_the_batch_after_the_gap(tmp_path, clock):
    seg = segment(tmp_path, clock)
    seg.append(batch(b"first message", base_offset=40))
    seg.append(batch(b"message after gap", base_offset=43))
    seg.truncate_to(41)
    assert batch_offsets(seg.read(40, 10_000)) == [(40, 40)]


def test_truncate_to_the_middle_of_a_batch_removes_the_whole_batch(tmp_path, clock):
    seg = segment(tmp_path, clock)
    seg.append(records(40, "a", "b"))
    seg.append(records(42, "c", "d", "e"))
    removed = seg.truncate_to(43)
    assert removed == len(records(42, "c", "d", "e"))
    assert seg.read_next_offset() == 42


def test_truncate_of_an_empty_reopened_segment_leaves_room_in_its_indexes(tmp_path, clock):
    max_segment_ms = 300_000
    seg = segment(tmp_path, clock, 0)
    seg.offset_index.entry_count, seg.time_index.entry_count  # materialise both
    seg.close()
    reopened = LogSegment.open(os.fspath(tmp_path), 0, config(index_interval_bytes=10), clock=clock)
    assert reopened.offset_index.size_in_bytes == 0 and reopened.time_index.file_bytes == 0
    clock.advance(500)
    reopened.truncate_to(57)
    assert reopened.time_waited_for_roll(clock.time_ms(), -1) == 0
    assert not reopened.offset_index.is_full() and not reopened.time_index.is_full()
    roll = dict(max_segment_bytes=INT_MAX, max_segment_ms=max_segment_ms, messages_bytes=1024, max_timestamp_ms=-1)
    assert reopened.should_roll(last_offset=100, now_ms=clock.time_ms(), **roll) is None
    clock.advance(max_segment_ms + 1)
    assert reopened.time_waited_for_roll(clock.time_ms(), -1) == max_segment_ms + 1
    assert reopened.should_roll(last_offset=100, now_ms=clock.time_ms(), **roll) is None  # empty: never by time
    assert reopened.should_roll(last_offset=INT_MAX + 200, now_ms=clock.time_ms(), **roll) is RollReason.OFFSET_OVERFLOW


def test_truncate_reloads_the_largest_timestamp_and_next_offset(tmp_path, clock):
    seg = segment(tmp_path, clock, 40, index_interval_bytes=2 * len(records(0, "hello")) - 1)
    for offset in range(40, 70):
        seg.append(records(offset, "hello", timestamp_ms=offset))
    assert seg.read_next_offset() == 70
    assert seg.time_index.entry_count == 30 // 2 - 1
    seg.truncate_to(41)
    assert seg.time_index.entry_count == 0
    assert seg.largest_timestamp() == 40
    assert seg.read_next_offset() == 41


def test_truncate_to_before_everything_resets_the_created_time_and_allows_reappending(tmp_path, clock):
    seg = segment(tmp_path, clock)
    seg.append(records(40, "hello", "there", timestamp_ms=-1))
    clock.advance(500)
    assert seg.time_waited_for_roll(clock.time_ms(), -1) == 500
    seg.truncate_to(0)
    assert seg.time_waited_for_roll(clock.time_ms(), -1) == 0
    assert not seg.time_index.is_full() and not seg.offset_index.is_full()
    assert seg.read(0, 1024) is None
    seg.append(records(40, "hello", "there"))
    assert seg.read_next_offset() == 42


# -- timestamps ------------------------------------------------------------------------------


def test_find_offset_by_timestamp(tmp_path, clock):
    seg = segment(tmp_path, clock, 40, index_interval_bytes=2 * len(records(0, "msg00")) - 1)
    for offset in range(40, 50):
        seg.append(records(offset, f"msg{offset}", timestamp_ms=offset * 10))
    assert seg.largest_timestamp() == 490
    assert seg.find_offset_by_timestamp(420, 0).offset == 42  # an indexed timestamp
    assert seg.find_offset_by_timestamp(421, 0).offset == 43
    assert seg.find_offset_by_timestamp(430, 0).offset == 43  # an un-indexed one
    assert seg.find_offset_by_timestamp(431, 0).offset == 44
    assert seg.find_offset_by_timestamp(491, 0) is None  # beyond the last
    assert seg.find_offset_by_timestamp(401, 0).offset == 41  # before the first indexed
    assert seg.find_offset_by_timestamp(399, 0).offset == 40  # before the first


def test_find_offset_by_timestamp_looks_inside_batches_and_honours_the_starting_offset(tmp_path, clock):
    seg = segment(tmp_path, clock, 0)
    seg.append(batch(b"a", b"b", b"c", base_offset=0, timestamps=[100, 300, 200]))
    found = seg.find_offset_by_timestamp(150, 0)
    assert (found.timestamp_ms, found.offset) == (300, 1)
    found = seg.find_offset_by_timestamp(150, 2)
    assert (found.timestamp_ms, found.offset) == (200, 2)


def test_largest_timestamp_falls_back_to_the_file_mtime(tmp_path, clock):
    seg = segment(tmp_path, clock)
    seg.append(records(40, "a", timestamp_ms=-1))
    assert seg.largest_record_timestamp() is None
    assert seg.largest_timestamp() == seg.last_modified_ms()


def test_first_batch_timestamp(tmp_path, clock):
    seg = segment(tmp_path, clock, 1)
    assert seg.first_batch_timestamp() is None
    seg.append(batch(b"one", base_offset=1, timestamps=1000))
    assert seg.first_batch_timestamp() == 1000


def test_offset_of_max_timestamp_is_the_first_record_carrying_it(tmp_path, clock):
    seg = segment(tmp_path, clock, 0)
    seg.append(batch(b"a", b"b", b"c", base_offset=0, timestamps=[5, 9, 9]))
    seg.append(batch(b"d", base_offset=3, timestamps=7))
    found = seg.offset_of_max_timestamp()
    assert (found.timestamp_ms, found.offset) == (9, 1)


# -- roll decisions --------------------------------------------------------------------------


def roll_args(clock, **overrides):
    args = dict(
        max_segment_bytes=INT_MAX,
        max_segment_ms=1000,
        messages_bytes=100,
        max_timestamp_ms=-1,
        last_offset=41,
        now_ms=clock.time_ms(),
    )
    args.update(overrides)
    return args


def test_roll_for_size_when_the_batch_would_pass_segment_bytes(tmp_path, clock):
    seg = segment(tmp_path, clock)
    seg.append(records(40, "a"))
    size = seg.size_in_bytes
    assert seg.should_roll(**roll_args(clock, max_segment_bytes=size + 100)) is None
    assert seg.should_roll(**roll_args(clock, max_segment_bytes=size + 99)) is RollReason.SIZE


def test_roll_for_time_uses_the_first_batch_timestamp(tmp_path, clock):
    seg = segment(tmp_path, clock)
    seg.append(records(40, "a", timestamp_ms=NOW_MS))
    assert seg.should_roll(**roll_args(clock, max_timestamp_ms=NOW_MS + 1000)) is None
    assert seg.should_roll(**roll_args(clock, max_timestamp_ms=NOW_MS + 1001)) is RollReason.TIME


def test_roll_for_time_uses_the_wall_clock_without_timestamps(tmp_path, clock):
    seg = segment(tmp_path, clock)
    seg.append(records(40, "a", timestamp_ms=-1))
    clock.advance(1000)
    assert seg.should_roll(**roll_args(clock, now_ms=clock.time_ms())) is None
    clock.advance(1)
    assert seg.should_roll(**roll_args(clock, now_ms=clock.time_ms())) is RollReason.TIME


def test_roll_jitter_shortens_the_roll_time(tmp_path, clock):
    seg = new_segment(tmp_path, 40, clock, config(), roll_jitter_ms=300)
    seg.append(records(40, "a", timestamp_ms=NOW_MS))
    assert seg.should_roll(**roll_args(clock, max_timestamp_ms=NOW_MS + 700)) is None
    assert seg.should_roll(**roll_args(clock, max_timestamp_ms=NOW_MS + 701)) is RollReason.TIME


def test_roll_when_the_offset_index_is_full(tmp_path, clock):
    seg = new_segment(tmp_path, 0, clock, config(index_interval_bytes=1, segment_index_bytes=24))
    for offset in range(4):  # no timestamps: offset entries only, 3 of 3 slots
        seg.append(records(offset, "a", timestamp_ms=-1))
    assert seg.offset_index.is_full()
    assert seg.should_roll(**roll_args(clock, last_offset=10)) is RollReason.OFFSET_INDEX_FULL


def test_roll_when_the_time_index_is_full(tmp_path, clock):
    seg = new_segment(tmp_path, 0, clock, config(index_interval_bytes=1, segment_index_bytes=24))
    for offset in range(2):  # 2 time slots, the last one reserved for the roll entry
        seg.append(records(offset, "a", timestamp_ms=NOW_MS + offset))
    assert not seg.offset_index.is_full()
    assert seg.should_roll(**roll_args(clock, last_offset=10)) is RollReason.TIME_INDEX_FULL


# -- recovery --------------------------------------------------------------------------------


def test_recovery_rebuilds_the_same_indexes_appends_wrote(tmp_path, clock):
    seg = segment(tmp_path, clock, 0, index_interval_bytes=100)
    for offset in range(50):
        seg.append(records(offset, "v" * (offset % 13), timestamp_ms=NOW_MS + offset))
    entries = lambda index: [index.entry(s) for s in range(index.entry_count)]
    offset_entries, time_entries = entries(seg.offset_index), entries(seg.time_index)
    assert seg.recover() == 0
    assert entries(seg.offset_index) == offset_entries
    assert entries(seg.time_index)[: len(time_entries)] == time_entries


def test_recovery_fixes_a_corrupt_offset_index(tmp_path, clock):
    seg = segment(tmp_path, clock, 0)
    for offset in range(100):
        seg.append(records(offset, str(offset), timestamp_ms=-1))
    seg.offset_index.flush()
    fill_with_nonsense(seg.offset_index.path, 5, os.path.getsize(seg.offset_index.path) - 5)
    seg.recover()
    for offset in range(100):
        assert offsets_of(seg.read(offset, 1, min_one_batch=True)) == [offset]


def test_recovery_fixes_a_corrupt_time_index(tmp_path, clock):
    seg = segment(tmp_path, clock, 0)
    for offset in range(100):
        seg.append(records(offset, str(offset), timestamp_ms=offset * 10))
    seg.time_index.flush()
    fill_with_nonsense(seg.time_index.path, 5, os.path.getsize(seg.time_index.path) - 5)
    seg.recover()
    for offset in range(100):
        assert seg.find_offset_by_timestamp(offset * 10, 0).offset == offset
        if offset < 99:
            assert seg.find_offset_by_timestamp(offset * 10 + 1, 0).offset == offset + 1


@pytest.mark.parametrize("seed", range(10))
def test_recovery_cuts_the_log_at_a_corrupt_batch(tmp_path, clock, seed):
    rng = random.Random(seed)
    seg = segment(tmp_path, clock, 0)
    for offset in range(20):
        seg.append(records(offset, str(offset)))
    corrupt_from = rng.randrange(20)
    position = seg.log.search_for_offset_with_size(corrupt_from, 0).position + rng.randrange(15)
    fill_with_nonsense(seg.log.path, position, seg.size_in_bytes - position, seed)
    truncated = seg.recover()
    assert truncated > 0
    assert [h.last_offset for h in seg.log.batch_headers()] == list(range(corrupt_from))


def test_recovery_cuts_a_batch_with_one_flipped_byte(tmp_path, clock):
    seg = segment(tmp_path, clock, 0)
    for offset in range(10):
        seg.append(records(offset, "payload"))
    position = seg.log.search_for_offset_with_size(6, 0).position + 70
    with open(seg.log.path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x01]))
    seg.recover()
    assert seg.read_next_offset() == 6


def test_recovery_cuts_a_torn_tail(tmp_path, clock):
    seg = segment(tmp_path, clock, 0)
    for offset in range(10):
        seg.append(records(offset, "payload"))
    full = seg.size_in_bytes
    with open(seg.log.path, "r+b") as f:
        f.truncate(full - 5)
    reopened = LogSegment.open(os.fspath(tmp_path), 0, config(index_interval_bytes=10), clock=clock)
    assert reopened.recover() == len(records(9, "payload")) - 5
    assert reopened.read_next_offset() == 9


def test_recovery_stops_at_a_batch_whose_offsets_go_backwards(tmp_path, clock):
    seg = segment(tmp_path, clock, 0)
    seg.append(records(0, "a", "b"))
    seg.append(records(2, "c"))
    seg.log.append([records(1, "stale")])  # rewinds: a valid CRC, but not a valid log
    assert seg.recover() == len(records(1, "stale"))
    assert seg.read_next_offset() == 3


def test_recovery_of_batches_larger_than_the_read_chunk(tmp_path, clock):
    seg = segment(tmp_path, clock, 0)
    big = 5 * 1024 * 1024
    seg.append(sized_batch(big, base_offset=0))
    seg.append(records(1, "small"))
    assert seg.recover() == 0
    assert seg.read_next_offset() == 2


# -- files -----------------------------------------------------------------------------------


def test_change_file_suffixes_renames_without_creating_index_files(tmp_path, clock):
    seg = segment(tmp_path, clock)
    log_path, index_path, time_path = seg.log.path, seg.offset_index.path, seg.time_index.path
    assert not os.path.exists(index_path) and not os.path.exists(time_path)
    seg.change_file_suffixes("", ".deleted")
    assert not os.path.exists(index_path + ".deleted") and not os.path.exists(time_path + ".deleted")
    assert (seg.log.path, seg.offset_index.path, seg.time_index.path) == (
        log_path + ".deleted",
        index_path + ".deleted",
        time_path + ".deleted",
    )
    assert os.path.exists(seg.log.path)
    assert seg.has_suffix(".deleted")
    seg.offset_index.entry_count
    assert os.path.exists(seg.offset_index.path)
    seg.time_index.entry_count
    assert os.path.exists(seg.time_index.path)


def test_preallocated_segment_is_trimmed_on_close_and_reads_back(tmp_path, clock):
    log_config = config(index_interval_bytes=10, segment_index_bytes=1000, preallocate=True, segment_bytes=512 * 1024)
    seg = new_segment(tmp_path, 40, clock, log_config)
    assert os.path.getsize(seg.log.path) == 512 * 1024
    seg.append(records(50, "hello", "there"))
    ms2 = records(60, "alpha", "beta")
    seg.append(ms2)
    assert seg.read(55, 200) == ms2
    size = seg.size_in_bytes
    seg.close()
    assert os.path.getsize(seg.log.path) == size
    reopened = LogSegment.open(os.fspath(tmp_path), 40, log_config, clock=clock)
    assert reopened.read(55, 200) == ms2
    assert reopened.size_in_bytes == size


def test_delete_if_exists_removes_every_file(tmp_path, clock):
    seg = segment(tmp_path, clock)
    seg.append(records(40, "a"))
    seg.flush()
    assert len(os.listdir(tmp_path)) == 3
    seg.delete_if_exists()
    assert os.listdir(tmp_path) == []
    seg.delete_if_exists()  # missing files are fine


def test_on_become_inactive_trims_indexes_and_writes_the_final_time_entry(tmp_path, clock):
    seg = segment(tmp_path, clock, 0, index_interval_bytes=10_000)
    seg.append(records(0, "a", timestamp_ms=5))
    seg.append(records(1, "b", timestamp_ms=9))
    seg.on_become_inactive_segment()
    assert os.path.getsize(seg.offset_index.path) == 0
    assert seg.time_index.entry_count == 1
    assert seg.time_index.last_entry == (9, 1)
    assert os.path.getsize(seg.time_index.path) == 12


def test_values_survive_a_reopen(tmp_path, clock):
    seg = segment(tmp_path, clock, 0)
    seg.append(batch(b"x", b"y", base_offset=0))
    seg.close()
    reopened = LogSegment.open(os.fspath(tmp_path), 0, config(), clock=clock)
    assert values_of(reopened.read(0, 1000)) == [b"x", b"y"]


@pytest.mark.parametrize("interval", [1, 100, 4096, 1_000_000])
def test_long_reads_end_on_a_batch_boundary_whatever_the_index_density(tmp_path, clock, interval):
    seg = segment(tmp_path, clock, 0, index_interval_bytes=interval)
    batches = [records(offset, "v" * (offset * 37 % 300)) for offset in range(400)]
    for one in batches:
        seg.append(one)
    starts = [0]
    for one in batches:
        starts.append(starts[-1] + len(one))
    rng = random.Random(interval)
    for _ in range(200):
        first = rng.randrange(400)
        max_bytes = rng.randrange(1, seg.size_in_bytes)
        data = seg.read(first, max_bytes, min_one_batch=True)
        expected_end = max(s for s in starts if s - starts[first] <= max_bytes) if starts[first + 1] - starts[first] <= max_bytes else starts[first + 1]
        assert data == seg.log.read(starts[first], expected_end - starts[first])
