"""A service start that fails leaves no service process behind: the helpers that start one
(``integration_helpers.ServiceProcess.start``, the client tests' ``start_service``,
``etcd_server.EtcdServer.launch`` and ``s3_server.WeedServer.launch``) kill and reap it whether the start ran out of time or was interrupted (Ctrl-C, a cancelled run). The caller
never got the service to stop, and its temp dir goes at the end of the test, so a process left
there ran on with its data deleted.

The services are real; the start's bound is made 0 s (it runs out before the service can load) or
its poll's sleep raises KeyboardInterrupt."""

from __future__ import annotations

import importlib
import signal
import subprocess
import time
import types
from collections.abc import Iterator

import pytest
import tests.integration.client.conftest as client_conftest
from tests.support import etcd_server, integration_helpers, s3_server
from tests.support.integration_helpers import ServiceProcess

pytestmark = pytest.mark.integration


def _interrupted_sleep(_seconds: float) -> None:
    raise KeyboardInterrupt


def _fail_start(monkeypatch, module, timeout_name: str, how: str) -> type[BaseException]:
    """Makes ``module``'s next service start fail ``how``; returns what the start raises then."""
    if how == "timeout":
        monkeypatch.setattr(module, timeout_name, 0.0)
        return AssertionError
    monkeypatch.setattr(module, "time", types.SimpleNamespace(monotonic=time.monotonic, sleep=_interrupted_sleep))
    return KeyboardInterrupt


@pytest.fixture
def popened(monkeypatch) -> Iterator[list[subprocess.Popen]]:
    """Every process the test starts (the client tests' helper does not hand its process back
    when its start fails)."""
    started: list[subprocess.Popen] = []

    class Recorded(subprocess.Popen):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(subprocess, "Popen", Recorded)
    yield started
    for process in started:  # a helper that failed its test leaves no process either
        if process.poll() is None:
            process.kill()
            process.wait()


def _assert_killed_and_reaped(process: subprocess.Popen) -> None:
    # returncode is set only by a wait (or poll) of the helper's: the test itself waits for nothing.
    assert process.returncode == -signal.SIGKILL


@pytest.mark.parametrize("how", ["timeout", "interrupt"])
def test_a_failed_service_process_start_kills_and_reaps_the_process(tmp_path, monkeypatch, popened, how):
    raised = _fail_start(monkeypatch, integration_helpers, "START_TIMEOUT_S", how)
    service = ServiceProcess(tmp_path, [tmp_path / "data"], [])
    with pytest.raises(raised):
        service.start()
    assert [service.process] == popened
    _assert_killed_and_reaped(service.process)


@pytest.mark.parametrize("how", ["timeout", "interrupt"])
def test_a_failed_client_tests_service_start_kills_and_reaps_the_process(tmp_path, monkeypatch, popened, how):
    raised = _fail_start(monkeypatch, client_conftest, "SERVICE_START_TIMEOUT_S", how)
    with pytest.raises(raised):
        client_conftest.start_service(tmp_path)
    assert len(popened) == 1
    _assert_killed_and_reaped(popened[0])


@pytest.mark.parametrize("how", ["timeout", "interrupt"])
@pytest.mark.parametrize("server", [etcd_server.EtcdServer, s3_server.WeedServer], ids=["etcd", "weed"])
def test_a_failed_engine_start_kills_and_reaps_the_process(tmp_path, monkeypatch, popened, server, how):
    raised = _fail_start(monkeypatch, importlib.import_module(server.__module__), "START_TIMEOUT_S", how)
    with pytest.raises(raised):
        server.start(str(tmp_path))
    assert len(popened) == 1
    _assert_killed_and_reaped(popened[0])
