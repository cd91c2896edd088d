"""A single lookup (AsyncAdmin.offsets_for_times of one partition, its stream message reused
from lookup to lookup) follows its partition's owner: a real etcd (conftest.py), two real
service processes, an Admin bootstrapped with a. A partition on b is asked of a once, refused
with b's hint and asked at b (one redirect), then straight at b; after the partition moves to a,
b's refusal sends it back to a; a target's own error is raised at either owner, the lookups
after it answered. Each instance answers a single target (its own partition's, another's with
the owner's hint, an unknown one's) as it answers the target asked twice."""

from __future__ import annotations

import pytest

from seglog import Admin, TopicPartition
from seglog.errors import InvalidRequestError
from seglog.structs import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from seglog.v1 import log_service_pb2 as pb
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _produce, _start, _until, services

__all__ = ["services"]

RECORDS = 5


@pytest.mark.slow  # two service processes and a move: ~15 s
def test_a_single_lookup_follows_its_owner_across_a_move(tmp_path, etcd, services):
    cluster = f"single{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    tp = TopicPartition("t", 1)
    with Admin(a.address) as admin:
        _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b"}, what="a sees b")
        admin.create_topic("t", partitions=2)
        assert admin.metadata(["t"]).owner_of("t", 1).owner_id == "b"
        _until(lambda: _holds(b, "t"), what="b holding the topic")
        for value in range(RECORDS):
            _produce(b, "t", 1, b"%d" % value)
        router = admin._async._router
        _single_answers_as_the_general_path(a, b)

        def single(timestamp_ms: int):
            return admin.offsets_for_times({tp: timestamp_ms})[tp]

        assert single(LATEST_TIMESTAMP).offset == RECORDS
        assert router.redirects == 1  # refused by a with b's hint, asked at b
        for _ in range(10):
            assert (single(0).offset, single(EARLIEST_TIMESTAMP).offset, single(LATEST_TIMESTAMP).offset) == \
                (0, 0, RECORDS)
        with pytest.raises(InvalidRequestError, match="t-1: .*-7"):
            single(-7)
        assert router.redirects == 1  # straight at b since

        moved = admin.move_partition("t", 1, to="a", from_instance="b")
        assert (moved.from_instance, moved.to_instance) == ("b", "a")
        assert single(LATEST_TIMESTAMP).offset == RECORDS  # b refuses with a's hint: asked at a
        assert router.redirects == 2
        for _ in range(10):
            assert (single(0).offset, single(LATEST_TIMESTAMP).offset) == (0, RECORDS)
        with pytest.raises(InvalidRequestError, match="t-1: .*-7"):
            single(-7)
        assert single(0).offset == 0
        assert router.redirects == 2
        _single_answers_as_the_general_path(a, b)


def _single_answers_as_the_general_path(*instances) -> None:
    """Each instance answers a request of one target (its owner's fast path, or the refusal with
    the owner's hint) byte for byte as a request of the target twice answers it."""
    for instance in instances:
        for partition in (0, 1, 2):
            for timestamp_ms in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, -3, -7, 0, 2**62):
                target = pb.PartitionTimestamp(topic="t", partition=partition, timestamp_ms=timestamp_ms)
                one = instance.stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target]), timeout=10)
                both = instance.stub.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target, target]),
                                                     timeout=10)
                assert one.results[0].SerializeToString(deterministic=True) == \
                    both.results[0].SerializeToString(deterministic=True), (partition, timestamp_ms)
