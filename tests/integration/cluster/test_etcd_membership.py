"""Membership against a real etcd: registration under a lease, and fencing. With etcd frozen
(SIGSTOP) the instance stops acknowledging strictly before its lease could expire at etcd; when
etcd resumes, or the lease is lost, it registers again by itself."""

from __future__ import annotations

import json
import time

import pytest

from seglog_server.cluster import Capacity, ClusterConfig, ClusterKeys, EtcdGateway, Membership
from seglog_server.cluster.etcd_gateway import b64
from seglog_server.cluster.records import decode_instance

pytestmark = pytest.mark.integration
# etcd's shortest lease: keepalive every 0.4 s, fenced 1.0 s after the last renewal was sent.
TTL_S = 2
WAIT_S = 15.0


@pytest.fixture
def make_member(etcd, request):
    started = []

    def make(instance_id="i-1", cluster_name=None):
        config = ClusterConfig(etcd_endpoints=(etcd.endpoint,), advertise="127.0.0.1:50551", instance_id=instance_id,
                               data_dirs=("/data/a",), cluster_name=cluster_name or f"m-{request.node.name[:40]}",
                               lease_ttl_s=TTL_S)
        gateway = EtcdGateway(config.etcd_endpoints, timeout_s=config.keepalive_interval_s)
        member = Membership(config, gateway, lambda: Capacity(partition_count=3, bytes=4096, disk_free_bytes=1 << 30))
        started.append((member, gateway))
        return member, config

    yield make
    etcd.resume()
    for member, gateway in started:
        member.stop()
        gateway.close()


def wait_for(condition, timeout_s=WAIT_S, poll_s=0.01):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(poll_s)


def test_a_member_registers_its_record_under_a_lease(etcd, make_member):
    member, config = make_member()
    assert not member.may_acknowledge()  # nothing acknowledged before the first registration
    member.start()
    wait_for(member.may_acknowledge)
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    kv = reader.get(ClusterKeys(config.cluster_name).instance("i-1"))
    reader.close()
    assert kv is not None and kv.lease == member.statistics().lease
    assert json.loads(kv.value) == {"id": "i-1", "address": "127.0.0.1:50551", "data_dirs": ["/data/a"],
                                    "acl_digest": "",
                                    "capacity": {"partition_count": 3, "bytes": 4096, "disk_free_bytes": 1 << 30}}


def test_a_changed_record_is_written_again_under_the_same_lease_and_never_over_another(etcd):
    capacity = [Capacity(partition_count=1, bytes=0, disk_free_bytes=1, acl_digest="d1")]
    config = ClusterConfig(etcd_endpoints=(etcd.endpoint,), advertise="127.0.0.1:50551", instance_id="i-1",
                           data_dirs=("/data/a",), cluster_name="m-refresh", lease_ttl_s=TTL_S)
    gateway = EtcdGateway(config.etcd_endpoints, timeout_s=config.keepalive_interval_s)
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    member = Membership(config, gateway, lambda: capacity[0])
    key = ClusterKeys(config.cluster_name).instance("i-1")
    record = lambda: json.loads(reader.get(key).value)  # noqa: E731
    try:
        member.start()
        wait_for(member.may_acknowledge)
        assert record()["acl_digest"] == "d1"
        # A new ACL digest (SIGHUP) and new bytes: written at a check, under the same lease.
        capacity[0] = Capacity(partition_count=1, bytes=5000, disk_free_bytes=1, acl_digest="d2")
        wait_for(lambda: record()["acl_digest"] == "d2")
        assert record()["capacity"]["bytes"] == 5000
        assert reader.get(key).lease == member.statistics().lease and member.record_refresh_count() >= 1
        # Bytes alone: written too (within a lease TTL of the last write).
        capacity[0] = Capacity(partition_count=1, bytes=9000, disk_free_bytes=1, acl_digest="d2")
        wait_for(lambda: record()["capacity"]["bytes"] == 9000)
        # The key under another registration's lease: a refresh leaves it alone.
        other = reader.grant(30)
        reader.txn([], [{"request_put": {"key": b64(key), "value": b64('{"id": "other", "address": "x"}'),
                                         "lease": other}}])
        capacity[0] = Capacity(partition_count=2, bytes=9000, disk_free_bytes=1, acl_digest="d3")
        refreshed = member.record_refresh_count()
        checked = member.statistics().record_check_count
        # Two checks, each of which tried the refresh and left the key.
        wait_for(lambda: member.statistics().record_check_count >= checked + 2)
        assert record() == {"id": "other", "address": "x"}
        assert member.record_refresh_count() == refreshed
        reader.revoke(other)
    finally:
        member.stop()
        gateway.close()
        reader.close()


def test_a_frozen_etcd_fences_the_member_before_its_lease_can_expire_and_it_resumes(etcd, make_member):
    member, config = make_member()
    member.start()
    wait_for(member.may_acknowledge)
    etcd.pause()
    # The instant it is seen fenced, etcd's expiry (at least TTL after the last renewal was sent) is
    # still ahead: the takeover that expiry allows can only come after this instance stopped.
    wait_for(lambda: not member.may_acknowledge())
    seen_fenced_at = time.monotonic()
    renewed_at = member.statistics().renewed_at
    assert renewed_at is not None and seen_fenced_at < renewed_at + config.lease_ttl_s
    assert seen_fenced_at >= renewed_at + config.fence_after_s
    etcd.resume()
    wait_for(member.may_acknowledge)
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    assert reader.get(ClusterKeys(config.cluster_name).instance("i-1")) is not None
    reader.close()


def test_a_lost_lease_fences_at_once_and_the_member_registers_again(etcd, make_member):
    member, config = make_member()
    member.start()
    wait_for(member.may_acknowledge)
    first = member.statistics().lease
    other = EtcdGateway((etcd.endpoint,), timeout_s=5)
    other.revoke(first)  # as etcd does when a lease expires: the key goes with it
    wait_for(lambda: member.statistics().registration_count == 2)
    wait_for(member.may_acknowledge)
    kv = other.get(ClusterKeys(config.cluster_name).instance("i-1"))
    other.close()
    assert member.statistics().lease != first and kv is not None and kv.lease == member.statistics().lease
    # Fenced by etcd's answer (a keepalive's TTL 0 or a check finding the key gone), not a failure.
    assert member.statistics().renewal_failure_count == 0


def test_a_second_process_with_the_same_id_waits_until_the_first_is_gone(make_member):
    first, config = make_member()
    second, _ = make_member(cluster_name=config.cluster_name)
    first.start()
    wait_for(first.may_acknowledge)
    second.start()
    wait_for(lambda: second.statistics().renewal_failure_count >= 2)  # InstanceIdInUseError, twice
    assert not second.may_acknowledge() and second.statistics().registration_count == 0
    first.stop()  # revokes: the id is free
    wait_for(second.may_acknowledge)


@pytest.mark.parametrize("under_lease", [False, True], ids=["etcdctl-put", "etcdctl-put-lease"])
def test_its_own_record_written_malformed_is_written_again_by_the_instance(etcd, make_member, under_lease):
    """An operator's put over a live instance's key (malformed here) once stayed until the
    instance's figures changed: every other instance saw it not registered meanwhile. The instance
    writes it again at its next check of the record, under its lease, whether or not the put kept the lease."""
    member, config = make_member()
    member.start()
    wait_for(member.may_acknowledge)
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    key = ClusterKeys(config.cluster_name).instance("i-1")
    try:
        good = reader.get(key).value
        put = {"key": b64(key), "value": b64(b'{"address": 1}')}
        if under_lease:
            put["lease"] = member.statistics().lease
        reader.txn([], [{"request_put": put}])
        wait_for(lambda: reader.get(key).value == good)
        kv = reader.get(key)
        assert decode_instance(kv.key, kv.value).address == "127.0.0.1:50551" and kv.lease == member.statistics().lease
        assert member.may_acknowledge()
        # Deleted under its live lease: the instance registers again (fenced in between).
        registrations = member.statistics().registration_count
        reader.delete(key)
        wait_for(lambda: member.statistics().registration_count > registrations and reader.get(key) is not None)
        assert reader.get(key).lease == member.statistics().lease
    finally:
        reader.close()


def test_its_record_put_malformed_under_another_lease_is_logged_once_counted_and_left(etcd, make_member, caplog):
    """Not written over (it may be another registration's), but no longer silent: every other
    instance sees this one not registered while it stays, so it is logged once, with the way out,
    and counted. Revoking that lease deletes the key: the instance then registers again."""
    member, config = make_member()
    member.start()
    wait_for(member.may_acknowledge)
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    key = ClusterKeys(config.cluster_name).instance("i-1")
    try:
        other = reader.grant(30)
        reader.txn([], [{"request_put": {"key": b64(key), "value": b64(b'{"address": 1}'), "lease": other}}])
        wait_for(lambda: member.statistics().record_held_elsewhere_count == 1)
        checked = member.statistics().record_check_count
        # Three more checks: neither logged nor counted again.
        wait_for(lambda: member.statistics().record_check_count >= checked + 3)
        held = [r for r in caplog.records if "is held under lease" in r.getMessage()]
        assert len(held) == 1 and held[0].levelname == "ERROR"
        assert key in held[0].getMessage() and "malformed" in held[0].getMessage()
        assert f"revoke lease {other:x}" in held[0].getMessage()
        assert member.statistics().record_held_elsewhere_count == 1
        assert reader.get(key).value == b'{"address": 1}' and member.may_acknowledge()
        registrations = member.statistics().registration_count
        reader.revoke(other)
        wait_for(lambda: member.statistics().registration_count > registrations and reader.get(key) is not None)
        kv = reader.get(key)
        assert kv.lease == member.statistics().lease and decode_instance(kv.key, kv.value).address == "127.0.0.1:50551"
    finally:
        reader.close()
