"""The epoch rule with a real etcd (conftest.py) and two real service processes: the owner stamps
the partition's ownership epoch into every batch it appends (partitionLeaderEpoch, read back by
Fetch) and into its leader-epoch-checkpoint; an epoch bump by etcd's ownership transaction is
followed; after the partition moved to b the old owner acknowledges nothing and drops its copy
(the stale-copy drop, move_rpcs.py, within a second); and an owner whose log holds a newer epoch
than etcd's (cluster metadata rolled back) refuses the append in the log."""

from __future__ import annotations

import json

import grpc
import pytest

from seglog.records import iter_batches
from seglog.v1 import log_service_pb2 as pb
from seglog_server.cluster import ClusterKeys, EtcdGateway, change_owner, read_owner
from seglog_server.cluster.etcd_gateway import b64
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _cluster_args, _metadata, _names, _produce, _start, _until, services

__all__ = ["services"]

pytestmark = pytest.mark.integration

_CHECKPOINT = "leader-epoch-checkpoint"
_SEGMENT = "00000000000000000000.log"


def _epoch_seen(service, epoch: int, owner: str) -> bool:
    (partition,) = [p for p in _metadata(service, "t").partitions if p.topic == "t"]
    return (partition.owner_id, partition.epoch) == (owner, epoch)


def _size(path) -> int:
    """The file's size, -1 while it is absent (a log's segment between its drop and recreation)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


def _fetched(service) -> list[tuple[int, int]]:
    """(base offset, partitionLeaderEpoch) of every batch Fetch returns, each CRC checked."""
    response = service.stub.Fetch(pb.FetchRequest(topic="t", partition=0, offset=0, max_bytes=1 << 20), timeout=10)
    batches = list(iter_batches(response.records))
    for batch in batches:
        batch.ensure_valid()
    return [(batch.base_offset, batch.partition_leader_epoch) for batch in batches]


@pytest.mark.slow  # two service processes: ~10 s
def test_the_owner_stamps_its_epoch_and_a_stale_owner_acknowledges_nothing(tmp_path, etcd, services):
    cluster = f"epochs{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)  # placed on a (id order)
    _until(lambda: _epoch_seen(a, 0, "a"), what="t-0 on a at epoch 0")
    _until(lambda: _holds(b, "t"), what="b holding the topic")
    a_dir = a.data_dirs[0] / "t-0"
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    keys = ClusterKeys(cluster)
    try:
        _produce(a, "t", 0, b"e0")
        _produce(a, "t", 0, b"e0")
        assert (a_dir / _CHECKPOINT).read_bytes() == b"0\n1\n0 0\n"

        # An ownership change back to a (etcd's transaction, epoch + 1): a stamps the new epoch.
        change_owner(gateway, keys, "t", 0, "a", read_owner(gateway, keys, "t", 0))
        _until(lambda: _epoch_seen(a, 1, "a"), what="a at epoch 1")
        _produce(a, "t", 0, b"e1")
        assert _fetched(a) == [(0, 0), (1, 0), (2, 1)]
        assert (a_dir / _CHECKPOINT).read_bytes() == b"0\n2\n0 0\n1 2\n"

        # The partition moves to b (epoch 2): a refuses with b's hint and writes nothing more.
        change_owner(gateway, keys, "t", 0, "b", read_owner(gateway, keys, "t", 0))
        _until(lambda: _epoch_seen(a, 2, "b"), what="a seeing b at epoch 2")
        log_bytes = (a_dir / _SEGMENT).read_bytes()
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as refused:
                _produce(a, "t", 0, b"stale")
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            hint = dict(refused.value.trailing_metadata())
            assert (hint["seglog-owner-id"], hint["seglog-owner-address"], hint["seglog-epoch"]) == \
                ("b", b.address, "2")
            # Unchanged, or already emptied by the stale-copy drop (it runs each second): never appended to.
            assert (a_dir / _SEGMENT).read_bytes() in (log_bytes, b"")
        # a's copy (last stamped epoch 1) is stale once etcd gives b epoch 2: a drops it (docs/cluster.md,
        # "The source drops its copy"), so a holds none of it when the partition comes back below.
        _until(lambda: _size(a_dir / _SEGMENT) == 0, what="a's stale copy of t-0 dropped")
        _until(lambda: _epoch_seen(b, 2, "b"), what="b at epoch 2")
        assert _produce(b, "t", 0, b"on b").base_offset == 0  # b's copy starts empty (no move here)
        assert _fetched(b) == [(0, 2)]
        assert (b.data_dirs[0] / "t-0" / _CHECKPOINT).read_bytes() == b"0\n1\n2 0\n"

        # Back to a at epoch 3 (its copy dropped: it starts empty, as b's did), then etcd's record rolled
        # back to epoch 1 (a restore of an older copy of the cluster's metadata): a's log holds epoch 3
        # and refuses the append itself.
        change_owner(gateway, keys, "t", 0, "a", read_owner(gateway, keys, "t", 0))
        _until(lambda: _epoch_seen(a, 3, "a"), what="a at epoch 3")
        assert _produce(a, "t", 0, b"e3").base_offset == 0
        gateway.txn([], [{"request_put": {"key": b64(keys.owner("t", 0)),
                                          "value": b64(json.dumps({"owner": "a", "epoch": 1}))}}])
        _until(lambda: _epoch_seen(a, 1, "a"), what="a seeing the rolled-back epoch 1")
        log_bytes = (a_dir / _SEGMENT).read_bytes()
        with pytest.raises(grpc.RpcError) as fenced:
            _produce(a, "t", 0, b"under epoch 1")
        assert fenced.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert dict(fenced.value.trailing_metadata())["seglog-error"] == "FencedLeaderEpochError"
        assert "admitted under ownership epoch 1" in fenced.value.details()
        assert "at epoch 3" in fenced.value.details()
        assert (a_dir / _SEGMENT).read_bytes() == log_bytes
        assert _fetched(a) == [(0, 3)]
        assert (a_dir / _CHECKPOINT).read_bytes() == b"0\n1\n3 0\n"
        a.stub.ListTopics(pb.ListTopicsRequest(), timeout=10)  # still serving
    finally:
        gateway.close()
