"""Cluster mode's /metrics in real service processes against a real etcd (conftest.py): partitions
owned here, instances alive, partitions whose owner is gone, epoch changes, etcd round trips and
errors by operation, the time left before the fence, fencing refusals by reason, the failed lease
renewals, the checks of an instance's own record, the failed ones and the revisions of it found
held under another lease. A single process exports none of them (so no cluster alert can fire
there)."""

from __future__ import annotations

import signal
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from seglog.v1 import log_service_pb2 as pb
from seglog_server.cluster import ClusterKeys, EtcdGateway, change_owner, read_owner
from seglog_server.cluster.etcd_gateway import b64
from seglog_server.metrics import FAMILIES
from tests.integration.cluster.test_service_cluster import _cluster_args, _start, _until, services
from tests.support.integration_helpers import make_batch

pytestmark = pytest.mark.integration
__all__ = ["services"]  # the fixture, shared from test_service_cluster
CLUSTER_FAMILIES = sorted(name for name in FAMILIES if name.startswith("seglog_cluster_"))


def scrape(service) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value of every sample the service exports."""
    with urllib.request.urlopen(f"http://{service.metrics_address}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_a_single_process_exports_no_cluster_series(tmp_path, services):
    services.append(single := _start(tmp_path, "single", []))
    names = {name for name, _ in scrape(single)}
    assert "seglog_partitions" in names
    assert not [name for name in names if name.startswith("seglog_cluster_")]


@pytest.mark.slow  # two service processes, one killed: ~15 s
def test_two_instances_export_ownership_liveness_epochs_and_etcd_round_trips(tmp_path, etcd, services):
    services.append(a := _start(tmp_path, "a", _cluster_args(etcd, "metrics", "a")))
    services.append(b := _start(tmp_path, "b", _cluster_args(etcd, "metrics", "b")))
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="m", partitions=4), timeout=10)
    owned = lambda: (value(scrape(a), "seglog_cluster_owned_partitions"),  # noqa: E731
                     value(scrape(b), "seglog_cluster_owned_partitions"))
    assert _until(lambda: sum(owned()) == 4 and owned(), what="4 partitions owned") == (2, 2)
    for service in (a, b):
        samples = scrape(service)
        exported = {name for name, _ in samples}
        for family in CLUSTER_FAMILIES:  # every declared family, under its sample names
            assert exported & {family, f"{family}_total", f"{family}_count"}, family
        assert value(samples, "seglog_cluster_instances_alive") == 2
        assert value(samples, "seglog_cluster_offline_partitions") == 0
        assert value(samples, "seglog_cluster_metadata_current") == 1
        assert 0 < value(samples, "seglog_cluster_lease_remaining_seconds") <= 2.0  # fence after 2 s (4 s TTL)
        assert value(samples, "seglog_cluster_etcd_request_duration_seconds_count", operation="grant") >= 1  # registered
        assert value(samples, "seglog_cluster_etcd_request_duration_seconds_count", operation="txn") >= 1
        assert value(samples, "seglog_cluster_etcd_errors_total", operation="keepalive") == 0
        assert value(samples, "seglog_cluster_epoch_changes_total") == 0
        # Its own record checked every keepalive interval, none failed with etcd well.
        _until(lambda: value(scrape(service), "seglog_cluster_record_checks_total") >= 1, what="record checked")
        assert value(scrape(service), "seglog_cluster_record_check_failures_total") == 0

    # An ownership change made in etcd (what a move's commit writes): both caches count the new epoch.
    keys, writer = ClusterKeys("metrics"), EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        moved = next(p for p in range(4) if read_owner(writer, keys, "m", p).owner == "a")
        change_owner(writer, keys, "m", moved, "b", read_owner(writer, keys, "m", moved))
    finally:
        writer.close()
    for service in (a, b):
        _until(lambda: value(scrape(service), "seglog_cluster_epoch_changes_total") == 1, what="epoch change seen")
    assert owned() == (1, 3)

    # b killed: its lease expires, and a counts b's three partitions offline and one instance alive.
    b.signal(signal.SIGKILL)
    b.wait()
    _until(lambda: value(scrape(a), "seglog_cluster_offline_partitions") == 3, what="b's partitions offline")
    assert value(scrape(a), "seglog_cluster_instances_alive") == 1


@pytest.mark.slow  # waits out the fence deadline with etcd frozen: ~15 s
def test_a_frozen_etcd_shows_as_errors_no_time_left_and_refusals_for_the_lease(tmp_path, etcd, services):
    services.append(a := _start(tmp_path, "a", _cluster_args(etcd, "frozen-metrics", "a")))
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="f", partitions=1), timeout=10)
    produce = pb.ProduceRequest(topic="f", partition=0, records=make_batch([b"v"]))
    a.stub.Produce(produce, timeout=10)
    assert value(scrape(a), "seglog_cluster_lease_renewal_failures_total") == 0
    etcd.pause()
    try:
        def refused_for_the_lease():
            try:
                a.stub.Produce(produce, timeout=10)
            except grpc.RpcError as exc:
                return exc.code() == grpc.StatusCode.UNAVAILABLE and "fenced" in exc.details()
            return False

        _until(refused_for_the_lease, what="produce refused for the lease")
        samples = scrape(a)
        assert value(samples, "seglog_cluster_lease_remaining_seconds") == 0
        assert value(samples, "seglog_cluster_fenced_appends_refused_total", reason="lease") >= 1
        assert value(samples, "seglog_cluster_fenced_appends_refused_total", reason="moving") == 0
        assert value(samples, "seglog_cluster_etcd_errors_total", operation="keepalive") >= 1
        # The keepalive that failed is a failed renewal (registering again failing counts too).
        assert value(samples, "seglog_cluster_lease_renewal_failures_total") >= 1
        _until(lambda: value(scrape(a), "seglog_cluster_metadata_current") == 0, what="cache no longer current")
        _until(lambda: value(scrape(a), "seglog_cluster_record_check_failures_total") >= 1,
               what="a check of its own record failed")
    finally:
        etcd.resume()
    _until(lambda: value(scrape(a), "seglog_cluster_lease_remaining_seconds") > 0, what="lease renewed")
    _until(lambda: value(scrape(a), "seglog_cluster_metadata_current") == 1, what="cache current again")
    checks = value(scrape(a), "seglog_cluster_record_checks_total")
    _until(lambda: value(scrape(a), "seglog_cluster_record_checks_total") > checks, what="its record checked again")
    a.stub.Produce(produce, timeout=10)


def test_its_record_put_under_another_lease_counts_once_per_revision(tmp_path, etcd, services):
    """An operator's put of the instance's key under another lease (not written over: it may be
    another registration's) counts each revision seen once, however many checks read it."""
    services.append(a := _start(tmp_path, "a", _cluster_args(etcd, "held-metrics", "a")))
    _until(lambda: value(scrape(a), "seglog_cluster_record_checks_total") >= 1, what="record checked")
    assert value(scrape(a), "seglog_cluster_record_held_elsewhere_total") == 0
    writer, key = EtcdGateway((etcd.endpoint,), timeout_s=5), ClusterKeys("held-metrics").instance("a")
    try:
        other = writer.grant(30)
        try:
            put = {"request_put": {"key": b64(key), "value": b64(writer.get(key).value), "lease": other}}
            writer.txn([], [put])
            _until(lambda: value(scrape(a), "seglog_cluster_record_held_elsewhere_total") == 1, what="held elsewhere")
            checks = value(scrape(a), "seglog_cluster_record_checks_total")
            _until(lambda: value(scrape(a), "seglog_cluster_record_checks_total") >= checks + 2,
                   what="two more checks")
            assert value(scrape(a), "seglog_cluster_record_held_elsewhere_total") == 1  # the same revision
            writer.txn([], [put])  # a new revision under the other lease
            _until(lambda: value(scrape(a), "seglog_cluster_record_held_elsewhere_total") == 2, what="held again")
        finally:
            writer.revoke(other)  # the key goes with it (the instance registers again), failed or not
    finally:
        writer.close()
