"""``python -m seglog_server.healthcheck``: the container health check, against a real service."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def _check(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "seglog_server.healthcheck", *args],
        capture_output=True, text=True, timeout=30,
    )


def test_serving_service_is_healthy(service):
    result = _check("--server", service.address)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"seglog at {service.address}: SERVING"


def test_unknown_health_service_is_unhealthy(service):
    result = _check("--server", service.address, "--service", "no.such.Service")
    assert result.returncode == 1
    assert "NOT_FOUND" in result.stderr


def test_nothing_listening_is_unhealthy():
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = _check("--server", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert "UNAVAILABLE" in result.stderr or "DEADLINE_EXCEEDED" in result.stderr
