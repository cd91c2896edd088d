"""An instance registered again after its lease lapsed acknowledges nothing until its view of the
cluster has caught up past that registration (real etcd, the real Membership and MetadataCache).

The lapse is a revoked lease (what etcd does to an instance paused past its TTL); while the cache's
watch is held back (a gateway that holds each batch until released: a stalled stream), another
instance takes the partition over. The membership registers again and renews; a renewed lease
alone would let the stale view acknowledge produce for a partition it no longer owns. Refused
UNAVAILABLE instead until the view includes the registration, then refused with the new owner's
hint.
"""

from __future__ import annotations

import json
import threading

import pytest

from seglog_server.cluster import (
    Capacity,
    ClusterConfig,
    ClusterKeys,
    EtcdGateway,
    Membership,
    MetadataCache,
    create_topic,
    read_owner,
)
from seglog_server.cluster.etcd_gateway import b64
from seglog_server.cluster.partition_moves import take_over
from seglog_server.rpc.cluster_routing import ClusterRouting, InstanceFencedError, NotPartitionOwnerError
from tests.support.integration_helpers import wait_until

pytestmark = pytest.mark.integration
TTL_S = 2


class _HeldWatchGateway(EtcdGateway):
    """A gateway whose watch hands on no batch while ``held`` is set (a stalled stream)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.released = threading.Event()
        self.released.set()

    def watch_prefix(self, prefix, start_revision, read_timeout_s):
        for batch in super().watch_prefix(prefix, start_revision, read_timeout_s):
            self.released.wait()
            yield batch


def test_a_member_registered_again_after_a_lapse_acknowledges_nothing_before_its_view_catches_up(etcd):
    name = "viewfence"
    keys = ClusterKeys(name)
    config = ClusterConfig(etcd_endpoints=(etcd.endpoint,), advertise="127.0.0.1:1", instance_id="a",
                           data_dirs=("/data/a",), cluster_name=name, lease_ttl_s=TTL_S)
    writer = EtcdGateway((etcd.endpoint,), timeout_s=5)
    member = Membership(config, EtcdGateway((etcd.endpoint,), timeout_s=config.keepalive_interval_s),
                        lambda: Capacity(partition_count=1, bytes=0, disk_free_bytes=1 << 30))
    watched = _HeldWatchGateway((etcd.endpoint,), timeout_s=5)
    cache = MetadataCache(watched, keys, read_timeout_s=2.0)
    routing = ClusterRouting(name, "a", "127.0.0.1:1", member, cache, config.fence_after_s)
    b_lease = writer.grant(30)
    writer.txn([], [{"request_put": {"key": b64(keys.instance("b")), "lease": b_lease,
                                     "value": b64(json.dumps({"id": "b", "address": "127.0.0.1:2"}))}}])
    create_topic(writer, keys, "t", ["a"])
    member.start()
    cache.start()
    try:
        wait_until(lambda: _admitted(routing), "a admitting produce for t-0")

        watched.released.clear()  # the view stops here
        writer.revoke(member.statistics().lease)  # as etcd expires the lease of a paused instance
        owner = read_owner(writer, keys, "t", 0)
        take_over(writer, keys, "t", 0, "b", owner, start_offset=0, ceiling_mod_revision=0)
        wait_until(lambda: member.statistics().registration_count == 2 and member.may_acknowledge(),
                   "a registered again under a new lease")
        assert cache.owner_of("t", 0).owner == "a"  # the stale view
        with pytest.raises(InstanceFencedError, match="view of the cluster is at"):
            routing.check_produce("t", 0)
        with pytest.raises(InstanceFencedError):
            routing.check_acknowledge("t", 0)

        watched.released.set()
        wait_until(lambda: cache.statistics().revision >= member.registration_revision(), "the view catching up")
        with pytest.raises(NotPartitionOwnerError) as moved:
            routing.check_produce("t", 0)
        assert (moved.value.owner_id, moved.value.epoch) == ("b", 1)
    finally:
        watched.released.set()
        member.stop()
        cache.stop()
        writer.revoke(b_lease)
        writer.close()


def _admitted(routing: ClusterRouting) -> bool:
    try:
        return routing.check_produce("t", 0) == 0
    except InstanceFencedError:
        return False
