"""Offline cleaning through a real service process: snapshots taken while producers keep
appending, ListCleanable, CommitCleaned's refusals of stale and damaged results, and reads
(Fetch, OffsetsForTimes) across the offset gaps a cleaning leaves. Results here are written by
the codec-based hand cleaner (tests/support/cleaning_support.py); the end-to-end runs with the real
cleaning job are in test_cleaner_cli.py."""

from __future__ import annotations

import json
import os
import threading

import grpc
import pytest
from tests.support.integration_helpers import make_batch, records_of, rpc_error

from seglog.records import crc32c
from seglog.v1 import log_service_pb2 as pb
from tests.support.cleaning_support import hand_clean, write_result

pytestmark = pytest.mark.integration

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "2048", "file.delete.delay.ms": "0"}
T0_MS = 1_760_000_000_000


def create_compacted(stub, name, **extra):
    stub.CreateTopic(pb.CreateTopicRequest(topic=name, partitions=1, configs={**COMPACT, **extra}))


def produce(stub, topic, key: bytes, value: bytes | None, timestamp_ms: int) -> int:
    batch = make_batch([value], keys=[key], timestamps=[timestamp_ms])
    return stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=batch), timeout=10).base_offset


def fill(stub, topic, count=120, keys=10) -> list[tuple[int, bytes, bytes, int]]:
    """Overwrites of ``keys`` keys; (offset, key, value, timestamp) in offset order."""
    written = []
    for n in range(count):
        key, value, ts = b"key-%d" % (n % keys), b"value-%d-" % n + b"x" * 40, T0_MS + n * 10
        written.append((produce(stub, topic, key, value, ts), key, value, ts))
    return written


def snapshot(stub, topic) -> pb.CreateSnapshotResponse:
    return stub.CreateSnapshot(pb.CreateSnapshotRequest(topic=topic, partition=0, include_local_path=True), timeout=30)


def read_all(stub, topic) -> list[tuple[int, bytes, bytes]]:
    out = []
    offset = stub.DescribeTopic(pb.DescribeTopicRequest(topic=topic)).partitions[0].log_start_offset
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=offset), timeout=10)
        records = [r for r in records_of(response) if r.offset >= offset]
        if not records:
            return out
        out.extend((r.offset, r.key, r.value) for r in records)
        offset = response.next_offset


def latest(pairs):
    out = {}
    for key, value in pairs:
        out[key] = value
    return out


def test_snapshots_taken_while_producers_append_are_consistent(stub, service):
    topic = "cleaning-under-load"
    create_compacted(stub, topic)
    fill(stub, topic, count=60)
    stop = threading.Event()
    failures: list[BaseException] = []
    produced = []

    def producer(worker: int) -> None:
        n = 0
        while not stop.is_set():
            try:
                produced.append(produce(stub, topic, b"key-%d" % (n % 7), b"w%d-%d" % (worker, n) + b"y" * 60, T0_MS + n))
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)
                return
            n += 1

    threads = [threading.Thread(target=producer, args=(w,)) for w in range(2)]
    for thread in threads:
        thread.start()
    taken = []
    try:
        while len(taken) < 15:
            taken.append(snapshot(stub, topic))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == [] and len(produced) > 0
    for response in taken:
        manifest = json.loads(response.manifest_json)
        assert manifest == json.loads(open(os.path.join(response.local_path, "manifest.json")).read())
        assert response.relative_path == f".seglog-snapshots/{response.snapshot_id}"
        assert response.local_path.endswith(os.sep + response.relative_path)  # log_dir is a label
        segments = manifest["segments"]
        assert segments and segments[0]["base_offset"] == manifest["log_start_offset"] == 0
        for segment, following in zip(segments, segments[1:] + [None]):
            end = following["base_offset"] if following else manifest["first_uncleanable_offset"]
            assert segment["base_offset"] < segment["next_offset"] <= end
            data = open(os.path.join(response.local_path, segment["file"]), "rb").read()
            assert len(data) == segment["size_bytes"] and f"{crc32c(data):08x}" == segment["crc32c"]
        stub.DropSnapshot(pb.DropSnapshotRequest(snapshot_id=response.snapshot_id), timeout=10)
        assert not os.path.exists(response.local_path)


def test_list_cleanable_commit_and_reads_across_the_gaps(stub):
    topic = "cleaning-round-trip"
    create_compacted(stub, topic)
    written = fill(stub, topic)
    listed = [p for p in stub.ListCleanable(pb.ListCleanableRequest(topic=topic)).partitions]
    assert len(listed) == 1 and listed[0].eligible and listed[0].dirty_ratio == 1.0
    before = read_all(stub, topic)
    response = snapshot(stub, topic)
    hand_clean(response.local_path)
    commit = stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=response.snapshot_id), timeout=30)
    assert commit.cleaned_up_to_offset == response.first_uncleanable_offset
    assert commit.bytes_after < commit.bytes_before
    after = read_all(stub, topic)
    assert latest((k, v) for _, k, v in after) == latest((k, v) for _, k, v, _ in written)
    kept = {offset for offset, _, _ in after}
    assert [r for r in before if r[0] in kept] == after and len(after) < len(before)
    # A fetch at a removed offset starts at the next kept batch; OffsetsForTimes skips the gap.
    removed = sorted({offset for offset, _, _ in before} - kept)
    for offset in removed[:20]:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=offset), timeout=10)
        first = [r.offset for r in records_of(response) if r.offset >= offset][0]
        assert first == min(o for o in kept if o > offset)
        timestamp = written[offset][3]
        found = stub.OffsetsForTimes(pb.OffsetsForTimesRequest(
            partitions=[pb.PartitionTimestamp(topic=topic, partition=0, timestamp_ms=timestamp)])).results[0]
        assert found.offset == min(o for o in kept if o > offset)
    [listed] = stub.ListCleanable(pb.ListCleanableRequest(topic=topic)).partitions
    assert listed.first_dirty_offset == commit.cleaned_up_to_offset and not listed.eligible


def test_stale_and_damaged_results_are_refused_with_what_changed(stub):
    topic = "cleaning-refusals"
    create_compacted(stub, topic)
    fill(stub, topic)
    committed = snapshot(stub, topic)
    hand_clean(committed.local_path)
    twin = snapshot(stub, topic)
    hand_clean(twin.local_path)
    damaged = snapshot(stub, topic)
    result = hand_clean(damaged.local_path)
    result["output_segments"][0]["crc32c"] = "00000000"
    write_result(damaged.local_path, result)
    moved = snapshot(stub, topic)
    hand_clean(moved.local_path)

    rpc_error(stub.CommitCleaned, pb.CommitCleanedRequest(snapshot_id=damaged.snapshot_id),
              grpc.StatusCode.FAILED_PRECONDITION, "is damaged")
    # Appends and rolls after the snapshot do not make it stale (Kafka cleans while appends go on).
    fill(stub, topic, count=40)
    stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=committed.snapshot_id), timeout=30)
    rpc_error(stub.CommitCleaned, pb.CommitCleanedRequest(snapshot_id=committed.snapshot_id),
              grpc.StatusCode.FAILED_PRECONDITION, "already committed")
    rpc_error(stub.CommitCleaned, pb.CommitCleanedRequest(snapshot_id=twin.snapshot_id),
              grpc.StatusCode.FAILED_PRECONDITION, "stale")
    before = read_all(stub, topic)
    stub.DeleteRecords(pb.DeleteRecordsRequest(topic=topic, partition=0, offset=3))
    fresh = snapshot(stub, topic)
    hand_clean(fresh.local_path)
    stub.DeleteRecords(pb.DeleteRecordsRequest(topic=topic, partition=0, offset=5))
    rpc_error(stub.CommitCleaned, pb.CommitCleanedRequest(snapshot_id=fresh.snapshot_id),
              grpc.StatusCode.FAILED_PRECONDITION, "log start offset moved from 3 to 5")
    after = read_all(stub, topic)
    assert after == [r for r in before if r[0] >= 5]
    rpc_error(stub.CommitCleaned, pb.CommitCleanedRequest(snapshot_id="no-such-snapshot"),
              grpc.StatusCode.NOT_FOUND, "no cleaning snapshot")
    rpc_error(stub.CommitCleaned, pb.CommitCleanedRequest(snapshot_id="../escape"),
              grpc.StatusCode.INVALID_ARGUMENT, "invalid snapshot id")
    for response in (twin, damaged, moved, fresh):
        assert stub.DropSnapshot(pb.DropSnapshotRequest(snapshot_id=response.snapshot_id)).dropped


def test_a_result_for_a_topic_switched_to_delete_is_refused_and_its_snapshot_dropped(stub):
    topic = "cleaning-policy-changed"
    create_compacted(stub, topic)
    fill(stub, topic)
    taken = snapshot(stub, topic)
    hand_clean(taken.local_path)
    stub.AlterTopicConfigs(pb.AlterTopicConfigsRequest(topic=topic, set_configs={"cleanup.policy": "delete"}))
    before = read_all(stub, topic)
    rpc_error(stub.CommitCleaned, pb.CommitCleanedRequest(snapshot_id=taken.snapshot_id),
              grpc.StatusCode.FAILED_PRECONDITION, "no longer compacted (cleanup.policy=delete)")
    assert read_all(stub, topic) == before and len(before) == 120  # nothing installed
    assert not os.path.exists(taken.local_path)
    assert not stub.DropSnapshot(pb.DropSnapshotRequest(snapshot_id=taken.snapshot_id)).dropped


def test_snapshot_of_a_delete_topic_is_a_failed_precondition(stub, topic):
    stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=make_batch([b"v"])))
    rpc_error(stub.CreateSnapshot, pb.CreateSnapshotRequest(topic=topic, partition=0),
              grpc.StatusCode.FAILED_PRECONDITION, "not compacted")
    rpc_error(stub.CreateSnapshot, pb.CreateSnapshotRequest(topic="missing-topic", partition=0),
              grpc.StatusCode.NOT_FOUND, "does not exist")


def test_commit_while_producers_append_loses_nothing(stub):
    topic = "cleaning-commit-under-load"
    create_compacted(stub, topic)
    written = fill(stub, topic)
    response = snapshot(stub, topic)
    hand_clean(response.local_path)
    stop = threading.Event()
    failures: list[BaseException] = []
    produced: list[tuple[int, bytes, bytes]] = []

    def producer() -> None:
        n = 0
        while not stop.is_set():
            key, value = b"key-%d" % (n % 10), b"late-%d" % n
            try:
                produced.append((produce(stub, topic, key, value, T0_MS + 10_000 + n), key, value))
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)
                return
            n += 1

    thread = threading.Thread(target=producer)
    thread.start()
    try:
        stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=response.snapshot_id), timeout=30)
        while len(produced) < 50 and not failures:
            threading.Event().wait(0.01)
    finally:
        stop.set()
        thread.join()
    assert failures == []
    after = read_all(stub, topic)
    assert [r for r in after if r[0] >= response.first_uncleanable_offset] == (
        [(o, k, v) for o, k, v, _ in written if o >= response.first_uncleanable_offset] + produced
    )
    assert latest((k, v) for _, k, v in after) == latest([(k, v) for _, k, v, _ in written] + [(k, v) for _, k, v in produced])
