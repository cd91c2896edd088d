"""Retention rules over a list of segments, oldest first (Kafka's deletableSegments)."""

from __future__ import annotations

import pytest
from tests.support.log_test_support import NOW_MS, batch, new_segment

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.log.log_retention import (
    below_log_start_offset,
    beyond_retention_bytes,
    deletable_prefix,
    older_than_retention_ms,
)

HOUR_MS = 3_600_000


@pytest.fixture
def segments(tmp_path):
    """Segments at 0, 10, 20 (one 100-byte-ish batch each, timestamps 3, 2, 1 hours ago) and an
    empty active segment at 30."""
    clock = FakeClock(NOW_MS)
    made = []
    for slot, base in enumerate((0, 10, 20)):
        segment = new_segment(tmp_path, base, clock)
        segment.append(batch(b"x" * 40, base_offset=base, timestamps=NOW_MS - (3 - slot) * HOUR_MS))
        made.append(segment)
    made.append(new_segment(tmp_path, 30, clock))
    return made


def test_below_the_log_start_offset_deletes_segments_whose_successor_starts_at_or_below_it(segments):
    assert deletable_prefix(segments, 30, 30, below_log_start_offset(10)) == segments[:1]
    assert deletable_prefix(segments, 30, 30, below_log_start_offset(25)) == segments[:2]
    assert deletable_prefix(segments, 30, 30, below_log_start_offset(0)) == []


def test_retention_bytes_keeps_at_least_that_many_bytes(segments):
    size = segments[0].size_in_bytes
    total = 3 * size
    assert beyond_retention_bytes(total, -1) is None
    assert beyond_retention_bytes(total, total + 1) is None
    assert deletable_prefix(segments, 30, 30, beyond_retention_bytes(total, size)) == segments[:2]
    assert deletable_prefix(segments, 30, 30, beyond_retention_bytes(total, size + 1)) == segments[:1]


def test_retention_ms_deletes_the_old_prefix_and_never_an_empty_last_segment(segments):
    assert older_than_retention_ms(NOW_MS, -1) is None
    two_and_a_half_hours = deletable_prefix(segments, 30, 30, older_than_retention_ms(NOW_MS, 5 * HOUR_MS // 2))
    assert two_and_a_half_hours == segments[:1]
    every = deletable_prefix(segments, 30, 30, older_than_retention_ms(NOW_MS + 10 * HOUR_MS, 1))
    assert every == segments[:3]  # the empty active segment at 30 stays


def test_nothing_at_or_past_the_high_watermark_is_deleted(segments):
    assert deletable_prefix(segments, 15, 30, below_log_start_offset(30)) == segments[:1]
