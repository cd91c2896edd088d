"""Hostile cleaning documents against a real service: a result.json that Python's parser or int()
once failed on outside the reader's error (a 5000-digit integer in a field or in a list, deep
nesting, in the document or inside its lenient stats) answers CommitCleaned FAILED_PRECONDITION
naming the file, and the snapshot is free again (a good result commits, a drop drops); a number
no field can take (NaN, Infinity, a 30-digit integer) commits where it is in stats (counted as 0)
and is refused in a checked field; a hostile manifest.json met at start-up makes its snapshot
incomplete (removed: hard links only) and the service starts with every record."""

from __future__ import annotations

import json
import pathlib

import grpc
import pytest
from tests.support.cleaning_support import hand_clean, write_result
from tests.support.integration_helpers import assert_serving, make_batch, records_of, rpc_error

from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "2048", "file.delete.delay.ms": "0"}
# Each was once a ValueError or RecursionError out of the parse (an INTERNAL answer, the snapshot
# left claimed until a restart).
HOSTILE = {
    "huge_int": lambda good: good.replace('"format": 1', '"format": ' + "9" * 5000),
    "huge_int_in_list": lambda good: good.replace('"replaced_segments": [', '"replaced_segments": [' + "9" * 5000 + ", "),
    "deep": lambda good: "[" * 100_000,
    "deep_in_stats": lambda good: good.replace('"stats": {', '"stats": {"x": ' + "[" * 5000 + "]" * 5000 + ", "),
}
UNREADABLE_NUMBERS = {"nan": "NaN", "infinity": "Infinity", "long_int": "9" * 30}


def _filled(stub, topic: str) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1, configs=COMPACT))
    for n in range(120):
        batch = make_batch([b"value-%d-" % n + b"x" * 40], keys=[b"key-%d" % (n % 10)])
        stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=batch), timeout=10)


def _snapshot(stub, topic: str) -> pb.CreateSnapshotResponse:
    return stub.CreateSnapshot(pb.CreateSnapshotRequest(topic=topic, partition=0, include_local_path=True), timeout=30)


def _offsets(stub, topic: str) -> list[int]:
    out, offset = [], 0
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=offset), timeout=10)
        records = [r.offset for r in records_of(response) if r.offset >= offset]
        if not records:
            return out
        out += records
        offset = response.next_offset


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_result_is_refused_and_frees_its_snapshot(stub, kind):
    topic = f"hostile-result-{kind.replace('_', '-')}"
    _filled(stub, topic)
    taken, dropped = _snapshot(stub, topic), _snapshot(stub, topic)
    for response in (taken, dropped):
        good = hand_clean(response.local_path)
        (pathlib.Path(response.local_path) / "result.json").write_text(HOSTILE[kind](json.dumps(good)))
        rpc_error(stub.CommitCleaned, pb.CommitCleanedRequest(snapshot_id=response.snapshot_id),
                  grpc.StatusCode.FAILED_PRECONDITION, "result.json")
    before = _offsets(stub, topic)
    assert stub.DropSnapshot(pb.DropSnapshotRequest(snapshot_id=dropped.snapshot_id)).dropped
    write_result(taken.local_path, hand_clean(taken.local_path))
    committed = stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=taken.snapshot_id), timeout=30)
    after = _offsets(stub, topic)
    assert committed.replaced_segment_count > 0 and set(after) < set(before) and after[-1] == before[-1]


@pytest.mark.parametrize("kind", sorted(UNREADABLE_NUMBERS))
def test_an_unreadable_number_commits_in_stats_and_is_refused_in_a_checked_field(stub, kind):
    """Python's json.dumps writes NaN and Infinity; stats are read leniently (counted as 0), so
    such a result is not lost, while the same number in a checked field refuses the result."""
    topic = f"unreadable-stat-{kind.replace('_', '-')}"
    text = UNREADABLE_NUMBERS[kind]
    _filled(stub, topic)
    taken = _snapshot(stub, topic)
    document = hand_clean(taken.local_path)
    result = pathlib.Path(taken.local_path) / "result.json"
    good = json.dumps(document)
    result.write_text(good.replace('"cleaned_up_to_offset": ', f'"cleaned_up_to_offset": {text}, "x": '))
    rpc_error(stub.CommitCleaned, pb.CommitCleanedRequest(snapshot_id=taken.snapshot_id),
              grpc.StatusCode.FAILED_PRECONDITION, "result.json field 'cleaned_up_to_offset'")
    before = _offsets(stub, topic)
    document["stats"].update(map_utilization="@N@", records_read="@N@", bytes_written="@N@")
    result.write_text(json.dumps(document).replace('"@N@"', text))
    committed = stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=taken.snapshot_id), timeout=30)
    after = _offsets(stub, topic)
    assert committed.replaced_segment_count > 0 and set(after) < set(before) and after[-1] == before[-1]


@pytest.mark.parametrize("kind", ["huge_int", "deep"])
def test_a_restart_over_a_hostile_manifest_starts_and_keeps_every_record(start_service, tmp_path, kind):
    service = start_service(workdir=tmp_path / "svc")
    topic = "hostile-manifest"
    _filled(service.stub, topic)
    before = _offsets(service.stub, topic)
    taken = _snapshot(service.stub, topic)
    manifest = pathlib.Path(taken.local_path) / "manifest.json"
    assert service.stop() == 0
    manifest.write_text(HOSTILE[kind](manifest.read_text()))
    service = start_service(workdir=tmp_path / "svc")
    assert_serving(service.stub)
    assert _offsets(service.stub, topic) == before
    assert not pathlib.Path(taken.local_path).exists()  # an incomplete snapshot: its links removed
    assert not service.stub.DropSnapshot(pb.DropSnapshotRequest(snapshot_id=taken.snapshot_id)).dropped
    assert "unreadable manifest" in service.log() and "manifest.json" in service.log()
