"""A stream-mode Consumer follows a move whose target learns it late (real etcd, two service processes).

The old owner refuses the moment its own watch sees the move's commit; nothing waits for the
target's. A client that reaches the target first is refused there naming the old owner, which
names the target again: the consumer keeps following, with a short back-off between tries, until
the target's view catches up. Here the target's watch applies owner records late on purpose
(``SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS``, cluster/metadata_cache.py), so that refusal is met on
every run; poll() raises nothing and every record comes once, in order.
"""

from __future__ import annotations

import pytest

from seglog import Consumer, Producer
from seglog.errors import NotPartitionOwnerError
from tests.integration.cluster.test_service_cluster import _names, _start, _until, services

__all__ = ["_start", "services"]  # _start: test_producer_follows_lagging_owner.py starts its instances with it

TOPIC = "lagging"
RECORDS = 300
HELD = 10  # the consumer's buffer bound: its stream is held far from the tail when the move commits
# The target applies the move's owner record this late: well past the first reopen, well inside
# the consumer's bound on following one move.
OWNER_WATCH_DELAY_MS = 1500


def _moved_while_reading(two_instances, closing, **consumer_options):
    """Two instances, the target b learning owner records late; RECORDS produced at a; a consumer
    that read the first of them; the partition moved to b. The consumer and the admin."""
    a, b, admin = two_instances(f"lagging{next(_names)}", TOPIC,
                                b_env={"SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS": str(OWNER_WATCH_DELAY_MS)})
    producer = closing(Producer(a.address, linger_ms=1))
    for i in range(RECORDS):
        producer.send(TOPIC, f"r{i}".encode(), partition=0)
    producer.flush()
    # Small responses and a small buffer: the reader is far from the tail when the move commits.
    consumer = closing(Consumer(f"{a.address},{b.address}", TOPIC, 0, start="earliest", max_poll_records=HELD,
                                fetch_max_bytes=1024, **consumer_options))
    received = []
    _until(lambda: received.extend(consumer.poll(timeout_ms=200)) or len(received) >= HELD, what="the first records")
    admin.move_partition(TOPIC, 0, to="b", from_instance="a")
    return consumer, admin, received, a


@pytest.mark.parametrize("mode", ["stream", "fetch"])
def test_a_consumer_follows_a_move_the_target_learns_late(two_instances, closing, mode):
    consumer, admin, received, _ = _moved_while_reading(two_instances, closing, mode=mode)
    while len(received) < RECORDS:
        received.extend(consumer.poll(timeout_ms=200))  # raises nothing: the move is followed
    assert [(r.offset, r.value) for r in received] == [(i, f"r{i}".encode()) for i in range(RECORDS)]
    assert consumer.poll(timeout_ms=100) == []
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "b"


def test_the_refusal_is_raised_once_the_bound_runs_out(two_instances, closing):
    # The bound is the request timeout: far shorter here than the target's lag.
    consumer, _, received, a = _moved_while_reading(two_instances, closing, mode="stream",
                                                    request_timeout_ms=300)
    with pytest.raises(NotPartitionOwnerError) as raised:
        while True:
            received.extend(consumer.poll(timeout_ms=200))
    assert (raised.value.owner_id, raised.value.owner_address) == ("a", a.address)  # b's stale view
    assert [r.offset for r in received] == list(range(len(received)))
