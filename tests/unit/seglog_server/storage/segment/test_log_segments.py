"""LogSegments: the sorted base-offset map (ports of Kafka's LogSegmentsTest)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from seglog_server.storage.segment.log_segments import LogSegments


@dataclass(frozen=True)
class _Segment:
    """The two properties LogSegments reads; real segments are exercised in test_log.py."""

    base_offset: int
    size_in_bytes: int = 10


def _segments(*bases: int) -> tuple[LogSegments[_Segment], list[_Segment]]:
    segs = [_Segment(base) for base in bases]
    return LogSegments(segs), segs


def test_add_get_contains_and_remove():
    segments: LogSegments[_Segment] = LogSegments()
    assert not segments and len(segments) == 0
    seg1, seg2 = _Segment(40), _Segment(80)
    segments.add(seg1)
    assert segments and len(segments) == 1 and 40 in segments and segments.get(40) is seg1
    segments.add(seg2)
    assert len(segments) == 2 and segments.get(80) is seg2
    segments.remove(80)
    assert len(segments) == 1 and 80 not in segments
    segments.clear()
    assert not segments and 40 not in segments


def test_add_with_an_existing_base_offset_replaces_the_segment():
    segments, (seg1, _) = _segments(40, 80)
    replacement = _Segment(40, size_in_bytes=99)
    segments.add(replacement)
    assert len(segments) == 2
    assert segments.get(40) is replacement
    assert segments.base_offsets == [40, 80]


def test_add_out_of_order_keeps_base_offsets_sorted():
    segments, _ = _segments(30, 10, 20, 5)
    assert segments.base_offsets == [5, 10, 20, 30]
    assert [s.base_offset for s in segments] == [5, 10, 20, 30]


def test_first_last_and_active_follow_the_base_offsets():
    segments: LogSegments[_Segment] = LogSegments()
    assert segments.first is None and segments.last is None
    seg1 = _Segment(1)
    for seg in (seg1, _Segment(2), _Segment(3), _Segment(4)):
        segments.add(seg)
        assert segments.first is seg1
        assert segments.last is seg
        assert segments.active is seg


def test_values_from_to_follows_kafka_semantics():
    segments, (seg1, seg2, seg3, seg4) = _segments(1, 2, 3, 4)
    with pytest.raises(ValueError, match="below from offset"):
        segments.values(2, 1)
    assert segments.values(1, 1) == []
    assert segments.values(1, 2) == [seg1]
    assert segments.values(1, 3) == [seg1, seg2]
    assert segments.values(1, 4) == [seg1, seg2, seg3]
    assert segments.values(2, 4) == [seg2, seg3]
    assert segments.values(3, 4) == [seg3]
    assert segments.values(4, 4) == []
    assert segments.values(4, 5) == [seg4]
    assert segments.values() == [seg1, seg2, seg3, seg4]


def test_values_starts_with_the_segment_containing_from():
    segments, (seg10, seg20, seg30) = _segments(10, 20, 30)
    assert segments.values(25, 2**63 - 1) == [seg20, seg30]
    assert segments.values(0, 15) == [seg10]  # no floor: from the first segment


def test_non_active_from_excludes_the_active_segment():
    segments, (_, seg2, seg3, _) = _segments(1, 2, 3, 4)
    assert segments.non_active_from(2) == [seg2, seg3]
    assert segments.non_active_from(4) == []
    assert segments.non_active_from(5) == []


def test_floor_lower_and_higher():
    segments, (seg1, seg2, seg3, seg4) = _segments(1, 3, 5, 7)
    assert segments.floor(0) is None
    assert segments.floor(2) is seg1
    assert segments.floor(3) is seg2
    assert segments.floor(100) is seg4
    assert segments.lower(1) is None
    assert segments.lower(3) is seg1
    assert segments.lower(4) is seg2
    assert segments.higher(4) is seg3
    assert segments.higher(5) is seg4
    assert segments.higher(7) is None


def test_higher_segments_lists_every_segment_above_the_offset():
    segments, segs = _segments(1, 3, 5, 7, 9)
    assert segments.higher_segments(0) == segs
    assert segments.higher_segments(1) == segs[1:]
    assert segments.higher_segments(8) == segs[4:]
    assert segments.higher_segments(9) == []


def test_size_in_bytes_sums_beyond_int32():
    big = 2**31 - 1
    segments = LogSegments([_Segment(0, big), _Segment(10, big)])
    assert segments.size_in_bytes == 2 * big


def test_remove_of_an_unknown_base_offset_returns_none():
    segments, _ = _segments(1, 2)
    assert segments.remove(5) is None
    assert segments.base_offsets == [1, 2]


def test_floor_slot_and_at_give_positional_access():
    segments, (seg1, seg2, seg3) = _segments(10, 20, 30)
    assert segments.floor_slot(5) == -1
    assert segments.floor_slot(10) == 0
    assert segments.floor_slot(29) == 1
    assert segments.floor_slot(1000) == 2
    assert segments.at(0) is seg1 and segments.at(1) is seg2 and segments.at(-1) is seg3
