"""ClusterRouting.fenced_append_error: what a produce answers when the log refused its append
because the partition's epoch moved past the one it was admitted under. The routing reads the
cluster core's cache by duck type; here a cache of fixed answers stands for it (the process test
tests/integration/cluster/test_leader_epoch_stamping.py drives the path with a real etcd)."""

from __future__ import annotations

from seglog_server.cluster.metadata_cache import InstanceInfo
from seglog_server.cluster.ownership import PartitionOwner
from seglog_server.rpc.cluster_routing import ClusterRouting, NotPartitionOwnerError, PartitionOwnerGoneError
from seglog_server.storage.base.errors import FencedLeaderEpochError


class _Cache:
    def __init__(self, owner: str | None, epoch: int, alive: bool = True) -> None:
        self._owner = None if owner is None else PartitionOwner(owner, epoch, 1)
        self._instances = {"a": InstanceInfo("a", "a:1", True), "b": InstanceInfo("b", "b:1", alive, 5)}

    def owner_of(self, topic, partition):
        return self._owner

    def instances(self):
        return self._instances


def _routing(cache) -> ClusterRouting:
    return ClusterRouting("c", "a", "a:1", membership=None, cache=cache, fence_after_s=5.0)


def _refused(admitted: int, current: int) -> FencedLeaderEpochError:
    return FencedLeaderEpochError(f"t-0: admitted under {admitted}, at {current} now",
                                  admitted_epoch=admitted, current_epoch=current)


def test_moved_to_another_live_instance_answers_its_hint():
    error = _routing(_Cache("b", 4)).fenced_append_error("t", 0, _refused(3, 4))
    assert isinstance(error, NotPartitionOwnerError)
    assert (error.owner_id, error.owner_address, error.epoch) == ("b", "b:1", 4)


def test_moved_to_a_gone_instance_answers_unavailable_with_its_hint():
    error = _routing(_Cache("b", 4, alive=False)).fenced_append_error("t", 0, _refused(3, 4))
    assert isinstance(error, PartitionOwnerGoneError) and error.owner_id == "b"


def test_this_instances_again_at_a_newer_epoch_answers_retry_here():
    error = _routing(_Cache("a", 5)).fenced_append_error("t", 0, _refused(3, 5))
    assert isinstance(error, NotPartitionOwnerError)
    assert (error.owner_id, error.owner_address, error.epoch) == ("a", "a:1", 5)
    assert "retry here" in str(error) and "admitted under 3" in str(error)


def test_an_etcd_epoch_not_above_the_refused_one_answers_the_storage_error():
    refused = _refused(1, 3)  # the log holds epoch 3, etcd says 1 (metadata rolled back)
    assert _routing(_Cache("a", 1)).fenced_append_error("t", 0, refused) is refused
    assert _routing(_Cache(None, 0)).fenced_append_error("t", 0, refused) is refused
