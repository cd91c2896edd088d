"""Describing and cleaning a compacted topic spread over two instances, bootstrapped at one: a real
etcd (conftest.py), two real service processes, the real cleaning job (the single-process engine).

``Admin.describe_topic`` (and ``seglog topic describe``) through a shows b's partition with b's
offsets, not -1; ListCleanable at an instance lists only the partitions it owns; ``seglog cleaner
run --server a`` cleans both partitions, each at its owner (CreateSnapshot at the owner,
CommitCleaned and DropSnapshot where the snapshot was taken). Before, the cleaner saw only a's
list: a's empty copy of b's partition, never b's data."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from seglog import Admin
from seglog.records import RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _cluster_args, _metadata, _names, _start, _until, services
from tests.support.integration_helpers import records_of, service_environment

__all__ = ["services"]
TOPIC = "compacted"


def _keyed_workload(service, partition: int, seed: int, count: int = 300, keys: int = 20) -> None:
    rng = random.Random(seed)
    for start in range(0, count, 5):
        builder = RecordBatchBuilder()
        for n in range(start, start + 5):
            value = None if rng.random() < 0.125 else b"v-%d-" % n + b"p" * rng.randint(0, 200)
            builder.append(value, key=b"k-%02d" % rng.randrange(keys), timestamp_ms=1_760_000_000_000 + n)
        service.stub.Produce(pb.ProduceRequest(topic=TOPIC, partition=partition, records=builder.build()), timeout=10)


def _read_all(service, partition: int) -> list[tuple[int, bytes, bytes | None]]:
    out: list[tuple[int, bytes, bytes | None]] = []
    offset = 0
    while True:
        response = service.stub.Fetch(pb.FetchRequest(topic=TOPIC, partition=partition, offset=offset), timeout=10)
        records = [r for r in records_of(response) if r.offset >= offset]
        if response.next_offset <= offset:
            return out
        out.extend((r.offset, r.key, r.value) for r in records)
        offset = response.next_offset


def _latest(records) -> dict:
    return {key: value for _, key, value in records}


@pytest.mark.slow  # two service processes and two CLI runs: ~15 s
def test_describe_and_the_cleaner_bootstrapped_at_one_instance_reach_every_owner(tmp_path, etcd, services):
    cluster = f"cleaning{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")
    a.stub.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=2, configs={
        "cleanup.policy": "compact", "segment.bytes": "8192", "file.delete.delay.ms": "0"}), timeout=10)
    assert {p.partition: p.owner_id for p in _metadata(a, TOPIC).partitions} == {0: "a", 1: "b"}
    _until(lambda: _holds(b, TOPIC), what="b holding the topic")
    owners = {0: a, 1: b}
    for partition, owner in owners.items():
        _keyed_workload(owner, partition, seed=partition)
    before = {partition: _read_all(owner, partition) for partition, owner in owners.items()}

    # Described through a: b's partition carries b's own figures.
    with Admin(a.address) as admin:
        described = {p.partition: p for p in admin.describe_topic(TOPIC).partitions}
    b_own = b.stub.DescribeTopic(pb.DescribeTopicRequest(topic=TOPIC), timeout=10).partitions[1]
    assert described[1].log_end_offset == b_own.log_end_offset == before[1][-1][0] + 1
    assert (described[1].size_bytes, described[1].segment_count) == (b_own.size_bytes, b_own.segment_count) != (0, 0)
    assert described[0].log_end_offset == before[0][-1][0] + 1
    cli = subprocess.run([sys.executable, "-m", "seglog_cli", "topic", "describe", TOPIC, "--server", a.address,
                          "--format", "json"], capture_output=True, text=True, env=service_environment(), timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert [p["log_end_offset"] for p in json.loads(cli.stdout)["partitions"]] == \
        [before[0][-1][0] + 1, before[1][-1][0] + 1]

    # Each instance lists only what it owns (a's empty copy of partition 1 is not cleanable work).
    for partition, owner in owners.items():
        listed = owner.stub.ListCleanable(pb.ListCleanableRequest(topic=TOPIC), timeout=10).partitions
        assert [(p.partition, p.eligible) for p in listed] == [(partition, True)]

    finished = subprocess.run(
        [sys.executable, "-m", "seglog_cli", "cleaner", "run", "--once", "--server", a.address, "--topic", TOPIC,
         "--engine", "python"], capture_output=True, text=True, env=service_environment(), timeout=600)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert "cleaner round 1: 2 cleaned, 0 refused, 0 failed" in finished.stdout, finished.stdout + finished.stderr
    for partition, owner in owners.items():
        after = _read_all(owner, partition)
        assert _latest(after) == _latest(before[partition])
        assert set(after) <= set(before[partition]) and len(after) < len(before[partition])
    with Admin(f"{a.address},{b.address}") as admin:
        assert all(p.open_snapshot_ids == () and p.first_dirty_offset > 0 for p in admin.list_cleanable(TOPIC))
