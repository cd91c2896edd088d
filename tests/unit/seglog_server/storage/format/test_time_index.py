"""TimeIndex (kafka-storage.md 3.4): Kafka's TimeIndexTest ported, plus the time index's own rules
(reserved last slot, append only on a greater timestamp, truncation by offset)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.storage.base.errors import CorruptIndexError, IndexFullError, InvalidOffsetError, OffsetOverflowError
from seglog_server.storage.format.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset

BASE_OFFSET = 45
ENTRY_BYTES = 12
MAX_ENTRIES = 30


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "00000000000000000045.timeindex")


@pytest.fixture
def index(path):
    idx = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * ENTRY_BYTES)
    yield idx
    idx.close()


def append_entries(idx: TimeIndex, count: int) -> None:
    """Kafka's appendEntries: (10, 55), (20, 65), ... (10 * count, 10 * count + 45)."""
    for i in range(1, count + 1):
        idx.maybe_append(i * 10, i * 10 + BASE_OFFSET)


# -- lazy opening ----------------------------------------------------------------------------------
def test_new_time_index_creates_no_file_until_first_use(path):
    idx = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * ENTRY_BYTES)
    assert not os.path.exists(path) and not idx.is_materialized
    assert idx.last_entry == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)
    assert os.path.getsize(path) == MAX_ENTRIES * ENTRY_BYTES
    idx.close()


def test_default_max_index_bytes_rounds_down_to_873813_entries(path):
    idx = TimeIndex(path, 0)
    assert idx.max_entry_count == 873_813
    assert os.path.getsize(path) == 10_485_756
    idx.close()


# -- lookup ----------------------------------------------------------------------------------------
def test_lookup_in_an_empty_index_returns_no_timestamp_and_base_offset(index):
    assert index.lookup(100) == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)


def test_lookup_below_first_entry_returns_no_timestamp_and_base_offset(index):
    append_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(9) == TimestampOffset(-1, BASE_OFFSET)


def test_lookup_between_entries_returns_the_lower_entry(index):
    append_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(25) == TimestampOffset(20, 65)


def test_lookup_of_an_indexed_timestamp_returns_its_entry(index):
    append_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(30) == TimestampOffset(30, 75)


def test_lookup_after_last_entry_returns_the_last_entry(index):
    append_entries(index, 5)
    assert index.lookup(10**15) == TimestampOffset(50, 95)


def test_entry_returns_each_slot(index):
    append_entries(index, MAX_ENTRIES - 1)
    assert [index.entry(slot) for slot in range(4)] == [
        TimestampOffset(10, 55),
        TimestampOffset(20, 65),
        TimestampOffset(30, 75),
        TimestampOffset(40, 85),
    ]


def test_entry_of_an_empty_index_raises_index_error(index):
    with pytest.raises(IndexError, match="out of range"):
        index.entry(0)


def test_entry_is_stored_big_endian_timestamp_then_relative_offset(path, index):
    index.maybe_append(1_700_000_000_000, 50)
    index.close()
    with open(path, "rb") as file:
        assert file.read() == bytes.fromhex("0000018bcfe56800 00000005")


# -- maybe_append ----------------------------------------------------------------------------------
def test_last_entry_follows_appends(index):
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)
    index.maybe_append(1, BASE_OFFSET + 1)
    assert index.last_entry == TimestampOffset(1, BASE_OFFSET + 1)


def test_maybe_append_of_an_equal_timestamp_is_ignored(index):
    index.maybe_append(10, 50)
    index.maybe_append(10, 60)
    assert index.entry_count == 1 and index.last_entry == TimestampOffset(10, 50)


def test_maybe_append_to_an_empty_index_ignores_timestamps_up_to_no_timestamp(index):
    index.maybe_append(NO_TIMESTAMP, 50)
    index.maybe_append(-5, 50)
    assert index.entry_count == 0
    index.maybe_append(0, 50)
    assert index.last_entry == TimestampOffset(0, 50)


def test_maybe_append_of_a_greater_timestamp_at_the_same_offset_appends(index):
    index.maybe_append(10, 50)
    index.maybe_append(20, 50)
    assert index.entry_count == 2 and index.last_entry == TimestampOffset(20, 50)


def test_maybe_append_of_a_lower_offset_raises_invalid_offset(index):
    index.maybe_append(10, 50)
    with pytest.raises(InvalidOffsetError, match="49"):
        index.maybe_append(20, 49)


def test_maybe_append_of_a_lower_timestamp_raises(index):
    index.maybe_append(10, 50)
    with pytest.raises(ValueError, match="timestamp 9"):
        index.maybe_append(9, 60)
    assert index.entry_count == 1


def test_maybe_append_below_the_base_offset_overflows(index):
    with pytest.raises(OffsetOverflowError):
        index.maybe_append(10, BASE_OFFSET - 1)


def test_maybe_append_of_an_ignored_entry_does_not_check_overflow(index):
    index.maybe_append(10, 50)
    index.maybe_append(10, BASE_OFFSET + 2**31)  # equal timestamp: nothing written, nothing checked
    assert index.entry_count == 1


def test_time_index_is_full_one_slot_early(index):
    """Kafka's testIsFull: the last slot is kept for the roll/close entry."""
    assert not index.is_full()
    append_entries(index, MAX_ENTRIES - 2)
    assert not index.is_full()
    index.maybe_append(10_000, 1000)
    assert index.is_full()


def test_maybe_append_to_a_full_index_needs_skip_full_check(index):
    """Kafka's testAppend."""
    append_entries(index, MAX_ENTRIES - 1)
    with pytest.raises(IndexFullError):
        index.maybe_append(10_000, 1000)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(10_000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    index.maybe_append(10_000, 1000, skip_full_check=True)
    assert index.entry_count == MAX_ENTRIES


def test_maybe_append_with_no_slot_left_raises_even_when_skipping_the_full_check(index):
    append_entries(index, MAX_ENTRIES - 1)
    index.maybe_append(10_000, 1000, skip_full_check=True)
    with pytest.raises(IndexFullError, match="no slot left"):
        index.maybe_append(20_000, 2000, skip_full_check=True)
    index.maybe_append(10_000, 1000, skip_full_check=True)  # the repeated roll entry is a no-op


# -- truncation ------------------------------------------------------------------------------------
def test_truncate_removes_every_entry(index):
    """Kafka's testTruncate."""
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate()
    assert index.entry_count == 0
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate_to(10 + BASE_OFFSET)
    assert index.entry_count == 0


def test_truncate_to_an_indexed_offset_removes_it_and_everything_after(index):
    append_entries(index, 5)  # offsets 55, 65, 75, 85, 95
    index.truncate_to(75)
    assert index.entry_count == 2 and index.last_entry == TimestampOffset(20, 65)


def test_truncate_to_between_offsets_keeps_the_lower_entry(index):
    append_entries(index, 5)
    index.truncate_to(80)
    assert index.entry_count == 3 and index.last_entry == TimestampOffset(30, 75)


def test_truncate_to_before_the_first_entry_removes_everything(index):
    append_entries(index, 5)
    index.truncate_to(BASE_OFFSET)
    assert index.entry_count == 0


def test_truncate_to_past_the_end_changes_nothing(index):
    append_entries(index, 5)
    index.truncate_to(96)
    assert index.entry_count == 5 and index.last_entry == TimestampOffset(50, 95)


def test_truncate_to_searches_by_offset_not_by_timestamp(index):
    index.maybe_append(1000, 50)
    index.maybe_append(2000, 60)
    index.truncate_to(60)  # would keep both if 60 were compared with the timestamps
    assert index.entry_count == 1


def test_truncate_to_an_offset_shared_by_entries_may_keep_an_earlier_one(index):
    """Kafka's search stops on the first equal entry it probes, so truncating to an offset held by
    several entries can keep the ones before that probe (kept as Kafka does it)."""
    index.maybe_append(10, 49)
    for timestamp_ms in (20, 30, 40, 50):
        index.maybe_append(timestamp_ms, 50)
    index.truncate_to(50)
    assert index.entry_count == 2
    assert index.last_entry == TimestampOffset(20, 50)


def test_truncate_to_refreshes_the_last_entry_used_by_appends(index):
    append_entries(index, 5)
    index.truncate_to(75)
    index.maybe_append(25, 70)  # above the new last entry (20, 65)
    assert index.last_entry == TimestampOffset(25, 70)


# -- resize, close, reopen -------------------------------------------------------------------------
def test_resize_reports_whether_the_length_changed(index):
    """Kafka's testResize."""
    assert index.resize(MAX_ENTRIES * ENTRY_BYTES) is False
    assert index.resize(MAX_ENTRIES // 2 * ENTRY_BYTES) is True
    assert index.resize(MAX_ENTRIES * 2 * ENTRY_BYTES) is True
    assert index.max_entry_count == 2 * MAX_ENTRIES


def test_resize_rereads_the_last_entry(index):
    append_entries(index, 3)
    index.resize(3 * ENTRY_BYTES)
    assert index.last_entry == TimestampOffset(30, 75)
    assert index.is_full()


def test_close_trims_and_reopen_finds_the_same_entries(path, index):
    append_entries(index, 3)
    index.maybe_append(35, 80, skip_full_check=True)
    index.close()
    assert os.path.getsize(path) == 4 * ENTRY_BYTES
    reopened = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * ENTRY_BYTES)
    assert reopened.entry_count == 4
    assert reopened.last_entry == TimestampOffset(35, 80)
    assert reopened.lookup(31) == TimestampOffset(30, 75)
    reopened.maybe_append(35, 80, skip_full_check=True)  # a second close entry changes nothing
    assert reopened.entry_count == 4
    reopened.close()


def test_reopen_of_an_untrimmed_file_counts_every_slot_as_an_entry(path, index):
    append_entries(index, 3)
    index.close_handler()
    reopened = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * ENTRY_BYTES)
    assert reopened.entry_count == MAX_ENTRIES
    assert reopened.last_entry == TimestampOffset(0, BASE_OFFSET)  # a zero slot
    with pytest.raises(CorruptIndexError, match="last timestamp 0 is below the first, 10"):
        reopened.sanity_check()
    reopened.close_handler()


def test_reset_drops_entries_and_regrows(path, index):
    append_entries(index, 3)
    index.trim_to_valid_size()
    index.reset()
    assert index.entry_count == 0 and index.max_entry_count == MAX_ENTRIES
    assert index.last_entry == TimestampOffset(NO_TIMESTAMP, BASE_OFFSET)


# -- sanity check ------------------------------------------------------------------------------------
def write_entries(path: str, hex_entries: str) -> None:
    with open(path, "wb") as file:
        file.write(bytes.fromhex(hex_entries))


def test_sanity_check_passes_on_a_valid_index(path, index):
    """Kafka's testSanityCheck, first part."""
    index.sanity_check()
    append_entries(index, 5)
    index.sanity_check()
    index.close()
    reopened = TimeIndex(path, BASE_OFFSET, MAX_ENTRIES * ENTRY_BYTES)
    reopened.sanity_check()
    reopened.close()


def test_sanity_check_rejects_a_last_timestamp_below_the_first(path):
    write_entries(path, "0000000000000014 00000001" "000000000000000a 00000002")  # 20 then 10
    idx = TimeIndex(path, BASE_OFFSET, 360)
    with pytest.raises(CorruptIndexError, match="last timestamp 10 is below the first, 20"):
        idx.sanity_check()
    idx.close_handler()


def test_sanity_check_rejects_a_last_offset_below_the_base_offset(path):
    write_entries(path, "000000000000000a 00000001" "0000000000000014 ffffffff")  # relative -1
    idx = TimeIndex(path, BASE_OFFSET, 360)
    with pytest.raises(CorruptIndexError, match="last offset 44 is below the base offset 45"):
        idx.sanity_check()
    idx.close_handler()


def test_sanity_check_rejects_a_partial_entry(path):
    write_entries(path, "000000000000000a 00000001" "00")
    idx = TimeIndex(path, BASE_OFFSET, 360)
    assert idx.entry_count == 1
    with pytest.raises(CorruptIndexError, match="multiple of 12, found 13 bytes"):
        idx.sanity_check()
    idx.close_handler()


# -- statistics ------------------------------------------------------------------------------------
def test_statistics_count_warm_and_cold_lookups_around_682_entries(path):
    idx = TimeIndex(path, 0, 2000 * ENTRY_BYTES)
    for i in range(684):
        idx.maybe_append(10 * (i + 1), i)
    assert idx.lookup(10 * 684) == TimestampOffset(6840, 683)  # tail: warm
    assert idx.lookup(10 * 2) == TimestampOffset(20, 1)  # equal to the first hot entry: cold
    assert idx.lookup(10 * 2 + 1) == TimestampOffset(20, 1)  # just above it: warm
    stats = idx.statistics()
    assert (stats.warm_lookup_count, stats.cold_lookup_count) == (2, 1)
    assert (stats.entry_count, stats.size_in_bytes, stats.file_bytes) == (684, 684 * 12, 2000 * 12)
    idx.close()


@pytest.mark.parametrize("entry_count", [681, 682, 683, 684])
def test_every_lookup_is_right_around_the_warm_boundary(tmp_path, entry_count):
    idx = TimeIndex(str(tmp_path / "0.timeindex"), 0, 1000 * ENTRY_BYTES)
    for slot in range(entry_count):
        idx.maybe_append(10 * slot, slot)
    for slot in range(entry_count):
        assert idx.lookup(10 * slot) == TimestampOffset(10 * slot, slot)
        assert idx.lookup(10 * slot + 9) == TimestampOffset(10 * slot, slot)
    first_hot = max(0, entry_count - 1 - 682)
    cold = 2 * first_hot + 1  # targets at or below the first hot entry's timestamp
    stats = idx.statistics()
    assert (stats.warm_lookup_count, stats.cold_lookup_count) == (2 * entry_count - cold, cold)
    idx.close()


@settings(max_examples=40, deadline=None)
@given(rng=st.randoms(use_true_random=False))
def test_random_operations_agree_with_a_list_model(tmp_path_factory, rng):
    path = str(tmp_path_factory.mktemp("model") / "00000000000000000100.timeindex")
    max_entries = rng.choice([3, 40, 700])
    idx = TimeIndex(path, 100, max_entries * ENTRY_BYTES)
    model: list[tuple[int, int]] = []
    for _ in range(150):
        operation = rng.choice(["append", "append", "append", "lookup", "truncate_to", "reopen"])
        timestamp_ms, offset = rng.randint(-2, 4 * max_entries), rng.randint(98, 100 + 3 * max_entries)
        last_timestamp_ms, last_offset = model[-1] if model else (NO_TIMESTAMP, 100)
        if operation == "append":
            if len(model) >= idx.max_entry_count - 1:
                with pytest.raises(IndexFullError):
                    idx.maybe_append(timestamp_ms, offset)
            elif model and offset < last_offset:
                with pytest.raises(InvalidOffsetError):
                    idx.maybe_append(timestamp_ms, offset)
            elif model and timestamp_ms < last_timestamp_ms:
                with pytest.raises(ValueError):
                    idx.maybe_append(timestamp_ms, offset)
            elif timestamp_ms > last_timestamp_ms and offset < 100:
                with pytest.raises(OffsetOverflowError):
                    idx.maybe_append(timestamp_ms, offset)
            else:
                idx.maybe_append(timestamp_ms, offset)
                if timestamp_ms > last_timestamp_ms:
                    model.append((timestamp_ms, offset))
        elif operation == "lookup":
            below = [entry for entry in model if entry[0] <= timestamp_ms]
            assert idx.lookup(timestamp_ms) == (below[-1] if below else (NO_TIMESTAMP, 100))
        elif operation == "truncate_to":
            idx.truncate_to(offset)
            kept = [entry for entry in model if entry[1] < offset]
            # Kafka's search may stop on a later one of several entries sharing ``offset`` and keep
            # the earlier ones (test_truncate_to_an_offset_shared_by_entries_may_keep_an_earlier_one).
            assert len(kept) <= idx.entry_count <= len(kept) + sum(1 for entry in model if entry[1] == offset)
            model = model[: idx.entry_count]
        else:
            idx.close()
            idx = TimeIndex(path, 100, max_entries * ENTRY_BYTES)
            idx.resize(max_entries * ENTRY_BYTES)
        assert idx.entry_count == len(model)
        assert idx.last_entry == (model[-1] if model else (NO_TIMESTAMP, 100))
    idx.close()


# -- many ascending timestamps at once (OffsetsForTimes' targets) -----------------------------------


@settings(max_examples=40, deadline=None)
@given(
    entry_count=st.integers(0, 1500),
    timestamps=st.lists(st.integers(-5, 16_000), max_size=120),
)
def test_lookup_offsets_equals_a_lookup_per_timestamp_and_counts_each_in_its_zone(
    tmp_path_factory, entry_count, timestamps
):
    path = str(tmp_path_factory.mktemp("offsets") / "00000000000000000045.timeindex")
    one_by_one = TimeIndex(path, BASE_OFFSET, (1500 + 1) * ENTRY_BYTES)
    for i in range(entry_count):
        one_by_one.maybe_append(i * 10 + 3, BASE_OFFSET + i // 2)  # two entries an offset
    one_by_one.flush()
    timestamps = sorted(timestamps)
    expected = [one_by_one.lookup(timestamp).offset for timestamp in timestamps]
    alone = one_by_one.statistics()
    one_by_one.close()
    together = TimeIndex(path, BASE_OFFSET, (1500 + 1) * ENTRY_BYTES)
    assert together.lookup_offsets(timestamps) == expected
    both = together.statistics()
    assert (both.warm_lookup_count, both.cold_lookup_count) == (alone.warm_lookup_count, alone.cold_lookup_count)
    together.close()
