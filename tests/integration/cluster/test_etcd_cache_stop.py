"""A MetadataCache stops at once, even while its watch waits on an idle etcd stream (a real etcd,
conftest.py): the gateway's close shuts the open stream down, so an instance's shutdown does not
wait out the watch's read timeout (it waited 5 s before: WATCH_READ_TIMEOUT_S)."""

from __future__ import annotations

import threading

import pytest

from seglog_server.cluster import ClusterKeys, EtcdGateway, MetadataCache, create_topic

pytestmark = pytest.mark.integration
# Far beyond any bound below: a stop that waited for the read timeout would not end in time.
READ_TIMEOUT_S = 600.0
BOUND_S = 60.0


def test_stop_ends_an_idle_watch_without_waiting_for_its_read_timeout(etcd):
    cache = MetadataCache(EtcdGateway((etcd.endpoint,), timeout_s=2), ClusterKeys("stop-idle"),
                          read_timeout_s=READ_TIMEOUT_S)
    cache.start()
    assert cache.wait_until(lambda c: c.statistics().connected, BOUND_S)
    # A key written under the prefix and seen as a watch event: the stream is open and read.
    keys = ClusterKeys("stop-idle")
    writer = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        create_topic(writer, keys, "watched", ["a"])
    finally:
        writer.close()
    assert cache.wait_until(lambda c: c.statistics().event_count >= 1, BOUND_S)
    # Idle from here: nothing under the prefix changes.
    stopper = threading.Thread(target=cache.stop, daemon=True)
    stopper.start()
    stopper.join(BOUND_S)
    assert not stopper.is_alive(), "stop() is still waiting on the idle watch stream"
