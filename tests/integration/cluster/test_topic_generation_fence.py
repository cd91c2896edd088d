"""A local copy serves a partition only at the topic generation etcd has (real etcd, the real
ClusterNode, MetadataCache, HeldTopics and LogManager; the materializer's steps driven by hand).

The scenario: topic t deleted and created again while this instance still holds the old copy (the
materializer drops it up to 0.2 s later). The new owner record names this instance at epoch 0, as
the old log's epoch was: produce was admitted and appended to the OLD log (answered OK, then
deleted with it), and fetch handed the old topic's records to the new topic's consumers. Now both
are refused UNAVAILABLE (retriable) until the old copy is dropped and the new one made; and right
after CreateTopic, an owner whose copy is not made yet answers UNAVAILABLE, not NOT_FOUND.
"""

from __future__ import annotations

import time

import grpc
import pytest

from seglog_server.cluster import ClusterConfig, ClusterKeys, EtcdGateway, create_topic
from seglog_server.cluster.topic_records import delete_topic_records
from seglog_server.cluster_node import ClusterNode
from seglog_server.rpc.cluster_routing import TopicGenerationError
from seglog_server.rpc.status import status_for
from seglog_server.storage.manager.log_manager import LogManager
from tests.support.integration_helpers import make_batch, wait_until

pytestmark = pytest.mark.integration


class _CreateFailingOnce(LogManager):
    """A disk failing the next topic creation (``fail_next``), as a full or offline one would."""

    fail_next = False

    def create_topic(self, *args, **kwargs):
        if self.fail_next:
            self.fail_next = False
            raise OSError(28, "No space left on device")
        return super().create_topic(*args, **kwargs)


@pytest.fixture
def node(tmp_path, etcd):
    (tmp_path / "data").mkdir()
    manager = _CreateFailingOnce([str(tmp_path / "data")])
    manager.startup()
    config = ClusterConfig(etcd_endpoints=(etcd.endpoint,), advertise="127.0.0.1:1", instance_id="y",
                           data_dirs=(str(tmp_path / "data"),), cluster_name=f"gen{time.monotonic_ns()}",
                           lease_ttl_s=5)
    node = ClusterNode(config, manager, calls=None)
    node._membership.start()
    node._cache.start()
    try:
        wait_until(lambda: node._wait_ready(0.1), "y registered")
        yield node, manager
    finally:
        node._membership.stop(True)
        node._cache.stop()
        manager.shutdown()


def test_a_copy_of_an_earlier_generation_is_refused_until_the_new_one_is_held(node, etcd):
    node, manager = node
    routing = node.routing
    keys = ClusterKeys(node.config.cluster_name)
    node.create_topic("t", 1, {})
    assert routing.check_produce("t", 0) == 0
    manager.get_log("t", 0).append(make_batch([b"old"]), leader_epoch=0)

    # Deleted and created again elsewhere, the new owner record this instance's at epoch 0.
    writer = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        assert delete_topic_records(writer, keys, "t")
        generation = create_topic(writer, keys, "t", ["y"])
    finally:
        writer.close()
    wait_until(lambda: node._cache.topic_generation("t") == generation, "the view showing the new t")
    assert manager.get_log("t", 0).log_end_offset == 1  # the old copy, not dropped yet
    with pytest.raises(TopicGenerationError, match="since created again") as stale:
        routing.check_produce("t", 0)
    assert status_for(stale.value).code == grpc.StatusCode.UNAVAILABLE
    assert isinstance(routing.owner_error("t", 0), TopicGenerationError)  # fetch and every other RPC
    with pytest.raises(TopicGenerationError):
        routing.check_acknowledge("t", 0)  # an append admitted before the change is not answered OK

    # The materializer's steps: the old copy dropped, then (not held yet: UNAVAILABLE, not
    # NOT_FOUND) the new one made, served from offset 0.
    assert node._stale_topics() == ["t"]
    node.settle_topic("t")
    with pytest.raises(TopicGenerationError, match="not held here yet"):
        routing.check_produce("t", 0)
    # The group coordinator asks the owner alone (it makes its own copy of the offsets topic).
    assert routing.owner_error("t", 0, generation=False) is None
    # Recorded but the copy not made (the record goes first): still not served, not NOT_FOUND.
    manager.fail_next = True
    with pytest.raises(OSError):
        node._materialize_topic("t", 1)
    assert node._held.get("t") == generation
    with pytest.raises(TopicGenerationError, match="not held here yet"):
        routing.check_produce("t", 0)
    node._materialize_topic("t", 1)
    assert routing.check_produce("t", 0) == 0
    assert manager.get_log("t", 0).log_end_offset == 0


def test_a_deleted_topics_copy_is_refused_and_a_view_behind_the_copy_is_not_believed(node, etcd):
    node, manager = node
    routing = node.routing
    keys = ClusterKeys(node.config.cluster_name)
    node.create_topic("d", 1, {})
    # CreateTopic answers once the view has the topic: routed by owner at once.
    assert node._cache.topic_generation("d") == node._held.get("d")
    writer = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        assert delete_topic_records(writer, keys, "d")
    finally:
        writer.close()
    wait_until(lambda: node._cache.topic_generation("d") is None, "the view seeing d deleted")
    with pytest.raises(TopicGenerationError, match="since deleted"):
        routing.check_produce("d", 0)
    assert isinstance(routing.owner_error("d", 0), TopicGenerationError)

    # A copy newer than the view (a local record the cache has not reached: loading, etcd away)
    # is served as before, reads kept while etcd is unreachable.
    node._held.record("local", node._cache.statistics().revision + 1000)
    manager.create_topic("local", 1, {})
    assert routing.owner_error("local", 0) is None
    assert routing.check_produce("local", 0) is None
