"""The service's TLS files, read and checked together (at start and on every SIGHUP).

``--tls-cert`` is a PEM certificate chain (the service's certificate first), ``--tls-key`` its
PEM private key, ``--tls-client-ca`` the PEM certificates of the authorities whose client
certificates the service accepts (mutual TLS). The stdlib ``ssl`` module loads them the way an
OpenSSL server would, so a key that does not match its certificate, or a file that is not PEM, is
found here, with a message naming the setting, instead of at the first client's handshake.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from .errors import SecurityFileError

__all__ = ["TlsMaterial", "load_tls_material"]

# A certificate chain, key or CA bundle beyond this is not a TLS file (a real bundle of every
# public CA is ~250 KB).
TLS_FILE_BYTES_MAX = 4 * 1024 * 1024


@dataclass(frozen=True)
class TlsMaterial:
    cert_chain: bytes
    private_key: bytes
    client_ca: bytes | None  # None: server-only TLS

    @property
    def mutual(self) -> bool:
        return self.client_ca is not None


def load_tls_material(cert_path: str, key_path: str, client_ca_path: str | None) -> TlsMaterial:
    cert = _read("tls_cert", cert_path)
    key = _read("tls_key", key_path)
    client_ca = _read("tls_client_ca", client_ca_path) if client_ca_path else None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_path, key_path)
    except (ssl.SSLError, ValueError) as exc:
        raise SecurityFileError(
            f"tls_cert/tls_key: cannot be used together as a TLS server identity ({exc})"
        ) from None
    if client_ca is not None:
        try:
            context.load_verify_locations(cadata=client_ca.decode("ascii"))
        except (ssl.SSLError, ValueError, UnicodeDecodeError) as exc:
            raise SecurityFileError(f"tls_client_ca: not PEM CA certificates ({exc})") from None
    return TlsMaterial(cert, key, client_ca)


def _read(setting: str, path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            data = file.read(TLS_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise SecurityFileError(f"{setting}: cannot read {path}: {exc.strerror}") from None
    if len(data) > TLS_FILE_BYTES_MAX:
        raise SecurityFileError(f"{setting}: {path} is larger than {TLS_FILE_BYTES_MAX} bytes")
    if b"-----BEGIN" not in data:
        raise SecurityFileError(f"{setting}: {path} is not PEM")
    return data
