"""How every client reaches the service: one options type, built once, shared by Producer,
Consumer and Admin (and their async forms).

The connection keywords (``request_timeout_ms``, ``credentials``, ``channel_options``, ``tls``,
``tls_ca``, ``tls_cert``, ``tls_key``, ``token``) are the same on every client constructor;
``ConnectionOptions.resolve`` turns them into one frozen value as soon as the client is built (the
TLS files are read and the environment's fallbacks applied there, so a wrong option fails in the
caller's thread), and ``connect`` opens the ``Transport`` once a loop runs (a grpc.aio rule).
Kafka's clients share their connection and security settings the same way (``CommonClientConfigs``);
the retry policy is the producer's alone and stays in ``ProducerConfig``.

``server`` is one address or a bootstrap list (``"a:50551,b:50551"`` or a sequence of addresses,
Kafka's ``bootstrap.servers``): the transport dials the first reachable one (``Transport.ready``).
``connect_to`` opens a channel to one more address with the same settings: the routing clients'
channel per partition owner (``_routing.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from seglog._security import ConnectionSecurity, PemSource
from seglog.client import REQUEST_TIMEOUT_MS_DEFAULT, Transport
from seglog.structs import DEFAULT_SERVER

__all__ = ["ConnectionOptions", "parse_servers"]

ServerList = str | Sequence[str]


def parse_servers(server: ServerList) -> tuple[str, ...]:
    """The addresses of a bootstrap list, in order, duplicates dropped: ``"a:1,b:2"``, ``"a:1"``
    or ``["a:1", "b:2"]``. ValueError naming the value when it holds no address or an empty one."""
    if isinstance(server, str):
        parts = server.split(",")
    elif isinstance(server, Sequence) and all(isinstance(part, str) for part in server):
        parts = list(server)
    else:
        raise ValueError(f"server must be 'host:port', 'host:port,host:port' or a list of them, got {server!r}")
    addresses = [part.strip() for part in parts]
    if not addresses or any(not address for address in addresses):
        raise ValueError(f"server must name one or more 'host:port' addresses, got {server!r}")
    return tuple(dict.fromkeys(addresses))


@dataclass(frozen=True)
class ConnectionOptions:
    """Where the service is and how to talk to it: addresses, deadline, channel, TLS and token."""

    # The bootstrap list as given, joined ("a:1,b:2"); ``servers`` holds its addresses.
    server: str
    request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT
    # Ready gRPC credentials win over ``security``'s TLS settings; its token is sent either way.
    credentials: grpc.ChannelCredentials | None = None
    channel_options: tuple[tuple[str, Any], ...] = ()
    security: ConnectionSecurity = ConnectionSecurity()
    servers: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.servers:
            object.__setattr__(self, "servers", parse_servers(self.server))

    @classmethod
    def resolve(
        cls,
        server: ServerList = DEFAULT_SERVER,
        *,
        request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
        credentials: grpc.ChannelCredentials | None = None,
        channel_options: Sequence[tuple[str, Any]] = (),
        tls: bool | None = None,
        tls_ca: PemSource | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        token: str | None = None,
    ) -> ConnectionOptions:
        """The clients' connection keywords as one value; ValueError when the TLS and token
        options do not fit together (``ConnectionSecurity.resolve``). The address and deadline
        are checked when connecting, as before; the bootstrap list (ValueError) here."""
        servers = parse_servers(server)
        return cls(
            server=",".join(servers),
            servers=servers,
            request_timeout_ms=request_timeout_ms,
            credentials=credentials,
            channel_options=tuple(channel_options),
            security=ConnectionSecurity.resolve(tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token),
        )

    def connect(self) -> Transport:
        """A channel to the service (the first reachable of a bootstrap list); call it on the
        event loop that will use it."""
        return self._transport(self.servers[0], self.servers)

    def connect_to(self, address: str) -> Transport:
        """A channel to one given address (a partition owner's) with the same settings."""
        return self._transport(address, ())

    def _transport(self, server: str, bootstrap: tuple[str, ...]) -> Transport:
        return Transport(
            server,
            request_timeout_ms=self.request_timeout_ms,
            credentials=self.credentials,
            channel_options=self.channel_options,
            security=self.security,
            bootstrap=bootstrap,
        )
