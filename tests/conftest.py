"""Shared pytest configuration.

Sync clients left open: a synchronous client (Producer, Consumer, Admin, GroupConsumer) holds the
process's shared event-loop thread until it is closed, so one a test forgets keeps that thread
(and its channels) for the rest of the run, and later tests that count loop-thread users judge it
instead of their own. Every sync client a test module constructs itself (the code constructing
it is in the module's file: a test, a helper or a fixture written there), and every one the
module had made by a helper of another file (its creation has a frame in the module's file
further up), must be closed by the time the module ends: the module's last test errors at
teardown naming the module and, for each, the line that created it or called the helper.
Clients of shared fixtures (conftest.py, tests/support) are not judged. Close with a
with-block, or pass the client through the ``closing`` fixture.
"""

from __future__ import annotations

import os
import sys
import threading

import pytest
import uvloop
from hypothesis import HealthCheck, settings

from seglog import _sync

# Hypothesis's own clocks are timed assertions: its 200 ms deadline per example and its too-slow
# health check fail a property on a loaded machine (two pytest-xdist workers and the services they
# start share CI's 2 CPUs) though every example held. Off for every property; a test that sets
# its own settings keeps what it sets.
settings.register_profile("seglog", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("seglog")


def pytest_asyncio_loop_factories(config, item):
    # grpc.aio runs under uvloop in the service; tests use the same loop.
    return {"uvloop": uvloop.new_event_loop}


_CLIENT_DIR = os.path.dirname(os.path.realpath(_sync.__file__))


class _Created:
    def __init__(self, client: _sync.SyncFacade, line: int, direct: bool) -> None:
        self.client, self.line, self.direct = client, line, direct

    def describe(self) -> str:
        how = "created at" if self.direct else "made by a helper called at"
        return f"{type(self.client).__name__} {how} line {self.line}"


class _SyncClientsOfModule:
    """The sync clients created for the running test module, with the line in its file."""

    def __init__(self) -> None:
        self.module_file: str | None = None
        self.created: list[_Created] = []
        self._lock = threading.Lock()

    def note(self, client: _sync.SyncFacade) -> None:
        module_file = self.module_file
        if module_file is None:
            return
        frame = sys._getframe(2)  # noqa: SLF001 - above the wrapper and SyncFacade's __init__
        while frame is not None and os.path.realpath(frame.f_code.co_filename).startswith(_CLIENT_DIR + os.sep):
            frame = frame.f_back  # the client package's own frames (a subclass's __init__, say)
        direct = True
        while frame is not None:
            if os.path.realpath(frame.f_code.co_filename) == module_file:
                with self._lock:
                    self.created.append(_Created(client, frame.f_lineno, direct))
                return
            direct = False
            frame = frame.f_back

    def leaked(self) -> list[_Created]:
        with self._lock:
            return [created for created in self.created if not created.client._released]  # noqa: SLF001


_of_module = _SyncClientsOfModule()


def pytest_configure(config):
    started = _sync.SyncFacade._start

    def _start(self, async_client):
        started(self, async_client)  # a refused construction raises here: nothing to close
        _of_module.note(self)

    _sync.SyncFacade._start = _start


@pytest.fixture(scope="module", autouse=True)
def _sync_clients_closed_by_their_module(request):
    module = getattr(request, "module", None)
    path = getattr(module, "__file__", None)
    _of_module.module_file = os.path.realpath(path) if path else None
    _of_module.created = []
    yield
    leaked = _of_module.leaked()
    _of_module.module_file, _of_module.created = None, []
    if leaked:
        named = [created.describe() for created in leaked]
        pytest.fail(f"{request.node.nodeid}: {len(named)} sync client(s) left open at the module's end "
                    f"(each holds the shared loop thread until the process exits): {', '.join(named)}; "
                    "close each (a with-block, or the closing fixture)", pytrace=False)


@pytest.fixture
def closing():
    """``admin = closing(Admin(...))``: closes each client passed through it when the test ends,
    passed or failed (the latest first)."""
    clients: list[_sync.SyncFacade] = []

    def keep(client):
        clients.append(client)
        return client

    yield keep
    for client in reversed(clients):
        client.close()
