"""MetadataCache against a real etcd: changes made by other clients show up within a bounded wait;
an instance whose lease goes is remembered as not alive; after etcd stops and starts again the cache
reloads in full and sees what changed meanwhile."""

from __future__ import annotations

import pytest

from seglog_server.cluster import (
    Capacity,
    ClusterConfig,
    ClusterKeys,
    EtcdGateway,
    Membership,
    MetadataCache,
    change_owner,
    create_topic,
    read_owner,
)

pytestmark = pytest.mark.integration
WAIT_S = 15.0


@pytest.fixture
def keys(request):
    return ClusterKeys(f"cache-{request.node.name[:40]}")


@pytest.fixture
def cache(etcd, keys):
    cache = MetadataCache(EtcdGateway((etcd.endpoint,), timeout_s=2), keys, retry_interval_s=0.2, read_timeout_s=2)
    cache.start()
    assert cache.wait_until(lambda c: c.statistics().connected, WAIT_S)
    yield cache
    cache.stop()


@pytest.fixture
def writer(etcd):
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    yield gateway
    gateway.close()


def member(etcd, keys, instance_id):
    config = ClusterConfig(etcd_endpoints=(etcd.endpoint,), advertise=f"{instance_id}:50551", instance_id=instance_id,
                           cluster_name=keys.cluster_name, lease_ttl_s=2)
    membership = Membership(config, EtcdGateway(config.etcd_endpoints, timeout_s=0.4),
                            lambda: Capacity(partition_count=0, bytes=0, disk_free_bytes=0))
    membership.start()
    return membership


def test_a_topic_and_a_move_made_by_another_client_show_in_the_cache(etcd, cache, keys, writer):
    b = member(etcd, keys, "b")
    assert cache.wait_until(lambda c: c.instances().get("b") is not None and c.instances()["b"].alive, WAIT_S)
    create_topic(writer, keys, "orders", ["a", "a"])
    assert cache.wait_until(lambda c: c.owner_of("orders", 1) is not None, WAIT_S)
    assert (cache.owner_of("orders", 1).owner, cache.owner_of("orders", 1).epoch, cache.topics()) == (
        "a", 0, {"orders": 2})
    moved = change_owner(writer, keys, "orders", 1, "b", read_owner(writer, keys, "orders", 1))
    assert cache.wait_until(lambda c: c.owner_of("orders", 1) == moved, WAIT_S)
    assert cache.instances()["b"].address == "b:50551"
    assert cache.instances()["a"].alive is False  # named as an owner, never registered
    b.stop()


def test_an_instance_whose_lease_goes_stays_known_as_not_alive(etcd, cache, keys):
    b = member(etcd, keys, "b")
    assert cache.wait_until(lambda c: "b" in c.instances() and c.instances()["b"].alive, WAIT_S)
    b.stop()  # revokes the lease: the key goes as it would at expiry
    assert cache.wait_until(lambda c: not c.instances()["b"].alive, WAIT_S)
    assert cache.instances()["b"].gone_since_ms is not None and cache.instances()["b"].address == "b:50551"


def test_after_etcd_restarts_the_cache_reloads_and_sees_what_changed_meanwhile(etcd, cache, keys, writer):
    create_topic(writer, keys, "orders", ["a"])
    assert cache.wait_until(lambda c: c.owner_of("orders", 0) is not None, WAIT_S)
    reloads = cache.statistics().reload_count
    etcd.stop()
    assert cache.wait_until(lambda c: not c.statistics().connected, WAIT_S)
    assert cache.owner_of("orders", 0).owner == "a"  # answers from memory while etcd is away
    etcd.launch()
    create_topic(writer, keys, "payments", ["a"])
    assert cache.wait_until(lambda c: c.owner_of("payments", 0) is not None and c.statistics().connected, WAIT_S)
    assert cache.statistics().reload_count > reloads


def test_a_paused_etcd_is_noticed_and_the_cache_catches_up_after(etcd, cache, keys, writer):
    etcd.pause()
    try:
        assert cache.wait_until(lambda c: not c.statistics().connected, WAIT_S)
    finally:
        etcd.resume()
    create_topic(writer, keys, "late", ["a"])
    assert cache.wait_until(lambda c: c.owner_of("late", 0) is not None and c.statistics().connected, WAIT_S)


class _ClockFault(BaseException):
    """Raised by the cache's wall clock (its seam) where no handler of the thread expects it."""


def _faulty_clock(fail: list[BaseException]):
    def now_ms() -> int:
        if fail:
            raise fail.pop()
        return 1
    return now_ms


def _cache_with_faulty_clock(etcd, keys, fail: list[BaseException]) -> MetadataCache:
    """A cache whose wall-clock reads raise what ``fail`` holds (the next batch's read)."""
    return MetadataCache(EtcdGateway((etcd.endpoint,), timeout_s=2), keys, retry_interval_s=0.2, read_timeout_s=2,
                         wall_clock_ms=_faulty_clock(fail))


def test_an_unexpected_error_in_a_reload_shows_the_cache_not_current_and_the_next_reload_recovers(etcd, keys, writer):
    fail: list[BaseException] = []
    cache = _cache_with_faulty_clock(etcd, keys, fail)
    cache.start()
    try:
        assert cache.wait_until(lambda c: c.statistics().connected, WAIT_S)
        fail.append(RuntimeError("injected: a bug in applying a batch"))  # the next watch batch's clock read
        create_topic(writer, keys, "orders", ["a"])
        assert cache.wait_until(lambda c: c.statistics().unexpected_count == 1, WAIT_S)
        # Not current in between, then reloaded: the topic the failed batch carried is there.
        assert cache.wait_until(lambda c: c.owner_of("orders", 0) is not None and c.statistics().connected, WAIT_S)
        assert cache.statistics().reload_count >= 2
    finally:
        cache.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the thread's end, on purpose
def test_a_cache_thread_that_ends_is_never_shown_current(etcd, keys, writer):
    fail: list[BaseException] = []
    cache = _cache_with_faulty_clock(etcd, keys, fail)
    cache.start()
    try:
        assert cache.wait_until(lambda c: c.statistics().connected, WAIT_S)
        fail.append(_ClockFault())  # not an Exception: ends the thread
        create_topic(writer, keys, "orders", ["a"])
        assert cache.wait_until(lambda c: not c.statistics().connected, WAIT_S)
        cache._thread.join(WAIT_S)
        assert not cache._thread.is_alive() and not cache.statistics().connected
    finally:
        cache.stop()
