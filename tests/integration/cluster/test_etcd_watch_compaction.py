"""MetadataCache when etcd compacts its history: a watch etcd cancels as compacted goes back to a
full reload (a change made afterwards is seen), an idle cache follows the store's revision through
progress notifications, and a watch that fails at once backs off instead of spinning."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from seglog_server.cluster import ClusterKeys, EtcdGateway, EtcdUnavailableError, MetadataCache, create_topic
from seglog_server.cluster.etcd_gateway import WatchBatch, b64
from seglog_server.cluster.errors import WatchCompactedError
from tests.support.etcd_server import EtcdServer

pytestmark = pytest.mark.integration
WAIT_S = 10.0
READ_TIMEOUT_S = 0.5


def _busy_elsewhere(gateway: EtcdGateway, prefix: str, count: int) -> int:
    """Writes ``count`` keys outside the cache's prefix; the store's revision after."""
    revision = 0
    for i in range(count):
        _, revision = gateway.txn([], [{"request_put": {"key": b64(f"{prefix}/{i}"), "value": b64("x")}}])
    return revision


def test_a_watch_compacted_past_the_cache_reloads_and_sees_later_changes(etcd, request):
    keys = ClusterKeys(f"compact-{request.node.name[:30]}")
    writer = EtcdGateway((etcd.endpoint,), timeout_s=5)
    cache = MetadataCache(EtcdGateway((etcd.endpoint,), timeout_s=2), keys, retry_interval_s=0.1,
                          read_timeout_s=READ_TIMEOUT_S)
    cache.start()
    try:
        assert cache.wait_until(lambda c: c.statistics().connected, WAIT_S)
        behind = cache.statistics().revision
        latest = _busy_elsewhere(writer, "elsewhere-compact", 5)
        writer.compact(latest)
        assert latest > behind + 1  # the cache's next watch starts at a compacted revision
        # Let the idle watch be reopened (every read timeout) at its now compacted revision.
        time.sleep(3 * READ_TIMEOUT_S)
        create_topic(writer, keys, "after-compaction", {0: "a"})
        assert cache.wait_until(lambda c: c.owner_of("after-compaction", 0) is not None, WAIT_S)
        statistics = cache.statistics()
        assert statistics.connected and statistics.revision > latest
        assert statistics.compacted_count >= 1
    finally:
        cache.stop()
        writer.close()


def test_an_idle_cache_follows_the_store_revision_through_progress_notifications(tmp_path):
    etcd = EtcdServer.start(str(tmp_path), extra_args=("--experimental-watch-progress-notify-interval=200ms",))
    writer = EtcdGateway((etcd.endpoint,), timeout_s=5)
    cache = MetadataCache(EtcdGateway((etcd.endpoint,), timeout_s=2), ClusterKeys("progress"),
                          retry_interval_s=0.1, read_timeout_s=30)
    try:
        cache.start()
        assert cache.wait_until(lambda c: c.statistics().connected, WAIT_S)
        latest = _busy_elsewhere(writer, "elsewhere-progress", 3)
        # No event under the cache's prefix: only a progress notification can tell it the revision.
        assert cache.wait_until(lambda c: c.statistics().revision >= latest, WAIT_S)
        assert cache.statistics().reload_count == 1  # learnt from the open watch, not by reloading
    finally:
        cache.stop()
        writer.close()
        etcd.stop()


class _FailingWatchGateway:
    """A gateway whose reads answer and whose watch fails at once, counting the calls."""

    def __init__(self, failure: Exception) -> None:
        self.failure = failure
        self.calls = itertools.count()
        self.closed = threading.Event()

    def range_prefix(self, prefix):
        next(self.calls)
        return 7, []

    def watch_prefix(self, prefix, start_revision, read_timeout_s):
        next(self.calls)
        yield WatchBatch([])  # the creation answer
        raise self.failure

    def close(self):
        self.closed.set()


@pytest.mark.parametrize("failure", [
    EtcdUnavailableError("etcd cancelled the watch"),
    WatchCompactedError("etcd cancelled the watch: history compacted to revision 9", 9),
], ids=["stream-ends", "compacted"])
def test_a_watch_failing_at_once_backs_off(failure):
    gateway = _FailingWatchGateway(failure)
    cache = MetadataCache(gateway, ClusterKeys("fake"), retry_interval_s=0.05, read_timeout_s=5,
                          max_backoff_s=0.4)
    cache.start()
    time.sleep(2.0)
    cache.stop()
    calls = next(gateway.calls)
    # Backing off from 0.05 s doubling to 0.4 s: a handful of attempts in 2 s (a spin makes thousands).
    assert 2 <= calls <= 40, calls
