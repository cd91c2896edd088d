"""Which instance keeps a tiered partition's remote segments (real etcd, the real ClusterNode and
its watched view, a LogManager): the owner, and not while it is the source of a move in its final
catch-up; a copy held for another owner never. ClusterNode.start hands this check to the manager's
remote passes (test_tiered_owner_uploads.py drives the passes with it)."""

from __future__ import annotations

import json
import time

import pytest

from seglog_server.cluster import ClusterConfig, ClusterKeys, EtcdGateway, create_topic
from seglog_server.cluster.etcd_gateway import b64
from seglog_server.cluster_node import ClusterNode
from seglog_server.storage.manager.log_manager import LogManager
from tests.support.integration_helpers import wait_until

pytestmark = pytest.mark.integration


def _put(gateway, key: str, value: dict) -> None:
    gateway.txn([], [{"request_put": {"key": b64(key), "value": b64(json.dumps(value).encode())}}])


def test_only_the_owner_outside_a_final_catch_up_keeps_the_remote_segments(tmp_path, etcd):
    (tmp_path / "data").mkdir()
    manager = LogManager([str(tmp_path / "data")])
    manager.startup()
    config = ClusterConfig(etcd_endpoints=(etcd.endpoint,), advertise="127.0.0.1:1", instance_id="y",
                           data_dirs=(str(tmp_path / "data"),), cluster_name=f"owner{time.monotonic_ns()}",
                           lease_ttl_s=5)
    node = ClusterNode(config, manager, calls=None)
    node._cache.start()
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    keys = ClusterKeys(config.cluster_name)
    try:
        create_topic(gateway, keys, "t", ["y", "z"])
        wait_until(lambda: node._cache.owner_of("t", 1) is not None, "the view showing t")
        assert node.uploads_here("t", 0) and not node.uploads_here("t", 1)
        assert not node.uploads_here("unknown", 0)

        # A move record as MovePartition writes it (partition_moves: every field; the view refuses
        # a record that lacks one as malformed).
        move = {"source": "y", "target": "z", "epoch": 0, "state": "copying", "started_ms": int(time.time() * 1000)}
        _put(gateway, keys.move("t", 0), move)
        wait_until(lambda: node._cache.move_of("t", 0) is not None, "the view showing the move")
        assert node.uploads_here("t", 0)  # still the owner's until the final catch-up
        _put(gateway, keys.move("t", 0), {**move, "state": "final"})
        wait_until(lambda: (node._cache.move_of("t", 0) or {}).get("state") == "final", "the final state")
        assert not node.uploads_here("t", 0)
    finally:
        gateway.close()
        node._cache.stop()
        manager.shutdown()
