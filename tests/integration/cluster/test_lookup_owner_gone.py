"""A time lookup whose routed owner is gone while the cluster still names it: the client refreshes
its metadata, finds the partition still there, and fails the call with the owner's unavailability
(ServiceUnavailableError), as a Fetch or a Produce does. A real etcd (conftest.py) and two real
service processes; the topic's partition 1 on b, asked through a client bootstrapped at a, b
killed (its lease not yet run out: the cluster still names it).

Before, the lookup left those targets unanswered and failed an internal assertion ("every target
answered or refused"): an AssertionError instead of the error a caller can retry on."""

from __future__ import annotations

import signal

import pytest

from seglog import Admin, TopicPartition
from seglog.errors import ServiceUnavailableError
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _cluster_args, _names, _produce, _start, _until, services

__all__ = ["services"]


@pytest.mark.slow  # two service processes: ~10 s
def test_a_lookup_at_a_gone_owner_the_cluster_still_names_fails_unavailable(tmp_path, etcd, services):
    cluster = f"lookupgone{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    with Admin(a.address) as admin:
        _until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b"}, what="a sees b")
        admin.create_topic("t", partitions=2)
        _until(lambda: _holds(b, "t"), what="b holding the topic")
        _produce(b, "t", 1)
        on_a, on_b = TopicPartition("t", 0), TopicPartition("t", 1)
        # Both partitions asked of a: b's target refused with b's hint, followed, answered by b.
        assert admin.latest_offsets("t") == {0: 0, 1: 1}
        # Killed: its registration stays in etcd until its lease runs out (LEASE_TTL_MS, 4 s), and
        # meanwhile every instance's metadata still names b at its address.
        b.signal(signal.SIGKILL)
        assert b.wait() == -signal.SIGKILL
        # b's partition alone (every target on one channel: b's, which no longer answers).
        with pytest.raises(ServiceUnavailableError):
            admin.latest_offsets("t", [1])
        with pytest.raises(ServiceUnavailableError):
            admin.offsets_for_times_many([(on_b, 0), (on_b, 1)])
        # a's and b's together (split by owner): a's answered, b's unavailable, the call fails.
        with pytest.raises(ServiceUnavailableError):
            admin.offsets_for_times_many([(on_a, 0), (on_b, 0)])
        # The same in the packed form (eight targets or more a call, sixteen a partition).
        with pytest.raises(ServiceUnavailableError):
            admin.offsets_for_times_many([(on_b, t) for t in range(8)])
        with pytest.raises(ServiceUnavailableError):
            admin.offsets_for_times_many([(on_a, 0), (on_b, 0)] * 16)
        assert admin._async._router.packed_lookups
        assert admin.latest_offsets("t", [0]) == {0: 0}  # the client goes on
