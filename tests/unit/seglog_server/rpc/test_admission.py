"""Admission's three budgets: requests, waiters and streams, service-wide and per client."""

from __future__ import annotations

import contextlib

import pytest

from seglog_server.rpc.admission import Admission, AdmissionLimits, client_of
from seglog_server.rpc.errors import OverloadedError


def _admission(**overrides) -> Admission:
    limits = dict(request_max=2, waiter_max=3, waiter_per_client_max=2, stream_max=3,
                  stream_per_client_max=2)
    limits.update(overrides)
    return Admission(AdmissionLimits(**limits))


class Peer:
    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


@pytest.mark.parametrize("peer, client", [
    ("ipv4:10.0.0.7:53211", "10.0.0.7"),
    ("ipv6:[::1]:40000", "[::1]"),
    ("unix:/run/seglog.sock", "unix:/run/seglog.sock"),
    ("", "unknown"),
])
def test_a_client_is_the_peers_host_without_its_port(peer, client):
    assert client_of(Peer(peer)) == client


async def test_requests_beyond_the_budget_are_refused_naming_the_setting():
    admission = _admission()
    with admission.request(), admission.request():
        with pytest.raises(OverloadedError, match="rpc_concurrency_max=2"):
            with admission.request():
                pass
    assert admission.statistics().rejected_by_limit == {"rpc_concurrency_max": 1}
    with admission.request():
        assert admission.statistics().request_count == 1


async def test_a_stream_message_takes_a_request_slot_from_the_same_budget_and_gives_it_back():
    admission = _admission()
    admission.take_request_slot()
    with admission.request():
        with pytest.raises(OverloadedError, match="rpc_concurrency_max=2"):
            admission.take_request_slot()
        assert admission.statistics().request_count == 2  # the refusal took nothing
    admission.give_back_request_slot()
    assert admission.statistics().request_count == 0
    assert admission.statistics().rejected_by_limit == {"rpc_concurrency_max": 1}


async def test_a_waiting_fetch_gives_its_request_slot_back_while_it_waits():
    admission = _admission()
    with contextlib.ExitStack() as stack:
        stack.enter_context(admission.request())
        stack.enter_context(admission.waiting("a"))
        stack.enter_context(admission.request())
        stack.enter_context(admission.waiting("b"))
        # Two waiters hold no request slot: two more requests fit.
        stack.enter_context(admission.request())
        stack.enter_context(admission.request())
        assert admission.statistics().request_count == 2
        assert admission.statistics().waiter_count == 2
    statistics = admission.statistics()
    assert (statistics.request_count, statistics.waiter_count, statistics.client_count) == (0, 0, 0)


async def test_one_client_cannot_take_every_waiter():
    admission = _admission()
    with contextlib.ExitStack() as stack:
        for _ in range(2):
            stack.enter_context(admission.request())
            stack.enter_context(admission.waiting("greedy"))
        stack.enter_context(admission.request())
        with pytest.raises(OverloadedError,
                           match="from client greedy: 2 of long_poll_waiters_per_client_max=2"):
            stack.enter_context(admission.waiting("greedy"))
        stack.enter_context(admission.waiting("other"))  # another client still gets one
        stack.enter_context(admission.request())
        with pytest.raises(OverloadedError, match="3 of long_poll_waiters_max=3"):
            stack.enter_context(admission.waiting("third"))


async def test_streams_have_their_own_budget_per_client_and_in_total():
    admission = _admission()
    with contextlib.ExitStack() as stack:
        stack.enter_context(admission.stream("a"))
        stack.enter_context(admission.stream("a"))
        with pytest.raises(OverloadedError, match="consume_streams_per_client_max=2"):
            stack.enter_context(admission.stream("a"))
        stack.enter_context(admission.stream("b"))
        with pytest.raises(OverloadedError, match="consume_streams_max=3"):
            stack.enter_context(admission.stream("c"))
        with admission.request(), admission.request():  # requests are untouched by streams
            pass
    assert admission.statistics().stream_count == 0
