"""A Producer's partition window follows a move whose target learns it late, in its order (real
etcd, two service processes).

The old owner a refuses the moment its own watch sees the move's commit; the target b, its watch
held here (``SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS``), refuses too, naming a, for 1.5 s. An
idempotent producer's window holds at the first refusal, routes the partition, and sends its
batches again in their order once every answer owed is in, after MoveFollower's back-off, within
the request timeout and spending no retries: at ``retries=0`` every send succeeds, and the records
land once, in order, at b (before, a send right after the move failed naming a). A producer
without idempotence keeps following once an attempt, within its retries: at ``retries=0`` some
sends fail, and those that succeed land in the order they were sent (none sent again behind a
later one). With a request timeout shorter than the lag the refusal reaches the futures.
"""

from __future__ import annotations

import time

import pytest

from seglog import Consumer, Producer
from seglog.errors import NotPartitionOwnerError, ServiceUnavailableError
from tests.integration.cluster.test_service_cluster import _metadata, _names, _until, services

__all__ = ["services"]

TOPIC = "window-moves"
BEFORE = 50  # records at a before the move
AFTER = 150  # records sent right after the move and while b lags
OWNER_WATCH_DELAY_MS = 1500
_LAGGING = {"SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS": str(OWNER_WATCH_DELAY_MS)}


def _moved_under_sends(two_instances, closing, burst=1, **producer_options):
    """BEFORE records at a, the partition moved to b (lagging), AFTER records sent right after the
    commit and on through b's lag, ``burst`` records every 5 ms. The futures in send order."""
    a, b, admin = two_instances(f"windowmoves{next(_names)}", TOPIC, b_env=_LAGGING)
    producer = closing(Producer(f"{a.address},{b.address}", linger_ms=1, retries=0, **producer_options))
    futures = [producer.send(TOPIC, f"r{i}".encode(), partition=0) for i in range(BEFORE)]
    producer.flush()
    admin.move_partition(TOPIC, 0, to="b", from_instance="a")
    for i in range(BEFORE, BEFORE + AFTER):
        futures.append(producer.send(TOPIC, f"r{i}".encode(), partition=0))
        if i % burst == 0:
            time.sleep(0.005)
    producer.flush()
    return producer, futures, a, b, admin


def _log_at(closing, b, count):
    _until(lambda: _metadata(b, TOPIC).partitions[0].owner_id == "b", what="b's view of the move")
    consumer = closing(Consumer(b.address, TOPIC, 0, start="earliest"))
    received = []
    while len(received) < count:
        received.extend(consumer.poll(timeout_ms=200))
    assert consumer.poll(timeout_ms=100) == []  # nothing more
    return [(r.offset, r.value) for r in received]


# One record a batch, in bursts: several batches of the partition in one ProduceStream message.
@pytest.mark.parametrize("burst", [1, 10], ids=["paced", "grouped"])
def test_an_idempotent_window_follows_a_lagging_move_in_order_spending_no_retries(two_instances, closing, burst):
    options = {} if burst == 1 else {"batch_size": 16}
    producer, futures, _, b, admin = _moved_under_sends(two_instances, closing, burst, **options)
    assert [f.result(timeout=0).offset for f in futures] == list(range(BEFORE + AFTER))
    assert producer.statistics().retries == 0
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "b"
    assert _log_at(closing, b, BEFORE + AFTER) == [(i, f"r{i}".encode()) for i in range(BEFORE + AFTER)]


def test_a_producer_without_idempotence_never_lands_a_batch_behind_a_later_one(two_instances, closing):
    _, futures, _, b, _ = _moved_under_sends(two_instances, closing, enable_idempotence=False)
    landed = []
    for i, future in enumerate(futures):
        try:
            landed.append((future.result(timeout=0).offset, f"r{i}".encode()))
        except (NotPartitionOwnerError, ServiceUnavailableError):
            continue  # refused by the move (b lagging, a's final catch-up): failed, not sent again
    assert [offset for offset, _ in landed] == list(range(len(landed)))  # in send order, no gap
    assert _log_at(closing, b, len(landed)) == landed  # what landed, once each, in send order


def test_the_refusal_reaches_the_futures_once_the_request_timeout_ran_out(two_instances, closing):
    a, b, admin = two_instances(f"windowmoves{next(_names)}", TOPIC, b_env=_LAGGING)
    producer = closing(Producer(f"{a.address},{b.address}", linger_ms=1, request_timeout_ms=300))
    producer.send(TOPIC, b"before", partition=0).result(timeout=10)
    admin.move_partition(TOPIC, 0, to="b", from_instance="a")
    future = producer.send(TOPIC, b"after", partition=0)
    with pytest.raises(NotPartitionOwnerError) as raised:
        future.result(timeout=10)
    assert (raised.value.owner_id, raised.value.owner_address) == ("a", a.address)  # b's stale view
