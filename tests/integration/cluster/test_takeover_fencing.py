"""An owner paused (SIGSTOP) past its lease while another instance takes its partition over
uncleanly, then resumed (SIGCONT): real etcd, real service processes (conftest.py).

Produce goes on throughout through one idempotent Producer: its sends in flight to the paused owner
time out, and each timeout refreshes its metadata, so it follows the partition to its new owner
once the takeover commits (before, it kept retrying at the paused owner until its retries ran
out). The paused owner's late writes (produces queued while it was stopped, and produces sent to it after
SIGCONT) are never acknowledged; the takeover starts the partition past every offset the old
owner could have acknowledged (its offset ceiling in etcd), so no (partition, offset) is ever
acknowledged twice. The takeover is refused unless asked for as unclean, and while the owner is
alive.
"""

from __future__ import annotations

import signal
import threading

import grpc
import pytest

from seglog import Admin, Producer
from seglog.errors import SeglogError
from seglog.v1 import log_service_pb2 as pb
from seglog_server.cluster.offset_ceilings import OFFSET_BLOCK
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _start, _until, services
from tests.support.integration_helpers import error_class, make_batch

__all__ = ["services"]

TOPIC = "taken"


def _late_write(service, answers: list) -> object:
    try:
        service.stub.Produce(pb.ProduceRequest(topic=TOPIC, partition=0, records=make_batch([b"late"])), timeout=60)
        answers.append("OK")
    except grpc.RpcError as error:
        answers.append((error.code(), error_class(error)))
    return answers[-1]


@pytest.mark.slow  # a lease left to expire at etcd (4 s), produce on both sides of it: ~20 s
def test_a_paused_owner_taken_over_uncleanly_acknowledges_no_late_write_and_no_offset_twice(
        tmp_path, etcd, services, closing):
    cluster = f"takeover{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    admin_b = closing(Admin(b.address))
    _until(lambda: {i.instance_id for i in admin_b.metadata().instances if i.alive} == {"a", "b"}, what="b sees a")
    admin_b.create_topic(TOPIC, partitions=1)
    assert admin_b.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "a"
    _until(lambda: _holds(a, TOPIC) and _holds(b, TOPIC), what="a and b holding the topic")

    # Refused while a is alive, and refused unless asked for as unclean.
    with pytest.raises(SeglogError) as alive:
        admin_b.take_over_partition(TOPIC, 0, unclean=True)
    assert alive.value.code == grpc.StatusCode.FAILED_PRECONDITION and "holds its lease" in str(alive.value)
    with pytest.raises(SeglogError) as not_unclean:
        admin_b.take_over_partition(TOPIC, 0)
    assert not_unclean.value.code == grpc.StatusCode.FAILED_PRECONDITION and "--unclean" in str(not_unclean.value)

    acknowledged: list[tuple[int, int]] = []

    def sent(producer: Producer, tag: str, count: int) -> list:
        return [producer.send(TOPIC, f"{tag}-{n}".encode(), partition=0) for n in range(count)]

    def acknowledge(futures: list) -> None:
        acknowledged.extend((meta.partition, meta.offset) for meta in (f.result(timeout=90) for f in futures))

    # One producer across the pause: its request timeout paces the retries at the paused owner,
    # and enough of them outlast the lease and the takeover.
    producer = closing(Producer(b.address, linger_ms=1, request_timeout_ms=1500, retries=40))
    acknowledge(sent(producer, "before", 200))  # routed to the owner a by b's hint
    late: list = []
    a.signal(signal.SIGSTOP)
    try:
        paused = sent(producer, "paused", 200)  # in flight to the stopped owner
        writers = [threading.Thread(target=_late_write, args=(a, late)) for _ in range(3)]
        for writer in writers:  # queued at the stopped owner, answered after SIGCONT
            writer.start()
        _until(lambda: any(i.instance_id == "a" and not i.alive for i in admin_b.metadata().instances),
               what="a's lease gone at etcd")
        takeover = admin_b.take_over_partition(TOPIC, 0, unclean=True)
        assert (takeover.from_instance, takeover.epoch) == ("a", 1)
        # Past every offset a was allowed to acknowledge: a new epoch's first block of offsets.
        assert takeover.start_offset == OFFSET_BLOCK
        acknowledge(paused)  # delivered at b, the producer having followed the takeover
        assert producer.statistics().retries > 0
        acknowledge(sent(producer, "taken", 200))
    finally:
        a.signal(signal.SIGCONT)
        producer.close()
    for writer in writers:
        writer.join()
    # Straight after SIGCONT, and on until a, registered again, has the takeover in its view.
    _until(lambda: _late_write(a, late) == (grpc.StatusCode.FAILED_PRECONDITION, "NotPartitionOwnerError"),
           what="a refusing with b's hint")
    # a registered again, its own view showing it (so past its registration): a client
    # bootstrapped there is refused with the hint and routed to b.
    with Admin(a.address) as admin_a:
        _until(lambda: any(i.instance_id == "a" and i.alive for i in admin_a.metadata().instances),
               what="a registered again, in its own view")
    with Producer(a.address, linger_ms=1) as fresh:  # bootstrapped at a: routed to b by a's hint
        acknowledge(sent(fresh, "after", 100))

    assert "OK" not in late, late
    assert {answer[0] for answer in late} <= {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION}, late
    assert late[-1] == (grpc.StatusCode.FAILED_PRECONDITION, "NotPartitionOwnerError"), late
    assert len(set(acknowledged)) == len(acknowledged), "an offset acknowledged twice"
    assert admin_b.metadata([TOPIC]).owner_of(TOPIC, 0).owner_id == "b"
    admin_b.close()
