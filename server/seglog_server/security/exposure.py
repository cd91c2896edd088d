"""What a service's settings leave open to other machines: the warnings logged at start.

Each warning names a port reachable beyond loopback and what travels or is served there without
protection. Loopback (127.0.0.0/8, ::1, ``localhost``) is this machine only and never warned
about. The table, by the gRPC port's settings (mutual TLS counts as credentials, as tokens do):

    TLS   credentials   warning
    no    no            anyone can read, write and delete every topic
    yes   no            encrypted, but anyone who completes a handshake can do everything
    no    tokens        tokens (and records) travel in clear text: anyone on the path can take one
    yes   yes           none

and for ``/metrics``: served beyond loopback without ``--metrics-require-token``, anyone who can
reach it reads every topic's name and figures.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

__all__ = ["ExposedSettings", "exposure_warnings", "is_loopback_host"]

_SEE = "See docs/security.md."


@dataclass(frozen=True)
class ExposedSettings:
    listen: str  # the gRPC HOST:PORT
    listen_host: str
    tls: bool
    mutual_tls: bool
    tokens: bool
    metrics_listen: str | None  # None: metrics off
    metrics_host: str | None
    metrics_require_token: bool


def is_loopback_host(host: str) -> bool:
    """Whether only this machine can reach ``host`` (127.0.0.0/8, ::1 or localhost). A name
    other than localhost may resolve to anything: not loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warnings(settings: ExposedSettings) -> list[str]:
    """The warnings for ``settings``, one sentence each (empty: nothing exposed)."""
    warnings = []
    if not is_loopback_host(settings.listen_host):
        warnings.extend(_grpc_warnings(settings))
    if (settings.metrics_listen is not None and settings.metrics_host is not None
            and not is_loopback_host(settings.metrics_host) and not settings.metrics_require_token):
        warnings.append(
            f"metrics on {settings.metrics_listen} without a token: anyone who can reach the port "
            "reads every topic's name, size and rates. Set --metrics-require-token (with "
            f"--auth-tokens), or listen on 127.0.0.1, or keep the port inside a private network. {_SEE}"
        )
    return warnings


def _grpc_warnings(settings: ExposedSettings) -> list[str]:
    credentials = settings.tokens or settings.mutual_tls
    if not settings.tls and not credentials:
        return [
            f"listening on {settings.listen} without TLS or tokens: anyone who can reach the port "
            "can read, write and delete every topic. Set --tls-cert/--tls-key and --auth-tokens "
            f"(and --acl), or listen on 127.0.0.1. {_SEE}"
        ]
    if settings.tls and not credentials:
        return [
            f"listening on {settings.listen} with TLS but without tokens or client certificates: "
            "traffic is encrypted, but anyone who can reach the port can read, write and delete "
            f"every topic. Set --auth-tokens or --tls-client-ca (and --acl). {_SEE}"
        ]
    if settings.tokens and not settings.tls:
        return [
            f"listening on {settings.listen} with tokens over plaintext: tokens and records travel "
            "in clear text, so anyone on the network path can copy a token and use it. Set "
            f"--tls-cert/--tls-key, or listen on 127.0.0.1. {_SEE}"
        ]
    return []
