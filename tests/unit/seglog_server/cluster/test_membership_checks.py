"""The own-record check thread's counts (Membership._run_checks), without etcd or a thread: a pass
with no registration to check asks etcd nothing and is not counted; a check that fails is counted
as a check and as a failure."""

from __future__ import annotations

from seglog_server.cluster import Capacity, ClusterConfig, Membership
from seglog_server.cluster.errors import ClusterError


class _Passes:
    """A stand-in for the stop event: ``count`` waits that time out, then the stop."""

    def __init__(self, count: int) -> None:
        self.left = count

    def wait(self, timeout_s: float) -> bool:
        self.left -= 1
        return self.left < 0


class _EtcdAway:
    def __init__(self) -> None:
        self.asked = 0

    def get(self, key: str):
        self.asked += 1
        raise ClusterError("etcd did not answer")


def _member(passes: int) -> tuple[Membership, _EtcdAway]:
    config = ClusterConfig(("http://127.0.0.1:9",), "a:1", ("/d",), "a")
    etcd = _EtcdAway()
    member = Membership(config, None, lambda: Capacity(0, 0, 0, ""), check_gateway=etcd)
    member._stopping = _Passes(passes)
    return member, etcd


def test_a_pass_with_no_registration_to_check_is_not_counted():
    member, etcd = _member(3)
    member._run_checks()  # never registered: lease 0
    statistics = member.statistics()
    assert (statistics.record_check_count, statistics.record_check_failure_count, etcd.asked) == (0, 0, 0)


def test_a_check_that_fails_is_counted_as_a_check_and_a_failure():
    member, etcd = _member(2)
    member._lease = 7
    member._written = (member._record(), Capacity(0, 0, 0, ""))
    member._run_checks()
    statistics = member.statistics()
    assert (statistics.record_check_count, statistics.record_check_failure_count, etcd.asked) == (2, 2, 2)
