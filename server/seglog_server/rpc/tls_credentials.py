"""gRPC server credentials whose certificates can be replaced while the server runs.

grpc's dynamic SSL credentials ask a fetcher for a new certificate configuration at each new
TLS handshake (checked with grpc.aio 1.85: the fetcher is called from the core for every new
connection, on any thread). The fetcher here returns a configuration only once after ``replace``
(SIGHUP), and None (keep the current one) otherwise, so a handshake costs one attribute swap.
Established connections keep the keys they negotiated: streams on them are not dropped, and new
connections get the new certificate. Whether client certificates are required is fixed at start
(``--tls-client-ca`` given or not); the client CA bundle itself is reloaded with the rest.
"""

from __future__ import annotations

import threading

import grpc

from seglog_server.security import TlsMaterial

__all__ = ["ReloadableTlsCredentials"]


def _configuration(material: TlsMaterial) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration(
        [(material.private_key, material.cert_chain)], root_certificates=material.client_ca
    )


class ReloadableTlsCredentials:
    def __init__(self, material: TlsMaterial) -> None:
        self._mutual = material.mutual
        self._lock = threading.Lock()  # the fetcher runs on gRPC's threads
        self._pending: grpc.ServerCertificateConfiguration | None = None
        self.reload_count = 0
        self.server_credentials = grpc.dynamic_ssl_server_credentials(
            _configuration(material), self._fetch, require_client_authentication=self._mutual
        )

    def replace(self, material: TlsMaterial) -> None:
        """New connections from now on use ``material``."""
        assert material.mutual == self._mutual, "mutual TLS cannot be turned on or off by reload"
        with self._lock:
            self._pending = _configuration(material)
            self.reload_count += 1

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        with self._lock:
            pending, self._pending = self._pending, None
        return pending
