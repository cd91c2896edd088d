"""Membership over a slow or half-answering etcd (a real one, its calls slowed or its reads held or
failed in front of it): the check of the instance's own record never holds up or fails a renewal,
so a healthy instance is not fenced by it. Once each renewal also read the key on the renewing
thread, the next keepalive waiting for it: with a 10 s TTL, produce was fenced once etcd took
1.0 s a call (0.75 s when the record was written again too), where 1.5 s fenced before the read;
and a failed read counted as a failed renewal."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from types import SimpleNamespace

import pytest

from seglog_server.cluster import Capacity, ClusterConfig, ClusterKeys, EtcdGateway, Membership
from seglog_server.cluster.errors import EtcdUnavailableError
from seglog_server.cluster.etcd_gateway import b64

pytestmark = pytest.mark.integration
WAIT_S = 15.0


class _Slowed:
    """A real gateway whose every call first sleeps ``delay_s`` (a slow etcd), whose gets wait
    while ``gets_open`` is clear (a read that does not answer; ``gets_waiting`` counts the reads
    that began waiting) or fail with ``gets_fail`` (a read refused), whose keepalives wait while
    ``keepalives_open`` is clear; every call is recorded in ``calls`` as (thread name, call).
    ``another()`` is the same, sharing these settings."""

    def __init__(self, inner: EtcdGateway, settings: SimpleNamespace) -> None:
        self._inner, self._settings = inner, settings

    def another(self) -> _Slowed:
        return _Slowed(self._inner.another(), self._settings)

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str):
        call = getattr(self._inner, name)

        def slowed(*args, **kwargs):
            self._settings.calls.append((threading.current_thread().name, name))
            if name == "keepalive":
                self._settings.keepalives_open.wait()
            if name == "get":
                if not self._settings.gets_open.is_set():
                    self._settings.gets_waiting += 1
                self._settings.gets_open.wait()
                if self._settings.gets_fail:
                    raise EtcdUnavailableError("etcd at the test's proxy answers no read")
            time.sleep(self._settings.delay_s)
            return call(*args, **kwargs)

        return slowed


@pytest.fixture
def slowed_member(etcd, request):
    started = []

    def make(ttl_s: int, capacity=lambda: Capacity(partition_count=3, bytes=4096, disk_free_bytes=1)):
        config = ClusterConfig(etcd_endpoints=(etcd.endpoint,), advertise="127.0.0.1:50551", instance_id="i-1",
                               data_dirs=("/data/a",), cluster_name=f"slow-{request.node.name[:40]}",
                               lease_ttl_s=ttl_s)
        settings = SimpleNamespace(delay_s=0.0, gets_open=threading.Event(), gets_fail=False, gets_waiting=0,
                                   keepalives_open=threading.Event(), calls=[])
        settings.gets_open.set()
        settings.keepalives_open.set()
        gateway = _Slowed(EtcdGateway(config.etcd_endpoints, timeout_s=5), settings)
        member = Membership(config, gateway, capacity)
        started.append((member, gateway, settings))
        return member, config, settings

    yield make
    for member, gateway, settings in started:
        settings.gets_open.set()
        settings.keepalives_open.set()
        settings.delay_s = 0.0
        member.stop()
        gateway.close()


def _renewals(member: Membership, count: int) -> None:
    """Waits for ``count`` more renewals."""
    for _ in range(count):
        renewed_at = member.statistics().renewed_at
        _wait_for(lambda: member.statistics().renewed_at != renewed_at)


def _checks(member: Membership, count: int) -> None:
    """Waits for ``count`` more checks of the record to end (failed ones included)."""
    checked = member.statistics().record_check_count
    _wait_for(lambda: member.statistics().record_check_count >= checked + count)


def _wait_for(condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_a_check_of_the_record_that_never_answers_holds_up_no_renewal(slowed_member):
    member, _, settings = slowed_member(ttl_s=2)
    member.start()
    _wait_for(member.may_acknowledge)
    settings.gets_open.clear()  # every read of the key from now on waits
    _renewals(member, 4)
    statistics = member.statistics()
    assert member.may_acknowledge() and statistics.renewal_failure_count == 0 and statistics.registration_count == 1


def test_a_failed_check_of_the_record_is_no_failed_renewal_and_the_checks_resume(etcd, slowed_member):
    member, config, settings = slowed_member(ttl_s=2)
    member.start()
    _wait_for(member.may_acknowledge)
    settings.gets_fail = True
    _renewals(member, 4)
    statistics = member.statistics()
    assert member.may_acknowledge() and statistics.renewal_failure_count == 0 and statistics.registration_count == 1
    _wait_for(lambda: member.statistics().record_check_failure_count >= 2)  # counted as what failed
    # The reads answer again: a malformed put over its record is written back by the next check.
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    key = ClusterKeys(config.cluster_name).instance("i-1")
    try:
        good = reader.get(key).value
        reader.txn([], [{"request_put": {"key": b64(key), "value": b64(b"{")}}])
        settings.gets_fail = False
        _wait_for(lambda: reader.get(key).value == good)
        assert reader.get(key).lease == member.statistics().lease
    finally:
        reader.close()


def test_an_etcd_slow_at_every_call_delays_a_renewal_by_its_own_round_trip_only(slowed_member):
    """Every call slowed by d = 0.12 TTL (1.2 s at a 10 s TTL; 0.36 s at 3 s, keepalive every
    0.6 s), the record written again at every check (its partition count changes each time). Once
    the read and the write ran on the renewing thread between its keepalives, and the loop then
    waited its full interval: 0.6 + 3 x 0.36 = 1.68 s between renewals, past the 1.5 s fence. Told
    without timing: after registering, the renewing thread calls only keepalive (the reads and
    writes of the record go on the check thread), and it waits at most interval - d after a
    keepalive (a loaded machine only shortens that wait)."""
    counts = itertools.count(1)
    member, config, settings = slowed_member(
        ttl_s=3, capacity=lambda: Capacity(partition_count=next(counts), bytes=0, disk_free_bytes=1))
    renewing = f"seglog-membership-{config.instance_id}"
    waits: list[float] = []
    wait = member._stopping.wait

    def recorded_wait(timeout=None):
        if threading.current_thread().name == renewing:
            waits.append(timeout)
        return wait(timeout)

    member._stopping.wait = recorded_wait
    settings.delay_s = config.lease_ttl_s * 0.12
    member.start()
    _wait_for(member.may_acknowledge)
    refreshed = member.record_refresh_count()
    _renewals(member, 6)
    statistics = member.statistics()
    assert statistics.renewal_failure_count == 0 and statistics.registration_count == 1
    assert member.record_refresh_count() > refreshed  # the record was written again meanwhile
    calls = list(settings.calls)
    on_renewing = [name for thread, name in calls if thread == renewing]
    assert on_renewing[:2] == ["grant", "txn"] and len(on_renewing) >= 8
    assert set(on_renewing[2:]) == {"keepalive"}, on_renewing  # registered, it only renews
    assert {thread for thread, name in calls if name in ("get", "txn")} - {renewing} == {
        f"seglog-membership-check-{config.instance_id}"}
    assert {thread for thread, name in calls if name == "get"} == {f"seglog-membership-check-{config.instance_id}"}
    assert len(waits) >= 6
    assert max(waits) <= config.keepalive_interval_s - settings.delay_s + 1e-3, waits


def test_a_check_that_reads_its_record_registered_again_meanwhile_takes_it_for_its_own(etcd, slowed_member, caplog):
    """The check reads its lease L, then the key; meanwhile the keepalive thread lost L and
    registered again under L2: the read answers the instance's own record under L2. It was taken
    for a record held by another process: logged as an ERROR telling the operator to revoke L2 (the
    instance's own live lease: following it fences the instance) and counted."""
    member, config, settings = slowed_member(ttl_s=2)
    member.start()
    _wait_for(member.may_acknowledge)
    first = member.statistics().lease
    settings.gets_open.clear()
    waiting = settings.gets_waiting
    _wait_for(lambda: settings.gets_waiting > waiting)  # the check holds L and waits for its read
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        reader.revoke(first)
        _wait_for(lambda: member.statistics().registration_count == 2)
        settings.gets_open.set()
        _checks(member, 2)
        assert member.statistics().lease != first
        assert reader.get(ClusterKeys(config.cluster_name).instance("i-1")).lease == member.statistics().lease
    finally:
        reader.close()
    assert member.statistics().record_held_elsewhere_count == 0
    assert not [r for r in caplog.records if "is held under lease" in r.getMessage()]


def test_its_lease_expired_seen_first_by_the_check_is_no_failed_check(etcd, slowed_member, caplog):
    """The lease gone in etcd (expired: revoked here, as etcd does at expiry, the key with it),
    seen by the check before the keepalive thread: the check fences and revokes the lease, which
    etcd no longer has (its 404, which the gateway reports as unavailable). That was counted as a
    failed check and logged as the key deleted under its live lease. It is a check (the pass began
    under the lease), counted once it ends: the pass is held at its read of the key until the lease
    is gone, so the next count is its own (counted after the fence, whatever the next passes do)."""
    member, config, settings = slowed_member(ttl_s=2)
    member.start()
    _wait_for(member.may_acknowledge)
    first = member.statistics().lease
    settings.keepalives_open.clear()  # the keepalive thread learns nothing until the check has
    settings.gets_open.clear()
    waiting = settings.gets_waiting
    _wait_for(lambda: settings.gets_waiting > waiting)  # a check began under the lease, holds at its read
    checked = member.statistics().record_check_count
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        reader.revoke(first)
        settings.gets_open.set()
        # On the count read while the check was held: a baseline read now (the test thread late)
        # may hold that check already, and the passes after it, lease-less, are no checks.
        _wait_for(lambda: member.statistics().record_check_count >= checked + 1)
        assert member.statistics().lease == 0 and member.statistics().record_check_count == checked + 1
        settings.keepalives_open.set()
        _wait_for(lambda: member.statistics().registration_count == 2 and member.may_acknowledge())
        assert reader.get(ClusterKeys(config.cluster_name).instance("i-1")).lease == member.statistics().lease
    finally:
        reader.close()
    statistics = member.statistics()
    assert statistics.record_check_failure_count == 0 and statistics.renewal_failure_count == 0
    lost = [r.getMessage() for r in caplog.records if "fenced, registering again" in r.getMessage()]
    assert len(lost) == 1 and f"was deleted or its lease {first:x} expired" in lost[0], lost


def test_a_pass_with_no_lease_to_check_is_no_check(etcd, slowed_member):
    """Its id held by another registration, the instance never registers (InstanceIdInUseError
    each step): every pass of the check thread begins with no lease, asks etcd nothing, and is not
    counted as a check. Counted, such passes outnumbered the real checks while etcd was away (the
    keepalive thread failing to register again), diluting the failed share that
    SeglogClusterRecordChecksFailing reads."""
    member, config, settings = slowed_member(ttl_s=2)
    checking = f"seglog-membership-check-{config.instance_id}"
    passes = itertools.count()
    ended = [0]  # the check thread's waits begun: each after a pass ended, but the first
    wait = member._stopping.wait

    def counted_wait(timeout=None):
        if threading.current_thread().name == checking:
            ended[0] = next(passes)
        return wait(timeout)

    member._stopping.wait = counted_wait
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    key = ClusterKeys(config.cluster_name).instance("i-1")
    try:
        other = reader.grant(30)
        try:
            reader.txn([], [{"request_put": {"key": b64(key), "value": b64(b"{}"), "lease": other}}])
            member.start()
            _wait_for(lambda: ended[0] >= 3 and member.statistics().renewal_failure_count >= 1)
            statistics = member.statistics()
            assert (statistics.registered, statistics.record_check_count, statistics.record_check_failure_count) == (
                False, 0, 0)
            assert not [name for thread, name in settings.calls if thread == checking]  # etcd asked nothing
        finally:
            reader.revoke(other)  # failed or not, not left to its 30 s TTL
    finally:
        reader.close()


def test_an_unexpected_error_in_a_check_is_logged_counted_and_the_checks_go_on(etcd, slowed_member, caplog):
    """A check that raises anything but a cluster error (a fault in capacity() here) once ended
    the check thread for good, silently: the record was never checked or written again."""
    faults = [0]
    capacity = [Capacity(partition_count=3, bytes=4096, disk_free_bytes=1)]

    def faulty_capacity() -> Capacity:
        if threading.current_thread().name.startswith("seglog-membership-check-") and faults[0]:
            faults[0] -= 1
            raise RuntimeError("injected fault in capacity()")
        return capacity[0]

    member, config, settings = slowed_member(ttl_s=2, capacity=faulty_capacity)
    member.start()
    _wait_for(member.may_acknowledge)
    faults[0] = 2
    _wait_for(lambda: faults[0] == 0)
    _checks(member, 1)
    statistics = member.statistics()
    assert statistics.record_check_failure_count == 2 and statistics.renewal_failure_count == 0
    logged = [r for r in caplog.records if "not checked" in r.getMessage() and "injected fault" in r.getMessage()]
    assert len(logged) == 1 and logged[0].levelname == "ERROR" and logged[0].exc_info  # once, with its traceback
    # The checks went on: a new partition count is written at the next one.
    capacity[0] = Capacity(partition_count=4, bytes=4096, disk_free_bytes=1)
    reader = EtcdGateway((etcd.endpoint,), timeout_s=5)
    try:
        key = ClusterKeys(config.cluster_name).instance("i-1")
        _wait_for(lambda: b'"partition_count": 4' in reader.get(key).value)
    finally:
        reader.close()


class _Snapshots(logging.Handler):
    """The member's statistics() taken at every record its module logs, on the thread logging it."""

    def __init__(self, member: Membership) -> None:
        super().__init__()
        self._member, self.taken = member, []

    def emit(self, record: logging.LogRecord) -> None:
        self.taken.append((record.getMessage(), self._member.statistics()))


def test_a_failed_check_is_counted_with_its_check_so_no_snapshot_has_more_failures_than_checks(slowed_member):
    """A failed check was added to the failures in one section of the lock, and to the checks in
    another after it logged the failure: a scrape between the two (the log record here) read one
    failure more than checks, a failed share above 1 while every check so far had failed. Every
    check fails from the first here (two faults of its own, each logged, then unanswered reads):
    at every record logged, failures <= checks."""
    faults = [2]

    def faulty_capacity() -> Capacity:
        if threading.current_thread().name.startswith("seglog-membership-check-") and faults[0]:
            faults[0] -= 1
            raise RuntimeError(f"injected fault in capacity() ({faults[0]} left)")  # distinct: each logged
        return Capacity(partition_count=3, bytes=4096, disk_free_bytes=1)

    member, _, settings = slowed_member(ttl_s=2, capacity=faulty_capacity)
    settings.gets_fail = True  # the registration reads nothing: only the checks fail
    snapshots = _Snapshots(member)
    logger = logging.getLogger(Membership.__module__)
    logger.addHandler(snapshots)
    try:
        member.start()
        _wait_for(lambda: member.statistics().record_check_failure_count >= 4)
        settings.gets_fail = False
        _wait_for(lambda: any("checked again" in message for message, _ in snapshots.taken))
    finally:
        logger.removeHandler(snapshots)
    not_checked = [statistics for message, statistics in snapshots.taken if "not checked" in message]
    assert len(not_checked) == 3, snapshots.taken  # two faults, then the unanswered read (once)
    over = [(message, statistics) for message, statistics in snapshots.taken
            if statistics.record_check_failure_count > statistics.record_check_count]
    assert not over, over
    assert member.statistics().renewal_failure_count == 0


def test_an_unexpected_error_in_a_registration_is_a_failed_renewal_and_the_renewals_go_on(slowed_member, caplog):
    """The renewing thread's registration calls capacity() too: anything but a cluster error
    raised there once ended that thread for good, silently, the instance never registered."""
    faults = [2]

    def faulty_capacity() -> Capacity:
        if threading.current_thread().name == "seglog-membership-i-1" and faults[0]:
            faults[0] -= 1
            raise RuntimeError("injected fault in capacity()")
        return Capacity(partition_count=3, bytes=4096, disk_free_bytes=1)

    member, _, _ = slowed_member(ttl_s=2, capacity=faulty_capacity)
    member.start()
    _wait_for(member.may_acknowledge)
    statistics = member.statistics()
    assert statistics.renewal_failure_count == 2 and statistics.registration_count == 1
    logged = [r for r in caplog.records if "injected fault" in r.getMessage() and r.levelname == "ERROR"]
    assert len(logged) == 1 and logged[0].exc_info  # once, with its traceback
