"""A ProduceStream message refused for another instance's partition names the owner as data, as the
unary Produce does in its trailing metadata (real etcd, two service processes).

The unary refusal carries ``seglog-owner-id``, ``seglog-owner-address`` and ``seglog-epoch``; the
stream's ``StreamError`` carries the same hint in ``owner_id``, ``owner_address`` and
``owner_epoch``, so a stream-mode producer's ``NotPartitionOwnerError`` names the owner as a unary
caller's does (before, the stream named it only in the message's text).
"""

from __future__ import annotations

import grpc
import pytest

from seglog import Producer
from seglog.errors import NotPartitionOwnerError
from seglog.v1 import log_service_pb2 as pb
from tests.integration.cluster.test_service_cluster import _names, _stream_produce, _until, services
from tests.support.integration_helpers import make_batch

__all__ = ["services"]

TOPIC = "hinted"
# The target learns the move this late: the producer's one follow meets its stale refusal.
OWNER_WATCH_DELAY_MS = 1500


def test_a_stream_refusal_carries_the_hint_the_unary_refusal_carries(two_instances):
    a, b, _ = two_instances(f"hints{next(_names)}", TOPIC)
    with pytest.raises(grpc.RpcError) as unary:
        b.stub.Produce(pb.ProduceRequest(topic=TOPIC, partition=0, records=make_batch([b"u"])), timeout=10)
    trailing = dict(unary.value.trailing_metadata())
    streamed = _stream_produce(b, TOPIC, 0)
    error = streamed.error
    assert (error.code, error.error_class) == (grpc.StatusCode.FAILED_PRECONDITION.value[0], "NotPartitionOwnerError")
    assert (error.owner_id, error.owner_address, error.owner_epoch) == ("a", a.address, 0)
    assert (trailing["seglog-owner-id"], trailing["seglog-owner-address"], int(trailing["seglog-epoch"])) == \
        (error.owner_id, error.owner_address, error.owner_epoch)
    # Several batches in one message: each refusal carries it.
    more = pb.ProduceStreamRequest(correlation_id=9, produce=pb.ProduceRequest(
        topic=TOPIC, partition=0, records=make_batch([b"m0"])))
    more.more.append(pb.ProduceRequest(topic=TOPIC, partition=0, records=make_batch([b"m1"])))
    (response,) = list(b.stub.ProduceStream(iter([more]), timeout=10))
    hints = [(e.owner_id, e.owner_address, e.owner_epoch) for e in (response.error, *(m.error for m in response.more))]
    assert hints in ([("a", a.address, 0)] * 2, [("a", a.address, 0)])  # one slot: an older pack size


def test_a_stream_mode_producer_refused_names_the_owner_as_data(two_instances, closing):
    # A move to b, which learns it late: the producer (no retries, a request timeout far shorter
    # than b's lag) follows a's refusal to b, and b's stale refusal reaches the caller naming a,
    # at a's address and epoch 0.
    a, b, admin = two_instances(f"hints{next(_names)}", TOPIC,
                                b_env={"SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS": str(OWNER_WATCH_DELAY_MS)})
    producer = closing(Producer(a.address, linger_ms=1, retries=0, request_timeout_ms=300))
    assert producer.send(TOPIC, b"before", partition=0).result(timeout=10).offset == 0
    admin.move_partition(TOPIC, 0, to="b", from_instance="a")
    future = producer.send(TOPIC, b"after", partition=0)
    with pytest.raises(NotPartitionOwnerError) as raised:
        future.result(timeout=10)
    assert producer._async._sender.streaming is True  # the refusal came on the stream
    assert (raised.value.owner_id, raised.value.owner_address, raised.value.epoch) == ("a", a.address, 0)
    _until(lambda: admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "b", what="the move")
