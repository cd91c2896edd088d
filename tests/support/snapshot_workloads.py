"""Builds keyed workloads as snapshot directories and replays logs, for the cleaner's tests."""

from __future__ import annotations

import os
import json

from hypothesis import strategies as st

from seglog.records import RecordBatch, RecordBatchBuilder, iter_batches
from seglog_spark.snapshot_writer import write_snapshot

BASE_TIME_MS = 1_700_000_000_000


PRODUCER_IDS = (900, 901, 902)


def build_segments(ops, batch_size: int, segment_batches: int, *, idempotent: bool = False):
    """ops: (key or None, value or None) in offset order -> list of segments (lists of batches).
    ``idempotent``: the batches take turns among PRODUCER_IDS, each numbering its records."""
    segments, batches = [], []
    sequences = dict.fromkeys(PRODUCER_IDS, 0)
    for start in range(0, len(ops), batch_size):
        producer = {}
        if idempotent:
            pid = PRODUCER_IDS[(start // batch_size) % len(PRODUCER_IDS)]
            producer = {"producer_id": pid, "producer_epoch": 0, "base_sequence": sequences[pid]}
            sequences[pid] += len(ops[start : start + batch_size])
        builder = RecordBatchBuilder(base_offset=start, **producer)
        for i, (key, value) in enumerate(ops[start : start + batch_size]):
            builder.append(value, key, BASE_TIME_MS + start + i)
        batches.append(builder.build())
        if len(batches) == segment_batches:
            segments.append(batches)
            batches = []
    if batches:
        segments.append(batches)
    return segments


def make_snapshot(path, ops, *, batch_size=5, segment_batches=4, idempotent=False, **kwargs):
    """``idempotent``: batches of PRODUCER_IDS, and the manifest names each one's last batch."""
    segments = build_segments(ops, batch_size, segment_batches, idempotent=idempotent)
    if idempotent:
        last = {}
        for one in (RecordBatch(b) for segment in segments for b in segment):
            last[one.producer_id] = one.last_offset
        kwargs["producers"] = [(pid, offset) for pid, offset in last.items()]
    return write_snapshot(path, segments, **kwargs)


def read_records(path):
    with open(path, "rb") as f:
        data = f.read()
    out = []
    for batch in iter_batches(data):
        batch.ensure_valid()
        out.extend(batch.records())
    return out


def snapshot_records(snapshot_dir):
    with open(os.path.join(snapshot_dir, "manifest.json")) as f:
        manifest = json.load(f)
    return [r for s in manifest["segments"] for r in read_records(os.path.join(snapshot_dir, s["file"]))]


def cleaned_log_records(snapshot_dir, result):
    """The log as the service would have it after installing `result`: the outputs in place of
    the replaced segments, the other snapshot segments as they were."""
    with open(os.path.join(snapshot_dir, "manifest.json")) as f:
        manifest = json.load(f)
    replaced = set(result["replaced_segments"])
    records = []
    for out in result["output_segments"]:
        records.extend(read_records(os.path.join(snapshot_dir, "cleaned", out["file"])))
    for segment in manifest["segments"]:
        if segment["base_offset"] not in replaced:
            records.extend(read_records(os.path.join(snapshot_dir, segment["file"])))
    return records


def latest_values(records):
    """key -> value after replaying (a tombstone deletes)."""
    state = {}
    for record in records:
        if record.key is None:
            continue
        if record.value is None:
            state.pop(record.key, None)
        else:
            state[record.key] = record.value
    return state


keys = st.sampled_from([b"k%d" % i for i in range(12)])
ops_strategy = st.lists(
    st.tuples(keys, st.one_of(st.none(), st.binary(min_size=0, max_size=6))),
    min_size=1,
    max_size=120,
)
