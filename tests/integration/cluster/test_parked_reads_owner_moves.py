"""Reads waiting on an instance when their partition moves away (real etcd, two service processes).

A Consume stream parked at the tail, a long-poll Fetch and a Consume stream between pushes (held
by flow control) on the old owner all end, once the move commits, with the owner check's refusal
(FAILED_PRECONDITION, ``NotPartitionOwnerError``, the new owner in trailing metadata) instead of
waiting on a log nothing appends to any more; a stream-mode Consumer follows the refusal to the new
owner and receives what is produced there. An empty partition's move, which leaves the old
owner's copy as it was (nothing to drop), wakes its parked stream all the same: the old owner's log
announces the new ownership epoch.
"""

from __future__ import annotations

import concurrent.futures

import grpc

from seglog import Consumer, Producer
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from tests.integration.cluster.test_service_cluster import _names, _until, services
from tests.integration.test_service_metrics import scrape, value
from tests.support.integration_helpers import error_class

__all__ = ["services"]

TOPIC = "parked"
VALUE = b"v" * 1000
BACKLOG = 2000  # records of 1 KB: far more than the flow-control windows hold
# A bound that makes a stream never woken fail instead of hang; the wake-up itself is a watch
# event away (milliseconds).
CALL_TIMEOUT_S = 15


def _refused_by_the_move(error: grpc.RpcError, owner, owner_id: str = "b") -> None:
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, (error.code(), error.details())
    assert error_class(error) == "NotPartitionOwnerError", error.details()
    hint = dict(error.trailing_metadata())
    assert (hint["seglog-owner-id"], hint["seglog-owner-address"]) == (owner_id, owner.address)


def _drain(stream) -> tuple[int, grpc.RpcError | None]:
    """Reads the stream to its end: the responses it gave, and the error it ended with."""
    count = 0
    try:
        for _ in stream:
            count += 1
    except grpc.RpcError as error:
        return count, error
    return count, None


def test_reads_waiting_on_the_old_owner_end_with_the_refusal_and_the_consumer_follows(two_instances, closing):
    a, b, admin = two_instances(f"parked{next(_names)}", TOPIC)
    producer = closing(Producer(f"{a.address},{b.address}", linger_ms=1))
    for _ in range(BACKLOG):
        producer.send(TOPIC, VALUE, partition=0)
    producer.flush()
    end = BACKLOG

    # The stream-mode consumer reads the backlog on a, then waits at its tail.
    consumer = closing(Consumer(f"{a.address},{b.address}", TOPIC, 0, start="earliest", mode="stream"))
    seen = 0
    while seen < end:
        seen += len(consumer.poll(timeout_ms=1000))
    assert consumer.poll(timeout_ms=200) == []

    # At a, on a channel of its own (no BDP probing: the windows stay at their initial size).
    channel = closing(grpc.insecure_channel(a.address, options=[("grpc.http2.bdp_probe", 0)]))
    stub = pb_grpc.LogServiceStub(channel)
    parked = stub.Consume(pb.ConsumeRequest(topic=TOPIC, partition=0, offset=end, max_wait_ms=300_000),
                          timeout=CALL_TIMEOUT_S)
    assert dict(parked.initial_metadata())["seglog-start-offset"] == str(end)  # open, at the tail
    # Between pushes: small responses from the start, one read, the rest held by flow control.
    pushing = stub.Consume(pb.ConsumeRequest(topic=TOPIC, partition=0, offset=0, max_bytes=4096),
                           timeout=CALL_TIMEOUT_S)
    next(pushing)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    parked_end = pool.submit(_drain, parked)
    long_poll = stub.Fetch.future(pb.FetchRequest(topic=TOPIC, partition=0, offset=end, max_wait_ms=300_000),
                                  timeout=CALL_TIMEOUT_S)
    # The consumer's stream, the raw one and the long poll, each parked at the tail.
    _until(lambda: value(scrape(a.metrics_address), "seglog_fetch_waiters") >= 3, what="three reads waiting")

    admin.move_partition(TOPIC, 0, to="b", from_instance="a")

    count, error = parked_end.result()
    pool.shutdown()
    assert count == 0 and error is not None
    _refused_by_the_move(error, b)
    try:
        long_poll.result()
        raise AssertionError("the long poll answered after its partition moved away")
    except grpc.RpcError as error:
        _refused_by_the_move(error, b)
    # The pushes already in the transport arrive; the next read meets the owner check.
    count, error = _drain(pushing)
    assert error is not None
    _refused_by_the_move(error, b)
    assert count < end // 4, count  # it ended between pushes, far from the tail

    # Produced at b now (the producer follows the move); the consumer follows the refusal there.
    for i in range(3):
        producer.send(TOPIC, f"after-{i}".encode(), partition=0)
    producer.flush()
    received: list = []
    _until(lambda: received.extend(consumer.poll(timeout_ms=200)) or len(received) >= 3,
           what="the records produced at b")
    assert [(r.offset, r.value) for r in received] == [(end + i, f"after-{i}".encode()) for i in range(3)]


def test_a_stream_parked_on_an_empty_partition_ends_when_it_moves_away(two_instances):
    a, b, admin = two_instances(f"parked{next(_names)}", TOPIC)
    parked = a.stub.Consume(pb.ConsumeRequest(topic=TOPIC, partition=0, offset=0), timeout=CALL_TIMEOUT_S)
    assert dict(parked.initial_metadata())["seglog-start-offset"] == "0"
    _until(lambda: value(scrape(a.metrics_address), "seglog_fetch_waiters") >= 1, what="the stream waiting")

    admin.move_partition(TOPIC, 0, to="b", from_instance="a")

    count, error = _drain(parked)
    assert count == 0 and error is not None
    _refused_by_the_move(error, b)
