"""How every client reaches the service: one options type, built once, shared by Producer,
Consumer and Admin (and their async forms).

The connection keywords (``request_timeout_ms``, ``credentials``, ``channel_options``, ``tls``,
``tls_ca``, ``tls_cert``, ``tls_key``, ``token``) are the same on every client constructor;
``ConnectionOptions.resolve`` turns them into one frozen value as soon as the client is built (the
TLS files are read and the environment's fallbacks applied there, so a wrong option fails in the
caller's thread), and ``connect`` opens the ``Transport`` once a loop runs (a grpc.aio rule).
Kafka's clients share their connection and security settings the same way (``CommonClientConfigs``);
the retry policy is the producer's alone and stays in ``ProducerConfig``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from seglog._security import ConnectionSecurity, PemSource
from seglog.client import REQUEST_TIMEOUT_MS_DEFAULT, Transport
from seglog.structs import DEFAULT_SERVER

__all__ = ["ConnectionOptions"]


@dataclass(frozen=True)
class ConnectionOptions:
    """Where the service is and how to talk to it: address, deadline, channel, TLS and token."""

    server: str
    request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT
    # Ready gRPC credentials win over ``security``'s TLS settings; its token is sent either way.
    credentials: grpc.ChannelCredentials | None = None
    channel_options: tuple[tuple[str, Any], ...] = ()
    security: ConnectionSecurity = ConnectionSecurity()

    @classmethod
    def resolve(
        cls,
        server: str = DEFAULT_SERVER,
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
        are checked when connecting, as before."""
        return cls(
            server=server,
            request_timeout_ms=request_timeout_ms,
            credentials=credentials,
            channel_options=tuple(channel_options),
            security=ConnectionSecurity.resolve(tls=tls, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key, token=token),
        )

    def connect(self) -> Transport:
        """A channel to the service; call it on the event loop that will use it."""
        return Transport(
            self.server,
            request_timeout_ms=self.request_timeout_ms,
            credentials=self.credentials,
            channel_options=self.channel_options,
            security=self.security,
        )
