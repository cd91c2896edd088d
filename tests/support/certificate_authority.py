"""A throwaway certificate authority for the security tests, made with ``cryptography``.

``TestCA`` issues server certificates (SAN 127.0.0.1 and localhost) and client certificates
(subject CN = the principal), valid, expired or not yet valid, and writes PEM files. Keys are
P-256: fast to make, accepted by gRPC's BoringSSL.
"""

from __future__ import annotations

import datetime
import ipaddress
import pathlib
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    cert: pathlib.Path
    key: pathlib.Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()

    @property
    def key_pem(self) -> bytes:
        return self.key.read_bytes()


class TestCA:
    __test__ = False  # not a pytest test class

    def __init__(self, directory: pathlib.Path, name: str = "seglog test CA") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.timezone.utc)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY).not_valid_after(now + 30 * _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                              content_commitment=False, key_encipherment=False,
                              data_encipherment=False, key_agreement=False, encipher_only=False,
                              decipher_only=False),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self.ca_file = directory / f"{_slug(name)}.pem"
        self.ca_file.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    def server(self, name: str = "seglog-server", *, file_stem: str | None = None,
               client_too: bool = False) -> Issued:
        """A server certificate; ``client_too``: usable as a client certificate as well (an
        instance of a cluster presenting its own certificate to the others)."""
        return self._issue(name, server=True, file_stem=file_stem, client_too=client_too)

    def client(self, principal: str, *, expired: bool = False) -> Issued:
        return self._issue(principal, server=False, expired=expired)

    def _issue(self, common_name: str, *, server: bool, expired: bool = False,
               file_stem: str | None = None, client_too: bool = False) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        not_before, not_after = (now - 10 * _DAY, now - _DAY) if expired else (now - _DAY, now + 30 * _DAY)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        usages = [usage, ExtendedKeyUsageOID.CLIENT_AUTH] if client_too else [usage]
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(not_after)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        cert = builder.sign(self._key, hashes.SHA256())
        stem = file_stem or f"{_slug(common_name)}{'-expired' if expired else ''}"
        cert_file, key_file = self.directory / f"{stem}.crt", self.directory / f"{stem}.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                               serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return Issued(cert_file, key_file)


def common_name_of(der: bytes) -> str:
    cert = x509.load_der_x509_certificate(der)
    return cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")
