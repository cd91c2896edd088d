"""Errors of the security layer: who is calling, what they may do, how much they may use.

None of them carries a file path or the credential that was presented: their text goes to
clients. ``rpc/status.py`` maps each to its gRPC status::

    SecurityError
    ├── AuthenticationFailedError    no usable credentials (never says which part was wrong)
    │                                                                      UNAUTHENTICATED
    ├── PermissionDeniedError        the principal may not do this operation on this topic
    │                                                                      PERMISSION_DENIED
    ├── QuotaExceededError           a byte rate is used up for longer than the delay bound;
    │   │                            ``retry_after_ms`` says when to try again RESOURCE_EXHAUSTED
    │   ├── PrincipalLimitError      too many concurrent requests, waiters or streams
    │   └── AuthenticationBusyError  too many new tokens being checked at once (the caller
    │                                is not authenticated yet: retry after the hint)
    └── SecurityFileError            a token, ACL or quota file is malformed (start, SIGHUP)
"""

from __future__ import annotations

__all__ = [
    "AuthenticationBusyError",
    "AuthenticationFailedError",
    "PermissionDeniedError",
    "PrincipalLimitError",
    "QuotaExceededError",
    "SecurityError",
    "SecurityFileError",
]


class SecurityError(Exception):
    """Root of the security layer's errors."""


class AuthenticationFailedError(SecurityError):
    # One message for a missing header, a malformed one, an unknown key id and a wrong secret:
    # the caller learns nothing about which part was wrong.
    MESSAGE = "authentication failed: present a valid token or client certificate"

    def __init__(self, reason: str | None = None) -> None:
        # ``reason`` only where it tells the caller nothing about a secret (a certificate
        # without a common name); wrong tokens always get the one MESSAGE.
        super().__init__(self.MESSAGE if reason is None else f"authentication failed: {reason}")


class PermissionDeniedError(SecurityError):
    def __init__(self, principal: str, operation: str, topic: str | None, *, any_topic: bool = False) -> None:
        if any_topic:
            target = "any topic (the call needs the operation on at least one)"
        else:
            target = f"topic {topic!r}" if topic is not None else "every topic (cluster-wide call)"
        super().__init__(f"principal {principal!r} is not allowed to {operation} {target}")
        self.principal = principal
        self.operation = operation
        self.topic = topic


class QuotaExceededError(SecurityError):
    def __init__(self, message: str, retry_after_ms: int) -> None:
        assert retry_after_ms >= 0
        super().__init__(f"{message}; retry after {retry_after_ms} ms")
        self.retry_after_ms = retry_after_ms


class PrincipalLimitError(QuotaExceededError):
    pass


class AuthenticationBusyError(QuotaExceededError):
    """The bounded queue of slow token checks is full: the caller is refused before any hash."""


class SecurityFileError(SecurityError):
    """A security file is unreadable or malformed; the message names the line, not the path."""
