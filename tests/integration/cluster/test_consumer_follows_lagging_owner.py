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

from seglog import Admin, Consumer, Producer
from seglog.errors import NotPartitionOwnerError
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _until, services
from tests.support.integration_helpers import ServiceProcess

__all__ = ["services"]

TOPIC = "lagging"
RECORDS = 300
HELD = 10  # the consumer's buffer bound: its stream is held far from the tail when the move commits
# The target applies the move's owner record this late: well past the first reopen, well inside
# the consumer's bound on following one move.
OWNER_WATCH_DELAY_MS = 1500


def _start(tmp_path, name: str, args: list[str], env: dict[str, str] | None = None) -> ServiceProcess:
    data = tmp_path / name / "data"
    data.mkdir(parents=True)
    return ServiceProcess(tmp_path / name, [data], args, env=env).start()


def _moved_while_reading(tmp_path, etcd, services, closing, **consumer_options):
    """Two instances, the target b learning owner records late; RECORDS produced at a; a consumer
    that read the first of them; the partition moved to b. The consumer and the admin."""
    cluster = f"lagging{next(_names)}"
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
def test_a_consumer_follows_a_move_the_target_learns_late(tmp_path, etcd, services, closing, mode):
    consumer, admin, received, _ = _moved_while_reading(tmp_path, etcd, services, closing, mode=mode)
    while len(received) < RECORDS:
        received.extend(consumer.poll(timeout_ms=200))  # raises nothing: the move is followed
    assert [(r.offset, r.value) for r in received] == [(i, f"r{i}".encode()) for i in range(RECORDS)]
    assert consumer.poll(timeout_ms=100) == []
    assert admin.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "b"


def test_the_refusal_is_raised_once_the_bound_runs_out(tmp_path, etcd, services, closing):
    # The bound is the request timeout: far shorter here than the target's lag.
    consumer, _, received, a = _moved_while_reading(tmp_path, etcd, services, closing, mode="stream",
                                                    request_timeout_ms=300)
    with pytest.raises(NotPartitionOwnerError) as raised:
        while True:
            received.extend(consumer.poll(timeout_ms=200))
    assert (raised.value.owner_id, raised.value.owner_address) == ("a", a.address)  # b's stale view
    assert [r.offset for r in received] == list(range(len(received)))
