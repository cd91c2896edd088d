"""When a key shard's map fills, the round ends lower and every shard is decided again below
that end.  Every engine fills each shard's map in from the rows its first decision's puts landed
on (its trail: decide_shard_trailed, decide_from_trail) instead of putting the entries again;
these tests hold that to what deciding anew gives."""

import hashlib
import os
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seglog_spark import CleanerError
from seglog_spark.cleaner_local import clean_snapshot
from seglog_spark.cleaning import (
    assemble_group,
    choose_replaced,
    cleaning_end,
    finish,
    merge_shard_bitmaps,
    part_path,
    plan_cleaning,
    prepare_output,
    replaced_ranges,
    trail_path,
)
from seglog_spark.key_scan import ENTRY, scan_range, shard_of
from seglog_spark.key_shard import decide_from_trail, decide_shard, decide_shard_trailed
from seglog_spark.offset_map import SkimpyOffsetMap
from seglog_spark.rewrite import rewrite_range

from tests.support.snapshot_workloads import make_snapshot, ops_strategy

# Digests that hit the map's corners: shared first windows (long probe chains), a first window of
# Integer.MIN_VALUE, and the all-zero digest (an entry that reads as empty when put at offset 0).
_digests = st.one_of(
    st.integers(0, 30).map(lambda k: hashlib.md5(b"%d" % k).digest()),
    st.binary(min_size=12, max_size=12).map(lambda tail: b"\x00\x00\x00\x01" + tail),
    st.binary(min_size=12, max_size=12).map(lambda tail: b"\x80\x00\x00\x00" + tail),
    st.just(bytes(16)),
)


@settings(max_examples=300, deadline=None)
@given(
    ranges=st.lists(st.lists(st.tuples(_digests, st.booleans(), st.integers(1, 3)), max_size=25), min_size=1, max_size=6),
    dirty_fraction=st.floats(0, 1),
    slots=st.sampled_from([1, 2, 3, 5, 10, 50]),
    end_at=st.integers(0, 10),
    inside=st.booleans(),
)
def test_deciding_from_the_trail_equals_deciding_anew_below_the_end(ranges, dirty_fraction, slots, end_at, inside):
    """Records (digest, keyed, offset step) per range; the end at a range's first offset (as a
    segment's base offset always is), or inside a range, or past the last."""
    chunks, starts, offset = [], [], 0
    for range_id, records in enumerate(ranges):
        starts.append(offset)
        packed = []
        for ordinal, (digest, keyed, step) in enumerate(records):
            if keyed:
                packed.append(ENTRY.pack(digest, offset, ordinal))
            offset += step
        if packed:
            chunks.append((range_id, len(records), b"".join(packed)))
    starts.append(offset + 1)
    end = starts[end_at % len(starts)] + (1 if inside else 0)
    first_dirty = int(offset * dirty_fraction)
    try:
        anew = decide_shard(3, chunks, first_dirty_offset=first_dirty, map_bytes=24 * slots, end_offset=end)
    except ValueError:  # a map too small for one put: nothing to compare (the cleaning refuses it earlier)
        return
    first, trail = decide_shard_trailed(3, list(reversed(chunks)), first_dirty_offset=first_dirty, map_bytes=24 * slots)
    assert first == decide_shard(3, chunks, first_dirty_offset=first_dirty, map_bytes=24 * slots)
    # Every field: bitmaps, where the map filled, its size and slots, its lookups and probes
    # (the collision rate a cleaning reports), the records decided.
    assert decide_from_trail(3, chunks, trail, first_dirty_offset=first_dirty, map_bytes=24 * slots, end_offset=end) == anew


def clean_deciding_anew(snapshot_dir, *, map_bytes, shard_count):
    """The cleaning as it ran before the trails: when a map filled, every shard decided again
    from its entries with decide_shard(end_offset=end).  The reference the engine must match."""
    plan = plan_cleaning(snapshot_dir, map_bytes=map_bytes, shard_count=shard_count)
    snapshot = plan.snapshot
    chunks = defaultdict(list)
    for byte_range in plan.ranges:
        found = scan_range(snapshot, byte_range, shard_count)
        for shard, packed in found.entries.items():
            chunks[shard].append((found.range_id, found.record_count, packed))

    def decide_all(end_offset):
        return [decide_shard(shard, chunks.get(shard, []), first_dirty_offset=snapshot.first_dirty_offset,
                             map_bytes=map_bytes, load_factor=plan.load_factor, end_offset=end_offset)
                for shard in range(shard_count)]

    shard_results = decide_all(None)
    end = cleaning_end(plan, shard_results)
    if end is not None:
        shard_results = decide_all(end)
    choice = choose_replaced(plan, end, merge_shard_bitmaps(shard_results))
    prepare_output(snapshot)
    outputs = [rewrite_range(snapshot, r, choice.bitmaps.get(r.range_id), choice.upper_bound,
                             part_path(snapshot, r.range_id)) for r in replaced_ranges(plan, choice)]
    segments = [s for s in (assemble_group(plan, g) for g in choice.groups) if s is not None]
    return finish(plan, choice, shard_results, outputs, segments, engine="python", dry_run=False)


def _cleaned_files(snapshot_dir):
    cleaned = os.path.join(snapshot_dir, "cleaned")
    return {name: open(os.path.join(cleaned, name), "rb").read() for name in sorted(os.listdir(cleaned))}


def _comparable(document):
    stats = {k: v for k, v in document["stats"].items() if k != "duration_s"}
    return {**document, "stats": stats}


def _growing(steps):
    """(new key?, pick, value) -> ops whose keys arrive over the log (a new key, or one seen
    before), so that maps fill past the first segment and keys written below the end are
    written again past it."""
    ops, seen = [], 0
    for new, pick, value in steps:
        if new or not seen:
            seen += 1
        ops.append((b"k%d" % (seen - 1 if new else pick % seen), value))
    return ops


growing_ops = st.lists(
    st.tuples(st.booleans(), st.integers(0, 1000), st.one_of(st.none(), st.binary(max_size=4))), min_size=1, max_size=80
).map(_growing)


def _keys_of_shard(shard, count, prefix, shard_count=2):
    names = (prefix + b"%d" % i for i in range(10_000))
    return [name for name in names if shard_of(hashlib.md5(name).digest(), shard_count) == shard][:count]


# Two keys of shard 1 written over and over, then ten new keys of shard 0, then the two again:
# shard 0's map fills among the new keys, and shard 1's map, which does not fill, holds the two
# keys at offsets past the end: their latest records below it must stay.
_SPANNING, _NEW = _keys_of_shard(1, 2, b"s"), _keys_of_shard(0, 10, b"n")
SPANNING_KEYS = ([(_SPANNING[i % 2], b"v%d" % i) for i in range(12)] + [(key, b"x") for key in _NEW]
                 + [(_SPANNING[0], b"z"), (_SPANNING[1], None)])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.one_of(growing_ops, ops_strategy), batch_size=st.integers(1, 5), segment_batches=st.integers(1, 3),
       map_slots=st.sampled_from([4, 6, 8, 16]), shard_count=st.integers(1, 4), dirty_fraction=st.floats(0, 1))
@example(ops=SPANNING_KEYS, batch_size=2, segment_batches=2, map_slots=6, shard_count=2, dirty_fraction=0.0)
def test_the_engine_writes_what_deciding_anew_writes(tmp_path_factory, ops, batch_size, segment_batches, map_slots,
                                                     shard_count, dirty_fraction):
    """Random keyed logs (tombstones, empty values, keyless records) with maps small enough to
    fill in some shards and not others: the same result document (but its duration) and the
    same cleaned bytes as the cleaning that decides every shard anew."""
    paths = [str(tmp_path_factory.mktemp(name)) for name in ("engine", "anew")]
    for path in paths:
        make_snapshot(path, ops, batch_size=batch_size, segment_batches=segment_batches,
                      first_dirty_offset=int(len(ops) * dirty_fraction))
    try:
        expected = clean_deciding_anew(paths[1], map_bytes=24 * map_slots, shard_count=shard_count)
    except CleanerError as exc:  # a map too small for the first dirty segment: refused alike
        try:
            clean_snapshot(paths[0], map_bytes=24 * map_slots, shard_count=shard_count)
        except CleanerError as again:
            assert str(again) == str(exc)
            return
        raise AssertionError("the engine cleaned what deciding anew refused")
    result = clean_snapshot(paths[0], map_bytes=24 * map_slots, shard_count=shard_count)
    assert _comparable(result) == _comparable(expected)
    assert _cleaned_files(paths[0]) == _cleaned_files(paths[1])


def test_a_round_where_one_map_fills_puts_no_entry_twice(tmp_path, monkeypatch):
    """One shard's map fills, the other's does not: the round still decides both below the end,
    and every dirty entry enters a map once (deciding anew put every entry below the end again)."""
    put = []
    real_put = SkimpyOffsetMap.put_digests

    def counted(self, digests, offsets, limit=None):
        consumed, positions = real_put(self, digests, offsets, limit)
        put.extend(zip(map(bytes, digests[:consumed]), offsets[:consumed].tolist()))
        return consumed, positions

    monkeypatch.setattr(SkimpyOffsetMap, "put_digests", counted)
    # 40 keys of shard 0 and 20 of shard 1, each written twice: with maps of 40 slots (36 keys
    # before full), shard 0's map fills in the second pass over the keys and shard 1's never.
    candidates = (b"key-%d" % i for i in range(1000))
    by_shard = {0: [], 1: []}
    for key in candidates:
        shard = shard_of(hashlib.md5(key).digest(), 2)
        if len(by_shard[shard]) < (40, 20)[shard]:
            by_shard[shard].append(key)
    keys = by_shard[0] + by_shard[1]
    ops = [(key, b"v") for key in keys] + [(key, b"w") for key in keys]
    make_snapshot(str(tmp_path), ops, batch_size=5, segment_batches=2)
    result = clean_snapshot(str(tmp_path), map_bytes=24 * 40, shard_count=2)
    assert 0 < result["cleaned_up_to_offset"] < len(ops)  # a map filled: the round ended lower
    assert put and len(put) == len(set(put)), f"{len(put) - len(set(put))} of {len(put)} puts were of an entry put before"
    # The map the round reports holds the keys written below its end.
    assert result["stats"]["distinct_keys"] == len({digest for digest, offset in put if offset < result["cleaned_up_to_offset"]})


def test_a_trail_that_does_not_match_the_entries_is_refused_by_name():
    """The second stage reads the trail the first left beside the entries: one that names other
    ranges, or other puts, than the entries it is read with is refused, not used."""
    digests = [hashlib.md5(b"%d" % k).digest() for k in range(4)]
    chunks = [(r, 4, b"".join(ENTRY.pack(digests[(r + i) % 4], 4 * r + i, i) for i in range(4))) for r in range(3)]
    _, trail = decide_shard_trailed(0, chunks, first_dirty_offset=0, map_bytes=24 * 50)
    options = {"first_dirty_offset": 0, "map_bytes": 24 * 50, "end_offset": 8}
    assert decide_from_trail(0, chunks, trail, **options) == decide_shard(0, chunks, **options)
    with pytest.raises(CleanerError, match="its trail names 3 ranges, its entries 2"):
        decide_from_trail(0, chunks[:2], trail, **options)
    fewer = [(r, 4, packed[: 3 * ENTRY.size]) for r, _, packed in chunks]  # a range's entries shorter
    with pytest.raises(CleanerError, match="its trail names 4 puts in its range 0, its entries 3"):
        decide_from_trail(0, fewer, trail, **options)


def test_deciding_from_a_trail_below_a_range_boundary_puts_nothing(monkeypatch):
    """The Spark jobs' second stage: a shard whose entries run past the end is decided below it
    with its map filled in from the trail, not one entry put (deciding anew puts them all)."""
    digests = [hashlib.md5(b"%d" % k).digest() for k in range(6)]
    chunks = [(r, 5, b"".join(ENTRY.pack(digests[(r + i) % 6], 5 * r + i, i) for i in range(5))) for r in range(4)]
    _, trail = decide_shard_trailed(0, chunks, first_dirty_offset=0, map_bytes=24 * 50)
    options = {"first_dirty_offset": 0, "map_bytes": 24 * 50, "end_offset": 10}
    anew = decide_shard(0, chunks, **options)
    puts = []
    real_put = SkimpyOffsetMap.put_digests
    monkeypatch.setattr(SkimpyOffsetMap, "put_digests", lambda self, *a, **k: puts.append(len(a[1])) or real_put(self, *a, **k))
    assert decide_from_trail(0, chunks, trail, **options) == anew
    assert puts == []
    decide_shard(0, chunks, **options)
    assert puts == [5, 5]  # deciding anew: both ranges below the end put again



def test_deciding_anew_from_a_trail_holds_one_map_at_a_time():
    """When the end falls inside a range, decide_from_trail decides anew; the map it allocated
    for the trail was still referenced then, so two maps of map_bytes were live at once (the
    second decision's memory doubled).  It allocates its map only once the way is known."""
    import tracemalloc

    digests = [hashlib.md5(b"%d" % k).digest() for k in range(6)]
    chunks = [(r, 5, b"".join(ENTRY.pack(digests[(r + i) % 6], 5 * r + i, i) for i in range(5))) for r in range(4)]
    options = {"first_dirty_offset": 0, "map_bytes": 24 * 10**6}
    _, trail = decide_shard_trailed(0, chunks, **options)
    for end in (12, 10):  # inside range 2 (decided anew), then at its first offset (from the trail)
        expected = decide_shard(0, chunks, end_offset=end, **options)
        tracemalloc.start()
        try:
            assert decide_from_trail(0, chunks, trail, end_offset=end, **options) == expected
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert options["map_bytes"] <= peak < 1.5 * options["map_bytes"], (end, peak)


# -- a trail read back from a file or an object is bytes from outside the process -------------

def _hostile_case(ranges, first_dirty_fraction):
    chunks, offset = [], 0
    for range_id, records in enumerate(ranges):
        packed = []
        for ordinal, (digest, step) in enumerate(records):
            packed.append(ENTRY.pack(digest, offset, ordinal))
            offset += step
        chunks.append((range_id, len(records), b"".join(packed)))
    return chunks, int(offset * first_dirty_fraction)


def _mutate(trail, how, at, value, other_trails):
    """One hostile change of a valid trail: `how` picks the kind, `at` where, `value` with what."""
    header = 56  # magic and six int64s
    if how == "flip":
        at %= len(trail)
        return trail[:at] + bytes([trail[at] ^ (value % 255 + 1)]) + trail[at + 1 :]
    if how == "zero-rows":
        count = int.from_bytes(trail[8 + 32 : 8 + 40], "little")
        start = header + 32 * count
        return trail[:start] + bytes(len(trail) - start)
    if how == "row":
        count = int.from_bytes(trail[8 + 32 : 8 + 40], "little")
        start = header + 32 * count
        rows = (len(trail) - start) // 4
        if not rows:
            return trail + b"\x00\x00\x00\x00"
        i = start + 4 * (at % rows)
        choices = [value % 2**32, (value % 2**32) ^ 0xFFFFFFFF, int.from_bytes(trail[start + 4 * (value % rows) : start + 4 * (value % rows) + 4], "little")]
        return trail[:i] + choices[at % 3].to_bytes(4, "little") + trail[i + 4 :]
    if how == "field":  # any int64 of the header and tables
        count = int.from_bytes(trail[8 + 32 : 8 + 40], "little")
        fields = 6 + 4 * count
        i = 8 + 8 * (at % fields)
        return trail[:i] + (value - 2**20).to_bytes(8, "little", signed=True) + trail[i + 8 :]
    if how == "truncate":
        return trail[: at % (len(trail) + 1)]
    if how == "extend":
        return trail + bytes([value % 256]) * (1 + at % 9)
    if how == "empty":
        return b""
    return other_trails[at % len(other_trails)]


@settings(max_examples=400, deadline=None)
@given(
    ranges=st.lists(st.lists(st.tuples(_digests, st.integers(1, 3)), min_size=1, max_size=12), min_size=1, max_size=5),
    dirty_fraction=st.floats(0, 1),
    slots=st.sampled_from([2, 3, 7, 10, 50]),
    end_at=st.integers(0, 10),
    how=st.sampled_from(["flip", "zero-rows", "row", "field", "truncate", "extend", "empty", "other"]),
    at=st.integers(0, 10_000),
    value=st.integers(0, 2**21),
)
@example(ranges=[[(hashlib.md5(b"a").digest(), 1), (hashlib.md5(b"b").digest(), 1)], [(hashlib.md5(b"a").digest(), 1)]],
         dirty_fraction=0.0, slots=50, end_at=1, how="zero-rows", at=0, value=0)
def test_a_hostile_trail_is_refused_or_decides_as_anew(ranges, dirty_fraction, slots, end_at, how, at, value):
    """A valid trail from a real first decision, then one byte flipped, its rows zeroed, a row
    replaced (by a value, its complement, another put's row), a header or table field replaced,
    cut, extended, emptied, or another shard's or another map size's trail: deciding from it
    either refuses with CleanerError or gives exactly what deciding anew gives."""
    chunks, first_dirty = _hostile_case(ranges, dirty_fraction)
    starts = sorted({int.from_bytes(packed[16:24], "big") for _, _, packed in chunks} | {10**9})
    end = starts[end_at % len(starts)]
    options = {"first_dirty_offset": first_dirty, "map_bytes": 24 * slots}
    try:
        anew = decide_shard(3, chunks, end_offset=end, **options)
        _, trail = decide_shard_trailed(3, chunks, **options)
    except ValueError:  # a map too small for one put: refused earlier by the cleaning
        return
    others = [decide_shard_trailed(4, chunks, **options)[1]]
    for other_slots in (slots + 1, 7 if slots != 7 else 50):
        try:
            others.append(decide_shard_trailed(3, chunks, first_dirty_offset=first_dirty, map_bytes=24 * other_slots)[1])
        except ValueError:
            pass
    hostile = _mutate(trail, how, at, value, others)
    try:
        got = decide_from_trail(3, chunks, hostile, end_offset=end, source="shard-003.trail", **options)
    except CleanerError as exc:
        assert "key shard 3: shard-003.trail: " in str(exc)
        return
    assert got == anew


class _Cpu:  # a task's CPU accumulator, as Spark's accumulator is used by job.py's tasks
    def add(self, seconds):
        pass


def _job_first_stage(tmp_path):
    """job.py's stages driven as its tasks run them, without Spark: the scan to .keys files and
    the first decision (which leaves each shard's trail); returns (plan, scanned, end)."""
    from seglog_spark.job import _decide_from_files_task, _scan_to_file_task

    make_snapshot(str(tmp_path), SPANNING_KEYS, batch_size=2, segment_batches=2)
    plan = plan_cleaning(str(tmp_path), map_bytes=24 * 6, shard_count=2, range_bytes=1)
    prepare_output(plan.snapshot)
    scanned = [_scan_to_file_task(plan, _Cpu())(byte_range) for byte_range in plan.ranges]
    first = [_decide_from_files_task(plan, scanned, _Cpu())(shard)[0] for shard in range(2)]
    end = cleaning_end(plan, first)
    assert end is not None  # shard 0's map filled: the second decision reads the trails
    return plan, scanned, end


def test_the_spark_jobs_second_decision_refuses_a_missing_cut_or_grown_trail_file_by_name(tmp_path):
    """The trail file between job.py's two stages deleted, cut inside its header or its rows,
    or grown past what the shard's entries allow: CleanerError naming the shard and the file
    (before: FileNotFoundError, numpy's ValueError, or a read of the whole file)."""
    from seglog_spark.job import _decide_from_files_task

    plan, scanned, end = _job_first_stage(tmp_path)
    second = _decide_from_files_task(plan, scanned, _Cpu(), end)
    expected = [decide_again[0] for decide_again in (second(0), second(1))]  # the trails as written
    path = trail_path(plan.snapshot, 0)
    trail = open(path, "rb").read()
    for hostile, why in ((trail[:30], "shorter than a trail's 56-byte header"), (trail[:-3], "bytes, a trail of"),
                         (trail + bytes(10**6), "longer than the"), (b"", "0 bytes, shorter")):
        with open(path, "wb") as f:
            f.write(hostile)
        with pytest.raises(CleanerError, match=f"key shard 0: {path}: .*{why}"):
            second(0)
    os.unlink(path)
    with pytest.raises(CleanerError, match=f"key shard 0: {path}: its trail is missing"):
        second(0)
    assert second(1)[0] == expected[1]


def test_the_spark_jobs_files_are_replaced_whole_or_not_at_all(tmp_path):
    """job.py writes its .keys and trail files under a name of its own and renames them over
    the file: a write that fails half-way (here its second chunk is not bytes) leaves the file
    a reader (a later stage, or another attempt of the task) sees as it was, and no stray file."""
    from seglog_spark.job import _write_whole

    path = str(tmp_path / "shard-000.trail")
    _write_whole(path, [b"old ", b"trail"])
    with pytest.raises(TypeError):
        _write_whole(path, [b"a cut", "not bytes"])
    assert open(path, "rb").read() == b"old trail"
    assert os.listdir(tmp_path) == ["shard-000.trail"]
    _write_whole(path, [b"new"])
    assert open(path, "rb").read() == b"new" and os.listdir(tmp_path) == ["shard-000.trail"]


def test_the_spark_jobs_writers_never_share_a_temporary_name(tmp_path, monkeypatch):
    """Two writers of one file with the same pid and thread id (executors in containers sharing
    the snapshot mount, each in its own pid namespace) wrote the same `{path}.{pid}.{thread}.tmp`
    and could rename each other's half-written bytes over the file: every write's temporary
    name is its own."""
    from seglog_spark import job

    monkeypatch.setattr(job.os, "getpid", lambda: 1)
    names = []
    real_open = open

    def recording_open(name, *args, **kwargs):
        names.append(str(name))
        return real_open(name, *args, **kwargs)

    monkeypatch.setattr(job, "open", recording_open, raising=False)
    path = str(tmp_path / "00000000.keys")
    job._write_whole(path, [b"one"])
    job._write_whole(path, [b"two"])
    assert len(names) == 2 and names[0] != names[1] and all(name.startswith(path + ".") for name in names)
    assert os.listdir(tmp_path) == ["00000000.keys"] and real_open(path, "rb").read() == b"two"


def test_the_spark_jobs_stages_through_files_decide_as_the_baseline(tmp_path):
    """The file stages driven directly give the baseline's decisions below the end."""
    from seglog_spark.job import _decide_from_files_task

    plan, scanned, end = _job_first_stage(tmp_path)
    second = _decide_from_files_task(plan, scanned, _Cpu(), end)
    chunks = defaultdict(list)
    for byte_range in plan.ranges:
        found = scan_range(plan.snapshot, byte_range, 2)
        for shard, packed in found.entries.items():
            chunks[shard].append((found.range_id, found.record_count, packed))
    for shard in range(2):
        assert second(shard)[0] == decide_shard(shard, chunks.get(shard, []), first_dirty_offset=plan.snapshot.first_dirty_offset,
                                                map_bytes=24 * 6, end_offset=end)


def test_a_map_too_large_for_a_trail_is_refused_before_any_work(tmp_path):
    """A shard map of 2**31 slots or more leaves no trail (4-byte rows): refused when the round is
    planned, naming the setting, not after every shard's first decision (a CleanerError there)."""
    from seglog_spark.cleaning import plan_cleaning
    from seglog_spark.key_shard import MAP_SLOTS_MAX
    from seglog_spark.offset_map import SkimpyOffsetMap

    too_large = 24 * (MAP_SLOTS_MAX + 1)
    assert SkimpyOffsetMap.slots_of(too_large) > MAP_SLOTS_MAX
    with pytest.raises(ValueError, match=f"map_bytes {too_large} "):
        plan_cleaning(str(tmp_path / "not-read"), map_bytes=too_large)
