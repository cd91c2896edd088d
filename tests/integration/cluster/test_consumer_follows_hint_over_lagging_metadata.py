"""A Consumer follows a move straight to its target while the instance that answers its Metadata
still lags (real etcd, three service processes).

a owns the partition and b takes it; c, the consumer's bootstrap instance and so the one it asks
for Metadata, learns owner records late (``SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS``). a refuses
naming b at the move's epoch; c's Metadata still names a at the epoch before. The refusal's hint
is newer and wins: the consumer reads on at b at once, not only once c catches up (before, it went
back to a, was refused again, and with a request timeout shorter than c's lag raised
``NotPartitionOwnerError``).
"""

from __future__ import annotations

import pytest

from seglog import Consumer, Producer
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _start, _until, services

__all__ = ["services"]

TOPIC = "hinted"
RECORDS = 200
HELD = 10
# c applies owner records this late; the consumer's request timeout (its bound on following one
# move) is far shorter, so only a consumer that believes the refusal over c's answer reads on.
OWNER_WATCH_DELAY_MS = 3000
REQUEST_TIMEOUT_MS = 400


@pytest.mark.parametrize("mode", ["stream", "fetch"])
def test_a_consumer_follows_the_refusals_newer_owner_over_older_metadata(tmp_path, etcd, services, two_instances,
                                                                        closing, mode):
    cluster = f"hintwins{next(_names)}"
    a, b, admin = two_instances(cluster, TOPIC)
    c = _start(tmp_path, "c", _cluster_args(etcd, cluster, "c"),
               env={"SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS": str(OWNER_WATCH_DELAY_MS)})
    services.append(c)
    _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b", "c"},
           what="c registered")
    producer = closing(Producer(a.address, linger_ms=1))
    for i in range(RECORDS):
        producer.send(TOPIC, f"r{i}".encode(), partition=0)
    producer.flush()
    consumer = closing(Consumer(c.address, TOPIC, 0, start="earliest", max_poll_records=HELD, fetch_max_bytes=1024,
                                mode=mode, request_timeout_ms=REQUEST_TIMEOUT_MS))
    received = []
    _until(lambda: received.extend(consumer.poll(timeout_ms=200)) or len(received) >= HELD, what="the first records")
    admin.move_partition(TOPIC, 0, to="b", from_instance="a")
    # Records only b has: the consumer must reach b to read them.
    for i in range(RECORDS, 2 * RECORDS):
        producer.send(TOPIC, f"r{i}".encode(), partition=0)
    producer.flush()
    while len(received) < 2 * RECORDS:
        received.extend(consumer.poll(timeout_ms=200))  # raises nothing: b is reached at once
    assert [(r.offset, r.value) for r in received] == [(i, f"r{i}".encode()) for i in range(2 * RECORDS)]
    router = consumer._async._router
    assert router.metadata.instance_id == "c"  # the Metadata the hint won over was c's
