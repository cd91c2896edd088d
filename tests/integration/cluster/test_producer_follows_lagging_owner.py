"""An idempotent Producer follows a move whose target learns it late (real etcd, two service processes).

The old owner refuses the moment its own watch sees the move's commit; the target, its watch
held here (``SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS``), refuses too, naming the old owner, for
longer than a batch's retries (5 x 100 ms) last. Those refusals are followed within the request
timeout (``_routing.MoveFollower``), not counted as retries: every send succeeds, and the records
land once, in order, at the target. With a request timeout shorter than the lag, the refusal
reaches the records' futures, naming the old owner (the target's stale view).
"""

from __future__ import annotations

import time

import pytest
from seglog import Admin, Consumer, Producer
from seglog.errors import NotPartitionOwnerError

from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_consumer_follows_lagging_owner import _start
from tests.integration.cluster.test_service_cluster import (
    _cluster_args,
    _names,
    _until,
    services,
)

__all__ = ["services"]

TOPIC = "lagging-producer"
BEFORE = 50  # records at a before the move
AFTER = 200  # records sent right after the move and while the target lags
OWNER_WATCH_DELAY_MS = 1500


def _two_instances(tmp_path, etcd, services, closing):
    """Instances a and b (b applying owner records late), TOPIC created at a and known to b."""
    cluster = f"laggingp{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"),
               env={"SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS": str(OWNER_WATCH_DELAY_MS)})
    services.append(b)
    admin = closing(Admin(f"{a.address},{b.address}"))
    _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b"}, what="a sees b")
    admin.create_topic(TOPIC, partitions=1)
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "a"
    _until(lambda: _holds(b, TOPIC), what="b holding the topic")
    return a, b, admin


def test_an_idempotent_producer_follows_a_move_the_target_learns_late(tmp_path, etcd, services, closing):
    a, b, admin = _two_instances(tmp_path, etcd, services, closing)
    producer = closing(Producer(f"{a.address},{b.address}", linger_ms=1))  # idempotent, default retries
    futures = [producer.send(TOPIC, f"r{i}".encode(), partition=0) for i in range(BEFORE)]
    producer.flush()
    admin.move_partition(TOPIC, 0, to="b", from_instance="a")
    # Right after the commit, and on through the target's lag: a record every 10 ms.
    for i in range(BEFORE, BEFORE + AFTER):
        futures.append(producer.send(TOPIC, f"r{i}".encode(), partition=0))
        time.sleep(0.01)
    producer.flush()
    assert [f.result(timeout=0).offset for f in futures] == list(range(BEFORE + AFTER))
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "b"
    consumer = closing(Consumer(b.address, TOPIC, 0, start="earliest"))
    received = []
    while len(received) < BEFORE + AFTER:
        received.extend(consumer.poll(timeout_ms=200))
    assert [(r.offset, r.value) for r in received] == [(i, f"r{i}".encode()) for i in range(BEFORE + AFTER)]
    assert consumer.poll(timeout_ms=100) == []  # once each


def test_the_refusal_reaches_the_futures_once_the_request_timeout_ran_out(tmp_path, etcd, services, closing):
    a, b, admin = _two_instances(tmp_path, etcd, services, closing)
    producer = closing(Producer(f"{a.address},{b.address}", linger_ms=1, request_timeout_ms=300))
    producer.send(TOPIC, b"before", partition=0).result(timeout=10)
    admin.move_partition(TOPIC, 0, to="b", from_instance="a")
    future = producer.send(TOPIC, b"after", partition=0)
    with pytest.raises(NotPartitionOwnerError) as raised:
        future.result(timeout=10)
    # b's stale view (a ProduceStream refusal names the owner in its message alone: no hint fields)
    assert f"owned by instance 'a' at {a.address}" in str(raised.value)
    assert producer.statistics().retries == 0  # followed within the bound, not retried past it
