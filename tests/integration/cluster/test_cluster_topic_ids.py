"""A topic's id in cluster mode is one for the cluster: CreateTopic writes it into etcd's topic
record and every instance's copy takes it (the object store keys a tiered partition's segments by
it, so a move's target and source must agree); a topic deleted and created again gets another.
A record written before ids were carried gives every instance the same id derived from its
generation."""

from __future__ import annotations

import json

import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog_server.cluster import ClusterKeys, EtcdGateway
from seglog_server.cluster.ownership import topic_id_of
from seglog_server.storage.format.topic_metadata import read_topic_metadata
from tests.integration.cluster.test_service_cluster import _cluster_args, _metadata, _names, _start, _until, services

__all__ = ["services"]


def _local_ids(service, topic: str) -> set[str | None]:
    """The topic ids of ``topic``'s partition directories at ``service``; None for a directory
    whose metadata file is not written yet (a partition being created from the watch)."""
    found: set[str | None] = set()
    for path in service.data_dirs[0].iterdir():
        if path.is_dir() and path.name.rpartition("-")[0] == topic:
            metadata = read_topic_metadata(str(path))
            found.add(None if metadata is None else metadata.topic_id)
    return found


def _etcd_record(etcd, cluster: str, topic: str):
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        return gateway.get(ClusterKeys(cluster).topic(topic))
    finally:
        gateway.close()


@pytest.mark.slow  # two service processes: ~10 s
def test_every_instance_holds_a_topic_under_the_id_etcd_records(tmp_path, etcd, services):
    cluster = f"topicids{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")

    a.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=2), timeout=10)
    recorded = json.loads(_etcd_record(etcd, cluster, "t").value)["topic_id"]
    # Each instance creates its partitions from its watch: wait until every directory it made
    # carries its metadata, then each holds the id etcd records.
    _until(lambda: _local_ids(a, "t") == _local_ids(b, "t") == {recorded}, what="a and b holding t")

    b.stub.DeleteTopic(pb.DeleteTopicRequest(topic="t"), timeout=10)
    _until(lambda: not _local_ids(a, "t"), what="a dropping t")
    b.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=1), timeout=10)
    renewed = json.loads(_etcd_record(etcd, cluster, "t").value)["topic_id"]
    assert renewed != recorded
    _until(lambda: _local_ids(a, "t") == _local_ids(b, "t") == {renewed}, what="a and b holding the new t")


def test_a_record_without_an_id_gives_one_per_generation_the_same_everywhere():
    old = {"partitions": 1, "configs": {}}
    first = topic_id_of("c", "t", old, 17)
    assert first == topic_id_of("c", "t", dict(old), 17) and len(first) == 32
    assert first != topic_id_of("c", "t", old, 18) != topic_id_of("d", "t", old, 17)
    assert topic_id_of("c", "t", {**old, "topic_id": "ab" * 16}, 17) == "ab" * 16
    assert topic_id_of("c", "t", {**old, "topic_id": "../x"}, 17) == first  # not an id: derived
