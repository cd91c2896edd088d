"""OffsetIndex (kafka-storage.md 3.1, 3.3, 3.5): Kafka's OffsetIndexTest ported, plus every edge of
the lazy, preallocated, mmap'd file."""

from __future__ import annotations

import io
import os
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.storage.format.abstract_index import RELATIVE_OFFSET_MAX, IndexStatistics
from seglog_server.storage.base.errors import CorruptIndexError, IndexFullError, InvalidOffsetError, OffsetOverflowError
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.format.offset_index import OffsetIndex, OffsetPosition

BASE_OFFSET = 45
ENTRY_BYTES = 8
MAX_ENTRIES = 30


class RecordingFS(FileSystem):
    """The real file system, noting every call (to see what laziness leaves untouched)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def open(self, path, flags, mode=0o644):
        self.calls.append("open")
        return super().open(path, flags, mode)

    def mmap(self, fd, length, writable):
        self.calls.append("mmap")
        return super().mmap(fd, length, writable)


class MmapFailsOnceFS(FileSystem):
    def __init__(self) -> None:
        self.failed = False

    def mmap(self, fd, length, writable):
        if not self.failed:
            self.failed = True
            raise OSError(12, "injected: cannot allocate memory")
        return super().mmap(fd, length, writable)


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "00000000000000000045.index")


@pytest.fixture
def index(path):
    idx = OffsetIndex(path, BASE_OFFSET, MAX_ENTRIES * ENTRY_BYTES)
    yield idx
    idx.close()


def fill(idx: OffsetIndex, pairs) -> None:
    for offset, position in pairs:
        idx.append(offset, position)


# -- lazy opening --------------------------------------------------------------------------------
def test_new_index_creates_no_file_until_first_use(path):
    fs = RecordingFS()
    idx = OffsetIndex(path, BASE_OFFSET, 240, fs=fs)
    assert not idx.is_materialized
    assert (idx.path, idx.base_offset, idx.max_index_bytes) == (path, BASE_OFFSET, 240)
    assert not os.path.exists(path)
    assert fs.calls == []


def test_first_lookup_creates_the_file_preallocated_to_max_index_bytes(path, index):
    assert index.lookup(50) == OffsetPosition(BASE_OFFSET, 0)
    assert index.is_materialized
    assert os.path.getsize(path) == MAX_ENTRIES * ENTRY_BYTES
    assert (index.entry_count, index.max_entry_count, index.size_in_bytes) == (0, MAX_ENTRIES, 0)


def test_preallocation_rounds_max_index_bytes_down_to_whole_entries(path):
    idx = OffsetIndex(path, BASE_OFFSET, 30 * ENTRY_BYTES + 7)
    assert idx.max_entry_count == 30
    assert os.path.getsize(path) == 240
    idx.close()


def test_max_index_bytes_below_one_entry_is_rejected_when_the_file_is_created(path):
    idx = OffsetIndex(path, BASE_OFFSET, 7)
    with pytest.raises(ValueError, match="invalid max index size"):
        idx.lookup(BASE_OFFSET)
    assert not os.path.exists(path)


def test_existing_file_is_not_opened_until_first_use(path, index):
    fill(index, [(50, 0), (60, 100)])
    index.close()
    fs = RecordingFS()
    reopened = OffsetIndex(path, BASE_OFFSET, 240, fs=fs)
    assert fs.calls == []
    assert reopened.last_offset == 60
    assert fs.calls[-1] == "mmap" and fs.calls.count("mmap") == 1
    reopened.close()


def test_flush_materializes_the_index_file(path):
    idx = OffsetIndex(path, BASE_OFFSET, 240)
    idx.flush()
    assert os.path.getsize(path) == 240
    idx.close()


def test_statistics_of_an_unmaterialized_index_open_nothing(path):
    fs = RecordingFS()
    idx = OffsetIndex(path, BASE_OFFSET, 240, fs=fs)
    assert idx.statistics() == IndexStatistics(path, False, 0, 0, 0, 0, 0, 0)
    assert fs.calls == [] and not os.path.exists(path)


def test_rename_of_an_unmaterialized_index_without_file_only_changes_the_path(path, tmp_path):
    idx = OffsetIndex(path, BASE_OFFSET, 240)
    renamed = path + ".deleted"
    idx.rename_to(renamed)
    assert idx.path == renamed
    assert os.listdir(tmp_path) == []
    assert not idx.is_materialized


def test_rename_of_an_unmaterialized_index_moves_its_existing_file_without_mapping_it(path, index):
    fill(index, [(50, 0)])
    index.close()
    fs = RecordingFS()
    idx = OffsetIndex(path, BASE_OFFSET, 240, fs=fs)
    idx.rename_to(path + ".swap")
    assert not os.path.exists(path) and os.path.getsize(path + ".swap") == ENTRY_BYTES
    assert fs.calls == []
    assert idx.lookup(55) == OffsetPosition(50, 0)  # the moved file is the one that opens
    idx.close()


def test_rename_of_a_materialized_index_moves_the_mapped_file(path, index):
    fill(index, [(50, 0)])
    index.rename_to(path + ".cleaned")
    fill(index, [(51, 10)])
    index.close()
    assert not os.path.exists(path)
    assert os.path.getsize(path + ".cleaned") == 2 * ENTRY_BYTES


def test_rename_of_a_materialized_index_whose_file_vanished_raises(path, index):
    index.lookup(50)
    os.unlink(path)
    with pytest.raises(FileNotFoundError):
        index.rename_to(path + ".deleted")
    assert index.path == path + ".deleted"  # Kafka updates the path even when the move fails
    with pytest.raises(FileNotFoundError):
        index.close()  # trimming finds no file ...
    assert index.is_closed  # ... but the mapping is released all the same


def test_delete_of_an_unmaterialized_index_without_file_returns_false_and_creates_nothing(path, tmp_path):
    idx = OffsetIndex(path, BASE_OFFSET, 240)
    assert idx.delete_if_exists() is False
    assert os.listdir(tmp_path) == []


def test_delete_of_an_unmaterialized_index_removes_its_existing_file(path, index):
    fill(index, [(50, 0)])
    index.close()
    fs = RecordingFS()
    idx = OffsetIndex(path, BASE_OFFSET, 240, fs=fs)
    assert idx.delete_if_exists() is True
    assert not os.path.exists(path) and fs.calls == []


def test_delete_of_a_materialized_index_unmaps_and_removes_it(path, index):
    fill(index, [(50, 0)])
    assert index.delete_if_exists() is True
    assert not os.path.exists(path)
    with pytest.raises(ValueError, match="closed"):
        index.lookup(50)


def test_close_of_an_unmaterialized_index_touches_nothing(path, tmp_path):
    idx = OffsetIndex(path, BASE_OFFSET, 240)
    idx.close()
    assert os.listdir(tmp_path) == []


def test_update_parent_dir_follows_a_directory_rename(path, tmp_path):
    idx = OffsetIndex(path, BASE_OFFSET, 240)
    idx.update_parent_dir(str(tmp_path / "topic-0.abc-delete"))
    assert idx.path == str(tmp_path / "topic-0.abc-delete" / "00000000000000000045.index")


def test_a_failed_mapping_leaves_no_preallocated_file_behind(path):
    idx = OffsetIndex(path, BASE_OFFSET, 240, fs=MmapFailsOnceFS())
    with pytest.raises(OSError, match="injected"):
        idx.lookup(50)
    assert not os.path.exists(path)
    assert not idx.is_materialized
    fill(idx, [(50, 0)])  # the next use opens afresh, with no phantom entries
    assert idx.entry_count == 1
    idx.close()


# -- lookup ----------------------------------------------------------------------------------------
def test_lookup_in_an_empty_index_returns_base_offset_and_position_0(index):
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    assert index.lookup(92) == OffsetPosition(BASE_OFFSET, 0)


def test_lookup_below_first_entry_returns_base_offset(index):
    fill(index, [(50, 100), (60, 200)])
    assert index.lookup(49) == OffsetPosition(BASE_OFFSET, 0)
    assert index.lookup(0) == OffsetPosition(BASE_OFFSET, 0)


def test_lookup_of_an_indexed_offset_returns_its_entry(index):
    fill(index, [(50, 100), (60, 200), (70, 300)])
    assert index.lookup(50) == OffsetPosition(50, 100)
    assert index.lookup(60) == OffsetPosition(60, 200)
    assert index.lookup(70) == OffsetPosition(70, 300)


def test_lookup_between_entries_returns_the_lower_entry(index):
    fill(index, [(50, 100), (60, 200), (70, 300)])
    assert index.lookup(59) == OffsetPosition(50, 100)
    assert index.lookup(61) == OffsetPosition(60, 200)


def test_lookup_after_last_entry_returns_the_last_entry(index):
    fill(index, [(50, 100), (60, 200)])
    assert index.lookup(10**12) == OffsetPosition(60, 200)


def test_random_lookups_agree_with_a_sorted_map(index):
    """Kafka's randomLookupTest."""
    rng = random.Random(7)
    offsets, positions, offset, position = [], [], BASE_OFFSET + 1, 0
    for _ in range(index.max_entry_count):
        offset += rng.randint(1, 15)
        position += rng.randint(1, 15)
        offsets.append(offset)
        positions.append(position)
    fill(index, zip(offsets, positions, strict=True))
    for offset, position in zip(offsets, positions, strict=True):
        assert index.lookup(offset) == OffsetPosition(offset, position)
    for target in rng.sample(range(BASE_OFFSET, offsets[-1]), 60):
        below = [i for i, o in enumerate(offsets) if o <= target]
        expected = OffsetPosition(offsets[below[-1]], positions[below[-1]]) if below else OffsetPosition(BASE_OFFSET, 0)
        assert index.lookup(target) == expected


def test_lookup_extreme_cases_on_a_full_index(index):
    """Kafka's lookupExtremeCases."""
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    fill(index, ((BASE_OFFSET + i + 1, i) for i in range(index.max_entry_count)))
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    last = BASE_OFFSET + index.max_entry_count
    assert index.lookup(last) == OffsetPosition(last, index.max_entry_count - 1)


def test_entry_returns_each_slot(index):
    fill(index, ((BASE_OFFSET + i, i) for i in range(index.max_entry_count)))
    for slot in range(index.max_entry_count):
        assert index.entry(slot) == OffsetPosition(BASE_OFFSET + slot, slot)


@pytest.mark.parametrize("slot", [0, 1, -1])
def test_entry_outside_the_valid_slots_raises_index_error(index, slot):
    with pytest.raises(IndexError, match="out of range"):
        index.entry(slot)


def test_lookup_statistics_count_warm_and_cold_zones(path):
    idx = OffsetIndex(path, 0, 2000 * ENTRY_BYTES)
    fill(idx, ((i, i) for i in range(2000)))
    idx.lookup(1999)  # tail: warm
    idx.lookup(1500)  # within the newest 1025 entries: warm
    idx.lookup(10)  # cold
    stats = idx.statistics()
    assert (stats.warm_lookup_count, stats.cold_lookup_count) == (2, 1)
    assert (stats.entry_count, stats.max_entry_count, stats.size_in_bytes) == (2000, 2000, 16000)
    idx.close()


# -- append ----------------------------------------------------------------------------------------
def test_append_writes_big_endian_relative_offset_and_position(path, index):
    index.append(50, 4096)
    index.close()
    with open(path, "rb") as file:
        assert file.read() == bytes.fromhex("00000005 00001000")


def test_append_to_a_full_index_raises_index_full(index):
    """Kafka's appendTooMany."""
    fill(index, ((BASE_OFFSET + i + 1, i) for i in range(index.max_entry_count)))
    assert index.is_full()
    with pytest.raises(IndexFullError, match="full"):
        index.append(BASE_OFFSET + index.max_entry_count + 1, 1)


def test_append_of_a_lower_offset_raises_invalid_offset(index):
    """Kafka's appendOutOfOrder."""
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError, match="51"):
        index.append(50, 1)


def test_append_of_the_same_offset_raises_invalid_offset(index):
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(51, 10)


def test_append_of_the_base_offset_is_a_valid_first_entry(index):
    index.append(BASE_OFFSET, 0)
    assert index.lookup(BASE_OFFSET) == OffsetPosition(BASE_OFFSET, 0)
    index.sanity_check()  # Kafka's testSanityLastOffsetEqualToBaseOffset


def test_append_below_the_base_offset_overflows(index):
    assert not index.can_append_offset(BASE_OFFSET - 1)
    with pytest.raises(OffsetOverflowError, match=str(BASE_OFFSET - 1)):
        index.append(BASE_OFFSET - 1, 0)
    assert index.entry_count == 0


def test_append_at_the_largest_relative_offset_succeeds_and_one_more_overflows(index):
    assert index.can_append_offset(BASE_OFFSET + RELATIVE_OFFSET_MAX)
    assert not index.can_append_offset(BASE_OFFSET + RELATIVE_OFFSET_MAX + 1)
    index.append(BASE_OFFSET + RELATIVE_OFFSET_MAX - 1, 0)
    index.append(BASE_OFFSET + RELATIVE_OFFSET_MAX, 1)
    with pytest.raises(OffsetOverflowError):
        index.append(BASE_OFFSET + RELATIVE_OFFSET_MAX + 1, 2)
    assert index.lookup(2**62) == OffsetPosition(BASE_OFFSET + RELATIVE_OFFSET_MAX, 1)


def test_append_checks_fullness_then_order_then_overflow(index):
    fill(index, ((BASE_OFFSET + i, i) for i in range(index.max_entry_count)))
    with pytest.raises(IndexFullError):
        index.append(0, 0)  # full wins over out of order
    index.truncate()
    index.append(60, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(BASE_OFFSET - 1, 0)  # out of order wins over overflow


# -- fetch_upper_bound_offset --------------------------------------------------------------------
def test_fetch_upper_bound_offset_returns_an_entry_at_or_past_the_fetch_end(index):
    """Kafka's testFetchUpperBoundOffset."""
    first, second, third, fourth = (OffsetPosition(BASE_OFFSET + i, p) for i, p in enumerate([0, 10, 23, 37]))
    assert index.fetch_upper_bound_offset(first, 5) is None
    fill(index, [first, second, third, fourth])
    assert index.fetch_upper_bound_offset(first, 5) == second
    assert index.fetch_upper_bound_offset(first, 10) == second
    assert index.fetch_upper_bound_offset(first, 23) == third
    assert index.fetch_upper_bound_offset(first, 22) == third
    assert index.fetch_upper_bound_offset(second, 24) == fourth
    assert index.fetch_upper_bound_offset(fourth, 1) is None
    assert index.fetch_upper_bound_offset(first, 200) is None
    assert index.fetch_upper_bound_offset(second, 200) is None


def test_fetch_upper_bound_offset_at_the_first_position_skips_to_the_second_entry(index):
    """The documented SMALLEST_UPPER_BOUND quirk: the first entry is never the answer for a target
    equal to its position; the next one is (still an offset outside the fetch)."""
    fill(index, [(50, 100), (60, 200)])
    assert index.fetch_upper_bound_offset(OffsetPosition(BASE_OFFSET, 0), 100) == OffsetPosition(60, 200)
    assert index.fetch_upper_bound_offset(OffsetPosition(BASE_OFFSET, 0), 99) == OffsetPosition(50, 100)


def test_fetch_upper_bound_offset_in_a_one_entry_index_at_its_position_is_none(index):
    index.append(50, 100)
    assert index.fetch_upper_bound_offset(OffsetPosition(BASE_OFFSET, 0), 100) is None


# -- truncation ------------------------------------------------------------------------------------
@pytest.fixture
def nine(tmp_path):
    """Kafka's truncate test index: base 0, offsets 1..9 at positions 1..9, room for 10."""
    idx = OffsetIndex(str(tmp_path / "00000000000000000000.index"), 0, 10 * ENTRY_BYTES)
    fill(idx, ((i, i) for i in range(1, 10)))
    yield idx
    idx.close()


def test_truncate_to_past_the_end_changes_nothing(nine):
    nine.truncate_to(12)
    assert nine.lookup(10) == OffsetPosition(9, 9)
    assert nine.last_offset == 9 and nine.entry_count == 9


def test_truncate_to_the_next_offset_after_the_last_entry_changes_nothing(nine):
    nine.append(10, 10)
    nine.truncate_to(11)
    assert nine.last_offset == 10


def test_truncate_to_an_indexed_offset_removes_it_and_everything_after(nine):
    nine.truncate_to(9)
    assert nine.lookup(10) == OffsetPosition(8, 8)
    assert nine.last_offset == 8
    nine.append(9, 9)  # appending resumes after truncation
    assert nine.last_offset == 9


def test_truncate_to_between_entries_keeps_the_lower_entry(tmp_path):
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, 80)
    fill(idx, [(10, 1), (20, 2), (30, 3)])
    idx.truncate_to(25)
    assert (idx.entry_count, idx.last_offset) == (2, 20)
    idx.close()


def test_truncate_to_before_the_first_entry_removes_everything(nine):
    nine.truncate_to(0)
    assert nine.entry_count == 0
    assert nine.last_offset == 0  # the base offset
    assert nine.lookup(5) == OffsetPosition(0, 0)


def test_truncate_sequence_from_kafka(nine):
    """Kafka's OffsetIndexTest.truncate, step by step."""
    nine.append(10, 10)
    nine.truncate_to(10)
    assert nine.lookup(10) == OffsetPosition(9, 9) and nine.last_offset == 9
    nine.append(10, 10)
    nine.truncate_to(9)
    assert nine.lookup(10) == OffsetPosition(8, 8) and nine.last_offset == 8
    nine.append(9, 9)
    nine.truncate_to(5)
    assert nine.lookup(10) == OffsetPosition(4, 4) and nine.last_offset == 4
    nine.append(5, 5)
    nine.truncate()
    assert nine.entry_count == 0


def test_truncate_keeps_the_file_length(nine):
    nine.truncate()
    assert nine.file_bytes == 10 * ENTRY_BYTES
    assert nine.max_entry_count == 10


# -- resize, trim, reset -------------------------------------------------------------------------
def test_resize_to_the_current_length_returns_false(index):
    assert index.resize(MAX_ENTRIES * ENTRY_BYTES) is False
    assert index.resize(MAX_ENTRIES * ENTRY_BYTES + 7) is False  # rounds down to the same


def test_resize_shrinks_and_grows_the_file_keeping_entries(path, index):
    fill(index, [(50, 1), (60, 2)])
    assert index.resize(10 * ENTRY_BYTES) is True
    assert (index.max_entry_count, os.path.getsize(path)) == (10, 80)
    assert index.resize(100 * ENTRY_BYTES + 3) is True
    assert (index.max_entry_count, os.path.getsize(path)) == (100, 800)
    assert index.lookup(61) == OffsetPosition(60, 2)
    fill(index, ((70 + i, 10 + i) for i in range(98)))
    assert index.is_full()


def test_resize_below_the_valid_entries_is_refused(index):
    fill(index, [(50, 1), (60, 2)])
    with pytest.raises(ValueError, match="2 entries"):
        index.resize(ENTRY_BYTES)
    assert index.lookup(60) == OffsetPosition(60, 2)


def test_trim_to_valid_size_leaves_exactly_the_entries(path, index):
    fill(index, [(50, 1), (60, 2)])
    assert index.trim_to_valid_size() is True
    assert os.path.getsize(path) == 2 * ENTRY_BYTES
    assert index.is_full()
    assert index.trim_to_valid_size() is False


def test_trim_of_an_empty_index_leaves_an_empty_file_that_still_answers(path, index):
    index.trim_to_valid_size()
    assert os.path.getsize(path) == 0
    assert index.lookup(50) == OffsetPosition(BASE_OFFSET, 0)
    assert index.fetch_upper_bound_offset(OffsetPosition(BASE_OFFSET, 0), 10) is None
    with pytest.raises(IndexFullError):
        index.append(50, 0)


def test_reset_drops_entries_and_regrows_to_max_index_bytes(path, index):
    fill(index, [(50, 1), (60, 2)])
    index.trim_to_valid_size()
    index.reset()
    assert (index.entry_count, index.max_entry_count, index.last_offset) == (0, MAX_ENTRIES, BASE_OFFSET)
    assert os.path.getsize(path) == MAX_ENTRIES * ENTRY_BYTES
    index.append(46, 0)


# -- close and reopen ------------------------------------------------------------------------------
def test_close_trims_and_reopen_finds_the_same_entries(path, index):
    """Kafka's testReopen: a reopened trimmed index is full, so appends fail."""
    fill(index, [(51, 0), (52, 1)])
    index.close()
    assert os.path.getsize(path) == 2 * ENTRY_BYTES
    reopened = OffsetIndex(path, BASE_OFFSET, writable=False)
    assert reopened.lookup(51) == OffsetPosition(51, 0)
    assert reopened.lookup(52) == OffsetPosition(52, 1)
    assert (reopened.last_offset, reopened.entry_count) == (52, 2)
    with pytest.raises(IndexFullError):
        reopened.append(53, 1)
    reopened.close()


def test_reopen_of_an_untrimmed_file_counts_every_slot_as_an_entry(path, index):
    fill(index, [(50, 1), (60, 2)])
    index.close_handler()  # unmapped without trimming: what a crash leaves
    reopened = OffsetIndex(path, BASE_OFFSET, MAX_ENTRIES * ENTRY_BYTES)
    assert (reopened.entry_count, reopened.max_entry_count) == (MAX_ENTRIES, MAX_ENTRIES)
    assert reopened.entry(2) == OffsetPosition(BASE_OFFSET, 0)  # zero slots read as entries
    assert reopened.last_offset == BASE_OFFSET
    reopened.close()


def test_reopen_of_a_file_with_a_partial_entry_ignores_it_and_fails_sanity_check(path):
    with open(path, "wb") as file:
        file.write(bytes.fromhex("00000005 00001000") + b"\x00\x00\x00")
    idx = OffsetIndex(path, BASE_OFFSET, 240)
    assert idx.entry_count == 1
    assert idx.lookup(60) == OffsetPosition(50, 4096)
    with pytest.raises(CorruptIndexError, match="multiple of 8, found 11 bytes"):
        idx.sanity_check()
    idx.close_handler()


def test_sanity_check_rejects_a_last_offset_below_the_base_offset(path):
    with open(path, "wb") as file:
        file.write(bytes.fromhex("00000001 00000000 ffffffff 00000010"))  # relative offset -1
    idx = OffsetIndex(path, BASE_OFFSET, 240)
    assert idx.last_offset == BASE_OFFSET - 1
    with pytest.raises(CorruptIndexError, match="below the base offset"):
        idx.sanity_check()
    idx.close_handler()


def test_sanity_check_passes_on_a_new_and_on_a_reopened_index(path, index):
    index.sanity_check()
    fill(index, [(50, 0)])
    index.close()
    reopened = OffsetIndex(path, BASE_OFFSET, 240)
    reopened.sanity_check()
    reopened.close()


def test_read_only_index_refuses_to_resize(path, index):
    fill(index, [(50, 0)])
    index.close()
    reopened = OffsetIndex(path, BASE_OFFSET, 240, writable=False)
    with pytest.raises(io.UnsupportedOperation):
        reopened.resize(240)
    reopened.close()
    assert os.path.getsize(path) == ENTRY_BYTES


def test_read_only_index_of_a_missing_file_raises_file_not_found(path):
    with pytest.raises(FileNotFoundError):
        OffsetIndex(path, BASE_OFFSET, 240, writable=False).lookup(50)
    assert not os.path.exists(path)


def test_index_is_unusable_after_close_handler(index):
    """Kafka's forceUnmapTest: after unmapping, lookups fail (a ValueError here, not a crash)."""
    index.lookup(50)
    index.close_handler()
    with pytest.raises(ValueError, match="closed"):
        index.lookup(1)
    index.close()  # closing again is harmless


def test_context_manager_closes_and_trims(path):
    with OffsetIndex(path, BASE_OFFSET, 240) as idx:
        idx.append(50, 0)
    assert idx.is_closed and os.path.getsize(path) == ENTRY_BYTES


# -- concurrency -----------------------------------------------------------------------------------
def test_lookups_run_safely_while_another_thread_appends_truncates_and_trims(tmp_path):
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, 4000 * ENTRY_BYTES)
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for round_number in range(15):
                idx.reset()
                for offset in range(round_number, 3000, 3):
                    idx.append(offset, offset * 10)
                idx.truncate_to(1500)
                idx.trim_to_valid_size()
        except BaseException as error:  # noqa: BLE001 - reported to the test thread
            errors.append(error)
        finally:
            stop.set()

    def reader() -> None:
        try:
            while not stop.is_set():
                found = idx.lookup(1499)
                assert found.offset <= 1499 and found.position == found.offset * 10
        except BaseException as error:  # noqa: BLE001 - reported to the test thread
            errors.append(error)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    idx.close()


# -- the warm/cold boundary through the index ------------------------------------------------------
@pytest.mark.parametrize("entry_count", [1023, 1024, 1025, 1026])
def test_every_lookup_is_right_around_the_warm_boundary(tmp_path, entry_count):
    idx = OffsetIndex(str(tmp_path / "0.index"), 0, 2000 * ENTRY_BYTES)
    fill(idx, ((10 * slot, slot) for slot in range(entry_count)))
    for slot in range(entry_count):
        assert idx.lookup(10 * slot) == OffsetPosition(10 * slot, slot)
        assert idx.lookup(10 * slot + 9) == OffsetPosition(10 * slot, slot)
    stats = idx.statistics()
    first_hot = max(0, entry_count - 1 - 1024)
    # Warm iff the first hot entry is strictly below the target: all but the exact first-hot hit(s).
    cold = 2 * first_hot + 1
    assert (stats.warm_lookup_count, stats.cold_lookup_count) == (2 * entry_count - cold, cold)
    idx.close()


# -- against a model -------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(rng=st.randoms(use_true_random=False))
def test_random_operations_agree_with_a_list_model(tmp_path_factory, rng):
    path = str(tmp_path_factory.mktemp("model") / "00000000000000000100.index")
    max_entries = rng.choice([3, 40, 1100])
    idx = OffsetIndex(path, 100, max_entries * ENTRY_BYTES)
    model: list[tuple[int, int]] = []
    for _ in range(150):
        operation = rng.choice(["append", "append", "append", "lookup", "truncate_to", "reopen", "trim"])
        offset = rng.randint(95, 100 + 3 * max_entries)
        if operation == "append":
            position = len(model) * 10
            if len(model) >= idx.max_entry_count:
                with pytest.raises(IndexFullError):
                    idx.append(offset, position)
            elif model and offset <= model[-1][0]:
                with pytest.raises(InvalidOffsetError):
                    idx.append(offset, position)
            elif offset < 100:
                with pytest.raises(OffsetOverflowError):
                    idx.append(offset, position)
            else:
                idx.append(offset, position)
                model.append((offset, position))
        elif operation == "lookup":
            below = [entry for entry in model if entry[0] <= offset]
            assert idx.lookup(offset) == (below[-1] if below else (100, 0))
        elif operation == "truncate_to":
            idx.truncate_to(offset)
            model = [entry for entry in model if entry[0] < offset]
        elif operation == "reopen":
            idx.close()
            idx = OffsetIndex(path, 100, max_entries * ENTRY_BYTES)
            idx.resize(max_entries * ENTRY_BYTES)  # as the log does for its active segment
        else:
            idx.trim_to_valid_size()
        assert idx.entry_count == len(model)
        assert idx.last_offset == (model[-1][0] if model else 100)
    idx.close()


# -- many ascending offsets at once (OffsetsForTimes' targets) -------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    entry_count=st.integers(0, 2500),
    offsets=st.lists(st.integers(-5, 26_000), max_size=120),
)
def test_lookup_positions_equals_a_lookup_per_offset_and_counts_each_in_its_zone(tmp_path_factory, entry_count, offsets):
    path = str(tmp_path_factory.mktemp("positions") / "00000000000000000000.index")
    one_by_one = OffsetIndex(path, 0, 2500 * ENTRY_BYTES)
    fill(one_by_one, ((i * 10, i * 7) for i in range(entry_count)))
    one_by_one.flush()
    offsets = sorted(offsets)
    expected = [one_by_one.lookup(offset).position for offset in offsets]
    alone = one_by_one.statistics()
    one_by_one.close()
    together = OffsetIndex(path, 0, 2500 * ENTRY_BYTES)
    assert together.lookup_positions(offsets) == expected
    both = together.statistics()
    assert (both.warm_lookup_count, both.cold_lookup_count) == (alone.warm_lookup_count, alone.cold_lookup_count)
    together.close()


def test_lookup_positions_of_unsorted_offsets_searches_each(index):
    fill(index, ((BASE_OFFSET + i * 10, i * 100) for i in range(10)))
    offsets = [BASE_OFFSET + 55, BASE_OFFSET, BASE_OFFSET + 91, BASE_OFFSET + 12]
    assert index.lookup_positions(offsets) == [index.lookup(offset).position for offset in offsets]
