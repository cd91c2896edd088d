"""The host a member's records keep, from gRPC's peer string, as Kafka shows a member's host
("/" and the address, no port): IPv4, IPv6 (bracketed, percent-encoded or not), another kind of
peer as gRPC names it, nothing when the peer is unknown."""

from __future__ import annotations

import pytest

from seglog_server.rpc.group_rpcs import client_host


class Peer:
    """A call context's one method client_host reads."""

    def __init__(self, peer: str) -> None:
        self._peer = peer

    def peer(self) -> str:
        return self._peer


@pytest.mark.parametrize(("peer", "host"), [
    ("ipv4:127.0.0.1:54321", "/127.0.0.1"),
    ("ipv4:10.1.2.3:9", "/10.1.2.3"),
    ("ipv6:[::1]:54321", "/::1"),
    ("ipv6:%5B::1%5D:54321", "/::1"),
    ("ipv6:[fe80::1:2]:80", "/fe80::1:2"),
    ("unix:/run/seglog.sock", "unix:/run/seglog.sock"),
    ("", ""),
])
def test_the_host_is_the_peers_address_without_its_port(peer, host):
    assert client_host(Peer(peer)) == host


def test_no_context_gives_no_host():
    assert client_host(None) == ""
