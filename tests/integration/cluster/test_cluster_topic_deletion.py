"""DeleteTopic cluster-wide: a real etcd (conftest.py) and two real service processes.

Sent to any instance, the topic and its owner records leave etcd in one transaction and every
instance deletes its local copy (data included) as its cache sees it; an instance down at the
time deletes it at its next start, and keeps every topic etcd still has; a create of the same
name afterwards is a new, empty topic. Before, DeleteTopic deleted the asking instance's copy
only: etcd kept the topic, the other instances kept serving it and a create answered
ALREADY_EXISTS.
"""

from __future__ import annotations

import json

import grpc
import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog_server.cluster import ClusterKeys, EtcdGateway
from seglog_server.cluster.topic_records import HELD_TOPICS_FILE_NAME, HeldTopics
from tests.integration.cluster.test_service_cluster import (
    _cluster_args,
    _metadata,
    _names,
    _produce,
    _start,
    _until,
    services,
)
from tests.support.integration_helpers import error_class, records_of

__all__ = ["services"]


def _topics(service) -> set[str]:
    return {t.topic for t in service.stub.ListTopics(pb.ListTopicsRequest(), timeout=10).topics}


def _partition_dirs(service, topic: str) -> list[str]:
    return sorted(path.name for path in service.data_dirs[0].iterdir()
                  if path.is_dir() and path.name.rpartition("-")[0] == topic)


def _owner(service, topic: str, partition: int) -> str:
    return {(p.topic, p.partition): p.owner_id for p in _metadata(service, topic).partitions}[(topic, partition)]


def _served(service, topic: str, partition: int) -> bool:
    """Whether the owner serves its copy: until its record and copy are made (the directories
    appear first) it answers UNAVAILABLE TopicGenerationError, retriable."""
    try:
        _fetch_values(service, topic, partition)
    except grpc.RpcError as error:
        assert (error.code(), error_class(error)) == (grpc.StatusCode.UNAVAILABLE, "TopicGenerationError"), \
            error.details()
        return False
    return True


def _etcd_keys(etcd, cluster: str, topic: str) -> list[str]:
    keys = ClusterKeys(cluster)
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        _, kvs = gateway.range_prefix(keys.prefix)
    finally:
        gateway.close()
    return [kv.key for kv in kvs if f"/{topic}/" in kv.key or kv.key.endswith(f"/{topic}")]


def _fetch_values(service, topic: str, partition: int) -> list[bytes]:
    response = service.stub.Fetch(pb.FetchRequest(topic=topic, partition=partition, offset=0), timeout=10)
    return [record.value for record in records_of(response)]


@pytest.mark.slow  # two service processes, one restarted: ~15 s
def test_delete_topic_anywhere_deletes_it_on_every_instance_and_a_restart_catches_up(tmp_path, etcd, services):
    cluster = f"deletion{next(_names)}"
    a = _start(tmp_path, "a", _cluster_args(etcd, cluster, "a"))
    services.append(a)
    b = _start(tmp_path, "b", _cluster_args(etcd, cluster, "b"))
    services.append(b)
    _until(lambda: {i.instance_id for i in _metadata(a).instances if i.alive} == {"a", "b"}, what="a sees b")
    by_id = {"a": a, "b": b}
    for topic in ("t", "u", "keep", "maybe"):
        a.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=2), timeout=10)
    _until(lambda: {"t", "u", "keep", "maybe"} <= _topics(b), what="b holding the topics")
    for topic in ("t", "u", "keep"):
        for partition in range(2):
            _produce(by_id[_owner(a, topic, partition)], topic, partition, b"old")

    # Sent to b: both copies go, data included, and etcd keeps nothing of the topic.
    b.stub.DeleteTopic(pb.DeleteTopicRequest(topic="t"), timeout=10)
    assert "t" not in _topics(b) and _partition_dirs(b, "t") == []
    _until(lambda: "t" not in _topics(a) and _partition_dirs(a, "t") == [], what="a deleting its copy")
    assert _etcd_keys(etcd, cluster, "t") == []
    assert "t" not in {p.topic for p in _metadata(a).partitions}
    with pytest.raises(grpc.RpcError) as gone:
        a.stub.DeleteTopic(pb.DeleteTopicRequest(topic="t"), timeout=10)
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND, gone.value.details()

    # A create of the name afterwards (here with 3 partitions) is a new, empty topic everywhere.
    b.stub.CreateTopic(pb.CreateTopicRequest(topic="t", partitions=3), timeout=10)
    _until(lambda: len(_partition_dirs(a, "t")) == 3, what="a holding the new topic")
    for partition in range(3):
        owner = by_id[_owner(a, "t", partition)]
        _until(lambda: _served(owner, "t", partition), what="the new copy served")
        assert _fetch_values(owner, "t", partition) == []
        assert _produce(owner, "t", partition, b"new").base_offset == 0

    # etcd frozen: the delete is answered UNAVAILABLE, saying its outcome is not known (etcd may
    # still apply the request sitting in its socket when it resumes), and whatever etcd decides,
    # both instances end with the same answer: the topic on both, or on neither.
    etcd.pause()
    try:
        with pytest.raises(grpc.RpcError) as frozen:
            a.stub.DeleteTopic(pb.DeleteTopicRequest(topic="maybe"), timeout=30)
    finally:
        etcd.resume()
    assert frozen.value.code() == grpc.StatusCode.UNAVAILABLE, frozen.value.details()
    assert error_class(frozen.value) == "ClusterUnavailableError"
    assert "not confirmed by etcd" in frozen.value.details()
    _until(lambda: ("maybe" in _topics(a)) == ("maybe" in _topics(b)) == bool(_etcd_keys(etcd, cluster, "maybe")),
           what="both instances agreeing with etcd on the frozen delete")
    assert "keep" in _topics(a) and "keep" in _topics(b)

    # b down while t is deleted and u deleted and created again: at its next start b deletes its
    # copy of t, replaces its old copy of u with the new (empty) one, and keeps every record of keep.
    b_keep = [p for p in range(2) if _owner(a, "keep", p) == "b"]
    b.stop()
    _until(lambda: not {i.instance_id: i.alive for i in _metadata(a).instances}["b"], what="a seeing b gone")
    a.stub.DeleteTopic(pb.DeleteTopicRequest(topic="t"), timeout=10)
    a.stub.DeleteTopic(pb.DeleteTopicRequest(topic="u"), timeout=10)
    a.stub.CreateTopic(pb.CreateTopicRequest(topic="u", partitions=1), timeout=10)
    held = json.loads((b.data_dirs[0] / HELD_TOPICS_FILE_NAME).read_text())["topics"]
    assert set(held) - {"maybe"} == {"t", "u", "keep"}
    b.start()
    _until(lambda: "t" not in _topics(b) and _partition_dirs(b, "t") == [], what="b deleting t at its start")
    _until(lambda: _partition_dirs(b, "u") == ["u-0"], what="b holding the new u")
    assert _fetch_values(a, "u", 0) == []
    assert "keep" in _topics(b)
    for partition in b_keep:
        assert _fetch_values(b, "keep", partition) == [b"old"]
    assert HeldTopics(str(b.data_dirs[0])).get("u") != held["u"]


def test_an_unreadable_held_topics_file_deletes_nothing_for_etcds_sake(tmp_path, caplog):
    (tmp_path / HELD_TOPICS_FILE_NAME).write_text('{"version": 1, "topics": ["t"]}')
    held = HeldTopics(str(tmp_path))
    assert held.get("t") is None
    assert "unreadable" in caplog.text
    held.record("t", 7)  # written afresh, atomically
    assert HeldTopics(str(tmp_path)).get("t") == 7
    held.forget("t")
    assert json.loads((tmp_path / HELD_TOPICS_FILE_NAME).read_text()) == {"topics": {}, "version": 1}
