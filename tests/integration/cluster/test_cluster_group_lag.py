"""A group's lag in cluster mode, against a real etcd (conftest.py) and two real service
processes: the coordinator's DescribeGroup knows the log ends of the partitions its instance owns
only (-1 for the others: its copy of them is empty), and ``Admin.describe_group`` (the CLI's
``seglog groups describe``) asks each other partition's owner for its end, so every row has its
log end offset and lag."""

from __future__ import annotations

import json

import grpc
import pytest
from seglog import Admin, Producer
from seglog.v1 import log_service_pb2 as pb

from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_cluster_groups import (
    _cli,
    _group_coordinated_by,
    _two_instances,
)
from tests.integration.cluster.test_service_cluster import _until, services

__all__ = ["services"]

pytestmark = pytest.mark.integration

PARTITIONS = 4
RECORDS = {0: 3, 1: 5, 2: 2, 3: 6}
COMMITTED = {0: 1, 1: 2, 2: 2, 3: 0}


@pytest.mark.slow  # two service processes: ~10 s
def test_describe_group_shows_the_lag_of_partitions_owned_by_the_other_instance(tmp_path, etcd, services):
    a, b = _two_instances(tmp_path, etcd, services)
    with Admin(a.address) as admin:
        admin.create_topic("lagging", partitions=PARTITIONS)
    _until(lambda: _holds(b, "lagging"), what="b holding the topic")
    with Producer(a.address) as producer:  # the producer follows each partition's owner
        futures = [producer.send("lagging", b"%d" % i, partition=p) for p, count in RECORDS.items()
                   for i in range(count)]
        for future in futures:
            future.result(timeout=30)
    try:
        group, _ = _group_coordinated_by(b, "a")
    except grpc.RpcError:
        pytest.fail("b answered a group it does not coordinate")
    a.stub.CommitOffsets(pb.CommitOffsetsRequest(group=group, offsets=[
        pb.OffsetToCommit(topic="lagging", partition=p, offset=o) for p, o in COMMITTED.items()]), timeout=10)

    raw = a.stub.DescribeGroup(pb.DescribeGroupRequest(group=group), timeout=10)
    unknown = {p.partition for p in raw.partitions if p.log_end_offset == -1}
    assert unknown and unknown != set(RECORDS), "the partitions are split between a and b"
    assert all(p.lag == -1 for p in raw.partitions if p.partition in unknown)

    want = [(p, RECORDS[p], RECORDS[p] - COMMITTED[p]) for p in range(PARTITIONS)]
    with Admin(b.address) as admin:  # bootstrapped at the other instance: follows a's hint, then the owners
        described = admin.describe_group(group)
    assert [(p.partition, p.log_end_offset, p.lag) for p in described.partitions] == want
    shown = json.loads(_cli(b, "groups", "describe", group, "--format", "json"))
    assert [(p["partition"], p["log_end_offset"], p["lag"]) for p in shown["partitions"]] == want
