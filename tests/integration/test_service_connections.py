"""Connections give their descriptors back: a real service process closes TCP connections that
never complete their handshake (``--handshake-timeout-ms``) and connections with no call in
flight (``--connection-idle-ms``). With gRPC's defaults a socket that never spoke held its
descriptor for 120 s, and an idle one for ever: 1,100 such sockets under a 1,024 descriptor limit
refused every storage call.

Each test waits for the service's action with a generous deadline, never for a fixed time.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time

import grpc
from tests.support.integration_helpers import assert_serving

from seglog.v1 import log_service_pb2_grpc as pb_grpc

SILENT_COUNT = 40
DEADLINE_S = 30.0  # far above the short timeouts the tests set: only a service that never acts misses it


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def _wait_until_closed_by_peer(sockets: list[socket.socket], deadline_s: float) -> list[socket.socket]:
    """Reads (and drops) what the service sends until each socket sees end-of-file; returns the
    sockets still open at the deadline."""
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    open_sockets = set(sockets)
    end = time.monotonic() + deadline_s
    while open_sockets and time.monotonic() < end:
        for key, _ in selector.select(timeout=max(0.0, end - time.monotonic())):
            try:
                data = key.fileobj.recv(65536)  # the server's HTTP/2 SETTINGS, then EOF
            except ConnectionResetError:
                data = b""
            if not data:
                selector.unregister(key.fileobj)
                open_sockets.discard(key.fileobj)
    selector.close()
    return list(open_sockets)


def _descriptor_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_connections_that_never_speak_are_closed_after_the_handshake_timeout(start_service):
    service = start_service(args=["--handshake-timeout-ms", "300"])
    assert_serving(service.stub)
    before = _descriptor_count(service.process.pid)
    silent = [socket.create_connection(_host_port(service.address)) for _ in range(SILENT_COUNT)]
    try:
        still_open = _wait_until_closed_by_peer(silent, DEADLINE_S)
        assert still_open == [], f"{len(still_open)} of {SILENT_COUNT} silent connections still open"
        assert_serving(service.stub)  # the service's own connection is unaffected
        assert _descriptor_count(service.process.pid) <= before + 2
    finally:
        for sock in silent:
            sock.close()


def test_a_connection_with_no_call_in_flight_is_closed_after_the_idle_time(start_service):
    service = start_service(args=["--connection-idle-ms", "500"])
    channel = grpc.insecure_channel(service.address)
    went_idle = threading.Event()
    seen: list[grpc.ChannelConnectivity] = []

    def on_state(state: grpc.ChannelConnectivity) -> None:
        seen.append(state)
        # READY then IDLE: the service sent GOAWAY on the idle connection and closed it.
        if state is grpc.ChannelConnectivity.IDLE and grpc.ChannelConnectivity.READY in seen:
            went_idle.set()

    try:
        stub = pb_grpc.LogServiceStub(channel)
        assert_serving(stub)
        channel.subscribe(on_state, try_to_connect=False)
        assert went_idle.wait(DEADLINE_S), f"states seen: {seen}"
        assert_serving(stub)  # the channel reconnects on its next call
    finally:
        channel.close()
