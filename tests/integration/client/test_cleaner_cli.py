"""End to end: ``seglog cleaner run --once`` against a real service, with the real cleaning job
(spark_jobs/seglog_spark): the single-process baseline in the fast run, PySpark in local mode in
the slow one. A randomized keyed workload with overwrites and tombstones; afterwards the key ->
latest value map is the same, every retained record keeps its offset and bytes, nothing past the
cleaned range changed, and Fetch and OffsetsForTimes work across the gaps."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from tests.support.integration_helpers import records_of, service_environment

from seglog import Admin, TopicPartition
from seglog.records import RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration

T0_MS = 1_760_000_000_000


def workload(stub, topic: str, seed: int, count: int = 600, keys: int = 40) -> list[tuple[int, bytes, bytes | None, int]]:
    """Batches of 1-5 records over ``keys`` keys, about one tombstone in eight."""
    rng = random.Random(seed)
    written = []
    n = 0
    while n < count:
        builder = RecordBatchBuilder()
        size = rng.randint(1, 5)
        batch = []
        for _ in range(size):
            key = b"key-%03d" % rng.randrange(keys)
            value = None if rng.random() < 0.125 else b"value-%d-" % n + b"p" * rng.randint(0, 200)
            timestamp = T0_MS + n * 7
            builder.append(value, key=key, timestamp_ms=timestamp)
            batch.append((key, value, timestamp))
            n += 1
        base = stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=builder.build()), timeout=10).base_offset
        written.extend((base + i, key, value, ts) for i, (key, value, ts) in enumerate(batch))
    return written


def read_all(stub, topic) -> list[tuple[int, bytes, bytes | None, int]]:
    out = []
    offset = stub.DescribeTopic(pb.DescribeTopicRequest(topic=topic)).partitions[0].log_start_offset
    while True:
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=offset), timeout=10)
        records = [r for r in records_of(response) if r.offset >= offset]
        if not records:
            return out
        out.extend((r.offset, r.key, r.value, r.timestamp_ms) for r in records)
        offset = response.next_offset


def first_record_from(stub, topic: str, offset: int) -> int:
    """The offset of the first record a consumer fetching from ``offset`` gets. A response may
    hold only an emptied batch (Kafka keeps the last batch of a cleaned range as a bare header,
    and a read stops at its segment's end): the consumer goes on from next_offset, and so does this."""
    position = offset
    for _ in range(10):
        response = stub.Fetch(pb.FetchRequest(topic=topic, partition=0, offset=position), timeout=10)
        found = [r.offset for r in records_of(response) if r.offset >= offset]
        if found:
            return found[0]
        assert response.next_offset > position, "a fetch must make progress"
        position = response.next_offset
    raise AssertionError(f"no record after offset {offset} within ten fetches")


def latest(records) -> dict:
    out = {}
    for _, key, value, _ in records:
        out[key] = value
    return out


def run_cleaner(service, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seglog_cli", "cleaner", "run", "--once", "--server", service.address, *args],
        capture_output=True, text=True, env=service_environment(), timeout=600,
    )


def check_cleaned(service, topic: str, written, cleaner_args: list[str]) -> None:
    stub = service.stub
    before = read_all(stub, topic)
    assert before == written
    with Admin(service.address) as admin:
        [listed] = admin.list_cleanable(topic)
    assert listed.eligible
    finished = run_cleaner(service, "--topic", topic, *cleaner_args)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "cleaner round 1: 1 cleaned, 0 refused, 0 failed" in finished.stdout, finished.stdout + finished.stderr
    after = read_all(stub, topic)
    end = listed.first_uncleanable_offset
    assert latest(after) == latest(before)
    assert set(after) <= set(before) and len(after) < len(before)
    assert [r for r in after if r[0] >= end] == [r for r in before if r[0] >= end]
    kept = [r[0] for r in after]
    for offset, _, _, timestamp in before[: end : 7]:
        following = min(o for o in kept if o >= offset)
        assert first_record_from(stub, topic, offset) == following
        with Admin(service.address) as admin:
            found = admin.offsets_for_times({TopicPartition(topic, 0): timestamp})[TopicPartition(topic, 0)]
        assert found is not None and found.offset == following
    with Admin(service.address) as admin:
        [listed] = admin.list_cleanable(topic)
    assert listed.first_dirty_offset == end and listed.open_snapshot_ids == ()
    snapshots = os.path.join(str(service.data_dirs[0]), ".seglog-snapshots")
    assert not os.path.exists(snapshots) or os.listdir(snapshots) == []


def compacted(stub, topic: str) -> None:
    stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1, configs={
        "cleanup.policy": "compact", "segment.bytes": "8192", "file.delete.delay.ms": "0"}))


def test_cleaner_run_once_with_the_python_baseline(start_service):
    service = start_service()
    compacted(service.stub, "e2e-python")
    written = workload(service.stub, "e2e-python", seed=1)
    check_cleaned(service, "e2e-python", written, ["--engine", "python"])


@pytest.mark.slow
@pytest.mark.timeout(900)  # a JVM and a Spark session on two shared cores: minutes, not seconds
def test_cleaner_run_once_with_spark_local_mode(start_service):
    service = start_service()
    compacted(service.stub, "e2e-spark")
    written = workload(service.stub, "e2e-spark", seed=2)
    check_cleaned(service, "e2e-spark", written, ["--engine", "spark", "--master", "local[2]"])


@pytest.fixture
def spark_cluster(spark_standalone):
    """The session's standalone Spark master and worker (tests/integration/conftest.py): its URL."""
    return spark_standalone.master_url


@pytest.mark.slow
@pytest.mark.timeout(900)  # a master, a worker, a driver and an executor JVM start in this test
def test_cleaner_run_once_on_a_standalone_spark_cluster(start_service, spark_cluster):
    service = start_service()
    compacted(service.stub, "e2e-cluster")
    written = workload(service.stub, "e2e-cluster", seed=3, count=300)
    check_cleaned(service, "e2e-cluster", written, ["--engine", "spark", "--master", spark_cluster])


def test_the_indexes_the_service_rebuilds_equal_the_jobs(start_service):
    """The service rebuilds a cleaned segment's indexes from its .log (bytes from outside are not
    trusted); the job's own must be the same bytes (CLEANING-CONTRACT: Kafka's index rules)."""
    from seglog_spark import cleaner_local

    service = start_service()
    compacted(service.stub, "e2e-indexes")
    workload(service.stub, "e2e-indexes", seed=4)
    with Admin(service.address) as admin:
        snapshot = admin.create_snapshot("e2e-indexes", 0, include_local_path=True)
        result = cleaner_local.clean_snapshot(snapshot.local_path)
        cleaned = os.path.join(snapshot.local_path, "cleaned")
        theirs = {name: open(os.path.join(cleaned, name), "rb").read()
                  for name in os.listdir(cleaned) if name.endswith((".index", ".timeindex", ".log"))}
        admin.commit_cleaned(snapshot.snapshot_id)
    partition_dir = os.path.join(str(service.data_dirs[0]), "e2e-indexes-0")
    assert theirs and len(theirs) == 3 * len(result["output_segments"])
    for name, data in theirs.items():
        with open(os.path.join(partition_dir, name), "rb") as file:
            assert file.read() == data, name


def test_tombstones_go_in_a_later_round_once_their_horizon_passed(start_service):
    """delete.retention.ms=0: the first cleaning keeps each tombstone and sets its batch's delete
    horizon (KIP-534); the next round, once new writes made the log dirty again, drops them."""
    service = start_service()
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="e2e-horizon", partitions=1, configs={
        "cleanup.policy": "compact", "segment.bytes": "8192", "delete.retention.ms": "0"}))
    written = workload(stub, "e2e-horizon", seed=5)
    first = run_cleaner(service, "--topic", "e2e-horizon", "--engine", "python")
    assert "1 cleaned" in first.stdout, first.stdout + first.stderr
    after_first = read_all(stub, "e2e-horizon")
    tombstoned = {key for key, value in latest(written).items() if value is None}
    assert tombstoned and tombstoned <= {key for _, key, value, _ in after_first if value is None}
    more = workload(stub, "e2e-horizon", seed=6, count=600, keys=200)  # new keys: dirty again
    second = run_cleaner(service, "--topic", "e2e-horizon", "--engine", "python")
    assert "1 cleaned" in second.stdout, second.stdout + second.stderr
    after_second = read_all(stub, "e2e-horizon")
    expected = latest(written + more)
    end = max(o for o, _, _, _ in written)
    # Tombstones of the first range are gone; every other key keeps its latest value.
    tombstones_before = [r for r in after_first if r[2] is None]
    assert tombstones_before and not [r for r in after_second if r[0] <= end and r[2] is None]
    assert not [r for r in after_second if r[0] <= end and r[2] is None and r[1] in tombstoned
                and expected[r[1]] is None]
    assert {k: v for k, v in latest(after_second).items() if v is not None} == {
        k: v for k, v in expected.items() if v is not None}
