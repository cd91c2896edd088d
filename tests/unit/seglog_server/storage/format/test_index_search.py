"""Kafka's warm/cold index search (kafka-storage.md 3.2), checked case by case and against a
sorted-list oracle built on ``bisect``."""

from __future__ import annotations

import bisect
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.storage.format import offset_index, time_index
from seglog_server.storage.format.index_search import (
    LARGEST_LOWER_BOUND,
    NO_SLOT,
    SMALLEST_UPPER_BOUND,
    SPAN_PER_TARGET_MAX,
    WARM_SECTION_BYTES,
    Bound,
    EntryLayout,
    Zone,
    first_hot_slot,
    largest_lower_bound_slot_for,
    plain_slot_range_for,
    recording,
    slot_and_zone_for,
    slot_range_for,
    slot_zone_and_pages_for,
    slots_between,
    smallest_upper_bound_slot_for,
)

OFFSET = offset_index.LAYOUT  # (relative offset, position): 8 bytes
TIME = time_index.LAYOUT  # (timestamp, relative offset): 12 bytes
PAGE_BYTES = 4096


def build(layout_entry: struct.Struct, pairs: list[tuple[int, int]]) -> bytes:
    return b"".join(layout_entry.pack(key, value) for key, value in pairs)


def offset_buffer(keys: list[int]) -> bytes:
    """An offset-index buffer whose keys are ``keys`` and whose positions are 10 * key."""
    return build(offset_index.ENTRY, [(key, key * 10) for key in keys])


def kafka_oracle(values: list[int], target: int, bound: Bound) -> set[int]:
    """Every slot Kafka's search may answer for sorted (non-decreasing) ``values``.

    The ideal answer is bisect's: the last slot <= target or the first slot >= target. Kafka's
    search differs in exactly two documented ways:
    - with equal neighbours, an exact hit stops on whichever equal slot it probes first;
    - it never probes slot 0 inside a binary search, so SMALLEST_UPPER_BOUND for a target equal to
      entry 0 answers another equal slot, else slot 1 (NO_SLOT for a one-entry index).
    """
    count = len(values)
    left, right = bisect.bisect_left(values, target), bisect.bisect_right(values, target)
    if left == right:  # target absent: the answer is unique
        if bound is LARGEST_LOWER_BOUND:
            return {left - 1}  # NO_SLOT (-1) below the first entry
        return {left if left < count else NO_SLOT}
    equal_slots = set(range(left, right))
    if bound is SMALLEST_UPPER_BOUND and left == 0:
        equal_slots.discard(0)  # the quirk
        return equal_slots or {1 if count > 1 else NO_SLOT}
    return equal_slots


def zone_oracle(keys: list[int], target: int, field) -> Zone:
    """The section a search of sorted ``keys`` runs in: none when it needs no search (empty, or
    below the first entry), warm above the warm section's first entry, cold otherwise."""
    if not keys or target < keys[0]:
        return Zone.NONE
    return Zone.WARM if target > keys[first_hot_slot(len(keys), field)] else Zone.COLD


# -- the layouts ------------------------------------------------------------------------------
def test_layouts_derive_field_offsets_from_the_entry_struct():
    assert (OFFSET.entry_bytes, OFFSET.key.field_offset, OFFSET.value.field_offset) == (8, 0, 4)
    assert (TIME.entry_bytes, TIME.key.field_offset, TIME.value.field_offset) == (12, 0, 8)


def test_warm_section_holds_8192_bytes_of_entries():
    assert WARM_SECTION_BYTES == 8192
    assert OFFSET.warm_entry_count == 1024
    assert TIME.warm_entry_count == 682


def test_layout_reads_signed_big_endian_fields():
    buffer = build(time_index.ENTRY, [(-5, 7), (2**40, 2**31 - 1)])
    assert TIME.key.unpack_from(buffer, 0) == (-5,)
    assert TIME.value.unpack_from(buffer, 12 + 8) == (2**31 - 1,)
    assert TIME.key.unpack_from(buffer, 12) == (2**40,)


def test_layout_of_a_custom_entry_struct_locates_both_fields():
    layout = EntryLayout.of(struct.Struct(">hqi"), key_field=1, value_field=2)
    assert (layout.entry_bytes, layout.key.field_offset, layout.value.field_offset) == (14, 2, 10)
    assert layout.warm_entry_count == 8192 // 14


# -- empty, below, exact, between, after --------------------------------------------------------
@pytest.mark.parametrize("bound", list(Bound))
def test_empty_index_has_no_slot(bound):
    assert slot_range_for(b"", 0, 5, OFFSET.key, bound) == NO_SLOT
    assert slot_and_zone_for(b"", 0, 5, OFFSET.key, bound) == (NO_SLOT, Zone.NONE)
    assert slot_zone_and_pages_for(b"", 0, 5, OFFSET.key, bound, PAGE_BYTES) == (NO_SLOT, Zone.NONE, 0)


def test_target_below_first_entry_has_no_lower_bound_and_upper_bound_slot_0():
    buffer = offset_buffer([10, 20, 30])
    assert largest_lower_bound_slot_for(buffer, 3, 9, OFFSET.key) == NO_SLOT
    assert smallest_upper_bound_slot_for(buffer, 3, 9, OFFSET.key) == 0


@pytest.mark.parametrize("entry_count", [3, 1026, 5000])
@pytest.mark.parametrize("bound", list(Bound))
def test_target_below_first_entry_searches_no_zone(entry_count, bound):
    """Answered by the first entry's comparison alone: neither warm nor cold (a young segment's
    lookups are all of this kind, and counting them cold made a small setup read 100 % cold)."""
    keys = list(range(10, 10 + 2 * entry_count, 2))
    buffer = offset_buffer(keys)
    expected_slot = NO_SLOT if bound is LARGEST_LOWER_BOUND else 0
    assert slot_and_zone_for(buffer, entry_count, 9, OFFSET.key, bound) == (expected_slot, Zone.NONE)
    assert slot_zone_and_pages_for(buffer, entry_count, 9, OFFSET.key, bound, PAGE_BYTES)[:2] == (
        expected_slot, Zone.NONE)
    assert slot_and_zone_for(buffer, entry_count, 10, OFFSET.key, bound)[1] is Zone.COLD  # searched


@pytest.mark.parametrize("bound", list(Bound))
def test_exact_hit_returns_that_slot(bound):
    buffer = offset_buffer([10, 20, 30, 40])
    for slot, key in enumerate([10, 20, 30, 40]):
        if key == 10 and bound is SMALLEST_UPPER_BOUND:
            continue  # the quirk, tested on its own below
        assert slot_range_for(buffer, 4, key, OFFSET.key, bound) == slot


def test_target_between_entries_finds_both_neighbours():
    buffer = offset_buffer([10, 20, 30, 40])
    assert largest_lower_bound_slot_for(buffer, 4, 25, OFFSET.key) == 1
    assert smallest_upper_bound_slot_for(buffer, 4, 25, OFFSET.key) == 2


def test_target_after_last_entry_has_lower_bound_last_slot_and_no_upper_bound():
    buffer = offset_buffer([10, 20, 30, 40])
    assert largest_lower_bound_slot_for(buffer, 4, 41, OFFSET.key) == 3
    assert smallest_upper_bound_slot_for(buffer, 4, 41, OFFSET.key) == NO_SLOT


def test_search_reads_only_entry_count_slots_of_a_longer_buffer():
    buffer = offset_buffer([10, 20, 30, 40]) + bytes(8 * 100)  # preallocated zero slots after
    assert largest_lower_bound_slot_for(buffer, 2, 35, OFFSET.key) == 1
    assert smallest_upper_bound_slot_for(buffer, 2, 35, OFFSET.key) == NO_SLOT


def test_search_by_value_compares_the_value_field():
    buffer = offset_buffer([10, 20, 30, 40])  # positions 100, 200, 300, 400
    assert largest_lower_bound_slot_for(buffer, 4, 250, OFFSET.value) == 1
    assert smallest_upper_bound_slot_for(buffer, 4, 250, OFFSET.value) == 2
    assert largest_lower_bound_slot_for(buffer, 4, 30, OFFSET.value) == NO_SLOT


def test_search_compares_negative_targets_and_fields_as_signed():
    buffer = build(time_index.ENTRY, [(-3, 0), (0, 1), (5, 2)])
    assert largest_lower_bound_slot_for(buffer, 3, -1, TIME.key) == 0
    assert largest_lower_bound_slot_for(buffer, 3, -4, TIME.key) == NO_SLOT


# -- the SMALLEST_UPPER_BOUND quirk -------------------------------------------------------------
def test_smallest_upper_bound_of_first_entry_answers_slot_1_not_0():
    buffer = offset_buffer([10, 20, 30])
    assert smallest_upper_bound_slot_for(buffer, 3, 10, OFFSET.key) == 1


def test_smallest_upper_bound_of_the_only_entry_answers_no_slot():
    buffer = offset_buffer([10])
    assert smallest_upper_bound_slot_for(buffer, 1, 10, OFFSET.key) == NO_SLOT


def test_largest_lower_bound_of_first_entry_is_slot_0():
    buffer = offset_buffer([10, 20, 30])
    assert largest_lower_bound_slot_for(buffer, 3, 10, OFFSET.key) == 0
    assert largest_lower_bound_slot_for(offset_buffer([10]), 1, 10, OFFSET.key) == 0


def test_quirk_does_not_reach_the_warm_section():
    count = OFFSET.warm_entry_count + 10
    keys = list(range(0, count * 2, 2))
    buffer = offset_buffer(keys)
    hot = first_hot_slot(count, OFFSET.key)
    # The warm range starts below the target, so its first slot never equals the target.
    assert smallest_upper_bound_slot_for(buffer, count, keys[hot + 1], OFFSET.key) == hot + 1
    assert smallest_upper_bound_slot_for(buffer, count, keys[hot], OFFSET.key) == hot  # cold, exact hit


# -- the warm/cold boundary ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("entry_count", "first_hot"),
    [(1, 0), (1024, 0), (1025, 0), (1026, 1), (1027, 2), (2048, 1023)],
)
def test_first_hot_slot_of_the_offset_index(entry_count, first_hot):
    assert first_hot_slot(entry_count, OFFSET.key) == first_hot


@pytest.mark.parametrize(("entry_count", "first_hot"), [(681, 0), (682, 0), (683, 0), (684, 1), (685, 2)])
def test_first_hot_slot_of_the_time_index(entry_count, first_hot):
    assert first_hot_slot(entry_count, TIME.key) == first_hot


@pytest.mark.parametrize(
    ("layout", "entry_count"),
    [(OFFSET, n) for n in (1023, 1024, 1025, 1026)] + [(TIME, n) for n in (681, 682, 683, 684)],
    ids=lambda v: str(v) if isinstance(v, int) else f"{v.entry_bytes}B",
)
@pytest.mark.parametrize("bound", list(Bound))
def test_every_entry_is_found_around_the_warm_boundary(layout, entry_count, bound):
    keys = list(range(3, 3 + 4 * entry_count, 4))
    entry = offset_index.ENTRY if layout is OFFSET else time_index.ENTRY
    buffer = build(entry, [(key, slot) for slot, key in enumerate(keys)])
    for slot, key in enumerate(keys):
        for target in (key - 1, key, key + 1):
            expected = kafka_oracle(keys, target, bound)
            found, zone = slot_and_zone_for(buffer, entry_count, target, layout.key, bound)
            assert found in expected, (slot, target)
            assert zone is zone_oracle(keys, target, layout.key)


def test_target_equal_to_first_hot_entry_searches_the_cold_section():
    keys = list(range(0, 2 * 1026, 2))
    buffer = offset_buffer(keys)
    assert first_hot_slot(1026, OFFSET.key) == 1
    assert slot_and_zone_for(buffer, 1026, keys[1], OFFSET.key, LARGEST_LOWER_BOUND) == (1, Zone.COLD)
    assert slot_and_zone_for(buffer, 1026, keys[1] + 1, OFFSET.key, LARGEST_LOWER_BOUND) == (1, Zone.WARM)


@pytest.mark.parametrize(("layout", "entry_count"), [(OFFSET, 1026), (OFFSET, 5000), (TIME, 684), (TIME, 5000)])
def test_warm_lookup_probes_only_the_warm_section(layout, entry_count):
    entry = offset_index.ENTRY if layout is OFFSET else time_index.ENTRY
    keys = list(range(0, 2 * entry_count, 2))
    buffer = build(entry, [(key, slot) for slot, key in enumerate(keys)])
    hot = first_hot_slot(entry_count, layout.key)
    for target in range(keys[hot] + 1, keys[-1] + 3, 7):
        probed: list[int] = []
        slot_range_for(buffer, entry_count, target, recording(layout.key, probed), LARGEST_LOWER_BOUND)
        assert probed[0] == hot
        assert all(hot <= slot < entry_count for slot in probed)


def pages_touched(probed: list[int], field_bytes: int, entry_bytes: int) -> set[int]:
    pages: set[int] = set()
    for slot in probed:
        first_byte = slot * entry_bytes
        pages.update(range(first_byte // PAGE_BYTES, (first_byte + field_bytes - 1) // PAGE_BYTES + 1))
    return pages


@pytest.mark.parametrize(("layout", "field_bytes"), [(OFFSET, 4), (TIME, 8)], ids=["offset", "time"])
def test_tail_lookup_touches_at_most_3_pages_at_any_index_size(layout, field_bytes):
    entry = offset_index.ENTRY if layout is OFFSET else time_index.ENTRY
    total = 4000
    buffer = build(entry, [(2 * slot, slot) for slot in range(total)])
    for entry_count in range(1, total):
        for target in (2 * (entry_count - 1), 2 * entry_count + 5):  # the last entry, past it
            probed: list[int] = []
            slot_range_for(buffer, entry_count, target, recording(layout.key, probed), LARGEST_LOWER_BOUND)
            assert len(pages_touched(probed, field_bytes, layout.entry_bytes)) <= 3, entry_count


def test_tail_lookup_probes_the_same_pages_after_the_index_grows_a_page():
    entries_per_page = PAGE_BYTES // 8
    buffer = offset_buffer(list(range(20 * entries_per_page)))
    before, after = [], []
    count = 12 * entries_per_page
    slot_range_for(buffer, count, count - 1, recording(OFFSET.key, before), LARGEST_LOWER_BOUND)
    slot_range_for(buffer, count + 1, count, recording(OFFSET.key, after), LARGEST_LOWER_BOUND)
    new_pages = pages_touched(after, 4, 8) - pages_touched(before, 4, 8)
    assert new_pages <= {count // entries_per_page}  # at most the page the new entry was written to


def test_plain_search_probes_pages_spread_over_the_whole_index():
    entries_per_page = PAGE_BYTES // 8
    count = 13 * entries_per_page
    buffer = offset_buffer(list(range(count)))
    probed: list[int] = []
    plain_slot_range_for(buffer, count, count - 1, recording(OFFSET.key, probed), LARGEST_LOWER_BOUND)
    assert pages_touched(probed, 4, 8) >= {0, 6, 9, 11, 12}  # Kafka's AbstractIndex example


def test_recording_does_not_change_the_answer():
    buffer = offset_buffer(list(range(0, 6000, 3)))
    for target in range(-2, 6003, 97):
        probed: list[int] = []
        recorded = slot_range_for(buffer, 2000, target, recording(OFFSET.key, probed), LARGEST_LOWER_BOUND)
        assert recorded == slot_range_for(buffer, 2000, target, OFFSET.key, LARGEST_LOWER_BOUND)
        assert probed


# -- properties against the oracle ------------------------------------------------------------
def random_sorted(rng: random.Random, count: int, *, strictly: bool, start: int) -> list[int]:
    values, value = [], start
    for _ in range(count):
        value += rng.randint(1 if strictly else 0, 5)
        values.append(value)
    return values


def targets_around(rng: random.Random, values: list[int], layout_field_count: int) -> list[int]:
    if not values:
        return [-1, 0, 1]
    picks = [values[0] - 1, values[0], values[-1], values[-1] + 1]
    hot = max(0, len(values) - 1 - layout_field_count)
    picks += [values[hot] - 1, values[hot], values[hot] + 1]
    for _ in range(12):
        value = rng.choice(values)
        picks += [value - 1, value, value + 1]
    return picks


@settings(max_examples=120, deadline=None)
@given(
    entry_count=st.one_of(st.integers(0, 3000), st.sampled_from([1023, 1024, 1025, 1026, 681, 682, 683, 684])),
    rng=st.randoms(use_true_random=False),
    bound=st.sampled_from(list(Bound)),
)
def test_offset_index_search_matches_oracle_by_key_and_by_value(entry_count, rng, bound):
    keys = random_sorted(rng, entry_count, strictly=True, start=rng.randint(-10, 10))
    positions = random_sorted(rng, entry_count, strictly=True, start=0)
    buffer = build(offset_index.ENTRY, list(zip(keys, positions, strict=True)))
    for field, values in ((OFFSET.key, keys), (OFFSET.value, positions)):
        for target in targets_around(rng, values, OFFSET.warm_entry_count):
            expected = kafka_oracle(values, target, bound)
            assert slot_range_for(buffer, entry_count, target, field, bound) in expected
            assert plain_slot_range_for(buffer, entry_count, target, field, bound) in expected


@settings(max_examples=120, deadline=None)
@given(
    entry_count=st.one_of(st.integers(0, 3000), st.sampled_from([681, 682, 683, 684])),
    rng=st.randoms(use_true_random=False),
    bound=st.sampled_from(list(Bound)),
)
def test_time_index_search_matches_oracle_with_repeated_offsets(entry_count, rng, bound):
    timestamps = random_sorted(rng, entry_count, strictly=True, start=rng.randint(-5, 2**40))
    offsets = random_sorted(rng, entry_count, strictly=False, start=0)  # equal offsets are allowed
    buffer = build(time_index.ENTRY, list(zip(timestamps, offsets, strict=True)))
    for field, values in ((TIME.key, timestamps), (TIME.value, offsets)):
        for target in targets_around(rng, values, TIME.warm_entry_count):
            assert slot_range_for(buffer, entry_count, target, field, bound) in kafka_oracle(values, target, bound)


@settings(max_examples=60, deadline=None)
@given(entry_count=st.integers(1, 3000), rng=st.randoms(use_true_random=False))
def test_strictly_increasing_fields_give_bisect_answers_except_the_quirk(entry_count, rng):
    keys = random_sorted(rng, entry_count, strictly=True, start=0)
    buffer = offset_buffer(keys)
    for target in targets_around(rng, keys, OFFSET.warm_entry_count):
        lower = largest_lower_bound_slot_for(buffer, entry_count, target, OFFSET.key)
        upper = smallest_upper_bound_slot_for(buffer, entry_count, target, OFFSET.key)
        assert lower == bisect.bisect_right(keys, target) - 1
        ideal_upper = bisect.bisect_left(keys, target)
        if target == keys[0]:
            assert upper == (1 if entry_count > 1 else NO_SLOT)  # the quirk: never slot 0
        else:
            assert upper == (ideal_upper if ideal_upper < entry_count else NO_SLOT)


@settings(max_examples=60, deadline=None)
@given(
    entry_count=st.one_of(st.integers(0, 3000), st.sampled_from([0, 1, 2, 1023, 1024, 1025, 1026, 681, 682, 683])),
    rng=st.randoms(use_true_random=False),
    bound=st.sampled_from(list(Bound)),
)
def test_every_search_runs_in_the_zone_of_the_oracle(entry_count, rng, bound):
    """Any index, any target, either field: none exactly when no section is searched (empty, or
    below the first entry), warm and cold as before otherwise."""
    for layout, strictly in ((OFFSET, True), (TIME, False)):
        keys = random_sorted(rng, entry_count, strictly=True, start=rng.randint(-10, 10))
        values = random_sorted(rng, entry_count, strictly=strictly, start=0)
        entry = offset_index.ENTRY if layout is OFFSET else time_index.ENTRY
        buffer = build(entry, list(zip(keys, values, strict=True)))
        for field, sorted_values in ((layout.key, keys), (layout.value, values)):
            for target in targets_around(rng, sorted_values, layout.warm_entry_count):
                zone = slot_and_zone_for(buffer, entry_count, target, field, bound)[1]
                assert zone is zone_oracle(sorted_values, target, field), (entry_count, target)


@settings(max_examples=120, deadline=None)
@given(
    entry_count=st.one_of(st.integers(0, 3000), st.sampled_from([1023, 1024, 1025, 1026, 681, 682, 683, 684])),
    rng=st.randoms(use_true_random=False),
    bound=st.sampled_from(list(Bound)),
    page_bytes=st.sampled_from([4096, 16384, 65536]),
)
def test_paged_search_answers_and_counts_pages_as_the_recorded_search(entry_count, rng, bound, page_bytes):
    """What the observer is told per lookup (slot_zone_and_pages_for) is what the recording
    search probes: the same slot and zone, and the distinct pages of exactly its probes."""
    for layout, strictly in ((OFFSET, True), (TIME, False)):
        keys = random_sorted(rng, entry_count, strictly=True, start=rng.randint(-10, 10))
        values = random_sorted(rng, entry_count, strictly=strictly, start=0)
        entry = offset_index.ENTRY if layout is OFFSET else time_index.ENTRY
        buffer = build(entry, list(zip(keys, values, strict=True)))
        for field, sorted_values in ((layout.key, keys), (layout.value, values)):
            for target in targets_around(rng, sorted_values, layout.warm_entry_count):
                probed: list[int] = []
                slot, zone = slot_and_zone_for(buffer, entry_count, target, recording(field, probed), bound)
                pages = len({(s * field.entry_bytes + field.field_offset) // page_bytes for s in probed})
                assert slot_zone_and_pages_for(buffer, entry_count, target, field, bound, page_bytes) == (
                    slot, zone, pages)


# -- many ascending targets at once (slots_between) -------------------------------------------------


@settings(max_examples=120, deadline=None)
@given(
    entry_count=st.one_of(st.integers(0, 3000), st.sampled_from([681, 682, 683, 684, 1024, 1025])),
    rng=st.randoms(use_true_random=False),
    target_count=st.integers(1, 80),
)
def test_slots_between_equals_the_search_of_each_target(entry_count, rng, target_count):
    """Between the searched slots of the smallest and the greatest target, each target's slot is
    a bisect of the decoded entries: Kafka's search answers the same for strictly rising keys."""
    for layout, entry in ((OFFSET, offset_index.ENTRY), (TIME, time_index.ENTRY)):
        keys = random_sorted(rng, entry_count, strictly=True, start=rng.randint(-10, 10))
        buffer = build(entry, [(key, slot) for slot, key in enumerate(keys)])
        low, high = (keys[0] - 3, keys[-1] + 3) if keys else (-5, 5)
        span = rng.randint(0, high - low)
        start = rng.randint(low, high - span)
        targets = sorted(rng.randint(start, start + span) for _ in range(target_count))
        expected = [slot_range_for(buffer, entry_count, t, layout.key, LARGEST_LOWER_BOUND) for t in targets]
        found = slots_between(buffer, expected[0], expected[-1], targets[1:-1], layout.key)
        if found is None:  # a run longer than the bound: the caller searches each target
            assert expected[-1] - max(expected[0], 0) >= SPAN_PER_TARGET_MAX * max(target_count - 2, 1)
        else:
            assert found == expected[1:-1]


def test_slots_between_refuses_keys_out_of_order():
    buffer = offset_buffer([0, 10, 20, 15, 40, 50])  # a damaged index: 20 then 15
    assert slots_between(buffer, 0, 5, [12, 30], OFFSET.key) is None
    assert slots_between(buffer, 3, 5, [41, 45], OFFSET.key) == [4, 4]  # the run 15, 40, 50 rises


def test_slots_between_targets_below_the_first_entry_have_no_slot():
    buffer = offset_buffer([10, 20, 30])
    assert slots_between(buffer, NO_SLOT, 1, [5, 9, 10, 19, 20], OFFSET.key) == [NO_SLOT, NO_SLOT, 0, 0, 1]


def test_slots_between_refuses_a_run_too_long_for_its_targets():
    keys = list(range(0, 10 * SPAN_PER_TARGET_MAX * 3, 10))
    buffer = offset_buffer(keys)
    assert slots_between(buffer, 0, len(keys) - 1, [5, 15], OFFSET.key) is None
    assert slots_between(buffer, 0, len(keys) - 1, [5, 15, 25], OFFSET.key) == [0, 1, 2]
