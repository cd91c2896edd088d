"""The PySpark job on a real local[2] SparkSession: it writes the same bytes as the
single-process baseline, and so keeps the compaction invariant."""

import filecmp
import json
import os
import shutil

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seglog_spark import cleaner_local, job

from tests.support.snapshot_workloads import BASE_TIME_MS, make_snapshot, ops_strategy
from test_cleaner_local import FULL_MAP_EXAMPLE, check_compaction_invariant
from test_decide_again import SPANNING_KEYS

pytestmark = pytest.mark.slow

SMALL_MAP = 1 << 14


def same_output(left, right):
    names = sorted(os.listdir(os.path.join(left, "cleaned")))
    assert names == sorted(os.listdir(os.path.join(right, "cleaned")))
    for name in names:
        assert filecmp.cmp(os.path.join(left, "cleaned", name), os.path.join(right, "cleaned", name), shallow=False), name


def without_timing(result):
    stats = {k: v for k, v in result["stats"].items() if k not in ("duration_s", "engine", "task_peak_rss_bytes")}
    return {**result, "stats": stats}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    ops=ops_strategy,
    batch_size=st.integers(1, 6),
    segment_batches=st.integers(1, 4),
    map_slots=st.sampled_from([4, 8, 682]),
    range_bytes=st.sampled_from([1, 200, 1 << 20]),
    idempotent=st.booleans(),
)
@example(ops=FULL_MAP_EXAMPLE, batch_size=1, segment_batches=1, map_slots=4, range_bytes=1, idempotent=False)
@example(ops=SPANNING_KEYS, batch_size=2, segment_batches=2, map_slots=8, range_bytes=1, idempotent=False)
def test_spark_writes_the_baselines_bytes(spark, tmp_path_factory, ops, batch_size, segment_batches, map_slots, range_bytes,
                                          idempotent):
    baseline = str(tmp_path_factory.mktemp("baseline"))
    make_snapshot(baseline, ops, batch_size=batch_size, segment_batches=segment_batches, cleaning_time_ms=BASE_TIME_MS + 50,
                  idempotent=idempotent)
    on_spark = str(tmp_path_factory.mktemp("spark"))
    shutil.copytree(baseline, on_spark, dirs_exist_ok=True)
    options = {"map_bytes": 24 * map_slots, "shard_count": 2}
    try:
        expected = cleaner_local.clean_snapshot(baseline, **options)
    except Exception as exc:  # a map too small for one segment is refused by both engines alike
        with pytest.raises(type(exc)):
            job.clean_snapshot(spark, on_spark, range_bytes=range_bytes, **options)
        return
    result = job.clean_snapshot(spark, on_spark, range_bytes=range_bytes, **options)
    assert without_timing(result) | {"stats": None} == without_timing(expected) | {"stats": None}
    # The second decision, when a map filled, fills each map in from the first stage's trail:
    # the same map, so the same utilisation and collision rate as the baseline's.
    for name in ("records_kept", "bytes_written", "records_superseded", "tombstones_dropped", "distinct_keys",
                 "map_utilization", "map_utilization_max", "collision_rate"):
        assert result["stats"][name] == expected["stats"][name]
    same_output(baseline, on_spark)
    check_compaction_invariant(on_spark, result)


def test_one_large_segment_is_split_into_many_ranges(spark, tmp_path):
    ops = [(b"k%d" % (i % 50), b"value-%d" % i if i % 17 else None) for i in range(3000)]
    make_snapshot(str(tmp_path / "a"), ops, batch_size=20, segment_batches=1000, cleaning_time_ms=BASE_TIME_MS + 10)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    result = job.clean_snapshot(spark, str(tmp_path / "a"), map_bytes=SMALL_MAP, range_bytes=4096)
    assert result["stats"]["range_count"] > 10 and len(result["input_segments"]) == 1
    cleaner_local.clean_snapshot(str(tmp_path / "b"), map_bytes=SMALL_MAP)
    same_output(str(tmp_path / "a"), str(tmp_path / "b"))
    check_compaction_invariant(str(tmp_path / "a"), result)
    assert json.load(open(tmp_path / "a" / "result.json"))["stats"]["engine"].startswith("spark local[2]")


def test_dry_run_on_spark_writes_nothing(spark, tmp_path):
    make_snapshot(str(tmp_path), [(b"k%d" % (i % 4), b"v") for i in range(40)])
    before = sorted(os.listdir(tmp_path))
    result = job.clean_snapshot(spark, str(tmp_path), map_bytes=SMALL_MAP, dry_run=True)
    assert result["dry_run"] and result["stats"]["records_kept"] == 4
    assert sorted(os.listdir(tmp_path)) == before


def test_a_dry_run_on_spark_whose_map_filled_decides_below_the_end_as_the_baseline(spark, tmp_path):
    """The dry run's shuffled entries are decided again below the end, as the baseline's are:
    k0@0 and k1@3 are superseded only by records past the end, so both are kept."""
    make_snapshot(str(tmp_path), FULL_MAP_EXAMPLE, batch_size=1, segment_batches=1, cleaning_time_ms=BASE_TIME_MS + 50)
    options = {"map_bytes": 24 * 4, "shard_count": 2, "dry_run": True}
    expected = cleaner_local.clean_snapshot(str(tmp_path), **options)
    result = job.clean_snapshot(spark, str(tmp_path), range_bytes=1, **options)
    assert without_timing(result) | {"stats": None} == without_timing(expected) | {"stats": None}
    assert result["cleaned_up_to_offset"] == 4 and result["replaced_segments"] == [0, 1, 2, 3]
    assert (result["stats"]["records_superseded"], result["stats"]["records_kept"]) == (0, 4)
