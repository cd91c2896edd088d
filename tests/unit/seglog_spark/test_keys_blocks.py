"""job.py's scan leaves each range's entries in a .keys file that the shard stages read back:
bytes from outside the process.  Each shard's slice is a block (key_blocks.py) checked whole
before use; these tests hold a hostile file to a refusal naming it or to the intact file's
decisions."""

import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from seglog_spark import CleanerError
from seglog_spark.cleaning import keys_path, plan_cleaning, prepare_output
from seglog_spark.key_blocks import KEYS_BLOCK_OVERHEAD, keys_block, open_keys_block
from seglog_spark.key_scan import ENTRY

from tests.support.snapshot_workloads import make_snapshot
from tests.unit.seglog_spark.test_decide_again import SPANNING_KEYS, _Cpu

_SHARDS = 2


@pytest.fixture(scope="module")
def scanned_job(tmp_path_factory):
    """A real scan's .keys files (job.py's scan task, no Spark) and each shard's first decision
    from the intact files."""
    from seglog_spark.job import _decide_from_files_task, _scan_to_file_task

    path = str(tmp_path_factory.mktemp("keys"))
    make_snapshot(path, SPANNING_KEYS, batch_size=2, segment_batches=2)
    plan = plan_cleaning(path, map_bytes=24 * 6, shard_count=_SHARDS, range_bytes=1)
    prepare_output(plan.snapshot)
    scanned = [_scan_to_file_task(plan, _Cpu())(byte_range) for byte_range in plan.ranges]
    intact = {range_id: open(keys_path(plan.snapshot, range_id), "rb").read() for range_id, _, _ in scanned}
    decided = [_decide_from_files_task(plan, scanned, _Cpu())(shard)[0] for shard in range(_SHARDS)]
    return plan, scanned, intact, decided


def _hostile(intact, scanned, range_id, how, at, value):
    data = intact[range_id]
    others = [other for other, _, _ in scanned if other != range_id]
    bounds = next(b for r, _, b in scanned if r == range_id)
    if how == "flip":
        at %= len(data)
        return data[:at] + bytes([data[at] ^ value]) + data[at + 1 :]
    if how == "cut":
        return data[: at % len(data)]
    if how == "grow":
        return data + bytes([value]) * (1 + at % 64)
    if how == "empty":
        return b""
    if how == "other_range":
        return intact[others[at % len(others)]]
    # the shards' blocks swapped inside the file
    return data[bounds[1] :] + data[: bounds[1]]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 100), how=st.sampled_from(["flip", "cut", "grow", "empty", "other_range", "swap_shards"]),
       at=st.integers(0, 10**6), value=st.integers(1, 255))
# an entry's offset raised in its top byte (the first entry of shard 0's block: its offset begins
# 16 bytes in, after the digest): before, it entered the map and superseded its key's latest record
@example(which=0, how="flip", at=KEYS_BLOCK_OVERHEAD - 4 + 16, value=0x40)
@example(which=0, how="flip", at=16, value=0x40)
@example(which=1, how="cut", at=KEYS_BLOCK_OVERHEAD + ENTRY.size + 3, value=1)  # before: numpy's ValueError
@example(which=1, how="cut", at=ENTRY.size + 3, value=1)
def test_a_hostile_keys_file_is_refused_by_name_or_decides_as_the_intact_one(scanned_job, which, how, at, value):
    """A real scan's .keys file flipped, cut, grown, emptied, replaced by another range's, or
    with its shards' blocks swapped: each shard's decision from it raises a CleanerError naming
    the shard and the file, or is exactly the decision from the intact file."""
    from seglog_spark.job import _decide_from_files_task

    plan, scanned, intact, decided = scanned_job
    with_keys = [r for r, _, b in scanned if b[-1] > 0]
    range_id = with_keys[which % len(with_keys)]
    path = keys_path(plan.snapshot, range_id)
    hostile = _hostile(intact, scanned, range_id, how, at, value)
    try:
        with open(path, "wb") as f:
            f.write(hostile)
        for shard in range(_SHARDS):
            try:
                got = _decide_from_files_task(plan, scanned, _Cpu())(shard)[0]
            except CleanerError as exc:
                assert f"key shard {shard}: range {range_id}: {path}: " in str(exc)
                continue
            assert got == decided[shard], (how, shard)
    finally:
        with open(path, "wb") as f:
            f.write(intact[range_id])


def test_a_missing_keys_file_is_refused_by_name(scanned_job):
    """A .keys file deleted between the scan and the shard stage: CleanerError naming the shard,
    the range and the file (before: FileNotFoundError)."""
    from seglog_spark.job import _decide_from_files_task

    plan, scanned, intact, decided = scanned_job
    range_id, _, bounds = next(item for item in scanned if item[2][1] > 0)
    path = keys_path(plan.snapshot, range_id)
    os.unlink(path)
    try:
        with pytest.raises(CleanerError, match=f"key shard 0: range {range_id}: {path}: its .keys file is missing"):
            _decide_from_files_task(plan, scanned, _Cpu())(0)
    finally:
        with open(path, "wb") as f:
            f.write(intact[range_id])
    assert _decide_from_files_task(plan, scanned, _Cpu())(0)[0] == decided[0]


def test_a_block_is_refused_for_each_field_that_is_not_the_scans():
    """Each check of open_keys_block driven alone on a block whose CRC is right: the bounds'
    size, the length, the magic and version, the range, the shard, an offset outside the range's
    [base, end) or out of order, an ordinal outside the records or out of order."""
    def entry(offset, ordinal):
        return ENTRY.pack(bytes(16), offset, ordinal)

    good = entry(10, 0) + entry(12, 2)
    block = keys_block(3, 1, 10, 13, good)
    size = len(block)

    def opened(data, *, range_id=3, shard=1, size=size, record_count=3):
        return open_keys_block(data, range_id=range_id, shard=shard, size=size, record_count=record_count, source="f.keys")

    assert opened(block) == good and keys_block(3, 1, 10, 13, b"") == b""
    for data, kwargs, why in (
        (block, {"size": size - 1}, "not a block of whole entries"),
        (block, {"size": 5}, "not a block of whole entries"),
        (block[:-1], {}, f"{size - 1} bytes, the scan wrote a block of {size}"),
        (b"SGLTRAIL" + block[8:], {}, "not a version 1 block"),
        (block[:-1] + bytes([block[-1] ^ 1]), {}, "CRC-32C does not match"),
        (block, {"range_id": 4}, "a block of range 3, shard 1, 2 entries, where the scan wrote range 4"),
        (block, {"shard": 0}, "a block of range 3, shard 1"),
        (keys_block(3, 1, 11, 13, good), {}, r"offset outside the range's \[11, 13\)"),
        (keys_block(3, 1, 10, 12, good), {}, r"offset outside the range's \[10, 12\)"),
        (keys_block(3, 1, 10, 13, entry(12, 0) + entry(10, 2)), {}, "or out of order"),
        (block, {"record_count": 2}, "ordinal outside the range's 2 records"),
        (keys_block(3, 1, 10, 13, entry(10, 2) + entry(12, 0)), {}, "ordinal outside .* or out of order"),
        (keys_block(3, 1, 10, 13, entry(10, -1) + entry(12, 0)), {}, "ordinal outside"),
    ):
        with pytest.raises(CleanerError, match=f"key shard {kwargs.get('shard', 1)}: range {kwargs.get('range_id', 3)}: f.keys: .*{why}"):
            opened(data, **kwargs)
