"""Admin calls that ask every live instance (list_cleanable, list_groups) while one instance is
paused (SIGSTOP) and still shown alive (its lease outlives the test): a real etcd (conftest.py),
two real service processes.

The paused instance is skipped and named in a warning; the others' answers come back. Before, the
first instance that did not answer failed the whole listing, so one unreachable instance stopped a
whole cleaner round until its lease expired. With every instance unreachable, the error is raised.
"""

from __future__ import annotations

import logging
import signal

import pytest

from seglog import Admin
from seglog.errors import RequestTimeoutError, ServiceUnavailableError
from seglog.v1 import log_service_pb2 as pb
from tests.integration.cluster.test_cluster_cleaning import TOPIC, _keyed_workload
from tests.integration.cluster.test_cluster_client_routing import _holds
from tests.integration.cluster.test_service_cluster import _metadata, _names, _start, _until, services

__all__ = ["services"]
# Longer than the test: the paused instance stays alive in every instance's metadata.
LEASE_TTL_MS = 60_000


def _args(etcd, cluster: str, instance_id: str) -> list[str]:
    return ["--etcd", etcd.endpoint, "--cluster-name", cluster, "--instance-id", instance_id,
            "--lease-ttl-ms", str(LEASE_TTL_MS)]


@pytest.mark.slow  # two service processes, listings waiting out a short request timeout: ~10 s
def test_listings_skip_and_name_a_paused_instance_and_return_the_others(tmp_path, etcd, services, caplog):
    cluster = f"listing{next(_names)}"
    a = _start(tmp_path, "a", _args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _args(etcd, cluster, "b"))
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")
    a.stub.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=2, configs={
        "cleanup.policy": "compact", "segment.bytes": "8192"}), timeout=10)
    owners = {p.partition: p.owner_id for p in _metadata(a, TOPIC).partitions}
    assert sorted(owners.values()) == ["a", "b"]
    _until(lambda: _holds(b, TOPIC), what="b holding the topic")
    by_id = {"a": a, "b": b}
    for partition, owner in owners.items():
        _keyed_workload(by_id[owner], partition, seed=partition)
    a_partition = next(p for p, owner in owners.items() if owner == "a")

    with Admin(a.address, request_timeout_ms=1000) as admin:
        assert len(admin.list_cleanable(TOPIC)) == 2
        b.signal(signal.SIGSTOP)
        try:
            assert {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b"}
            with caplog.at_level(logging.WARNING, logger="seglog.admin"):
                listed = admin.list_cleanable(TOPIC)
                groups = admin.list_groups()
            assert [(c.topic, c.partition) for c in listed] == [(TOPIC, a_partition)]
            assert groups == []
            warnings = [r.getMessage() for r in caplog.records if r.name == "seglog.admin"]
            assert len(warnings) == 2 and all(b.address in w for w in warnings), warnings
            assert warnings[0].startswith("ListCleanable: 1 instance(s) skipped"), warnings
        finally:
            b.signal(signal.SIGCONT)

    # Bootstrapped at the paused instance alone: nothing answers, and the error says so.
    b.signal(signal.SIGSTOP)
    try:
        with Admin(b.address, request_timeout_ms=1000) as alone:
            with pytest.raises((RequestTimeoutError, ServiceUnavailableError)):
                alone.list_cleanable(TOPIC)
    finally:
        b.signal(signal.SIGCONT)
