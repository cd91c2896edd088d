"""A real etcd (Debian's etcd-server) on free loopback ports in a temporary directory.

``EtcdServer.start(directory)`` returns once etcd answers /health; ``stop()`` ends it (SIGTERM, then
SIGKILL) and leaves nothing running; ``pause()``/``resume()`` are SIGSTOP/SIGCONT, the fault tests'
frozen coordinator. ``require_etcd()`` finds the binary: scripts/test installs etcd-server when
missing and running as root, so a missing binary skips (saying why) only where it cannot be
installed, and fails where it should have been.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass

import pytest
from tests.support.ports import free_port

START_TIMEOUT_S = 20.0


def require_etcd() -> str:
    path = shutil.which("etcd")
    if path:
        return path
    if os.geteuid() != 0:
        pytest.skip("etcd is not installed and cannot be without root: apt-get install etcd-server")
    pytest.fail("etcd is not installed: scripts/test installs Debian's etcd-server when running as root")


@dataclass
class EtcdServer:
    directory: str
    client_port: int
    peer_port: int = 0
    process: subprocess.Popen | None = None
    extra_args: tuple[str, ...] = ()  # more etcd flags (e.g. a short progress-notify interval)
    name: str = "seglog-test"
    initial_cluster: str = ""  # "name=peer-url,..." of every member (EtcdCluster); "" for one member

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @classmethod
    def start(cls, directory: str, extra_args: tuple[str, ...] = ()) -> "EtcdServer":
        server = cls(directory, free_port(), free_port(), extra_args=tuple(extra_args))
        server.launch()
        return server

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def launch(self) -> None:
        """Starts (or starts again, with the same data) the etcd process."""
        self.spawn()
        try:
            self.wait_healthy()
        except BaseException:
            # Killed and reaped on any failure, Ctrl-C too: a caller whose start failed never got
            # the server to stop, and its temp dir goes, so etcd would run on without it.
            assert self.process is not None
            self.process.kill()
            self.process.wait()
            self.process = None
            raise

    def spawn(self) -> None:
        """Starts the process without waiting: a member of several is healthy only once a quorum runs."""
        assert self.process is None
        peer = self.peer_url
        client = self.endpoint
        log = open(os.path.join(self.directory, f"{self.name}.log"), "ab")
        self.process = subprocess.Popen(
            [require_etcd(), "--name", self.name, "--data-dir", os.path.join(self.directory, f"{self.name}-data"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", self.initial_cluster or f"{self.name}={peer}", "--log-level", "warn",
             *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.healthy():
            assert self.process.poll() is None, f"etcd exited with {self.process.returncode}: see {self.directory}"
            assert time.monotonic() < deadline, f"etcd did not become healthy in {START_TIMEOUT_S} s"
            time.sleep(0.05)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as response:
                return json.loads(response.read()).get("health") == "true"
        except (OSError, ValueError):
            return False

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGCONT)  # a paused etcd cannot act on SIGTERM
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None


class SharedEtcdServer(EtcdServer):
    """An etcd shared by several test modules that only read and write keys (the cluster tests'
    conftest.py): ``wipe()`` empties it for the next module; pause, resume, stop and launch fail
    the test, naming where a module that needs them gets an etcd of its own."""

    def _refuse(self, what: str) -> None:
        pytest.fail(f"the shared etcd cannot be {what}: list the module in OWN_ETCD "
                    "(tests/integration/cluster/conftest.py) to give it an etcd of its own", pytrace=False)

    def pause(self) -> None:
        self._refuse("paused")

    def resume(self) -> None:
        self._refuse("resumed")

    def stop(self) -> None:
        self._refuse("stopped")

    def launch(self) -> None:
        self._refuse("restarted")

    def shut_down(self) -> None:
        EtcdServer.stop(self)  # a second call (the session's end) finds it stopped

    def _post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(f"{self.endpoint}/v3/{path}", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read() or b"{}")

    def wipe(self) -> None:
        """Every key deleted and every lease revoked: what the next module sees is empty."""
        everything = base64.b64encode(b"\0").decode()
        self._post("kv/deleterange", {"key": everything, "range_end": everything})
        for lease in self._post("lease/leases", {}).get("leases", []):
            self._post("lease/revoke", {"ID": lease["ID"]})
        left = self._post("kv/range", {"key": everything, "range_end": everything, "count_only": True})
        assert int(left.get("count", 0)) == 0, left


@dataclass
class EtcdCluster:
    """Several etcd members on loopback, one etcd cluster: where quorum matters (a majority must run).

    ``stop_member(i)`` / ``start_member(i)`` stop one member and start it again with its data."""

    members: list[EtcdServer]

    @classmethod
    def start(cls, directory: str, size: int = 3) -> "EtcdCluster":
        members = [EtcdServer(directory, free_port(), free_port(), name=f"member{i}") for i in range(size)]
        initial = ",".join(f"{member.name}={member.peer_url}" for member in members)
        cluster = cls(members)
        try:
            for member in members:
                member.initial_cluster = initial
                member.extra_args = ("--initial-cluster-token", f"seglog-{os.path.basename(directory)}")
                member.spawn()
            for member in members:
                member.wait_healthy()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @property
    def endpoints(self) -> list[str]:
        return [member.endpoint for member in self.members]

    def stop_member(self, index: int) -> None:
        self.members[index].stop()

    def start_member(self, index: int) -> None:
        self.members[index].spawn()

    def wait_healthy(self) -> None:
        for member in self.members:
            if member.process is not None:
                member.wait_healthy()

    def stop(self) -> None:
        for member in self.members:
            member.stop()
