"""AlterTopicConfigs cluster-wide: a real etcd (conftest.py) and two real service processes.

Sent to any instance, the change is written into the topic's record in etcd (compared on its
revision) and every instance applies it to its copy from its watch: the owners' logs take it, an
instance down at the time applies it at its next start, a record an instance refuses leaves its
copy as it is, and etcd frozen answers UNAVAILABLE. Before, AlterTopicConfigs changed only the
asked instance's copy, and etcd's record (what a restarted or new instance creates from) kept the
configs of the creation."""

from __future__ import annotations

import json

import grpc
import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog_server.cluster import ClusterKeys, EtcdGateway
from seglog_server.cluster.etcd_gateway import b64
from seglog_server.cluster.errors import ConfigsConflictError, UnknownTopicError
from seglog_server.cluster.topic_configs import WRITE_ATTEMPTS_MAX, write_topic_configs
from seglog_server.storage.format.topic_metadata import read_topic_metadata
from tests.integration.cluster.test_service_cluster import _cluster_args, _metadata, _names, _start, _until, services
from tests.support.integration_helpers import error_class

__all__ = ["services"]


def _configs(service, topic: str) -> dict[str, str]:
    return dict(service.stub.DescribeTopic(pb.DescribeTopicRequest(topic=topic), timeout=10).configs)


def _files(service, topic: str) -> list[dict[str, str]]:
    dirs = sorted(p for p in service.data_dirs[0].iterdir() if p.is_dir() and p.name.rpartition("-")[0] == topic)
    # A copy being made has its directory before its topic.properties: not counted until written.
    found = [read_topic_metadata(str(path)) for path in dirs]
    return [dict(metadata.overrides) for metadata in found if metadata is not None]


def _record(etcd, cluster: str, topic: str) -> dict:
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        kv = gateway.get(ClusterKeys(cluster).topic(topic))
    finally:
        gateway.close()
    return json.loads(kv.value)


def _put(gateway, key: str, record: dict) -> None:
    """A write past the service (an operator's etcdctl put, another version's writer)."""
    gateway.txn([], [{"request_put": {"key": b64(key), "value": b64(json.dumps(record).encode())}}])


def _alter(service, topic: str, set_configs=None, delete=(), timeout=10):
    return service.stub.AlterTopicConfigs(pb.AlterTopicConfigsRequest(
        topic=topic, set_configs=set_configs or {}, delete_configs=list(delete)), timeout=timeout)


@pytest.mark.slow  # two service processes, one restarted: ~10 s
def test_a_change_anywhere_reaches_every_instance_and_one_down_applies_it_at_start(tmp_path, etcd, services):
    cluster = f"configs{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=2, configs={"segment.bytes": "65536"}),
                       timeout=10)
    _until(lambda: len(_files(b, "t")) == 2, what="b holding t")
    record = _record(etcd, cluster, "t")

    # Sent to b: etcd's record changes (the rest of it kept), and both copies follow.
    answer = _alter(b, "t", {"retention.ms": "3600000"}, ["segment.bytes"])
    assert answer.configs["retention.ms"] == "3600000" and answer.configs["segment.bytes"] == "1073741824"
    changed = _record(etcd, cluster, "t")
    assert changed == dict(record, configs={"retention.ms": "3600000"})
    assert _configs(b, "t")["retention.ms"] == "3600000"
    _until(lambda: _configs(a, "t")["retention.ms"] == "3600000", what="a applying the change")
    assert _configs(a, "t")["segment.bytes"] == "1073741824"
    assert _files(a, "t") == _files(b, "t") == [{"retention.ms": "3600000"}] * 2

    # b down while a changes the configs again: b applies them at its next start.
    b.stop()
    _alter(a, "t", {"cleanup.policy": "compact"})
    assert _files(b, "t") == [{"retention.ms": "3600000"}] * 2
    b.start()
    _until(lambda: _files(b, "t") == [{"cleanup.policy": "compact", "retention.ms": "3600000"}] * 2,
           what="b applying the change made while it was down")
    assert _configs(b, "t")["cleanup.policy"] == "compact"

    # A record b refuses (written past the service, a value it cannot parse): logged, b's copy
    # keeps its configs, and b goes on serving and applying later changes.
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        bad = dict(_record(etcd, cluster, "t"), configs={"retention.ms": "soon"})
        _put(gateway, ClusterKeys(cluster).topic("t"), bad)
    finally:
        gateway.close()
    _until(lambda: "the configs etcd holds are refused here" in b.log(), what="b refusing the record")
    assert _configs(b, "t")["cleanup.policy"] == "compact"
    _alter(a, "t", {"retention.ms": "7"})  # computed from etcd's record: the bad value is replaced
    _until(lambda: _configs(b, "t")["retention.ms"] == "7", what="b applying the next change")


@pytest.mark.slow  # one service process, etcd frozen for one request timeout
def test_etcd_frozen_is_unavailable_and_unknown_topics_not_found(tmp_path, etcd, services):
    cluster = f"configs{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)
    with pytest.raises(grpc.RpcError) as missing:
        _alter(a, "absent", {"retention.ms": "1"})
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    etcd.pause()
    try:
        with pytest.raises(grpc.RpcError) as frozen:
            _alter(a, "t", {"retention.ms": "1"}, timeout=30)
    finally:
        etcd.resume()
    assert frozen.value.code() == grpc.StatusCode.UNAVAILABLE, frozen.value.details()
    assert error_class(frozen.value) == "ClusterUnavailableError"
    assert "not confirmed by etcd" in frozen.value.details()
    assert _alter(a, "t", {"retention.ms": "2"}).configs["retention.ms"] == "2"


def test_a_change_racing_another_is_computed_again_from_the_record_that_won(etcd):
    keys = ClusterKeys(f"configs{next(_names)}")
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        _put(gateway, keys.topic("t"), {"partitions": 1, "configs": {"a": "1"}})
        seen = []

        def racing(configs):  # the first attempt loses to another writer's change
            seen.append(dict(configs))
            if len(seen) == 1:
                _put(gateway, keys.topic("t"), {"partitions": 1, "configs": {"b": "2"}})
            return dict(configs, c="3")

        configs, _ = write_topic_configs(gateway, keys, "t", racing)
        assert seen == [{"a": "1"}, {"b": "2"}]
        assert configs == {"b": "2", "c": "3"}
        assert json.loads(gateway.get(keys.topic("t")).value)["configs"] == {"b": "2", "c": "3"}

        def always_losing(configs):
            _put(gateway, keys.topic("t"), {"partitions": 1, "configs": configs})
            return {"lost": "1"}

        with pytest.raises(ConfigsConflictError, match=f"{WRITE_ATTEMPTS_MAX} times"):
            write_topic_configs(gateway, keys, "t", always_losing)
        assert "lost" not in json.loads(gateway.get(keys.topic("t")).value)["configs"]
        with pytest.raises(UnknownTopicError):
            write_topic_configs(gateway, keys, "absent", lambda configs: configs)
    finally:
        gateway.close()
