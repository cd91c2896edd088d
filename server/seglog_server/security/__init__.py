"""seglog's security layer, free of gRPC: token files and their checks, the ACL, quotas, TLS
files, and the policy that loads them all (the gRPC side is ``seglog_server.rpc.call_gate``)."""

from .acl import ANONYMOUS, ANY_PRINCIPAL, Acl, AclRule, Operation, parse_acl
from .errors import (
    AuthenticationBusyError,
    AuthenticationFailedError,
    PermissionDeniedError,
    PrincipalLimitError,
    QuotaExceededError,
    SecurityError,
    SecurityFileError,
)
from .policy import SecurityPaths, SecurityPolicy
from .quotas import ByteRate, CallKind, PrincipalQuota, QuotaBook
from .tls_files import TlsMaterial, load_tls_material
from .token_store import TokenStore

__all__ = [
    "ANONYMOUS",
    "ANY_PRINCIPAL",
    "Acl",
    "AclRule",
    "AuthenticationBusyError",
    "AuthenticationFailedError",
    "ByteRate",
    "CallKind",
    "Operation",
    "PermissionDeniedError",
    "PrincipalLimitError",
    "PrincipalQuota",
    "QuotaBook",
    "QuotaExceededError",
    "SecurityError",
    "SecurityFileError",
    "SecurityPaths",
    "SecurityPolicy",
    "TlsMaterial",
    "TokenStore",
    "load_tls_material",
    "parse_acl",
]
