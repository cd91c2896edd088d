"""A clean start after a topic's configs were lowered: segments written under larger
max.message.bytes and index.interval.bytes hold longer tails past their last index entry than the
new values allow, and are still trusted (no recovery, no warning, every record readable), while
a torn or overgrown tail is still recovered. Real files, a LogManager, damage done with plain
file operations."""

from __future__ import annotations

import logging
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import RecordBatchBuilder
from seglog_server.storage.segment import segment_check
from tests.support.load_fault_support import NOW_MS, append_bytes, read_values, segment_files, start, truncate_by

LOWERED = {"max.message.bytes": "1024", "index.interval.bytes": "64"}
# The tail walk's chunk: smaller than a header, than a batch, and the real one (batches then cross
# chunk boundaries, and batches longer than a chunk grow the buffer).
CHUNK_SIZES = [40, 5_000, segment_check.TAIL_CHUNK_BYTES]


def large_batches(log, sizes: list[int]) -> list[tuple[int, bytes]]:
    """One record a batch, its value ``size`` bytes; returns (offset, value) as acknowledged."""
    written = []
    for n, size in enumerate(sizes):
        payload = bytes([n % 251]) * size
        builder = RecordBatchBuilder()
        builder.append(payload, key=None, timestamp_ms=NOW_MS + n)
        info = log.append(builder.build())
        written.append((info.base_offset, payload))
    return written


def written_then_lowered(path: str, sizes: list[int], interval_bytes: int):
    """A topic written under large limits, its limits lowered, the service stopped cleanly."""
    manager = start([path])
    manager.create_topic("t", 1, {"segment.bytes": str(1 << 20), "max.message.bytes": str(1 << 20),
                                  "index.interval.bytes": str(interval_bytes)})
    written = large_batches(manager.get_log("t", 0), sizes)
    manager.alter_topic_configs("t", LOWERED)
    log_dir = manager.get_log("t", 0).dir
    manager.shutdown()
    assert manager.stopped_cleanly
    return written, log_dir


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("seglog_server")]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=300_000), min_size=1, max_size=12),
    interval_bytes=st.sampled_from([4096, 65_536, 1 << 20]),
    chunk_bytes=st.sampled_from(CHUNK_SIZES),
)
def test_segments_written_under_larger_limits_are_trusted_after_they_are_lowered(
    caplog, monkeypatch, sizes, interval_bytes, chunk_bytes
):
    monkeypatch.setattr(segment_check, "TAIL_CHUNK_BYTES", chunk_bytes)
    with tempfile.TemporaryDirectory() as path:
        written, _ = written_then_lowered(path, sizes, interval_bytes)
        caplog.clear()
        manager = start([path])
        try:
            log = manager.get_log("t", 0)
            assert read_values(log) == written  # every closed segment's deferred check runs here
            assert manager.statistics().recovery.segments_recovered == 0
            assert not any(segment.repaired_on_first_use for segment in log.segments_snapshot())
            assert warnings_of(caplog) == []
        finally:
            manager.shutdown()


@pytest.mark.parametrize("chunk_bytes", CHUNK_SIZES)
@pytest.mark.parametrize("damage", ["torn", "garbage"])
def test_a_damaged_tail_is_still_recovered_after_the_limits_were_lowered(tmp_path, caplog, monkeypatch, damage, chunk_bytes):
    monkeypatch.setattr(segment_check, "TAIL_CHUNK_BYTES", chunk_bytes)
    path = str(tmp_path / "d0")
    written, log_dir = written_then_lowered(path, [200_000, 150_000, 120_000, 5_000], 1 << 20)
    active = segment_files(log_dir, ".log")[-1]
    if damage == "torn":
        truncate_by(active, 30)  # inside the last batch: it is lost, the others kept
        expected = written[:-1]
    else:
        append_bytes(active, b"\x00\x01garbage" * 40)
        expected = written
    caplog.clear()
    manager = start([path])
    try:
        log = manager.get_log("t", 0)
        assert manager.statistics().recovery.segments_recovered == 1
        assert log.log_end_offset == len(expected)
        assert read_values(log) == expected
        assert any("recovering" in message for message in warnings_of(caplog))
    finally:
        manager.shutdown()
