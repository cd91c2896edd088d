"""The offline cleaner through the object store: a real service with --remote-storage, a real
S3-compatible server (weed) on loopback, the real cleaning job (the baseline here, PySpark local
in the slow test) reading and writing only objects, CommitCleaned fetching and checking them.

The compaction invariant after a round: the same latest value per key (tombstones kept, within
delete.retention.ms), every kept record at its offset with its bytes, nothing past the cleaned
range changed. Hostile objects (a truncated cleaned segment, a result naming offsets out of
range, a batch with a bad CRC behind a matching file CRC) are refused with FAILED_PRECONDITION
and nothing is installed; a store failing mid-export or mid-commit fails that call with
UNAVAILABLE and leaves the partition as it was."""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import uuid

import boto3
import grpc
import pytest
from tests.support.integration_helpers import ServiceProcess, records_of, service_environment
from tests.support.s3_server import CREDENTIALS_ENV, FaultProxy, _forward, _read_head

from seglog import Admin
from seglog.records import RecordBatchBuilder, crc32c
from seglog.v1 import log_service_pb2 as pb

from tests.integration.remote.conftest import BUCKET

pytestmark = pytest.mark.integration

T0_MS = 1_760_000_000_000
CALL_TIMEOUT_S = 60


class FailingProxy(FaultProxy):
    """FaultProxy that also answers ``503 Slow Down`` to requests whose request line holds
    ``fail_matching`` (e.g. ``"PUT "`` + a key part): one operation of the store fails while
    the others pass (a store failing mid-export or mid-commit)."""

    fail_matching: tuple[str, ...] = ()
    stall_matching: tuple[str, ...] = ()  # held silent until the proxy closes (sets ``stalled``)

    def _handle(self, client: socket.socket) -> None:
        head = _read_head(client)
        if head is None:
            return
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        if any(all(part in line for part in rule.split("*")) for rule in self.stall_matching):
            self.stalled.set()
            self._release.wait()
            return
        if any(all(part in line for part in rule.split("*")) for rule in self.fail_matching):
            body = b"<Error><Code>SlowDown</Code><Message>injected by the test</Message></Error>"
            client.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                           b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            return
        _forward(client, head, self.target_port)


@pytest.fixture
def proxy(weed):
    fault_proxy = FailingProxy(weed.s3_port)
    yield fault_proxy
    fault_proxy.close()


@pytest.fixture
def service(tmp_path, weed, proxy):
    """A service whose store is reached through the proxy (so tests can fail its calls)."""
    data = tmp_path / "data"
    data.mkdir()
    prefix = f"svc-{uuid.uuid4().hex[:10]}"
    running = ServiceProcess(tmp_path, [data], [
        "--remote-storage", f"s3://{BUCKET}/{prefix}", "--s3-endpoint", proxy.endpoint],
        env=CREDENTIALS_ENV).start()
    running.store_root = f"s3://{BUCKET}/{prefix}"
    yield running
    running.stop()


def s3(weed):
    return boto3.session.Session().client("s3", endpoint_url=weed.endpoint, region_name="us-east-1")


def compacted_workload(stub, topic: str, seed: int, count: int = 400, keys: int = 30) -> None:
    """Batches of 1-4 keyed records, about one tombstone in eight, over small segments."""
    import random

    stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1, configs={
        "cleanup.policy": "compact", "segment.bytes": "8192", "file.delete.delay.ms": "0"}))
    rng = random.Random(seed)
    n = 0
    while n < count:
        builder = RecordBatchBuilder()
        for _ in range(rng.randint(1, 4)):
            # key-000's last record is a tombstone in every workload (then 100 records of others),
            # so the cleaned range always holds one the cleaning must keep.
            last_part = n >= count - 100
            key = b"key-%03d" % (rng.randrange(1, keys) if last_part else rng.randrange(keys))
            tombstone = n == count - 101 or rng.random() < 0.125
            if n == count - 101:
                key = b"key-000"
            value = None if tombstone else b"value-%d-" % n + b"p" * rng.randint(0, 150)
            builder.append(value, key=key, timestamp_ms=T0_MS + n * 7)
            n += 1
        stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=builder.build()), timeout=10)


def read_all(stub, topic: str) -> list[tuple[int, bytes, bytes | None, int]]:
    out = []
    offset = stub.DescribeTopic(pb.DescribeTopicRequest(topic=topic)).partitions[0].log_start_offset
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=offset), timeout=10)
        records = [r for r in records_of(response) if r.offset >= offset]
        if not records:
            return out
        out.extend((r.offset, r.key, r.value, r.timestamp_ms) for r in records)
        offset = response.next_offset


def latest(records) -> dict:
    return {key: value for _, key, value, _ in records}


def check_invariant(before, after, end: int) -> None:
    assert latest(after) == latest(before)  # tombstoned keys still map to None: kept
    assert latest(before)[b"key-000"] is None and any(r[1] == b"key-000" and r[0] < end for r in after)
    assert set(after) <= set(before) and len(after) < len(before)  # offsets and bytes kept
    assert [r for r in after if r[0] >= end] == [r for r in before if r[0] >= end]


def run_cleaner(service, weed, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seglog_cli", "cleaner", "run", "--once", "--server", service.address,
         "--snapshot-store", service.store_root, "--s3-endpoint", weed.endpoint, *args],
        capture_output=True, text=True, env=service_environment(CREDENTIALS_ENV), timeout=600)


def keys_under(weed, url: str) -> list[str]:
    bucket, _, prefix = url[len("s3://"):].partition("/")
    pages = s3(weed).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item["Key"][len(prefix):] for page in pages for item in page.get("Contents") or []]


def local_snapshots(service) -> list[str]:
    root = service.data_dirs[0] / ".seglog-snapshots"
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def clean_round(service, weed, topic: str, *engine: str) -> None:
    before = read_all(service.stub, topic)
    with Admin(service.address) as admin:
        [listed] = admin.list_cleanable(topic)
    assert listed.eligible
    finished = run_cleaner(service, weed, "--topic", topic, *engine)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "cleaner round 1: 1 cleaned, 0 refused, 0 failed" in finished.stdout, finished.stdout + finished.stderr
    check_invariant(before, read_all(service.stub, topic), listed.first_uncleanable_offset)
    with Admin(service.address) as admin:
        [after] = admin.list_cleanable(topic)
    assert after.first_dirty_offset == listed.first_uncleanable_offset and after.open_snapshot_ids == ()
    # The commit removed the snapshot, locally and in the store.
    assert local_snapshots(service) == []
    assert keys_under(weed, service.store_root + "/cleaning-snapshots/") == []


def test_a_round_through_the_store_with_the_baseline_keeps_the_compaction_invariant(service, weed):
    compacted_workload(service.stub, "via-store", seed=11)
    clean_round(service, weed, "via-store", "--engine", "python")


@pytest.mark.slow
@pytest.mark.timeout(600)  # a JVM and a Spark session on two shared cores
def test_a_round_through_the_store_with_spark_local_mode(service, weed):
    scratch = os.path.join(tempfile.gettempdir(), "seglog-clean-via-store-spark-0-*")
    left_before = set(glob.glob(scratch))  # by an earlier run killed mid-job, not this one's to judge
    compacted_workload(service.stub, "via-store-spark", seed=12)
    clean_round(service, weed, "via-store-spark", "--engine", "spark", "--master", "local[2]")
    # Each Python worker's scratch (the ranges it fetched, the parts it assembled) went with its task.
    assert set(glob.glob(scratch)) - left_before == set()


# -- exported snapshots, hostile results ----------------------------------------------------------


def exported_and_cleaned(service, weed, topic: str, seed: int):
    """A snapshot exported to the store and cleaned there by the baseline (in this process)."""
    from seglog_spark import cleaner_local, object_io

    compacted_workload(service.stub, topic, seed=seed)
    with Admin(service.address) as admin:
        snapshot = admin.create_snapshot(topic, 0, export_to_store=True)
    assert snapshot.store_url == f"{service.store_root}/cleaning-snapshots/{snapshot.snapshot_id}/"
    names = keys_under(weed, snapshot.store_url)
    assert "manifest.json" in names and sum(n.endswith(".log") for n in names) == snapshot.segment_count
    store = object_io.StoreSnapshot.parse(snapshot.store_url, weed.endpoint)
    result = object_io.clean_downloaded(store, cleaner_local.clean_snapshot)
    return snapshot, store, result


def commit_refused(service, snapshot_id: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        service.stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=snapshot_id), timeout=CALL_TIMEOUT_S)
    return caught.value


def test_a_truncated_cleaned_segment_object_is_refused_and_nothing_installed(service, weed):
    snapshot, store, result = exported_and_cleaned(service, weed, "hostile-truncated", seed=21)
    before = read_all(service.stub, "hostile-truncated")
    output = result["output_segments"][0]
    data = store.get(f"cleaned/{output['file']}", size_max=1 << 30)
    store.put(f"cleaned/{output['file']}", data[: len(data) // 2])
    error = commit_refused(service, snapshot.snapshot_id)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert f"{len(data) // 2} bytes; result.json says {len(data)}" in error.details()
    assert read_all(service.stub, "hostile-truncated") == before
    assert not list((service.data_dirs[0] / "hostile-truncated-0").glob("*.cleaned"))


def test_a_result_naming_offsets_out_of_range_is_refused(service, weed):
    snapshot, store, result = exported_and_cleaned(service, weed, "hostile-range", seed=22)
    before = read_all(service.stub, "hostile-range")
    manifest = json.loads(snapshot.manifest_json)
    result["cleaned_up_to_offset"] = manifest["first_uncleanable_offset"] + 1000
    store.put("result.json", json.dumps(result).encode())
    error = commit_refused(service, snapshot.snapshot_id)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "cleaned_up_to_offset" in error.details()
    assert read_all(service.stub, "hostile-range") == before


def test_a_hostile_result_object_is_refused_and_the_good_one_then_commits(service, weed):
    """result.json from the store is outside bytes: a deep nesting and a 5000-digit integer (once
    RecursionError / ValueError out of the parse: INTERNAL, the snapshot held until a restart)
    answer FAILED_PRECONDITION naming the object, and the job's own result then commits."""
    snapshot, store, result = exported_and_cleaned(service, weed, "hostile-json", seed=23)
    before = read_all(service.stub, "hostile-json")
    good = json.dumps(result).encode()
    for hostile in (b"[" * 100_000, good.replace(b'"format": 1', b'"format": ' + b"9" * 5000)):
        store.put("result.json", hostile)
        error = commit_refused(service, snapshot.snapshot_id)
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION and "result.json" in error.details()
        assert read_all(service.stub, "hostile-json") == before
    store.put("result.json", good)
    service.stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=snapshot.snapshot_id), timeout=CALL_TIMEOUT_S)
    end = json.loads(snapshot.manifest_json)["first_uncleanable_offset"]
    check_invariant(before, read_all(service.stub, "hostile-json"), end)


def test_a_cleaned_batch_with_a_bad_crc_behind_a_matching_file_crc_is_refused(service, weed):
    """The hostile job recomputes the file's CRC in result.json: the batch CRC still catches it."""
    snapshot, store, result = exported_and_cleaned(service, weed, "hostile-crc", seed=23)
    before = read_all(service.stub, "hostile-crc")
    output = result["output_segments"][0]
    data = bytearray(store.get(f"cleaned/{output['file']}", size_max=1 << 30))
    data[80] ^= 0xFF  # inside the first batch's records: its CRC-32C no longer matches
    store.put(f"cleaned/{output['file']}", bytes(data))
    output["crc32c"] = f"{crc32c(bytes(data)):08x}"
    store.put("result.json", json.dumps(result).encode())
    error = commit_refused(service, snapshot.snapshot_id)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "crc" in error.details().lower()
    assert read_all(service.stub, "hostile-crc") == before


def test_a_commit_before_the_job_wrote_its_result_is_refused(service, weed):
    compacted_workload(service.stub, "no-result", seed=24)
    with Admin(service.address) as admin:
        snapshot = admin.create_snapshot("no-result", 0, export_to_store=True)
    error = commit_refused(service, snapshot.snapshot_id)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "the cleaning job has not finished" in error.details()


def test_export_without_a_store_is_a_failed_precondition(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    plain = ServiceProcess(tmp_path, [data], []).start()
    try:
        compacted_workload(plain.stub, "no-store", seed=25, count=200)
        with pytest.raises(grpc.RpcError) as caught:
            plain.stub.CreateSnapshot(pb.CreateSnapshotRequest(topic="no-store", partition=0, export_to_store=True),
                                      timeout=CALL_TIMEOUT_S)
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "has no object store" in caught.value.details()
        assert local_snapshots(plain) == []
    finally:
        plain.stop()


# -- the store failing ----------------------------------------------------------------------------


def test_the_store_failing_mid_export_leaves_nothing_and_the_partition_as_it_was(service, weed, proxy):
    compacted_workload(service.stub, "fail-export", seed=31)
    before = read_all(service.stub, "fail-export")
    proxy.fail_matching = ("PUT *manifest.json",)  # the segments go up, the manifest does not
    with pytest.raises(grpc.RpcError) as caught:
        service.stub.CreateSnapshot(pb.CreateSnapshotRequest(topic="fail-export", partition=0, export_to_store=True),
                                    timeout=CALL_TIMEOUT_S)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "manifest.json" in caught.value.details()
    assert local_snapshots(service) == []
    assert keys_under(weed, service.store_root + "/cleaning-snapshots/") == []  # its segments removed
    assert read_all(service.stub, "fail-export") == before
    with Admin(service.address) as admin:
        [listed] = admin.list_cleanable("fail-export")
    assert listed.open_snapshot_ids == ()


def test_the_store_failing_mid_commit_installs_nothing_and_a_retry_commits(service, weed, proxy):
    snapshot, _, _ = exported_and_cleaned(service, weed, "fail-commit", seed=32)
    before = read_all(service.stub, "fail-commit")
    proxy.fail_matching = ("GET *cleaned/",)  # result.json is read, the cleaned segments are not
    error = commit_refused(service, snapshot.snapshot_id)
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert read_all(service.stub, "fail-commit") == before
    snapshot_dir = service.data_dirs[0] / ".seglog-snapshots" / snapshot.snapshot_id
    assert not (snapshot_dir / "cleaned").exists() and not (snapshot_dir / "result.json").exists()
    proxy.fail_matching = ()
    service.stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=snapshot.snapshot_id), timeout=CALL_TIMEOUT_S)
    manifest = json.loads(snapshot.manifest_json)
    check_invariant(before, read_all(service.stub, "fail-commit"), manifest["first_uncleanable_offset"])


def test_a_cleaner_run_with_the_store_refusing_writes_fails_cleanly(service, weed, proxy):
    compacted_workload(service.stub, "fail-run", seed=33)
    before = read_all(service.stub, "fail-run")
    proxy.fail_matching = ("PUT ",)
    finished = run_cleaner(service, weed, "--topic", "fail-run", "--engine", "python")
    assert finished.returncode == 1, finished.stdout + finished.stderr
    assert "0 cleaned, 0 refused, 1 failed" in finished.stdout
    assert "not snapshotted" in finished.stderr and "ServiceUnavailableError" in finished.stderr
    assert read_all(service.stub, "fail-run") == before
    assert local_snapshots(service) == []


def test_the_store_stopped_before_a_commit_answers_unavailable_and_installs_nothing(service, weed, proxy):
    """The store gone from the service's view (its endpoint refuses connections): UNAVAILABLE
    naming the store, the partition as it was, the snapshot still open for a later commit."""
    snapshot, _, _ = exported_and_cleaned(service, weed, "store-stopped", seed=34)
    before = read_all(service.stub, "store-stopped")
    proxy.close()
    error = commit_refused(service, snapshot.snapshot_id)
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert proxy.endpoint.removeprefix("http://") in error.details()
    assert read_all(service.stub, "store-stopped") == before
    with Admin(service.address) as admin:
        [listed] = admin.list_cleanable("store-stopped")
    assert listed.open_snapshot_ids == (snapshot.snapshot_id,)


def test_a_service_killed_while_fetching_a_result_commits_it_after_a_restart(service, weed, proxy):
    """kill -9 while CommitCleaned downloads a cleaned segment (a partial file in the snapshot's
    cleaned/): nothing was installed, the restarted service still has the snapshot, and a commit
    then fetches afresh and installs."""
    snapshot, _, _ = exported_and_cleaned(service, weed, "killed-commit", seed=35)
    before = read_all(service.stub, "killed-commit")
    proxy.stall_matching = ("GET *cleaned/",)
    with pytest.raises(grpc.RpcError) as caught:
        service.stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=snapshot.snapshot_id), timeout=3)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert proxy.stalled.wait(30)
    service.signal(signal.SIGKILL)
    service.wait()
    snapshot_dir = service.data_dirs[0] / ".seglog-snapshots" / snapshot.snapshot_id
    assert any((snapshot_dir / "cleaned").iterdir())  # the partial download the kill left
    proxy.stall_matching = ()
    service.start()
    assert read_all(service.stub, "killed-commit") == before
    service.stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=snapshot.snapshot_id), timeout=CALL_TIMEOUT_S)
    manifest = json.loads(snapshot.manifest_json)
    check_invariant(before, read_all(service.stub, "killed-commit"), manifest["first_uncleanable_offset"])
    assert local_snapshots(service) == [] and keys_under(weed, snapshot.store_url) == []


def test_a_dry_run_through_the_store_reports_and_changes_nothing(service, weed):
    """--dry-run with --snapshot-store (the baseline): the job runs on a copy downloaded from
    the store and writes nothing there; the round says what it would reclaim, the snapshot is
    dropped, the partition is as it was (still dirty, nothing open)."""
    from seglog_spark import cleaner_local, object_io

    compacted_workload(service.stub, "dry-store", seed=13)
    before = read_all(service.stub, "dry-store")
    with Admin(service.address) as admin:
        [listed] = admin.list_cleanable("dry-store")
    finished = run_cleaner(service, weed, "--topic", "dry-store", "--engine", "python", "--dry-run")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    line = next(x for x in finished.stdout.splitlines() if x.startswith("cleaner round 1:"))
    assert "1 cleaned, 0 refused, 0 failed" in line and "would reclaim" in line, finished.stdout
    assert int(line.split("would reclaim ")[1].split(";")[0]) > 0, line
    assert read_all(service.stub, "dry-store") == before
    with Admin(service.address) as admin:
        [after] = admin.list_cleanable("dry-store")
        assert after.first_dirty_offset == listed.first_dirty_offset and after.open_snapshot_ids == ()
        # The job itself, on an exported snapshot: the store's keys are what the export wrote.
        snapshot = admin.create_snapshot("dry-store", 0, export_to_store=True)
        exported = sorted(keys_under(weed, snapshot.store_url))
        store = object_io.StoreSnapshot.parse(snapshot.store_url, weed.endpoint)
        result = object_io.clean_downloaded(store, cleaner_local.clean_snapshot, dry_run=True)
        assert result["dry_run"] is True and result["stats"]["records_kept"] < len(before)
        assert sorted(keys_under(weed, snapshot.store_url)) == exported
        assert "result.json" not in exported and not any(k.startswith("cleaned/") for k in exported)
        admin.drop_snapshot(snapshot.snapshot_id)


@pytest.mark.slow
@pytest.mark.timeout(600)  # a JVM and a Spark session on two shared cores
def test_a_dry_run_through_the_store_with_spark_local_mode(service, weed):
    compacted_workload(service.stub, "dry-store-spark", seed=14)
    before = read_all(service.stub, "dry-store-spark")
    finished = run_cleaner(service, weed, "--topic", "dry-store-spark", "--engine", "spark",
                           "--master", "local[2]", "--dry-run")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "1 cleaned, 0 refused, 0 failed" in finished.stdout and "would reclaim" in finished.stdout
    assert read_all(service.stub, "dry-store-spark") == before
    with Admin(service.address) as admin:
        [after] = admin.list_cleanable("dry-store-spark")
    assert after.open_snapshot_ids == () and after.eligible


def test_a_clusters_dry_run_through_the_store_is_refused_with_a_clear_line(service, weed):
    finished = run_cleaner(service, weed, "--engine", "spark", "--master", "spark://127.0.0.1:1", "--dry-run")
    assert finished.returncode != 0
    assert "--dry-run with --snapshot-store runs on this machine" in finished.stderr, finished.stderr


def put_snapshot(weed, local, word: str):
    """The snapshot made at ``local`` put in the store under a fresh prefix (``word`` starting it):
    its StoreSnapshot and that prefix."""
    from seglog_spark import object_io

    snapshot_id = json.load(open(local / "manifest.json"))["snapshot_id"]
    prefix = f"{word}-{uuid.uuid4().hex[:10]}/cleaning-snapshots/{snapshot_id}/"
    for name in sorted(os.listdir(local)):
        s3(weed).put_object(Bucket=BUCKET, Key=prefix + name, Body=(local / name).read_bytes())
    return object_io.StoreSnapshot.parse(f"s3://{BUCKET}/{prefix}", weed.endpoint), prefix


def scanned_spanning_snapshot(weed, tmp_path, word: str):
    """test_decide_again.SPANNING_KEYS as a snapshot in the store, planned in two shards of six
    slots' maps over one-byte ranges, each range scanned as job_store's task does: the
    StoreSnapshot, its prefix, the plan and the scans."""
    from seglog_spark import job_store, object_io
    from seglog_spark.cleaning import plan_cleaning

    from tests.support.snapshot_workloads import make_snapshot
    from tests.unit.seglog_spark.test_decide_again import SPANNING_KEYS

    local = tmp_path / "local"
    make_snapshot(str(local), SPANNING_KEYS, batch_size=2, segment_batches=2)
    store, prefix = put_snapshot(weed, local, word)
    plan = plan_cleaning(object_io.download_snapshot(store, str(tmp_path / "scratch")), map_bytes=24 * 6, shard_count=2,
                         range_bytes=1)
    scanned = [job_store._scan_task(store, plan)(byte_range) for byte_range in plan.ranges]
    return store, prefix, plan, scanned


@pytest.mark.slow
@pytest.mark.timeout(600)  # a JVM and a Spark session on two shared cores
def test_spark_through_the_store_whose_map_filled_decides_below_the_end_as_the_baseline(weed, tmp_path):
    """One shard's map fills while the other's goes on past the end the round reports: the job
    through the store decides its shards again below that end, as the baseline does (checked
    against the compaction invariant in tests/unit/seglog_spark), so k0@0 and k1@3, superseded
    only past the end, are kept."""
    from seglog_spark import cleaner_local, job_store
    from seglog_spark.session import build_session

    from tests.support.snapshot_workloads import BASE_TIME_MS, make_snapshot

    # test_cleaner_local.FULL_MAP_EXAMPLE: k1@3 (an empty value) was dropped for a tombstone k1@5.
    ops = [(b"k0", None), (b"k4", None), (b"k5", None), (b"k1", b""), (b"k0", None), (b"k1", None)]
    local = tmp_path / "local"
    make_snapshot(str(local), ops, batch_size=1, segment_batches=1, cleaning_time_ms=BASE_TIME_MS + 50)
    store, prefix = put_snapshot(weed, local, "full-map")
    options = {"map_bytes": 24 * 4, "shard_count": 2}
    expected = cleaner_local.clean_snapshot(str(local), **options)
    (tmp_path / "spark").mkdir()
    session = build_session("local[2]", app_name="seglog-store-full-map", tmp_dir=str(tmp_path / "spark"))
    try:
        result = job_store.clean_store_snapshot(session, store, range_bytes=1, **options)
    finally:
        session.stop()
    assert result["cleaned_up_to_offset"] == expected["cleaned_up_to_offset"] == 4
    assert result["replaced_segments"] == expected["replaced_segments"] == [0, 1, 2, 3]
    # The second stage fills each map in from the first's .work/ trail: the baseline's maps.
    for name in ("records_kept", "records_superseded", "bytes_written", "distinct_keys", "map_utilization", "collision_rate"):
        assert result["stats"][name] == expected["stats"][name], name
    assert (result["stats"]["records_superseded"], result["stats"]["records_kept"]) == (0, 4)
    for output in expected["output_segments"]:
        cleaned = s3(weed).get_object(Bucket=BUCKET, Key=f"{prefix}cleaned/{output['file']}")["Body"].read()
        assert cleaned == (local / "cleaned" / output["file"]).read_bytes()


def test_the_store_jobs_second_decision_refuses_a_missing_or_hostile_trail_object_by_name(weed, tmp_path):
    """job_store's stages driven as its tasks run them (no Spark): the first decision leaves
    each shard's trail as a .work/ object; that object deleted, or its rows zeroed, before the
    second decision reads it is refused with a CleanerError naming the shard and the object
    (zeroed rows were taken before: the latest record of a key below the end marked superseded)."""
    from seglog_spark import CleanerError, job_store
    from seglog_spark.cleaning import cleaning_end
    from seglog_spark.key_shard import decide_shard

    store, prefix, plan, scanned = scanned_spanning_snapshot(weed, tmp_path, "trail")
    end = cleaning_end(plan, [job_store._decide_task(store, plan, scanned)(shard) for shard in range(2)])
    assert end is not None  # shard 0's map filled: the second decision reads the trails
    second = job_store._decide_task(store, plan, scanned, end)
    name = job_store._trail_name(0)
    trail = store.get(name, size_max=10**6)
    expected = second(0)
    anew = decide_shard(0, [(r, c, job_store._get_keys_block(store, 0, r, c, b)) for r, c, b in scanned if b[1] > b[0]],
                        first_dirty_offset=plan.snapshot.first_dirty_offset, map_bytes=24 * 6, end_offset=end)
    assert expected == anew
    count = int.from_bytes(trail[40:48], "little")
    store.put(name, trail[: 56 + 32 * count] + bytes(len(trail) - 56 - 32 * count))
    with pytest.raises(CleanerError, match=f"key shard 0: {name}: "):
        second(0)
    s3(weed).delete_object(Bucket=BUCKET, Key=prefix + name)
    with pytest.raises(CleanerError, match=name):
        second(0)


def test_the_store_jobs_shard_stage_refuses_a_missing_or_hostile_keys_object_by_name(weed, tmp_path):
    """job_store's scan leaves each range's entries as a .work/ .keys object; the shard stage
    reading one deleted, cut, with an entry's offset flipped, or replaced by another range's, is
    refused with a CleanerError naming the shard, the range and the object (a flipped offset was
    taken before: the entry entered the map and superseded its key's latest record; a cut one
    raised numpy's ValueError)."""
    from seglog_spark import CleanerError, job_store
    from seglog_spark.key_scan import ENTRY, scan_range

    store, prefix, plan, scanned = scanned_spanning_snapshot(weed, tmp_path, "keys")
    decide = job_store._decide_task(store, plan, scanned)
    expected = decide(0)
    range_id, _, bounds = next(item for item in scanned if item[2][1] > 0)  # shard 0 has entries in it
    other = next(r for r, _, b in scanned if r != range_id and b[1] > 0)
    name = job_store._keys_name(range_id)
    keys = store.get(name, size_max=10**6)
    first_entry = scan_range(plan.snapshot, next(r for r in plan.ranges if r.range_id == range_id), 2).entries[0][: ENTRY.size]
    at = keys.index(first_entry) + 16  # the top byte of shard 0's first entry's offset, after its digest
    for hostile in (keys[:at] + bytes([keys[at] ^ 0x40]) + keys[at + 1 :], keys[: bounds[1] - 5],
                    store.get(job_store._keys_name(other), size_max=10**6)):
        store.put(name, hostile)
        with pytest.raises(CleanerError, match=f"key shard 0: range {range_id}: {name}: "):
            decide(0)
    s3(weed).delete_object(Bucket=BUCKET, Key=prefix + name)
    with pytest.raises(CleanerError, match=f"key shard 0: range {range_id}: {name}: "):
        decide(0)
    store.put(name, keys)
    assert decide(0) == expected
