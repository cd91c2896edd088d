"""The client routes each partition to its owner: a real etcd (conftest.py), two real service
processes, and a Producer, Consumer and Admin bootstrapped with the first instance only."""

from __future__ import annotations

import grpc
import pytest

from seglog import Admin, Consumer, Producer
from seglog.v1 import log_service_pb2 as pb
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _start, _until, services
from tests.support.integration_helpers import records_of

__all__ = ["services"]  # the fixture, shared with test_service_cluster.py

RECORDS_PER_PARTITION = 3


def _holds(service, topic: str) -> bool:
    """Whether the instance's cache has seen the topic (it answers NOT_FOUND until then)."""
    try:
        service.stub.DescribeTopic(pb.DescribeTopicRequest(topic=topic), timeout=10)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.NOT_FOUND, error.details()
        return False
    return True


@pytest.mark.slow  # two service processes: ~12 s
def test_a_client_bootstrapped_with_one_instance_reaches_every_partitions_owner(tmp_path, etcd, services):
    cluster = f"route{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    with Admin(a.address) as admin:
        _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b"}, what="a sees b")
        admin.create_topic("routed", partitions=4)
        metadata = admin.metadata(["routed"])
    assert metadata.cluster_mode and metadata.instance_id == "a"
    owners = {p.partition: p for p in metadata.partitions}
    assert [(owners[n].owner_id, owners[n].address, owners[n].epoch) for n in range(4)] == \
        [("a", a.address, 0), ("b", b.address, 0)] * 2
    _until(lambda: _holds(b, "routed"), what="b holding the topic")

    with Producer(a.address) as producer:
        futures = [producer.send("routed", f"{n}-{i}".encode(), partition=n)
                   for i in range(RECORDS_PER_PARTITION) for n in range(4)]
        acknowledged = [f.result(timeout=30) for f in futures]
        routing = producer._async._router.statistics()
    assert sorted((m.partition, m.offset) for m in acknowledged) == \
        [(n, i) for n in range(4) for i in range(RECORDS_PER_PARTITION)]
    # One Metadata call after the first refusal routed b's partitions; the others went straight there.
    assert routing.metadata_refreshes >= 1 and routing.owner_channels == 1

    # Every record once, in order, on its owner (asked directly, no routing).
    instances = {"a": a, "b": b}
    for n in range(4):
        owner = instances[owners[n].owner_id]
        fetched = owner.stub.Fetch(pb.FetchRequest(topic="routed", partition=n, offset=0), timeout=10)
        assert [r.value for r in records_of(fetched)] == [f"{n}-{i}".encode() for i in range(RECORDS_PER_PARTITION)]
        assert fetched.high_watermark == RECORDS_PER_PARTITION

    # A consumer bootstrapped with a reads b's partition 1, in both reading modes.
    for mode in ("fetch", "stream"):
        with Consumer(a.address, topic="routed", partition=1, start="earliest", mode=mode) as consumer:
            values = []
            while len(values) < RECORDS_PER_PARTITION:
                values += [r.value for r in consumer.poll(timeout_ms=10_000)]
        assert values == [f"1-{i}".encode() for i in range(RECORDS_PER_PARTITION)], mode
