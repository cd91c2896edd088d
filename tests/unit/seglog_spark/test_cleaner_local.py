"""The cleaning algorithm, run by the single-process baseline (the Spark job runs the same
steps; test_job.py checks it writes the same bytes)."""

import json
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kafka.record.memory_records import MemoryRecords

from seglog.records import RecordBatchBuilder, iter_batches
from seglog_spark import CleanerError, SnapshotError, UnsupportedBatchError
from seglog_spark.cleaner_local import clean_snapshot
from seglog_spark.index_writer import OFFSET_INDEX_ENTRY, TIME_INDEX_ENTRY
from seglog_spark.snapshot_writer import write_snapshot

from tests.support.snapshot_workloads import (
    BASE_TIME_MS,
    cleaned_log_records,
    latest_values,
    make_snapshot,
    ops_strategy,
    snapshot_records,
)

SMALL_MAP = 1 << 14  # 682 slots per shard: tests need no 16 MiB maps
DAY_MS = 86_400_000


def check_compaction_invariant(snapshot_dir, result):
    before = snapshot_records(snapshot_dir)
    after = cleaned_log_records(snapshot_dir, result)
    # Replaying gives the same key -> latest value map.
    assert latest_values(after) == latest_values(before)
    # Every retained record is an input record with its offset, key, value and timestamp.
    by_offset = {r.offset: r for r in before}
    for record in after:
        assert by_offset[record.offset][:4] == record[:4]
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets))
    # Within the replaced range, the latest record of every key survives.
    end = result["cleaned_up_to_offset"]
    latest = {}
    for record in before:
        if record.key is not None and record.offset < end:
            latest[record.key] = record.offset
    kept = set(offsets)
    for key, offset in latest.items():
        if by_offset[offset].value is not None:
            assert offset in kept, (key, offset)
    # Nothing past the replaced range changes, and the log end does not move back.
    replaced_end = max((r.offset for r in before if r.offset < end), default=None)
    assert [r for r in after if r.offset > (replaced_end if replaced_end is not None else -1)] == [
        r for r in before if r.offset > (replaced_end if replaced_end is not None else -1)
    ]
    if result["output_segments"]:
        last_out = result["output_segments"][-1]
        with open(os.path.join(snapshot_dir, "cleaned", last_out["file"]), "rb") as f:
            batches = list(iter_batches(f.read()))
        manifest = json.load(open(os.path.join(snapshot_dir, "manifest.json")))
        replaced = [s for s in manifest["segments"] if s["base_offset"] in set(result["replaced_segments"])]
        assert batches[-1].next_offset == replaced[-1]["next_offset"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops_strategy, batch_size=st.integers(1, 7), segment_batches=st.integers(1, 4), dirty_fraction=st.floats(0, 1))
def test_compaction_invariant_on_random_keyed_workloads(tmp_path_factory, ops, batch_size, segment_batches, dirty_fraction):
    path = str(tmp_path_factory.mktemp("snap"))
    first_dirty = int(len(ops) * dirty_fraction)
    make_snapshot(path, ops, batch_size=batch_size, segment_batches=segment_batches, first_dirty_offset=first_dirty)
    result = clean_snapshot(path, map_bytes=SMALL_MAP)
    check_compaction_invariant(path, result)
    assert result["cleaned_up_to_offset"] == len(ops)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops_strategy)
def test_cleaning_a_cleaned_log_again_changes_nothing_more(tmp_path_factory, ops):
    first = str(tmp_path_factory.mktemp("first"))
    make_snapshot(first, ops, batch_size=3, segment_batches=2)
    result = clean_snapshot(first, map_bytes=SMALL_MAP)
    batches = [bytes(b.view) for out in result["output_segments"]
               for b in iter_batches(open(os.path.join(first, "cleaned", out["file"]), "rb").read())]
    second = str(tmp_path_factory.mktemp("second"))
    write_snapshot(second, [batches], first_dirty_offset=len(ops), first_uncleanable_offset=len(ops))
    again = clean_snapshot(second, map_bytes=SMALL_MAP)
    assert cleaned_log_records(second, again) == cleaned_log_records(first, result)


def tombstone_log(path, cleaning_time_ms, *, ops=None):
    ops = ops or [(b"a", b"1"), (b"b", b"2"), (b"a", None), (b"c", b"3"), (b"d", b"4")]
    return make_snapshot(path, ops, batch_size=2, segment_batches=2, cleaning_time_ms=cleaning_time_ms,
                         configs={"delete.retention.ms": DAY_MS})


def test_first_pass_keeps_tombstones_and_records_their_delete_horizon(tmp_path):
    now = BASE_TIME_MS + 10
    tombstone_log(str(tmp_path), now)
    result = clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
    records = cleaned_log_records(str(tmp_path), result)
    assert [(r.offset, r.key, r.value) for r in records] == [(1, b"b", b"2"), (2, b"a", None), (3, b"c", b"3"), (4, b"d", b"4")]
    with open(tmp_path / "cleaned" / result["output_segments"][0]["file"], "rb") as f:
        batches = list(iter_batches(f.read()))
    horizon_batch = next(b for b in batches if b.base_offset <= 2 <= b.last_offset)
    assert horizon_batch.delete_horizon_ms == now + DAY_MS
    assert [r.timestamp_ms for r in horizon_batch.records()] == [BASE_TIME_MS + 2, BASE_TIME_MS + 3]
    assert result["stats"]["tombstones_dropped"] == 0


@pytest.mark.parametrize("later_ms, dropped", [(DAY_MS - 1, False), (DAY_MS, True)])
def test_a_later_pass_drops_tombstones_once_the_horizon_has_passed(tmp_path, later_ms, dropped):
    now = BASE_TIME_MS + 10
    first = tmp_path / "first"
    tombstone_log(str(first), now)
    result = clean_snapshot(str(first), map_bytes=SMALL_MAP)
    cleaned = open(first / "cleaned" / result["output_segments"][0]["file"], "rb").read()
    second = tmp_path / "second"
    write_snapshot(str(second), [[bytes(b.view) for b in iter_batches(cleaned)]], first_dirty_offset=5,
                   cleaning_time_ms=now + later_ms, configs={"delete.retention.ms": DAY_MS})
    again = clean_snapshot(str(second), map_bytes=SMALL_MAP)
    keys = [r.key for r in cleaned_log_records(str(second), again)]
    assert (b"a" not in keys) is dropped
    assert again["stats"]["tombstones_dropped"] == int(dropped)


def test_the_last_batch_of_the_cleaned_range_stays_as_an_empty_batch(tmp_path):
    ops = [(b"a", b"1"), (b"a", b"2"), (b"a", b"3"), (b"b", b"x"), (b"b", None)]
    manifest = make_snapshot(str(tmp_path), ops + [(b"a", b"4")], batch_size=3, segment_batches=1,
                             cleaning_time_ms=BASE_TIME_MS + 10, configs={"segment.bytes": 150})
    assert [s["size_bytes"] <= 150 < 2 * s["size_bytes"] for s in manifest["segments"]] == [True, True]
    # Offsets 0-2 and 3-5 in two segments, two groups; 'a' at 5 supersedes 0-2, whose batch
    # (and group) is dropped.
    result = clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
    out = [b for o in result["output_segments"] for b in iter_batches(open(tmp_path / "cleaned" / o["file"], "rb").read())]
    assert out[-1].next_offset == 6
    assert result["output_segments"][0]["base_offset"] == 3  # the emptied first group is dropped


def test_an_emptied_last_batch_is_written_as_61_bytes(tmp_path):
    seg1 = RecordBatchBuilder(base_offset=0)
    seg1.append(b"new", b"k", BASE_TIME_MS)
    first = seg1.build()
    older = RecordBatchBuilder(base_offset=1)
    older.append(None, None, BASE_TIME_MS + 1)  # keyless: dropped
    write_snapshot(str(tmp_path), [[first, older.build()]])
    result = clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
    batches = list(iter_batches(open(tmp_path / "cleaned" / result["output_segments"][0]["file"], "rb").read()))
    assert [b.size_in_bytes for b in batches] == [len(first), 61]
    assert batches[-1].records_count == 0 and batches[-1].last_offset == 1


def test_a_named_producers_superseded_last_batch_stays_empty_with_its_producer_fields(tmp_path):
    idempotent = RecordBatchBuilder(base_offset=0, producer_id=77, producer_epoch=4, base_sequence=12)
    idempotent.append(b"old", b"k", BASE_TIME_MS)
    idempotent.append(b"old", b"j", BASE_TIME_MS)
    other = RecordBatchBuilder(base_offset=2, producer_id=78, producer_epoch=0, base_sequence=0)
    other.append(b"old", b"k", BASE_TIME_MS)  # named with the wrong producer id: not kept
    newer = RecordBatchBuilder(base_offset=3)
    for key in (b"k", b"j", b"z"):
        newer.append(b"new", key, BASE_TIME_MS)
    write_snapshot(str(tmp_path), [[idempotent.build(), other.build(), newer.build()]], producers=[(77, 1), (1, 2)])
    result = clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
    data = open(tmp_path / "cleaned" / result["output_segments"][0]["file"], "rb").read()
    batches = list(iter_batches(data))
    kept = batches[0]
    kept.ensure_valid()
    theirs = MemoryRecords(data).next_batch()  # Kafka's reader takes the empty batch too
    assert theirs.validate_crc() and list(theirs) == [] and theirs.producer_id == 77
    assert [(b.base_offset, b.last_offset, b.records_count) for b in batches] == [(0, 1, 0), (3, 5, 3)]
    assert (kept.size_in_bytes, kept.producer_id, kept.producer_epoch, kept.base_sequence) == (61, 77, 4, 12)
    assert kept.max_timestamp == BASE_TIME_MS


@pytest.mark.parametrize("idempotent", [False, True])  # with producers' kept (possibly empty) last batches
def test_cleaned_segments_read_back_with_kafka_python(tmp_path, idempotent):
    ops = [(b"k%d" % (i % 9), b"value-%d" % i if i % 13 else None) for i in range(200)]
    make_snapshot(str(tmp_path), ops, batch_size=7, segment_batches=5, cleaning_time_ms=BASE_TIME_MS + 10,
                  idempotent=idempotent)
    result = clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
    ours = cleaned_log_records(str(tmp_path), result)
    theirs = []
    for out in result["output_segments"]:
        records = MemoryRecords(open(tmp_path / "cleaned" / out["file"], "rb").read())
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc()
            theirs.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)
    assert theirs == [(r.offset, r.timestamp_ms, r.key, r.value) for r in ours]


def index_entries(path, entry):
    data = open(path, "rb").read()
    assert len(data) % entry.size == 0
    return [entry.unpack_from(data, i) for i in range(0, len(data), entry.size)]


def test_indexes_point_at_the_batches_of_the_cleaned_log(tmp_path):
    ops = [(b"k%d" % (i % 40), b"v" * (i % 50)) for i in range(600)]
    make_snapshot(str(tmp_path), ops, batch_size=6, segment_batches=20, configs={"index.interval.bytes": 300})
    result = clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
    for out in result["output_segments"]:
        base = out["base_offset"]
        stem = tmp_path / "cleaned" / out["file"][: -len(".log")]
        data = open(f"{stem}.log", "rb").read()
        positions = {b.position: b for b in iter_batches(data)}
        entries = index_entries(f"{stem}.index", OFFSET_INDEX_ENTRY)
        assert entries, "600 records at a 300-byte interval index something"
        for relative, position in entries:
            assert positions[position].last_offset == base + relative
        times = index_entries(f"{stem}.timeindex", TIME_INDEX_ENTRY)
        assert [t for t, _ in times] == sorted({t for t, _ in times})
        for timestamp, relative in times:
            holder = next(b for b in positions.values() if b.base_offset <= base + relative <= b.last_offset)
            assert holder.max_timestamp == timestamp


def test_index_entry_formats_match_the_servers():
    from seglog_server.storage.format import offset_index, time_index

    assert OFFSET_INDEX_ENTRY.format == offset_index.ENTRY.format
    assert TIME_INDEX_ENTRY.format == time_index.ENTRY.format


def test_indexes_match_what_the_server_rebuilds(tmp_path):
    ops = [(b"k%d" % (i % 30), b"x" * 20) for i in range(400)]
    make_snapshot(str(tmp_path), ops, batch_size=4, segment_batches=200, configs={"index.interval.bytes": 200})
    result = clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
    out = result["output_segments"][0]
    stem = tmp_path / "cleaned" / out["file"][: -len(".log")]
    recovered = _server_recovered_indexes(tmp_path / "server", f"{stem}.log", out["base_offset"], 200)
    assert recovered == (open(f"{stem}.index", "rb").read(), open(f"{stem}.timeindex", "rb").read())


def _server_recovered_indexes(directory, log_path, base_offset, interval):
    import shutil

    from seglog_server.storage.base.clock import SystemClock
    from seglog_server.storage.base.log_config import LogConfig
    from seglog_server.storage.segment.log_segment import LogSegment

    os.makedirs(directory)
    target = os.path.join(directory, os.path.basename(log_path))
    shutil.copy(log_path, target)
    segment = LogSegment.open(str(directory), base_offset, LogConfig(index_interval_bytes=interval), clock=SystemClock())
    try:
        segment.recover()
        segment.on_become_inactive_segment()
    finally:
        segment.close()
    stem = target[: -len(".log")]
    return open(f"{stem}.index", "rb").read(), open(f"{stem}.timeindex", "rb").read()


def test_a_full_map_stops_at_the_last_wholly_indexed_segment(tmp_path):
    ops = [(b"key-%d" % i, b"v") for i in range(300)]  # 300 distinct keys
    make_snapshot(str(tmp_path), ops, batch_size=10, segment_batches=5)  # 50 records per segment
    # One shard, 100 slots, 90 keys before "full": the map fills inside the second segment.
    result = clean_snapshot(str(tmp_path), map_bytes=24 * 100, shard_count=1)
    assert result["replaced_segments"] == [0]
    assert result["cleaned_up_to_offset"] == 50
    check_compaction_invariant(str(tmp_path), result)
    again_dir = tmp_path / "next"
    # The next round starts where this one stopped.
    make_snapshot(str(again_dir), ops, batch_size=10, segment_batches=5, first_dirty_offset=50)
    assert clean_snapshot(str(again_dir), map_bytes=24 * 100, shard_count=1)["cleaned_up_to_offset"] == 100


# The record the invariant names, k1@3 (an empty value, not a tombstone), was dropped: its shard's
# map went on past the end the round reported, to k1@5, after the other shard's map filled.
FULL_MAP_EXAMPLE = [(b"k0", None), (b"k4", None), (b"k5", None), (b"k1", b""), (b"k0", None), (b"k1", None)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops_strategy, batch_size=st.integers(1, 6), segment_batches=st.integers(1, 4), map_slots=st.sampled_from([4, 8, 16]),
       shard_count=st.integers(1, 3), dirty_fraction=st.floats(0, 1))
@example(ops=FULL_MAP_EXAMPLE, batch_size=1, segment_batches=1, map_slots=4, shard_count=2, dirty_fraction=0.0)
def test_a_full_map_supersedes_nothing_with_a_record_past_the_cleaned_end(tmp_path_factory, ops, batch_size, segment_batches,
                                                                            map_slots, shard_count, dirty_fraction):
    """Maps small enough to fill, in some shards and not others: every record below the end the
    round reports is decided only by records below it (Kafka's map holds [first dirty, end))."""
    path = str(tmp_path_factory.mktemp("snap"))
    make_snapshot(path, ops, batch_size=batch_size, segment_batches=segment_batches,
                  first_dirty_offset=int(len(ops) * dirty_fraction))
    try:
        result = clean_snapshot(path, map_bytes=24 * map_slots, shard_count=shard_count)
    except CleanerError as exc:  # a map too small for the first dirty segment is refused
        assert "--map-bytes" in str(exc)
        return
    check_compaction_invariant(path, result)


def test_a_map_too_small_for_one_segment_is_refused_by_name(tmp_path):
    ops = [(b"key-%d" % i, b"v") for i in range(100)]
    make_snapshot(str(tmp_path), ops, batch_size=10, segment_batches=10)
    with pytest.raises(CleanerError, match="--map-bytes"):
        clean_snapshot(str(tmp_path), map_bytes=24 * 10, shard_count=1)


def test_small_segments_are_grouped_within_segment_bytes(tmp_path):
    ops = [(b"k%d" % i, b"v" * 30) for i in range(60)]
    manifest = make_snapshot(str(tmp_path), ops, batch_size=5, segment_batches=1, configs={"segment.bytes": 600})
    result = clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
    sizes = [s["size_bytes"] for s in manifest["segments"]]
    assert len(result["output_segments"]) == len(sizes) // 2  # two 256-261 byte inputs per 600 bytes
    assert all(out["size_bytes"] <= 600 for out in result["output_segments"])
    bases = {s["base_offset"] for s in manifest["segments"]}
    assert all(out["base_offset"] in bases for out in result["output_segments"])
    check_compaction_invariant(str(tmp_path), result)


def test_dry_run_reports_and_writes_nothing(tmp_path):
    ops = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(100)]
    make_snapshot(str(tmp_path), ops)
    result = clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP, dry_run=True)
    assert result["dry_run"] is True and result["stats"]["records_kept"] == 5
    assert result["stats"]["bytes_written"] < result["stats"]["bytes_read"]
    assert sorted(os.listdir(tmp_path)) == sorted(["manifest.json"] + [f for f in os.listdir(tmp_path) if f.endswith(".log")])


def test_transactional_batches_are_refused_by_name(tmp_path):
    builder = RecordBatchBuilder(base_offset=0, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    builder.append(b"v", b"k", BASE_TIME_MS)
    write_snapshot(str(tmp_path), [[builder.build()]])
    with pytest.raises(UnsupportedBatchError, match="transactional batch at offset 0"):
        clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)


def test_a_segment_that_changed_since_the_manifest_is_refused(tmp_path):
    make_snapshot(str(tmp_path), [(b"k", b"v")] * 10)
    manifest = json.load(open(tmp_path / "manifest.json"))
    path = tmp_path / manifest["segments"][0]["file"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="CRC-32C"):
        clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
    assert not (tmp_path / "result.json").exists()


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(first_dirty_offset=-1), "first_dirty_offset"),
    (lambda m: m["segments"][0].update(file="../x.log"), "expected file"),
    (lambda m: m["segments"][0].update(crc32c="XYZ"), "crc32c"),
    (lambda m: m.update(first_uncleanable_offset=3), "past first_uncleanable_offset"),
    (lambda m: m.update(format=2), "format 1"),
    (lambda m: m.update(producers={}), "'producers': expected a list"),
    (lambda m: m.update(producers=[{"producer_id": 1}]), "'last_offset'"),
    (lambda m: m.update(producers=[{"producer_id": 1, "last_offset": 10}]), r"outside the segments \[0, 10\)"),
    (lambda m: m.update(producers=[{"producer_id": 1, "last_offset": 4}] * 2), "named twice"),
])
def test_a_malformed_manifest_is_refused_by_field(tmp_path, edit, message):
    make_snapshot(str(tmp_path), [(b"k", b"v")] * 10)
    manifest = json.load(open(tmp_path / "manifest.json"))
    edit(manifest)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SnapshotError, match=message):
        clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)


def test_result_json_follows_the_contract(tmp_path):
    make_snapshot(str(tmp_path), [(b"k%d" % (i % 3), b"v") for i in range(30)])
    result = clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
    on_disk = json.load(open(tmp_path / "result.json"))
    assert on_disk == result
    assert set(result) >= {"format", "snapshot_id", "topic", "partition", "input_segments", "replaced_segments",
                           "output_segments", "cleaned_up_to_offset", "dry_run", "stats"}
    assert set(result["stats"]) >= {"records_read", "records_kept", "bytes_read", "bytes_written", "distinct_keys",
                                    "tombstones_dropped", "records_superseded", "map_utilization", "collision_rate",
                                    "duration_s", "engine"}
    assert sorted(os.listdir(tmp_path / "cleaned")) == sorted(
        f"{o['file'][:-4]}{suffix}" for o in result["output_segments"] for suffix in (".log", ".index", ".timeindex"))


@pytest.mark.parametrize("text", [
    "[" * 100_000,                                    # once RecursionError out of read_snapshot
    '{"format": ' + "9" * 5000 + "}",
    '{"format": 1e400}',
    '{"format": NaN}',
])
def test_a_hostile_manifest_is_a_snapshot_error(tmp_path, text):
    make_snapshot(str(tmp_path), [(b"k", b"v")] * 10)
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(SnapshotError, match="manifest"):
        clean_snapshot(str(tmp_path), map_bytes=SMALL_MAP)
