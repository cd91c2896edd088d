"""CommitCleaned at an instance that no longer serves the partition its snapshot was taken of: a
real etcd (conftest.py), two real service processes, a snapshot cleaned by hand, a real move.

Moved away since the snapshot, the commit is refused FAILED_PRECONDITION with the new owner's
hint, and nothing is installed; moved back (a new ownership epoch: the copy served is the one the
move brought, not the one the snapshot was taken of) it is refused as stale, naming both epochs.
Before, the commit installed into the old owner's copy, which nobody reads.
"""

from __future__ import annotations

import grpc
import pytest

from seglog import Admin
from seglog.v1 import log_service_pb2 as pb
from tests.integration.cluster.test_cluster_cleaning import _keyed_workload, _read_all
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _cluster_args, _metadata, _names, _start, _until, services
from tests.support.cleaning_support import hand_clean
from tests.support.integration_helpers import error_class

__all__ = ["services"]
TOPIC = "compacted"  # the workload helper's topic


def _snapshot(service) -> pb.CreateSnapshotResponse:
    return service.stub.CreateSnapshot(pb.CreateSnapshotRequest(topic=TOPIC, partition=0, include_local_path=True),
                                       timeout=30)


def _commit_refused(service, snapshot_id: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        service.stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=snapshot_id), timeout=30)
    return refused.value


@pytest.mark.slow  # two service processes, two moves: ~15 s
def test_commit_cleaned_is_refused_where_the_partition_moved_away_or_changed_epoch(tmp_path, etcd, services):
    cluster = f"commitowner{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")
    a.stub.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=1, configs={
        "cleanup.policy": "compact", "segment.bytes": "8192", "file.delete.delay.ms": "0"}), timeout=10)
    by_id = {"a": a, "b": b}
    first = _metadata(a, TOPIC).partitions[0].owner_id
    other = "b" if first == "a" else "a"
    owner, elsewhere = by_id[first], by_id[other]
    _until(lambda: _holds(elsewhere, TOPIC), what="both holding the topic")
    _keyed_workload(owner, 0, seed=7)
    before = _read_all(owner, 0)

    taken = _snapshot(owner)
    hand_clean(taken.local_path)
    with Admin(f"{a.address},{b.address}") as admin:
        assert admin.move_partition(TOPIC, 0, to=other).epoch == 1
    refused = _commit_refused(owner, taken.snapshot_id)
    assert (refused.code(), error_class(refused)) == (grpc.StatusCode.FAILED_PRECONDITION, "NotPartitionOwnerError")
    assert dict(refused.trailing_metadata())["seglog-owner-id"] == other
    assert _read_all(elsewhere, 0) == before  # nothing cleaned, anywhere
    owner.stub.DropSnapshot(pb.DropSnapshotRequest(snapshot_id=taken.snapshot_id), timeout=10)

    # Taken at the new owner, then the partition moved away and back: a new epoch there.
    again = _snapshot(elsewhere)
    hand_clean(again.local_path)
    with Admin(f"{a.address},{b.address}") as admin:
        assert admin.move_partition(TOPIC, 0, to=first).epoch == 2
        assert admin.move_partition(TOPIC, 0, to=other).epoch == 3
    stale = _commit_refused(elsewhere, again.snapshot_id)
    assert (stale.code(), error_class(stale)) == (grpc.StatusCode.FAILED_PRECONDITION, "StaleCleaningResultError")
    assert "epoch 1 and is at epoch 3" in stale.details(), stale.details()
    assert _read_all(elsewhere, 0) == before

    # At the epoch it was taken at, a commit installs as always.
    fresh = _snapshot(elsewhere)
    hand_clean(fresh.local_path)
    committed = elsewhere.stub.CommitCleaned(pb.CommitCleanedRequest(snapshot_id=fresh.snapshot_id), timeout=30)
    assert committed.bytes_after < committed.bytes_before
