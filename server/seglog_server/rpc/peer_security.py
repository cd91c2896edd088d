"""How an instance dials another of its cluster (a move's CopyPartition): the credentials it
presents, as any client must present them to a service with tokens or client certificates on.

- ``cluster_token_file``: a file holding one token (``seglog token create NAME``) the instance
  sends as ``authorization: Bearer`` on every call to another instance; the principal it names
  is what the peers' ACL sees (it needs the topics' admin operation for CopyPartition);
- with TLS served (``tls_cert``), peers are dialed over TLS: their server certificates checked
  against ``cluster_tls_ca`` (the system roots without it), and this instance's own certificate
  and key presented as its client certificate, so a cluster requiring client certificates
  (``tls_client_ca``) admits its instances.

Read once at start (config.py checks the token file: present, one line); without these settings
an instance dials its peers in plaintext with no credentials, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

__all__ = ["PeerSecurity", "read_token_file"]


def read_token_file(path: str) -> str:
    """The token in ``path``: one non-empty line (ValueError otherwise; OSError when unreadable)."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read(4096 + 1)
    token = text.strip()
    if not token or len(text) > 4096 or any(c in token for c in "\r\n \t"):
        raise ValueError(f"{path}: expected one token on one line")
    return token


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as handle:
        return handle.read()


@dataclass(frozen=True)
class PeerSecurity:
    token: str | None = None
    tls: bool = False
    root_certificates: bytes | None = None
    private_key: bytes | None = None
    certificate_chain: bytes | None = None

    @classmethod
    def from_config(cls, config: Any) -> PeerSecurity:
        """From a ServiceConfig (already checked by config.py)."""
        token = read_token_file(config.cluster_token_file) if config.cluster_token_file else None
        if not config.tls_cert:
            return cls(token=token)
        return cls(token=token, tls=True, root_certificates=_read(config.cluster_tls_ca),
                   private_key=_read(config.tls_key), certificate_chain=_read(config.tls_cert))

    def channel(self, address: str, options: list[tuple[str, Any]]) -> grpc.aio.Channel:
        if not self.tls:
            return grpc.aio.insecure_channel(address, options=options)
        credentials = grpc.ssl_channel_credentials(root_certificates=self.root_certificates,
                                                   private_key=self.private_key,
                                                   certificate_chain=self.certificate_chain)
        return grpc.aio.secure_channel(address, credentials, options=options)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return () if self.token is None else (("authorization", f"Bearer {self.token}"),)
