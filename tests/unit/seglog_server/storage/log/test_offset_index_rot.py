"""A rotted .index entry (mid-file, the first, one out of order, a position past the log or inside
a batch) never makes a read skip records: the batch at an entry's position must start at or below
the entry's offset, and an entry that disagrees with the log has the segment's offset index
rebuilt from the log, once. Reads and lookups by time over a rotted index answer exactly what
they answer over the good one, after a clean restart (the load checks only the index's tail)."""

from __future__ import annotations

import asyncio
import errno
import os
import random
import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.index_rot import rot_index_entries
from tests.support.log_test_support import NOW_MS, batch, config, offsets_of, open_log

from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.storage import INLINE_CALL, InlineRefused
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.format.offset_index import ENTRY
from seglog_server.storage.format.file_records import FileRecords
from seglog_server.storage.segment.log_segment import LogSegment

BATCHES = 300  # one 2-record batch each, ~100 bytes: about 3 batches per 256-byte index interval
TIMESTAMP_STEP = 10


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A log of one segment (offsets 0..599) with a sparse offset index, stopped cleanly, and
    the answers every read and lookup by time gives over its good index."""
    directory = tmp_path_factory.mktemp("good") / "topic-0"
    clock = FakeClock(NOW_MS)
    log = open_log(directory, clock, config(index_interval_bytes=256))
    for i in range(BATCHES):
        log.append(batch(b"a%03d" % i + b"x" * 20, b"b%03d" % i,
                         timestamps=[NOW_MS + i * TIMESTAMP_STEP, NOW_MS + i * TIMESTAMP_STEP + 1]))
    log.flush()
    log.close()
    good = open_log(directory, clock, config(index_interval_bytes=256))
    answers = _answers(good)
    good.close()
    index_path = next(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".index"))
    entries = os.path.getsize(index_path) // ENTRY.size
    assert entries > 50
    return directory, answers, entries


def _answers(log, times_first: bool = False) -> tuple[list, list]:
    if times_first:
        times = _times(log)
    reads = [offsets_of(log.read(offset, 300).records)[:4] for offset in range(0, 2 * BATCHES)]
    if not times_first:
        times = _times(log)
    return reads, times


def _times(log) -> list:
    return [log.offset_for_timestamp(NOW_MS + t) for t in range(-5, BATCHES * TIMESTAMP_STEP + 5, 3)]


def _rotted_copy(written, tmp_path, rot) -> tuple:
    directory, answers, entries = written
    copy = tmp_path / "topic-0"
    shutil.copytree(directory, copy)
    index_path = next(os.path.join(copy, n) for n in os.listdir(copy) if n.endswith(".index"))
    rot_index_entries(index_path, rot(entries))
    return copy, answers


def _reopen(directory):
    return open_log(directory, FakeClock(NOW_MS), config(index_interval_bytes=256))


ROTS = {
    # the audit's case: a mid-file entry's offset rotted far down (100 -> 3), so it is out of order
    "mid-file offset down": lambda n: {n // 2: (3, None)},
    # the first entry names offset 0 at another batch's position
    "first entry": lambda n: {0: (0, None)},
    # offsets still increasing, one lowered below its batch (monotonic: only the read guard sees it)
    "one offset lowered in order": lambda n: {n // 3: ("prev+1", None)},
    # a position pointing at a later batch, the offsets untouched
    "position forward": lambda n: {n // 2: (None, "next")},
    # a position inside a batch, and one past the log's end
    "position inside a batch": lambda n: {n // 2: (None, "+7")},
    "position past the end": lambda n: {n // 2: (None, 10**8)},
    # several entries out of order
    "non-monotonic run": lambda n: {n // 4: (5, None), n // 4 + 1: (2, None), n // 4 + 2: (700, None)},
}


def _resolve(written, name):
    """The rot's symbolic values in terms of the good index's entries."""
    directory, _, entries = written
    index_path = next(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".index"))
    with open(index_path, "rb") as f:
        good = [ENTRY.unpack(f.read(ENTRY.size)) for _ in range(entries)]

    def rot(n):
        resolved = {}
        for slot, (relative, position) in ROTS[name](n).items():
            if relative == "prev+1":
                relative = good[slot - 1][0] + 1
            if position == "next":
                position = good[slot + 1][1]
            elif position == "+7":
                position = good[slot][1] + 7
            resolved[slot] = (relative, position)
        return resolved

    return rot


@pytest.mark.parametrize("name", sorted(ROTS))
def test_a_rotted_index_entry_changes_no_read_and_no_lookup_by_time(written, tmp_path, name):
    copy, answers = _rotted_copy(written, tmp_path, _resolve(written, name))
    log = _reopen(copy)  # a clean restart: the load checks only the index's tail
    assert _answers(log) == answers  # before: reads from the rotted entry on skipped records
    log.close()
    copy, _ = _rotted_copy(written, tmp_path / "again", _resolve(written, name))
    log = _reopen(copy)
    assert _answers(log, times_first=True) == answers  # lookups by time before any read
    segment = log.segments_snapshot()[0]
    assert segment.index_rebuilt_on_read_count == 1  # rebuilt once, then trusted
    log.close()
    assert _answers(_reopen(copy)) == answers  # the rebuilt index was written to the file


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_rot_of_index_entries_never_changes_what_a_read_or_lookup_returns(written, tmp_path_factory, data):
    _, answers, entries = written
    rot = data.draw(st.dictionaries(
        st.integers(0, entries - 1),
        st.tuples(st.one_of(st.none(), st.integers(0, 2**31 - 1), st.integers(0, 2 * BATCHES)),
                  st.one_of(st.none(), st.integers(0, 2**31 - 1), st.integers(0, 40_000))),
        min_size=1, max_size=6))
    copy, _ = _rotted_copy(written, tmp_path_factory.mktemp("rot"), lambda n: rot)
    log = _reopen(copy)
    try:
        times = _times(log)  # before any read could rebuild the index
        reads = [offsets_of(log.read(offset, 300).records)[:4] for offset in range(0, 2 * BATCHES, 7)]
        assert reads == answers[0][::7]
        assert times == answers[1]
    finally:
        log.close()


def test_a_read_at_the_log_end_does_not_rebuild(written, tmp_path):
    copy, _ = _rotted_copy(written, tmp_path, lambda n: {})
    log = _reopen(copy)
    assert log.read(2 * BATCHES, 300).records == b""
    assert log.segments_snapshot()[0].index_rebuilt_on_read_count == 0
    log.close()


def test_an_unpacked_entry_layout_is_what_the_test_writes():
    assert ENTRY.format == ">ii" and struct.calcsize(ENTRY.format) == 8


@pytest.mark.parametrize("name", sorted(ROTS))
def test_batched_lookups_by_time_over_a_rotted_index_answer_as_over_the_good_one(written, tmp_path, name):
    targets = [NOW_MS + t for t in range(-5, BATCHES * TIMESTAMP_STEP + 5, 3)]
    copy, answers = _rotted_copy(written, tmp_path, _resolve(written, name))
    log = _reopen(copy)
    assert log.offsets_for_timestamps(targets) == answers[1]
    log.close()


class _IndexCannotGrowFs(FileSystem):
    """A full disk for the offset index once ``armed``: growing a ``.index`` file or writing the
    zeros that reserve its blocks fails with ENOSPC."""

    def __init__(self):
        self.paths: dict[int, str] = {}
        self.armed = False
        self.refused = 0

    def open(self, path, flags, mode=0o644):
        fd = super().open(path, flags, mode)
        self.paths[fd] = path
        return fd

    def close(self, fd):
        self.paths.pop(fd, None)
        super().close(fd)

    def _refuse(self, fd):
        if self.armed and self.paths.get(fd, "").endswith(".index"):
            self.refused += 1
            raise OSError(errno.ENOSPC, "injected: no space left", self.paths[fd])

    def ftruncate(self, fd, length):
        if length > os.fstat(fd).st_size:
            self._refuse(fd)
        super().ftruncate(fd, length)

    def pwrite(self, fd, data, position):
        self._refuse(fd)
        return super().pwrite(fd, data, position)


def _rotted_short_copy(written, tmp_path, name: str = "mid-file offset down") -> tuple:
    """A rotted copy whose index also lacks its last entries (a sound tail), so that a rebuild
    needs slots the file has no blocks for: the full disk refuses it."""
    copy, answers = _rotted_copy(written, tmp_path, _resolve(written, name))
    index_path = next(os.path.join(copy, n) for n in os.listdir(copy) if n.endswith(".index"))
    os.truncate(index_path, os.path.getsize(index_path) - 10 * ENTRY.size)
    return copy, answers, index_path


def test_a_rebuild_that_fails_leaves_reads_right_and_the_log_online(written, tmp_path):
    copy, answers, _ = _rotted_short_copy(written, tmp_path)
    fs = _IndexCannotGrowFs()
    log = open_log(copy, FakeClock(NOW_MS), config(index_interval_bytes=256), fs=fs)
    fs.armed = True
    assert _answers(log) == answers  # every search scans from the segment's start instead
    assert fs.refused == 1  # tried once, not by every read
    assert log.segments_snapshot()[0].index_rebuilt_on_read_count == 0
    fs.armed = False
    log.append(batch(b"after", timestamps=NOW_MS + BATCHES * TIMESTAMP_STEP))  # still online
    assert offsets_of(log.read(2 * BATCHES, 300).records) == [2 * BATCHES]
    log.close()


def test_appends_after_a_rebuild_of_the_active_segments_index_are_indexed_and_survive_a_restart(written, tmp_path):
    copy, answers = _rotted_copy(written, tmp_path, _resolve(written, "mid-file offset down"))
    log = _reopen(copy)
    assert offsets_of(log.read(250, 300).records)[:2] == answers[0][250][:2]  # rebuilds the active index
    assert log.segments_snapshot()[0].index_rebuilt_on_read_count == 1
    for i in range(BATCHES, BATCHES + 100):
        log.append(batch(b"a%03d" % i + b"x" * 20, b"b%03d" % i,
                         timestamps=[NOW_MS + i * TIMESTAMP_STEP, NOW_MS + i * TIMESTAMP_STEP + 1]))
    expected = [offsets_of(log.read(offset, 300).records)[:4] for offset in range(0, 2 * (BATCHES + 100))]
    assert expected[: 2 * BATCHES - 2] == answers[0][: 2 * BATCHES - 2]  # (the last batch then ended the log)
    assert all(reads[0] <= offset for offset, reads in enumerate(expected))
    log.flush()
    log.close()
    reopened = _reopen(copy)
    assert [offsets_of(reopened.read(offset, 300).records)[:4] for offset in range(0, 2 * (BATCHES + 100))] == expected
    assert reopened.segments_snapshot()[0].index_rebuilt_on_read_count == 0  # the rebuilt file is sound
    reopened.close()


def test_a_rebuild_that_fails_keeps_the_index_file_as_it_was_for_the_next_load_to_rebuild(written, tmp_path):
    copy, answers, index_path = _rotted_short_copy(written, tmp_path)
    with open(index_path, "rb") as f:
        before = f.read()
    fs = _IndexCannotGrowFs()
    log = open_log(copy, FakeClock(NOW_MS), config(index_interval_bytes=256), fs=fs)
    fs.armed = True
    assert _answers(log) == answers
    assert fs.refused == 1
    fs.armed = False
    log.close()  # a clean stop: once it trimmed the index to the none it held in memory
    with open(index_path, "rb") as f:
        assert f.read() == before  # before: an empty file, trusted by every later load
    log = _reopen(copy)
    assert _answers(log) == answers
    assert log.segments_snapshot()[0].index_rebuilt_on_read_count == 1  # the lie met again: rebuilt
    log.close()
    assert os.path.getsize(index_path) > len(before)  # the rebuilt index, with every entry


def test_an_inline_read_over_a_rotted_index_leaves_the_rebuild_to_the_storage_pool(written, tmp_path):
    copy, answers = _rotted_copy(written, tmp_path, _resolve(written, "mid-file offset down"))
    log = _reopen(copy)
    segment = log.segments_snapshot()[0]
    INLINE_CALL.running = True
    try:
        with pytest.raises(InlineRefused):
            log.read(250, 300)  # the read the service runs inline (a few KiB) meets the lying entry
    finally:
        INLINE_CALL.running = False
    assert segment.index_rebuilt_on_read_count == 0  # before: rebuilt there, on the event loop
    calls = StorageCalls(1, 65536)
    try:
        data = asyncio.run(calls.sized(300, log.read, 250, 300))
        assert offsets_of(data.records)[:4] == answers[0][250]
        assert calls.inline_refused_count == 1  # refused inline, then run on the pool, which rebuilt
        assert segment.index_rebuilt_on_read_count == 1
        assert offsets_of(asyncio.run(calls.sized(300, log.read, 260, 300)).records)[:4] == answers[0][260]
        assert calls.inline_refused_count == 1  # the rebuilt index serves inline reads again
    finally:
        calls.shutdown()
        log.close()


def test_a_bounded_lookup_by_time_over_a_rotted_index_is_refused_not_rebuilt_on_the_event_loop(written, tmp_path):
    copy, answers = _rotted_copy(written, tmp_path, _resolve(written, "mid-file offset down"))
    log = _reopen(copy)
    segment = log.segments_snapshot()[0]
    targets = [NOW_MS + t for t in range(-5, BATCHES * TIMESTAMP_STEP + 5, 3)]
    log.offset_for_timestamp(NOW_MS - 5)  # the first-use checks: an answer below every entry
    assert segment.index_rebuilt_on_read_count == 0
    inline = [log.lookup_timestamp_inline(target, 65536) for target in targets]
    assert segment.index_rebuilt_on_read_count == 0  # before: the first bounded lookup rebuilt it
    assert "refused" in inline
    assert all(got == "refused" or got == want for got, want in zip(inline, answers[1], strict=True))
    assert [log.offset_for_timestamp(target) for target in targets] == answers[1]  # the pool's call
    assert segment.index_rebuilt_on_read_count == 1
    log.close()


@pytest.mark.parametrize("name", sorted(ROTS))
def test_lookups_by_time_over_a_rotted_index_whose_rebuild_fails_scan_from_the_segment_start(written, tmp_path, name):
    copy, answers, _ = _rotted_short_copy(written, tmp_path, name)
    fs = _IndexCannotGrowFs()
    log = open_log(copy, FakeClock(NOW_MS), config(index_interval_bytes=256), fs=fs)
    fs.armed = True
    assert _times(log) == answers[1]  # before: CorruptSegmentError on a sound log (a position inside a batch)
    assert log.segments_snapshot()[0].index_rebuilt_on_read_count == 0
    log.close()
    copy, answers, _ = _rotted_short_copy(written, tmp_path / "batched", name)
    fs = _IndexCannotGrowFs()
    log = open_log(copy, FakeClock(NOW_MS), config(index_interval_bytes=256), fs=fs)
    fs.armed = True
    targets = [NOW_MS + t for t in range(-5, BATCHES * TIMESTAMP_STEP + 5, 3)]
    assert log.offsets_for_timestamps(targets) == answers[1]
    log.close()


BIG_BATCHES = 4000  # ~1 KiB each: a 4 MiB segment, whose batched lookups search the offset index
BIG_CONFIG = {"index_interval_bytes": 4096}


@pytest.fixture(scope="module")
def written_big(tmp_path_factory):
    """A 4 MiB segment and the answers of 20 batched lookups of 3 targets each over its good
    index: groups this small over a log this large are answered by the index searches and the
    scans from their positions (``_find_by_index_scans``), not by a table built in memory."""
    directory = tmp_path_factory.mktemp("big") / "topic-0"
    clock = FakeClock(NOW_MS)
    log = open_log(directory, clock, config(**BIG_CONFIG))
    for i in range(BIG_BATCHES):
        log.append(batch(b"a%04d" % i + b"x" * 1000, b"b%04d" % i,
                         timestamps=[NOW_MS + i * TIMESTAMP_STEP, NOW_MS + i * TIMESTAMP_STEP + 1]))
    log.flush()
    log.close()
    index_path = next(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".index"))
    entries = os.path.getsize(index_path) // ENTRY.size
    with open(index_path, "rb") as f:
        offsets = [ENTRY.unpack(f.read(ENTRY.size))[0] for _ in range(entries)]
    # Targets searched from the entries ROTS rot and their neighbours' (2 records a batch), first
    # (a table is built after 16 targets per MiB of the segment: 60 targets stay below), then
    # random ones.
    groups = [[NOW_MS + 1, NOW_MS + 21, NOW_MS + 31]]  # below the first entry's offset
    for slot in sorted({0, 1, entries // 4, entries // 3, entries // 2, entries // 2 + 1}):
        at = [NOW_MS + offsets[s] // 2 * TIMESTAMP_STEP for s in (slot - 1, slot, slot + 1) if s >= 0]
        groups += [[at[0] + 11, at[0] + 31, at[-1] + 21], [at[-2] + 1, at[-2] + 21, at[-1] + 1]]
    rnd = random.Random(1)
    groups += [sorted(rnd.sample(range(NOW_MS - 5, NOW_MS + BIG_BATCHES * TIMESTAMP_STEP + 5), 3)) for _ in range(7)]
    assert len(groups) * 3 < 16 * os.path.getsize(index_path.replace(".index", ".log")) / (1 << 20)
    good = open_log(directory, clock, config(**BIG_CONFIG))
    answers = [good.offsets_for_timestamps(group) for group in groups]
    good.close()
    return directory, groups, answers, entries


@pytest.mark.parametrize("name", sorted(ROTS))
def test_batched_lookups_by_time_over_a_large_rotted_segment_answer_as_over_the_good_one(written_big, tmp_path, name):
    directory, groups, answers, entries = written_big
    written = (directory, answers, entries)
    copy, _ = _rotted_copy(written, tmp_path, _resolve(written, name))
    log = open_log(copy, FakeClock(NOW_MS), config(**BIG_CONFIG))
    try:
        assert [log.offsets_for_timestamps(group) for group in groups] == answers
        # The searches met the lie (an entry lowered in order lies only for offsets no time-index
        # entry names: the time path never searches them) and rebuilt the index once.
        assert log.segments_snapshot()[0].index_rebuilt_on_read_count == (name != "one offset lowered in order")
    finally:
        log.close()


def test_after_a_rebuild_a_full_disk_refused_no_scan_from_the_segment_start_runs_inline(written, tmp_path, monkeypatch):
    copy, answers, _ = _rotted_short_copy(written, tmp_path)
    fs = _IndexCannotGrowFs()
    log = open_log(copy, FakeClock(NOW_MS), config(index_interval_bytes=256), fs=fs)
    fs.armed = True
    assert _answers(log) == answers  # on the pool: the rebuild tried once, refused by the full disk
    assert fs.refused == 1
    segment = log.segments_snapshot()[0]
    assert segment.index_rebuilt_on_read_count == 0
    forced: list[tuple[int, bool]] = []  # (offset, on the event loop) of each scan from 0 a lie forced
    search = FileRecords.search_for_offset_with_size
    vouched = LogSegment._vouched_position

    def spy_search(self, offset, start, *args, **kwargs):
        if start == 0 and segment.offset_index.lookup(offset)[1]:
            forced.append((offset, getattr(INLINE_CALL, "running", False) or segment.lookup_budget is not None))
        return search(self, offset, start, *args, **kwargs)

    def spy_vouched(self, offset, entry):
        position = vouched(self, offset, entry)
        if entry[1] and not position:
            forced.append((offset, getattr(INLINE_CALL, "running", False) or self.lookup_budget is not None))
        return position

    monkeypatch.setattr(FileRecords, "search_for_offset_with_size", spy_search)
    monkeypatch.setattr(LogSegment, "_vouched_position", spy_vouched)
    calls = StorageCalls(1, 65536)
    try:  # every read as the service runs it: inline first, on the pool once refused
        reads = [offsets_of(asyncio.run(calls.sized(300, log.read, offset, 300)).records)[:4]
                 for offset in range(0, 2 * BATCHES)]
    finally:
        calls.shutdown()
    assert reads == answers[0]
    assert not [offset for offset, inline in forced if inline]  # before: 30 reads scanned from 0 inline
    assert calls.inline_refused_count == len(forced) > 0  # each such read refused inline, answered by the pool
    forced.clear()
    targets = [NOW_MS + t for t in range(-5, BATCHES * TIMESTAMP_STEP + 5, 3)]
    inline = [log.lookup_timestamp_inline(target, 65536) for target in targets]  # the bounded lookup
    assert not [offset for offset, bounded in forced if bounded]
    assert all(got == "refused" or got == want for got, want in zip(inline, answers[1], strict=True))
    assert [log.offset_for_timestamp(target) for target in targets] == answers[1]  # the pool's call
    assert fs.refused == 1 and segment.index_rebuilt_on_read_count == 0
    log.close()
