"""A topic's configs applied to the local copy in the order of their etcd revisions (real etcd, the
real ClusterNode, MetadataCache and LogManager; the materializer's step driven by hand).

Two paths apply a record's configs to the local copy: the AlterTopicConfigs call on its pool thread
(the configs it committed) and the materializer pass (the configs its watched cache holds). Each
keeps the record's mod revision with the configs it applied and applies only a newer one, so a pass
that read the cache before a call's change never reverts it, and a call applying late never
overwrites a newer change a pass already applied. A local apply that fails once etcd has the change
(a full disk, injected through the storage's fs seam) does not fail the call, which answers the
committed configs, and is not marked applied: the next pass applies it.
"""

from __future__ import annotations

import errno
import logging
import time

import pytest

from seglog_server import cluster_node as cluster_node_module
from seglog_server.cluster import ClusterConfig, ClusterKeys, EtcdGateway
from seglog_server.cluster.topic_configs import write_topic_configs
from seglog_server.cluster_node import ClusterNode
from seglog_server.metrics.cluster_metrics import cluster_families
from seglog_server.storage.manager.log_manager import LogManager
from tests.support.fault_fs import FaultFs
from tests.support.integration_helpers import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def node(tmp_path, etcd):
    (tmp_path / "data").mkdir()
    fs = FaultFs()
    manager = LogManager([str(tmp_path / "data")], fs=fs)
    manager.startup()
    config = ClusterConfig(etcd_endpoints=(etcd.endpoint,), advertise="127.0.0.1:1", instance_id="y",
                           data_dirs=(str(tmp_path / "data"),), cluster_name=f"cfgrev{time.monotonic_ns()}",
                           lease_ttl_s=5)
    node = ClusterNode(config, manager, calls=None)
    node._membership.start()
    node._cache.start()
    writer = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        wait_until(lambda: node._wait_ready(0.1), "y registered")
        node.create_topic("t", 1, {})
        yield node, manager, writer, fs
    finally:
        writer.close()
        node._membership.stop(True)
        node._cache.stop()
        manager.shutdown()


def _retention(manager) -> int:
    return manager.describe_topic("t").config.retention_ms


def _other_instance_sets(node, writer, retention_ms: str) -> None:
    """A change written by another instance."""
    write_topic_configs(writer, ClusterKeys(node.config.cluster_name), "t",
                        lambda configs: {**configs, "retention.ms": retention_ms})


def test_a_pass_reading_the_cache_before_a_change_does_not_revert_it(node):
    node, manager, _, _ = node
    node._follow_configs("t")  # the creation's record applied: configs {} at its revision
    node._cache.stop()  # the pass's view from before the change (its read raced the call)
    node.alter_topic_configs("t", {"retention.ms": "1000"}, [])
    assert _retention(manager) == 1000
    node._follow_configs("t")
    assert _retention(manager) == 1000  # not reverted to the older record's default
    assert not node._configs_behind("t")  # and no pass asked to apply it


def test_a_call_applying_late_does_not_overwrite_a_newer_change_a_pass_applied(node, monkeypatch):
    node, manager, writer, _ = node
    def written_then_overtaken(gateway, keys, topic, change):
        # The call's change is committed; before its thread applies it, another instance changes
        # the configs again and the materializer applies that newer record.
        committed = write_topic_configs(gateway, keys, topic, change)
        _other_instance_sets(node, writer, "2000")
        wait_until(lambda: node._cache.topic_configs("t") == {"retention.ms": "2000"},
                   "the cache showing the newer record")
        node._follow_configs("t")
        assert _retention(manager) == 2000
        return committed

    monkeypatch.setattr(cluster_node_module, "write_topic_configs", written_then_overtaken)
    node.alter_topic_configs("t", {"retention.ms": "1000"}, [])
    assert _retention(manager) == 2000
    assert not node._configs_behind("t")


DEFAULT_RETENTION_MS = 604_800_000


def _unapplied_gauge(node) -> float:
    [family] = [f for f in cluster_families(node.routing) if f.name == "seglog_cluster_topic_configs_unapplied"]
    return family.samples[0].value


def _errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and r.name.startswith("seglog_server")]


def test_a_local_apply_failing_after_etcd_committed_answers_the_change_and_the_next_pass_applies_it(node, caplog):
    node, manager, _, fs = node
    full = fs.fail("pwrite", errno.ENOSPC, path="topic.properties")
    answer = node.alter_topic_configs("t", {"retention.ms": "1000"}, [])
    assert full.hits == 1
    assert answer.retention_ms == 1000  # the committed configs: every other instance applies them
    assert _retention(manager) == DEFAULT_RETENTION_MS
    assert any("in etcd but not applied to the local copy yet" in message for message in _errors(caplog))
    assert node._configs_behind("t") and node.configs_unapplied() == ("t",)
    wait_until(lambda: node._cache.topic_configs("t") == {"retention.ms": "1000"}, "the cache showing the change")
    node._follow_configs("t")
    assert _retention(manager) == 1000
    assert not node._configs_behind("t") and node.configs_unapplied() == ()


def test_a_pass_whose_apply_fails_tries_again_at_the_next_one(node, caplog):
    node, manager, writer, fs = node
    node._follow_configs("t")
    _other_instance_sets(node, writer, "2000")
    wait_until(lambda: node._cache.topic_configs("t") == {"retention.ms": "2000"}, "the cache showing the change")
    full = fs.fail("pwrite", errno.ENOSPC, path="topic.properties", times=2)
    caplog.clear()
    node._follow_configs("t")
    node._follow_configs("t")
    assert full.hits == 2 and _retention(manager) == DEFAULT_RETENTION_MS
    assert node._configs_behind("t")  # not marked applied
    assert node.configs_unapplied() == ("t",) and _unapplied_gauge(node) == 1
    refused = [message for message in _errors(caplog) if "refused here" in message]
    assert len(refused) == 1 and "no space left" in refused[0].lower()  # logged once a record
    node._follow_configs("t")  # the disk has room again
    assert _retention(manager) == 2000
    assert not node._configs_behind("t")
    assert node.configs_unapplied() == () and _unapplied_gauge(node) == 0


def test_a_topic_applied_after_a_failure_is_not_counted_while_a_newer_record_waits(node):
    node, manager, writer, fs = node
    node._follow_configs("t")
    _other_instance_sets(node, writer, "2000")
    wait_until(lambda: node._cache.topic_configs("t") == {"retention.ms": "2000"}, "the cache showing the change")
    fs.fail("pwrite", errno.ENOSPC, path="topic.properties")
    node._follow_configs("t")  # fails once ...
    assert _unapplied_gauge(node) == 1
    node._follow_configs("t")  # ... then succeeds
    assert _retention(manager) == 2000 and _unapplied_gauge(node) == 0
    _other_instance_sets(node, writer, "3000")  # a newer record, no pass has run for it yet
    wait_until(lambda: node._cache.topic_configs("t") == {"retention.ms": "3000"}, "the cache showing the newer record")
    assert node._configs_behind("t")  # waiting for the next pass: nothing failed
    assert node.configs_unapplied() == () and _unapplied_gauge(node) == 0
    node._follow_configs("t")
    assert _retention(manager) == 3000 and _unapplied_gauge(node) == 0


def test_a_call_whose_apply_fails_counts_before_the_cache_shows_its_record(node):
    node, manager, _, fs = node
    node._follow_configs("t")  # the creation's record applied
    node._cache.stop()  # the watched cache keeps showing the creation's record
    fs.fail("pwrite", errno.ENOSPC, path="topic.properties")
    assert node.alter_topic_configs("t", {"retention.ms": "1000"}, []).retention_ms == 1000
    assert _retention(manager) == DEFAULT_RETENTION_MS
    assert not node._configs_behind("t")  # the cache does not show the change yet ...
    assert node.configs_unapplied() == ("t",) and _unapplied_gauge(node) == 1  # ... the failure counts
