"""Admission: how many RPCs may work, wait and stream at once, service-wide and per client.

Three kinds of call hold the service's resources very differently:

    request   a unary call doing work (Produce, a Fetch reading, admin): CPU, buffers, the pool.
              ``rpc_concurrency_max`` of them.
    waiter    a Fetch parked at the tail of a log for up to max_wait_ms: a coroutine and a share
              of one future, nothing else. ``long_poll_waiters_max`` service-wide,
              ``long_poll_waiters_per_client_max`` per client.
    stream    an open Consume stream (reading or parked): ``consume_streams_max`` and
              ``consume_streams_per_client_max``. An open ProduceStream or LookupStream is a
              stream too, and each of its messages holds a request slot while it is worked on
              (``message``), as its unary twin would.

A unary call is admitted as a request; a Fetch that has to wait trades its request slot for a
waiter slot while it waits (``waiting``) and takes it back, unconditionally, to read what woke it
(it was admitted once; waking it must not fail it). So a thousand idle long polls hold no request
slot, and Produce and ListTopics keep being served. A call takes its request slot only after the
call gate has authenticated it (``handler``, then ``request_slot``): callers with wrong or slow-to-
check credentials never hold the slots authenticated callers need. gRPC's own ``maximum_concurrent_rpcs`` stays
as a backstop above the sum of the three (app.py).

Shutdown (``drain``): new calls are answered UNAVAILABLE at once, calls in progress get the grace
period to finish, and any still running after it are *cut*: their handlers are cancelled and
answer UNAVAILABLE (retriable) instead of the CANCELLED gRPC would send when the server stops
under them (``was_cut``).

A client is the call's authenticated principal (``call_gate``: a token's name or a client
certificate's CN), else the peer's host address (``ipv4:10.0.0.7:53211`` -> ``10.0.0.7``): one
host cannot take every waiter or stream by opening more connections. ``client_of`` is the one
place that decides. Full limits raise ``OverloadedError``
(RESOURCE_EXHAUSTED, retriable) naming the limit, its value and its setting.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from seglog_server.security import ANONYMOUS

from .call_gate import current_call
from .errors import OverloadedError, ServiceStoppingError

__all__ = ["DRAIN_QUIET_S", "Admission", "AdmissionLimits", "AdmissionStatistics", "client_of"]

# A drain ends once no call is in progress *and* none has arrived for this long (or the grace ran
# out). Calls already sent when the gRPC server stops are cancelled by gRPC itself (CANCELLED,
# which clients do not retry); while the drain lasts they are answered UNAVAILABLE instead. 0.2 s:
# a client that just got its answer sends its next call within a round trip (well under 1 ms on a
# LAN), and a retrying client backs off for longer (the seglog producer: 100 ms and up).
DRAIN_QUIET_S = 0.2


@dataclass(frozen=True)
class AdmissionLimits:
    request_max: int
    waiter_max: int
    waiter_per_client_max: int
    stream_max: int
    stream_per_client_max: int

    def __post_init__(self) -> None:
        assert self.request_max >= 1
        assert 1 <= self.waiter_per_client_max <= self.waiter_max
        assert 1 <= self.stream_per_client_max <= self.stream_max

    @property
    def total_max(self) -> int:
        """Every call the three limits can let in at once."""
        return self.request_max + self.waiter_max + self.stream_max


@dataclass(frozen=True)
class AdmissionStatistics:
    request_count: int
    waiter_count: int
    stream_count: int
    client_count: int  # clients holding a waiter or a stream
    rejected_by_limit: dict[str, int]


def client_of(context: Any) -> str:
    """The client a call comes from: its authenticated principal when the call gate named one
    (call_gate.current_call), else the peer's host (without its port)."""
    call = current_call()
    if call is not None and call.principal != ANONYMOUS:
        return f"principal {call.principal}"
    peer_of = getattr(context, "peer", None)
    peer = peer_of() if callable(peer_of) else ""
    kind, _, address = (peer or "").partition(":")
    if kind in ("ipv4", "ipv6"):
        host, _, _port = address.rpartition(":")
        return host or address
    return peer or "unknown"


class _Pool:
    """A count against a service-wide limit and a per-client one."""

    def __init__(self, setting: str, total_max: int, per_client_setting: str, per_client_max: int):
        self.setting = setting
        self.total_max = total_max
        self.per_client_setting = per_client_setting
        self.per_client_max = per_client_max
        self.count = 0
        self.by_client: Counter[str] = Counter()

    def take(self, client: str, what: str, rejected: Counter[str]) -> None:
        if self.count >= self.total_max:
            rejected[self.setting] += 1
            raise OverloadedError(
                f"too many {what}: {self.count} of {self.setting}={self.total_max} in use; "
                "retry later"
            )
        if self.by_client[client] >= self.per_client_max:
            rejected[self.per_client_setting] += 1
            raise OverloadedError(
                f"too many {what} from client {client}: {self.by_client[client]} of "
                f"{self.per_client_setting}={self.per_client_max} in use; retry later"
            )
        self.count += 1
        self.by_client[client] += 1

    def give_back(self, client: str) -> None:
        self.count -= 1
        self.by_client[client] -= 1
        if not self.by_client[client]:
            del self.by_client[client]
        assert self.count >= 0


class Admission:
    """Everything here runs on the event loop (no locks needed)."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self._limits = limits
        self._request_count = 0
        self._waiters = _Pool("long_poll_waiters_max", limits.waiter_max,
                              "long_poll_waiters_per_client_max", limits.waiter_per_client_max)
        self._streams = _Pool("consume_streams_max", limits.stream_max,
                              "consume_streams_per_client_max", limits.stream_per_client_max)
        self._rejected: Counter[str] = Counter()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._idle: asyncio.Event | None = None
        self._draining = False
        self._cut: set[asyncio.Task[Any]] = set()
        self._last_arrival = 0.0

    # -- shutdown -----------------------------------------------------------------------------
    async def drain(self, grace_s: float) -> int:
        """Refuses new calls (UNAVAILABLE), waits up to ``grace_s`` for those in progress and for
        arrivals to go quiet (``DRAIN_QUIET_S``), then cuts what still runs (they answer
        UNAVAILABLE too). Returns how many were cut."""
        self._draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while (remaining_s := deadline - loop.time()) > 0:
            if self._handlers:
                self._idle = asyncio.Event()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._idle.wait(), remaining_s)
                continue
            quiet_left_s = self._last_arrival + DRAIN_QUIET_S - loop.time()
            if quiet_left_s <= 0:
                break
            await asyncio.sleep(min(quiet_left_s, remaining_s))
        cut = [task for task in self._handlers if not task.done()]
        for task in cut:
            self._cut.add(task)
            task.cancel()
        if cut:
            await asyncio.wait(cut)
        return len(cut)

    def was_cut(self) -> bool:
        """True in a handler cancelled by ``drain`` (not by its client going away)."""
        task = asyncio.current_task()
        return task is not None and task in self._cut

    @contextlib.contextmanager
    def handler(self) -> Iterator[None]:
        """A call in progress, as the drain counts it (refused once the drain began). It holds
        no slot: a unary call takes its request slot (``request_slot``) only once it has been
        authenticated, so callers still proving who they are never hold one (boundary.py)."""
        self._last_arrival = asyncio.get_running_loop().time()
        if self._draining:
            raise ServiceStoppingError("seglog is shutting down; retry on a running service")
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            yield
        finally:
            self._handlers.discard(task)
            if self._idle is not None and not self._handlers:
                self._idle.set()

    # -- admission ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """``handler`` and ``request_slot`` at once (for a call with nothing to check first)."""
        with self.handler(), self.request_slot():
            yield

    @contextlib.contextmanager
    def request_slot(self) -> Iterator[None]:
        """A unary call's request slot, inside its ``handler``."""
        self.take_request_slot()
        try:
            yield
        finally:
            self.give_back_request_slot()

    def take_request_slot(self) -> None:
        """A request slot: a unary call's (``request``), or one stream message's, as the unary
        call it stands for (the stream's own slot is taken by ``stream``);
        ``give_back_request_slot`` once its answer is made. A stream message calls the pair
        directly, not through a context manager: they run once per message."""
        if self._request_count >= self._limits.request_max:
            self._rejected["rpc_concurrency_max"] += 1
            raise OverloadedError(
                f"too many requests in progress: {self._request_count} of "
                f"rpc_concurrency_max={self._limits.request_max}; retry later"
            )
        self._request_count += 1

    def request_slot_free(self) -> bool:
        """Whether ``take_request_slot`` would take one now (a check, nothing taken)."""
        return self._request_count < self._limits.request_max

    def give_back_request_slot(self) -> None:
        self._request_count -= 1

    @contextlib.contextmanager
    def waiting(self, client: str) -> Iterator[None]:
        """Inside ``request``: hands the request slot back for a waiter slot while waiting."""
        self._waiters.take(client, "waiting Fetches (long polls)", self._rejected)
        self._request_count -= 1
        try:
            yield
        finally:
            self._request_count += 1
            self._waiters.give_back(client)

    @contextlib.contextmanager
    def stream(self, client: str) -> Iterator[None]:
        with self.handler():
            self._streams.take(client, "open streams (Consume, ProduceStream, LookupStream)", self._rejected)
            try:
                yield
            finally:
                self._streams.give_back(client)

    def statistics(self) -> AdmissionStatistics:
        clients = set(self._waiters.by_client) | set(self._streams.by_client)
        return AdmissionStatistics(
            request_count=self._request_count,
            waiter_count=self._waiters.count,
            stream_count=self._streams.count,
            client_count=len(clients),
            rejected_by_limit=dict(self._rejected),
        )
