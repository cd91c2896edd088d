"""Why a listen address cannot be bound, said so that the operator knows what to change.

gRPC's own bind failure reads "Failed to bind to address 127.0.0.1:50551; set GRPC_VERBOSITY=debug
..." after a C-core log line of its own, and names neither the cause nor the setting that moves the
port. So the service binds a plain socket to the address first, as gRPC would (SO_REUSEADDR on,
so a port whose old connections linger in TIME_WAIT still counts as free), and turns the errno into
one sentence naming the flag: a port in use, a host that is not this machine's, a privileged port.
The check and gRPC's bind are not atomic; a port taken in between still fails gRPC's bind, which
then reports its own message with the same flag named.
"""

from __future__ import annotations

import errno
import socket

from seglog_server.config import parse_listen_address

__all__ = ["GRPC_LISTEN_FLAG", "METRICS_LISTEN_FLAG", "bind_problem", "describe_bind_error"]

GRPC_LISTEN_FLAG = "--listen HOST:PORT (SEGLOG_LISTEN, or listen in the --config file)"
METRICS_LISTEN_FLAG = "--metrics-listen HOST:PORT (SEGLOG_METRICS_LISTEN; none turns it off)"

_REASONS = {
    errno.EADDRINUSE: "the port is in use (another seglog, or another program, listens on it)",
    errno.EADDRNOTAVAIL: "the host is not an address of this machine",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
}


def describe_bind_error(address: str, error: OSError, flag: str) -> str:
    """One line: the address, why it cannot be bound, and the setting that chooses another."""
    reason = _REASONS.get(error.errno or 0, error.strerror or str(error))
    return f"cannot listen on {address}: {reason}; choose another with {flag}"


def bind_problem(address: str, flag: str) -> str | None:
    """``describe_bind_error`` for ``address`` when no address it resolves to can be bound now;
    None when one can (as for gRPC, one bound address is enough) or the port is 0 (any free one)."""
    host, port = parse_listen_address(address)
    if port == 0:
        return None
    try:
        resolved = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        return f"cannot listen on {address}: the host {host!r} does not resolve ({error.strerror}); choose another with {flag}"
    errors: list[OSError] = []
    for family, kind, protocol, _, socket_address in resolved:
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(socket_address)
            except OSError as error:
                errors.append(error)
                continue
        return None
    if not errors:
        return None
    in_use = [error for error in errors if error.errno == errno.EADDRINUSE]
    return describe_bind_error(address, (in_use or errors)[0], flag)
