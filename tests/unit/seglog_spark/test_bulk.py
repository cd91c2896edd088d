"""The bulk (numpy) cleaning steps against their one-at-a-time references: the offset map's
put_digests/get_digests against put_digest/get_digest, the bulk record walk against the codec,
the bulk rewrite against the record-by-record filter, and decide_shard against Kafka's loop
(Cleaner.buildOffsetMap + shouldRetainRecord) written out here with the reference map."""

import dataclasses
import hashlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog.records import Compression, RecordBatch, RecordBatchBuilder, TimestampType, build_empty_batch
from seglog_spark.cleaning import plan_cleaning
from seglog_spark.key_scan import ENTRY, range_batches, range_digests, range_keys, read_range
from seglog_spark.key_shard import decide_shard
from seglog_spark.offset_map import SkimpyOffsetMap, unique_digests
from seglog_spark.record_walk import walk_range_records
from seglog_spark.rewrite import filter_range
from seglog_spark.snapshot_writer import write_snapshot

from tests.support.snapshot_workloads import BASE_TIME_MS

# Digests that hit the probing scheme's corners: a first window of Integer.MIN_VALUE, zeros,
# shared prefixes (equal first 8 bytes), and the all-zero digest (an entry that reads empty).
_PREFIX = bytes(range(1, 9))
digests = st.one_of(
    st.binary(min_size=16, max_size=16),
    st.binary(min_size=12, max_size=12).map(lambda tail: b"\x80\x00\x00\x00" + tail),
    st.binary(min_size=8, max_size=8).map(lambda tail: _PREFIX + tail),
    st.just(bytes(16)),
    st.sampled_from([bytes([i]) * 16 for i in (1, 2, 0x80, 0xFF)]),
)


def as_array(items):
    return np.frombuffer(b"".join(items), dtype=np.uint8).reshape(-1, 16)


@settings(max_examples=300, deadline=None)
@given(
    pool=st.lists(digests, min_size=1, max_size=40, unique=True),
    picks=st.lists(st.integers(0, 10**6), max_size=120),
    slots=st.integers(1, 60),
    chunk_sizes=st.lists(st.integers(1, 30), min_size=1, max_size=10),
    load=st.sampled_from([None, 0.5, 0.9, 1.0]),
    queries=st.lists(digests, max_size=20),
)
def test_bulk_map_equals_one_put_at_a_time(pool, picks, slots, chunk_sizes, load, queries):
    sequence = [pool[i % len(pool)] for i in picks]
    offsets = list(range(0, 3 * len(sequence), 3))
    one, bulk = SkimpyOffsetMap(24 * slots), SkimpyOffsetMap(24 * slots)
    limit = None if load is None else max(1, int(slots * load))
    positions, refused = [], False
    for digest, offset in zip(sequence, offsets):
        if limit is not None and one.size >= limit:
            break
        try:
            positions.append(one.put_digest(digest, offset))
        except ValueError:  # full: the bulk map refuses the same call
            refused = True
            break
    bulk_positions, start, sizes = [], 0, iter(chunk_sizes * 200)
    while start < len(sequence):
        end = min(len(sequence), start + next(sizes))
        try:
            consumed, found = bulk.put_digests(as_array(sequence[start:end]), np.array(offsets[start:end]), limit)
        except ValueError:
            assert refused and len(positions) < end
            return
        bulk_positions.extend(found.tolist())
        if consumed < end - start:
            break
        start = end
    assert not refused
    assert bulk_positions == positions
    assert bytes(bulk._buffer) == bytes(one._buffer)
    assert (bulk.size, bulk.lookups, bulk.probes, bulk.latest_offset) == (one.size, one.lookups, one.probes, one.latest_offset)
    asked = pool + queries
    assert bulk.get_digests(as_array(asked)).tolist() == [one.get_digest(d) for d in asked]
    assert (bulk.lookups, bulk.probes, bulk.collision_rate) == (one.lookups, one.probes, one.collision_rate)
    assert bulk.offsets_at(np.array(positions, dtype=np.int64)).tolist() == [one.offset_at(p) for p in positions]


def test_bulk_map_at_90_percent_load_equals_one_put_at_a_time():
    slots = 5000
    keys = [hashlib.md5(b"%d" % (i % 4700)).digest() for i in range(20000)]
    one, bulk = SkimpyOffsetMap(24 * slots), SkimpyOffsetMap(24 * slots)
    limit = int(slots * 0.9)
    for offset, digest in enumerate(keys):
        if one.size >= limit:
            break
        one.put_digest(digest, offset)
    for chunk in np.array_split(np.arange(len(keys)), 7):
        consumed, _ = bulk.put_digests(as_array([keys[i] for i in chunk]), chunk, limit)
        if consumed < len(chunk):
            break
    assert bytes(bulk._buffer) == bytes(one._buffer)
    assert (bulk.size, bulk.lookups, bulk.probes) == (one.size, one.lookups, one.probes) and one.size == limit
    assert one.collision_rate > 0.5  # the placement rounds really ran


@settings(max_examples=100, deadline=None)
@given(st.lists(digests, max_size=60))
def test_unique_digests_gives_first_occurrences_in_order(items):
    first, inverse = unique_digests(as_array(items).reshape(-1, 16)) if items else unique_digests(np.zeros((0, 16), np.uint8))
    seen = {}
    for i, d in enumerate(items):
        seen.setdefault(d, i)
    assert first.tolist() == sorted(seen.values())
    assert [items[first[j]] for j in inverse] == items


# -- batches of every shape the codec writes -------------------------------------------------

keys_st = st.one_of(st.none(), st.just(b""), st.sampled_from([b"a", b"b", b"c"]), st.binary(min_size=1, max_size=200))
values_st = st.one_of(st.none(), st.just(b""), st.binary(max_size=20), st.just(b"x" * 20000))
records_st = st.lists(
    st.tuples(keys_st, values_st, st.sampled_from([0, 1, 5, 200, 10**6, 10**12, -1]),
              st.one_of(st.just(()), st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=3))), max_size=2))),
    min_size=0, max_size=9,  # none: the empty batch a cleaning leaves at the end of its range
)
batch_st = st.tuples(
    records_st,
    st.sampled_from([Compression.NONE, Compression.NONE, Compression.NONE, Compression.GZIP]),
    st.sampled_from([TimestampType.CREATE_TIME] * 3 + [TimestampType.LOG_APPEND_TIME]),
    st.sampled_from([None, None, BASE_TIME_MS, BASE_TIME_MS + 10**9]),  # delete horizon
    st.integers(0, 3),  # offsets skipped after the last record (a cleaned batch keeps its last offset)
    st.sampled_from([-1, -1, 7, 8]),  # producer id (idempotent: epoch 2, base sequence 40)
)


def build_batches(specs):
    batches, offset = [], 0
    for records, compression, timestamp_type, horizon, gap, producer_id in specs:
        producer = {"producer_id": producer_id, "producer_epoch": 2, "base_sequence": 40} if producer_id >= 0 else {}
        if not records:
            batches.append(build_empty_batch(base_offset=offset, last_offset_delta=gap, max_timestamp_ms=BASE_TIME_MS,
                                             **producer))
            offset += gap + 1
            continue
        builder = RecordBatchBuilder(base_offset=offset, compression=compression, timestamp_type=timestamp_type,
                                     delete_horizon_ms=horizon, **producer)
        for key, value, delta, headers in records:
            builder.append(value, key, BASE_TIME_MS + delta if delta >= 0 else -1, headers)
        batches.append(builder.build(last_offset_delta=len(records) - 1 + gap))
        offset += len(records) + gap
    return batches


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(batch_st, min_size=1, max_size=6))
def test_the_bulk_walk_reads_the_codecs_offsets_and_keys(tmp_path_factory, specs):
    batches = build_batches(specs)
    data = b"".join(batches)
    positions = np.cumsum([0] + [len(b) for b in batches[:-1]])
    walk = walk_range_records(data, positions)
    offsets, ordinals, keys = range_keys(walk, data)
    expected = [(r.offset, r.key) for b in batches for r in RecordBatch(b).records()]
    assert walk.record_count == len(expected)
    assert offsets.tolist() == [o for o, _ in expected]
    assert [bytes(k) for k in keys] == [k for _, k in expected if k is not None]
    assert ordinals.tolist() == [i for i, (_, k) in enumerate(expected) if k is not None]
    digest_offsets, digest_ordinals, digested = range_digests(walk, data)
    assert digest_offsets.tolist() == offsets.tolist() and digest_ordinals.tolist() == ordinals.tolist()
    assert digested.tobytes() == b"".join(hashlib.md5(k).digest() for _, k in expected if k is not None)
    # Uncompressed CreateTime batches without headers are walked in bulk, the rest by the codec.
    plain = [not r or c == Compression.NONE and t == TimestampType.CREATE_TIME and all(not h for *_, h in r)
             for r, c, t, *_ in specs]
    assert walk.regular.tolist() == plain


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    segments=st.lists(st.lists(batch_st, min_size=1, max_size=4), min_size=1, max_size=3),
    now_delta=st.sampled_from([10, 10**9 + 1]),
    range_bytes=st.sampled_from([1, 300, 1 << 20]),
    bits=st.randoms(use_true_random=False),
    at_end=st.booleans(),
)
def test_the_bulk_rewrite_writes_the_reference_filters_bytes(tmp_path_factory, segments, now_delta, range_bytes, bits, at_end):
    path = str(tmp_path_factory.mktemp("snap"))
    batches = build_batches([spec for segment in segments for spec in segment])
    cut, grouped = 0, []
    for segment in segments:
        grouped.append(batches[cut : cut + len(segment)])
        cut += len(segment)
    # Some producers' last batches named (some with another producer's id: not theirs to keep).
    named = [RecordBatch(b) for b in batches if RecordBatch(b).producer_id >= 0 and bits.random() < 0.6]
    producers = [(b.producer_id + (100 if bits.random() < 0.2 else 0), b.last_offset) for b in named]
    write_snapshot(path, grouped, cleaning_time_ms=BASE_TIME_MS + now_delta, producers=producers)
    plan = plan_cleaning(path, range_bytes=range_bytes)
    for byte_range in plan.ranges:
        data = read_range(plan.snapshot, byte_range)
        count = walk_range_records(data, range_batches(plan.snapshot, byte_range, data)).record_count
        bitmap = bytes(bits.getrandbits(8) & bits.choice([0, 0x55, 0xFF]) for _ in range((count + 7) // 8))
        upper = plan.snapshot.first_uncleanable_offset if at_end else -1
        try:
            expected, expected_stats = filter_range(plan.snapshot, byte_range, bitmap, upper, bulk=False)
        except ValueError as exc:  # a record the builder refuses: refused alike
            with pytest.raises(type(exc)):
                filter_range(plan.snapshot, byte_range, bitmap, upper)
            continue
        output, stats = filter_range(plan.snapshot, byte_range, bitmap, upper)
        assert output == expected
        assert dataclasses.asdict(stats) == dataclasses.asdict(expected_stats)


# -- decide_shard against Kafka's loop ------------------------------------------------------


def decide_one_at_a_time(chunks, first_dirty_offset, map_bytes, load_factor=0.9):
    """Cleaner.buildOffsetMap then shouldRetainRecord, entry by entry, with the reference map:
    a dirty entry reads the offset at the entry its put used, a clean one looks its digest up."""
    chunks = sorted(chunks)
    offset_map = SkimpyOffsetMap(map_bytes)
    capacity = int(offset_map.slots * load_factor)
    full_at, positions = None, []
    for _, _, packed in chunks:
        for digest, offset, _ in ENTRY.iter_unpack(packed):
            if offset < first_dirty_offset:
                continue
            if offset_map.size >= capacity:
                full_at = offset
                break
            positions.append(offset_map.put_digest(digest, offset))
        if full_at is not None:
            break
    bitmaps, records, puts = {}, 0, iter(positions)
    for range_id, record_count, packed in chunks:
        bits = bytearray((record_count + 7) >> 3)
        for digest, offset, ordinal in ENTRY.iter_unpack(packed):
            if full_at is not None and offset >= full_at:
                break
            records += 1
            latest = offset_map.offset_at(next(puts)) if offset >= first_dirty_offset else offset_map.get_digest(digest)
            if offset < latest:
                bits[ordinal >> 3] |= 1 << (ordinal & 7)
        if any(bits):
            bitmaps[range_id] = bytes(bits)
    return bitmaps, full_at, offset_map.size, offset_map.slots, offset_map.lookups, offset_map.probes, records


@settings(max_examples=200, deadline=None)
@given(
    keys=st.integers(1, 40),
    ranges=st.lists(st.lists(st.tuples(st.integers(0, 10**6), st.booleans(), st.integers(1, 3)), max_size=30), min_size=1, max_size=5),
    dirty_fraction=st.floats(0, 1),
    slots=st.sampled_from([1, 2, 5, 10, 50, 682]),
)
def test_decide_shard_equals_kafkas_loop(keys, ranges, dirty_fraction, slots):
    """Records (key, keyed, offset step) per range; ranges in offset order, shipped in any order."""
    digests_of = [hashlib.md5(b"%d" % k).digest() for k in range(keys)]
    chunks, offset = [], 0
    for range_id, records in enumerate(ranges):
        packed = []
        for ordinal, (k, keyed, step) in enumerate(records):
            if keyed:
                packed.append(ENTRY.pack(digests_of[k % keys], offset, ordinal))
            offset += step
        if packed:
            chunks.append((range_id, len(records), b"".join(packed)))
    first_dirty = int(offset * dirty_fraction)
    result = decide_shard(0, list(reversed(chunks)), first_dirty_offset=first_dirty, map_bytes=24 * slots)
    assert (result.bitmaps, result.full_at, result.entries, result.slots, result.lookups, result.probes,
            result.records) == decide_one_at_a_time(chunks, first_dirty, 24 * slots)
