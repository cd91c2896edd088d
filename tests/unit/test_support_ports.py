"""tests/support/ports.py: the ports a test names before its process starts come from below the
kernel's ephemeral range, from the block of this pytest-xdist worker, each free, in turn."""

from __future__ import annotations

import socket

import pytest

from tests.support import ports


def test_ports_are_free_distinct_and_in_this_workers_block_below_the_ephemeral_range(monkeypatch):
    for worker, block in (("gw0", (20_000, 21_500)), ("gw1", (21_500, 23_000))):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setattr(ports, "_next", None)
        handed = [ports.free_port() for _ in range(20)]
        assert len(set(handed)) == 20 and all(block[0] <= port < block[1] for port in handed)
        assert all(port < 32_768 for port in handed)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", handed[-1]))  # free when handed out


def test_a_port_someone_listens_on_is_passed_over(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")  # the block 24500-25999
    for port in range(24_600, 25_900):
        with socket.socket() as taken:
            try:
                taken.bind(("127.0.0.1", port))
            except OSError:
                continue
            taken.listen()
            monkeypatch.setattr(ports, "_next", port)
            handed = ports.free_port()
            assert handed != port and port < handed < 26_000
            return
    pytest.fail("no port of the block could be taken for the test")


def test_a_block_with_no_free_port_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    monkeypatch.setattr(ports, "_next", None)

    class Taken(socket.socket):
        def bind(self, address):
            raise OSError("in use")

    monkeypatch.setattr(ports.socket, "socket", Taken)
    with pytest.raises(RuntimeError, match="no free loopback port in 27500-28999"):
        ports.free_port()
