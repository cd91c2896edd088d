"""listen_check: why a listen address cannot be bound, in one line naming the flag, with real
sockets on loopback."""

from __future__ import annotations

import errno
import os
import socket

import pytest

from seglog_server.listen_check import GRPC_LISTEN_FLAG, METRICS_LISTEN_FLAG, bind_problem, describe_bind_error


@pytest.fixture
def listening():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_a_port_someone_listens_on_is_in_use_and_the_flag_is_named(listening):
    problem = bind_problem(listening, GRPC_LISTEN_FLAG)
    assert problem == (f"cannot listen on {listening}: the port is in use (another seglog, or another program, "
                       f"listens on it); choose another with {GRPC_LISTEN_FLAG}")


def test_a_free_port_and_port_0_have_no_problem(listening):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        free = f"127.0.0.1:{sock.getsockname()[1]}"  # bound, not listening: closed below
    assert bind_problem(free, GRPC_LISTEN_FLAG) is None
    assert bind_problem("127.0.0.1:0", GRPC_LISTEN_FLAG) is None


def test_a_port_whose_closed_connection_lingers_in_time_wait_is_free():
    """gRPC binds with SO_REUSEADDR, so the check does too: a restart right after a stop works
    (the old listener was gRPC's, with SO_REUSEADDR, which its connections in TIME_WAIT keep)."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = server.getsockname()
        client = socket.create_connection(address)
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end waits in TIME_WAIT
        client.close()
    assert bind_problem(f"127.0.0.1:{address[1]}", GRPC_LISTEN_FLAG) is None


def test_a_host_that_is_not_this_machines_address():
    problem = bind_problem("192.0.2.1:50551", METRICS_LISTEN_FLAG)  # TEST-NET-1: nobody's address
    assert problem == ("cannot listen on 192.0.2.1:50551: the host is not an address of this machine; "
                       f"choose another with {METRICS_LISTEN_FLAG}")


@pytest.mark.parametrize(
    ("code", "reason"),
    [(errno.EACCES, "permission denied (ports below 1024 need privileges)"), (errno.ENOBUFS, "No buffer space available")],
)
def test_other_errors_are_said_with_their_reason(code, reason):
    error = OSError(code, os.strerror(code))
    assert describe_bind_error("0.0.0.0:80", error, GRPC_LISTEN_FLAG) == (
        f"cannot listen on 0.0.0.0:80: {reason}; choose another with {GRPC_LISTEN_FLAG}")
