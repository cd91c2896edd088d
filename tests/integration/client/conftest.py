"""Fixtures for the client's end-to-end tests: a real ``python -m seglog_server`` on loopback.

One service per test module (tests use their own topics); the CLI runs as a subprocess
(``python -m seglog_cli``) against it.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.integration_helpers import (
    LIMITED_BATCH_BYTES_MAX,
    LIMITED_REQUEST_BYTES_MAX,
    START_TIMEOUT_S,
    ServiceProcess,
    keeping_records,
)

from seglog import Admin

# A service loads and binds in well under a second when the machine is idle; the bound only stops
# a hang (integration_helpers.START_TIMEOUT_S says why 30 s was too short on a loaded machine).
SERVICE_START_TIMEOUT_S = START_TIMEOUT_S
SERVICE_STOP_TIMEOUT_S = 30.0
# Polling the ready file is the one wait we cannot be notified of (the service writes it atomically).
READY_POLL_S = 0.02
# A CLI command against a live service finishes in about a second; the bound only stops a hang.
CLI_TIMEOUT_S = 60.0


@dataclass
class RunningService:
    address: str
    data_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _environment() -> dict[str, str]:
    """The runner's environment without SEGLOG_* settings, which would change the service or CLI."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}


def start_service(workdir: Path, *extra_args: str) -> RunningService:
    data_dir = workdir / "data"
    ready = workdir / "ready"
    log_path = workdir / "service.log"
    # Metrics on a free port too: services run side by side here (and on colleagues' runs).
    command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
               "--metrics-listen", "127.0.0.1:0", "--data-dir", str(data_dir), *extra_args]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=log, env=_environment(), cwd=workdir)
    try:
        _wait_ready(process, ready, log_path)
        return RunningService(ready.read_text().strip(), data_dir, process, log_path)
    except BaseException:
        # Killed and reaped on any failure, Ctrl-C and a cancelled run too: the caller never got
        # the service to stop, and its temp dir goes, so the process would run on without it.
        process.kill()
        process.wait()
        raise


def _wait_ready(process: subprocess.Popen[bytes], ready: Path, log_path: Path) -> None:
    deadline = time.monotonic() + SERVICE_START_TIMEOUT_S
    while not ready.exists():
        if process.poll() is not None:
            raise AssertionError(f"service exited with {process.returncode}:\n{log_path.read_text()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"service not ready after {SERVICE_START_TIMEOUT_S} s:\n{log_path.read_text()}")
        time.sleep(READY_POLL_S)


def stop_service(service: RunningService) -> int:
    if service.process.poll() is None:
        service.process.send_signal(signal.SIGTERM)
    return service.process.wait(timeout=SERVICE_STOP_TIMEOUT_S)


@pytest.fixture(scope="module")
def seglog_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningService]:
    """The module's service, keeping its records whatever their timestamps (``keeping_records``)."""
    service = start_service(tmp_path_factory.mktemp("client-e2e"), *keeping_records())
    yield service
    code = stop_service(service)
    assert code == 0, service.log()


_topic_numbers = itertools.count()


@pytest.fixture(scope="module")
def limited_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """A service of the module's own taking requests of at most ``LIMITED_REQUEST_BYTES_MAX``
    (900,000 bytes): smaller than the 1 MiB the client packs to, so a message of several batches
    packed to the client's limit is above it."""
    workdir = tmp_path_factory.mktemp("limited-service")
    args = keeping_records(["--request-bytes-max", str(LIMITED_REQUEST_BYTES_MAX),
                            "--topic-default", f"max.message.bytes={LIMITED_BATCH_BYTES_MAX}"])
    service = ServiceProcess(workdir, [workdir / "data"], args).start()
    yield service
    assert service.stop() == 0, service.log()


@pytest.fixture
def make_topic(seglog_service: RunningService, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Factory: make_topic(partitions=1, configs=None) -> a new topic's name."""

    def make(partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        name = f"{request.node.name[:60].strip('_')}-{next(_topic_numbers)}"
        name = "".join(c if c.isalnum() or c in "._-" else "-" for c in name)
        with Admin(seglog_service.address) as admin:
            admin.create_topic(name, partitions, configs or {})
        return name

    return make


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run_cli(seglog_service: RunningService) -> Callable[..., CliResult]:
    """run_cli(*args, input=None, server=True) -> CliResult of ``python -m seglog_cli``."""

    def run(*args: str, input: str | None = None, server: bool = True) -> CliResult:
        command = [sys.executable, "-m", "seglog_cli", *args]
        if server:
            command[3:3] = ["--server", seglog_service.address]
        done = subprocess.run(command, input=input, capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                              env=_environment())
        return CliResult(done.returncode, done.stdout, done.stderr)

    return run
