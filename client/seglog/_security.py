"""How a client proves who it is and checks whom it talks to: TLS and bearer tokens.

Every client (Producer, Consumer, Admin, their async forms, the CLI) takes the same options;
each one not given falls back to an environment variable:

    tls=True        SEGLOG_TLS=1              TLS, verifying the server against the system's CAs
    tls_ca=FILE     SEGLOG_TLS_CA             TLS, verifying the server against these PEM CAs
    tls_cert=FILE   SEGLOG_TLS_CLIENT_CERT    a client certificate (mutual TLS), with tls_key
    tls_key=FILE    SEGLOG_TLS_CLIENT_KEY
    token=TOKEN     SEGLOG_TOKEN              sent as ``authorization: Bearer TOKEN`` on each call

Any TLS option turns TLS on, and the server is always verified (there is no option to skip it:
a test CA is one file away). The client certificate's variables are not SEGLOG_TLS_CERT and
SEGLOG_TLS_KEY because those are the service's own settings (``--tls-cert``), and a shell that
runs both must not hand the service's key to every client or the other way round. Options may
be paths or the PEM bytes themselves. ``credentials=`` (a ready grpc.ChannelCredentials) still
works and wins over the TLS options.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc

__all__ = ["ENV_TLS", "ENV_TLS_CA", "ENV_TLS_CLIENT_CERT", "ENV_TLS_CLIENT_KEY", "ENV_TOKEN",
           "ConnectionSecurity", "PemSource"]

ENV_TLS = "SEGLOG_TLS"
ENV_TLS_CA = "SEGLOG_TLS_CA"
ENV_TLS_CLIENT_CERT = "SEGLOG_TLS_CLIENT_CERT"
ENV_TLS_CLIENT_KEY = "SEGLOG_TLS_CLIENT_KEY"
ENV_TOKEN = "SEGLOG_TOKEN"
AUTHORIZATION_METADATA_KEY = "authorization"
# A PEM file beyond this is not a certificate or key (a bundle of every public CA is ~250 KB).
_PEM_BYTES_MAX = 4 * 1024 * 1024

PemSource = str | os.PathLike[str] | bytes


@dataclass(frozen=True)
class ConnectionSecurity:
    tls: bool = False
    root_certificates: bytes | None = None
    private_key: bytes | None = None
    certificate_chain: bytes | None = None
    token: str | None = None

    @classmethod
    def resolve(
        cls,
        *,
        tls: bool | None = None,
        tls_ca: PemSource | None = None,
        tls_cert: PemSource | None = None,
        tls_key: PemSource | None = None,
        token: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> ConnectionSecurity:
        """Options, else environment variables; ValueError when they do not fit together."""
        environ = os.environ if environ is None else environ
        tls_ca = tls_ca if tls_ca is not None else environ.get(ENV_TLS_CA) or None
        tls_cert = tls_cert if tls_cert is not None else environ.get(ENV_TLS_CLIENT_CERT) or None
        tls_key = tls_key if tls_key is not None else environ.get(ENV_TLS_CLIENT_KEY) or None
        token = token if token is not None else environ.get(ENV_TOKEN) or None
        if tls is None:
            tls = environ.get(ENV_TLS, "").strip().lower() in ("1", "true", "yes", "on")
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("tls_cert and tls_key go together (a client certificate and its key)")
        if token is not None and (not token.strip() or any(c in token for c in "\r\n")):
            raise ValueError("token must be one line of text")
        uses_tls = bool(tls) or tls_ca is not None or tls_cert is not None
        return cls(
            tls=uses_tls,
            root_certificates=_pem("tls_ca", tls_ca),
            private_key=_pem("tls_key", tls_key),
            certificate_chain=_pem("tls_cert", tls_cert),
            token=token.strip() if token else None,
        )

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        if self.token is None:
            return ()
        return ((AUTHORIZATION_METADATA_KEY, f"Bearer {self.token}"),)


def _pem(option: str, source: Any) -> bytes | None:
    if source is None:
        return None
    if isinstance(source, bytes):
        data = source
    else:
        try:
            with open(source, "rb") as file:
                data = file.read(_PEM_BYTES_MAX + 1)
        except OSError as exc:
            raise ValueError(f"{option}: cannot read {source}: {exc.strerror}") from None
    if len(data) > _PEM_BYTES_MAX or b"-----BEGIN" not in data:
        raise ValueError(f"{option}: not a PEM file")
    return data
