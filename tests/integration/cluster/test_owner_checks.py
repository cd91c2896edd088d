"""Every RPC naming a partition is answered only by its owner: a real etcd (conftest.py), two real
service processes, a topic with partition 1 on b asked of a. Without the check a answered from its
empty local copy (OffsetsForTimes 0 or none, DeleteRecords moving nothing, DescribeTopic zeros)."""

from __future__ import annotations

import grpc
import pytest

from seglog import Admin, Consumer, TopicPartition
from seglog.errors import InvalidRequestError
from seglog.structs import LATEST_TIMESTAMP
from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc.operations import OPERATIONS, Owner
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _produce, _start, _until, services
from tests.support.integration_helpers import make_batch

__all__ = ["services"]

RECORDS_ON_B = 5

# One call of each Owner.EACH row, asked of the instance that does not own ("t", 1).
_EACH_CALLS = {
    "Produce": lambda stub: stub.Produce(pb.ProduceRequest(topic="t", partition=1, records=make_batch([b"x"])),
                                         timeout=10),
    "Fetch": lambda stub: stub.Fetch(pb.FetchRequest(topic="t", partition=1, offset=0), timeout=10),
    "Consume": lambda stub: next(iter(stub.Consume(pb.ConsumeRequest(topic="t", partition=1, offset=0),
                                                   timeout=10))),
    "DeleteRecords": lambda stub: stub.DeleteRecords(pb.DeleteRecordsRequest(topic="t", partition=1, offset=1),
                                                     timeout=10),
    "ExplainLookup": lambda stub: stub.ExplainLookup(pb.ExplainLookupRequest(topic="t", partition=1, offset=0),
                                                     timeout=10),
    "CreateSnapshot": lambda stub: stub.CreateSnapshot(pb.CreateSnapshotRequest(topic="t", partition=1), timeout=10),
}


@pytest.mark.slow  # two service processes: ~10 s
def test_every_partition_naming_rpc_is_answered_by_the_owner_and_the_client_follows(tmp_path, etcd, services):
    cluster = f"owners{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    with Admin(a.address) as admin:
        _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b"}, what="a sees b")
        admin.create_topic("t", partitions=2)
    _until(lambda: _holds(b, "t"), what="b holding the topic")
    for value in range(RECORDS_ON_B):
        _produce(b, "t", 1, b"%d" % value)

    # Each Owner.EACH row, asked of a: refused with b's hint (a new such row needs a call here).
    assert set(_EACH_CALLS) == {name for name, row in OPERATIONS.items() if row.owner is Owner.EACH}
    for name, call in _EACH_CALLS.items():
        with pytest.raises(grpc.RpcError) as refused:
            call(a.stub)
        error = refused.value
        assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, (name, error.details())
        hint = dict(error.trailing_metadata())
        assert (hint["seglog-owner-id"], hint["seglog-owner-address"]) == ("b", b.address), name

    # OffsetsForTimes (and LookupStream's messages): a's own target answered, b's refused per target.
    request = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=LATEST_TIMESTAMP),
        pb.PartitionTimestamp(topic="t", partition=1, timestamp_ms=LATEST_TIMESTAMP)])
    streamed = next(iter(a.stub.LookupStream(iter([pb.LookupStreamRequest(correlation_id=3, offsets_for_times=request)]),
                                             timeout=10))).offsets_for_times
    for answer in (a.stub.OffsetsForTimes(request, timeout=10), streamed):
        own, other = answer.results
        assert (own.offset, own.HasField("error")) == (0, False)
        assert (other.offset, other.error.code, other.error.error_class) == \
            (-1, grpc.StatusCode.FAILED_PRECONDITION.value[0], "NotPartitionOwnerError")
        assert (other.error.owner_id, other.error.owner_address, other.error.owner_epoch) == ("b", b.address, 0)
    # The packed form alike: each of b's targets refused with b's hint, the refused timestamp alone without.
    packed = pb.OffsetsForTimesRequest(packed=[
        pb.PartitionTimestamps(topic="t", partition=1, timestamps_ms=[LATEST_TIMESTAMP, -7, 0]),
        pb.PartitionTimestamps(topic="t", partition=0, timestamps_ms=[LATEST_TIMESTAMP])])
    other, own = a.stub.OffsetsForTimes(packed, timeout=10).packed
    assert (list(own.offsets), len(own.errors), list(other.offsets)) == ([0], 0, [-1, -1, -1])
    assert [(e.index, e.error.code, e.error.owner_id, e.error.owner_address, e.error.owner_epoch)
            for e in other.errors] == [
        (0, grpc.StatusCode.FAILED_PRECONDITION.value[0], "b", b.address, 0),
        (1, grpc.StatusCode.INVALID_ARGUMENT.value[0], "", "", 0),
        (2, grpc.StatusCode.FAILED_PRECONDITION.value[0], "b", b.address, 0)]

    # DescribeTopic on a: b's partition says so, never a's local zeros.
    described = {p.partition: p for p in a.stub.DescribeTopic(pb.DescribeTopicRequest(topic="t"), timeout=10).partitions}
    assert (described[0].owner_id, described[0].owned_elsewhere, described[0].log_end_offset) == ("a", False, 0)
    assert (described[1].owner_id, described[1].owner_address, described[1].owned_elsewhere) == ("b", b.address, True)
    assert (described[1].log_end_offset, described[1].high_watermark, described[1].size_bytes) == (-1, -1, -1)
    # Every figure of the partition (its tiered ones too, and any added later): -1, not a's copy.
    figures = {f.name for f in pb.PartitionDescription.DESCRIPTOR.fields
               if f.cpp_type in (f.CPPTYPE_INT32, f.CPPTYPE_INT64)} - {"partition", "owner_epoch"}
    assert {"local_log_start_offset", "local_segment_count", "remote_size_bytes"} <= figures
    assert {name: getattr(described[1], name) for name in figures} == dict.fromkeys(figures, -1)

    # The client bootstrapped with a answers b's real values.
    tp = TopicPartition("t", 1)
    with Admin(a.address) as admin:
        assert admin.latest_offsets("t") == {0: 0, 1: RECORDS_ON_B}
        assert admin.offsets_for_times_many([(tp, 0), (TopicPartition("t", 0), 0)])[0].offset == 0
        explained = admin.explain_lookup("t", 1, offset=RECORDS_ON_B - 1)
        assert explained.searches, explained
        assert admin.delete_records({tp: 2}) == {tp: 2}
        assert admin.earliest_offsets("t", [1]) == {1: 2}
    # A target refused for its own sake before one owned elsewhere (a client new to b): the first
    # failure is raised, after the other was asked at its owner all the same.
    with Admin(a.address) as admin:
        router = admin._async._router
        with pytest.raises(InvalidRequestError, match="t-0: .*-7"):
            admin.offsets_for_times_many([(TopicPartition("t", 0), -7)] + [(tp, 0)] * 40)
        # Asked in the packed form (sixteen targets a partition): b's entry redirected once, as one.
        assert router is not None and router.redirects == 1 and router.packed_lookups
    with Consumer(a.address, topic="t", partition=1, start="latest") as consumer:
        assert consumer.poll(timeout_ms=200) == []
        _produce(b, "t", 1, b"after")
        records = []
        while not records:
            records = consumer.poll(timeout_ms=10_000)
    assert [(r.offset, r.value) for r in records] == [(RECORDS_ON_B, b"after")]
