"""What an instance's registration in etcd carries beyond its address, in real service processes
against a real etcd (conftest.py): the bytes of the partitions it owns (placement's tie-break; they
were always 0, so equal partition counts fell to the instance id) and a digest of its ACL rules
(each instance keeps its own --acl file; one whose rules differ is reported by every other: a log
line and seglog_cluster_acl_mismatched_instances), both written again as they change."""

from __future__ import annotations

import json
import signal

import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import moves_pb2 as mpb
from seglog.v1 import moves_pb2_grpc as mpb_grpc
from seglog_server.cluster import ClusterKeys, EtcdGateway
from seglog_server.security.acl import parse_acl
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_cluster_metrics import scrape, value
from tests.integration.cluster.test_service_cluster import _cluster_args, _metadata, _names, _produce, _start, _until, services
from tests.support.integration_helpers import make_batch

pytestmark = pytest.mark.integration
__all__ = ["services"]  # the fixture, shared from test_service_cluster

ACL = """
[[allow]]
principals = ["*"]
operations = ["admin", "read", "write"]
topics = ["*"]

[[allow]]
principals = ["bob"]
operations = ["describe"]
topics = ["audit.*"]
"""
# The same rules, laid out otherwise: rule order, order within a rule, comments.
ACL_REORDERED = """
# audit readers
[[allow]]
topics = ["audit.*"]
operations = ["describe"]
principals = ["bob"]

[[allow]]
principals = ["*"]
operations = ["write", "read", "admin"]
topics = ["*"]
"""
ACL_WIDER = ACL + """
[[allow]]
principals = ["carol"]
operations = ["read"]
topics = ["audit.*"]
"""


def _registration(etcd, cluster: str, instance_id: str) -> dict:
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        kv = gateway.get(ClusterKeys(cluster).instance(instance_id))
    finally:
        gateway.close()
    return {} if kv is None else json.loads(kv.value)


def _loads_seen_by(service) -> dict[str, tuple[bool, int, int]]:
    """Each instance's (alive, partition count, bytes) in ``service``'s watched cache: what its
    placement reads (DescribeCluster answers from the same cache)."""
    described = mpb_grpc.PartitionMoveServiceStub(service.channel).DescribeCluster(mpb.DescribeClusterRequest(),
                                                                                   timeout=10)
    return {i.instance_id: (i.alive, i.partition_count, i.bytes) for i in described.instances}


def _mismatched(service) -> float:
    return value(scrape(service), "seglog_cluster_acl_mismatched_instances")


def test_the_acl_digest_ignores_layout_and_changes_with_the_rules():
    assert parse_acl(ACL).digest() == parse_acl(ACL_REORDERED).digest()
    assert parse_acl(ACL).digest() != parse_acl(ACL_WIDER).digest()
    assert parse_acl("").digest() != parse_acl(ACL).digest()


@pytest.mark.slow  # two service processes, SIGHUP twice: ~10 s
def test_an_instance_whose_acl_differs_is_reported_by_every_other_until_the_files_agree(tmp_path, etcd, services):
    cluster = f"acl{next(_names)}"
    for name, text in (("a", ACL), ("b", ACL_REORDERED)):
        (tmp_path / f"{name}.toml").write_text(text)
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a") + ["--acl", str(tmp_path / "a.toml")])
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b") + ["--acl", str(tmp_path / "b.toml")])
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")
    digest = parse_acl(ACL).digest()
    assert _registration(etcd, cluster, "a")["acl_digest"] == _registration(etcd, cluster, "b")["acl_digest"] == digest
    assert (_mismatched(a), _mismatched(b)) == (0, 0)

    # b's file gains a rule and b reloads it (SIGHUP): its registration says so at its next renewal,
    # and both sides report the other.
    (tmp_path / "b.toml").write_text(ACL_WIDER)
    b.signal(signal.SIGHUP)
    _until(lambda: _registration(etcd, cluster, "b").get("acl_digest") == parse_acl(ACL_WIDER).digest(),
           what="b's new digest in etcd")
    _until(lambda: (_mismatched(a), _mismatched(b)) == (1, 1), what="the mismatch reported")
    _until(lambda: "ACL differs from this instance's on b" in a.log(), what="a's warning")
    assert "ACL differs from this instance's on a" in b.log()

    # A file that does not parse is refused by the reload: the rules in force, and the digest, stay.
    (tmp_path / "b.toml").write_text("[[allow]]\nprincipals = 3\n")
    b.signal(signal.SIGHUP)
    _until(lambda: "security files not reloaded" in b.log(), what="b refusing the bad file")
    assert _registration(etcd, cluster, "b")["acl_digest"] == parse_acl(ACL_WIDER).digest()

    # The files agree again: nothing is reported.
    (tmp_path / "b.toml").write_text(ACL)
    b.signal(signal.SIGHUP)
    _until(lambda: (_mismatched(a), _mismatched(b)) == (0, 0), what="the mismatch gone")
    _until(lambda: "ACL: every live instance has the same rules as this one" in a.log(), what="a's all-clear")


@pytest.mark.slow  # two service processes, a bytes refresh after one lease TTL: ~10 s
def test_placement_breaks_a_partition_count_tie_on_the_bytes_each_instance_registers(tmp_path, etcd, services):
    cluster = f"bytes{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=2), timeout=10)
    owners = {p.partition: p.owner_id for p in _metadata(a, "t").partitions}
    assert owners == {0: "a", 1: "b"}  # one each; equal bytes (none) fell to the id
    batch = make_batch([b"x" * 1000] * 50)
    for _ in range(10):
        a.stub.Produce(pb.ProduceRequest(topic="t", partition=0, records=batch), timeout=10)
    _until(lambda: _holds(b, "t"), what="b holding the topic")
    _produce(b, "t", 1)
    size_a = a.stub.DescribeTopic(pb.DescribeTopicRequest(topic="t"), timeout=10).partitions[0].size_bytes
    # Written again within a lease TTL of the last write (bytes alone are not urgent).
    _until(lambda: _registration(etcd, cluster, "a")["capacity"]["bytes"] == size_a, what="a's bytes in etcd")
    bytes_b = _registration(etcd, cluster, "b")["capacity"]["bytes"]
    assert 0 <= bytes_b < size_a
    # b places from its watched cache, which learns a's new bytes a watch event after etcd holds them.
    seen = _until(lambda: (loads := _loads_seen_by(b)).get("a") == (True, 1, size_a) and loads,
                  what="a's bytes in b's cache")
    assert seen["b"][:2] == (True, 1) and 0 <= seen["b"][2] < size_a
    # Equal partition counts (1 each): the new partition goes to b, which holds fewer bytes, not to
    # a by its id.
    b.stub.CreateTopic(pb.CreateTopicRequest(topic="n", partitions=1), timeout=10)
    assert [p.owner_id for p in _metadata(b, "n").partitions] == ["b"]
