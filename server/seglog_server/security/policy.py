"""The security policy of one service process: credentials, ACL, quotas, TLS files.

``SecurityPolicy.load`` reads every file a setting names and fails with SecurityFileError (the
message names the setting) before the service binds; ``reload`` (SIGHUP) reads them again and
swaps in the new contents only if all of them load, so a half-edited file never opens a hole.
Each part is None when its setting is not given:

    tokens  None: no token file; a caller without a client certificate is ANONYMOUS
    acl     None: no ACL file; every principal may do everything
    tls     None: plaintext gRPC
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .acl import Acl, Operation, parse_acl
from .errors import AuthenticationBusyError, SecurityFileError
from .quotas import PrincipalQuota, QuotaBook, parse_quota_file
from .tls_files import TlsMaterial, load_tls_material
from .token_file import parse_token_file
from .token_store import SLOW_CHECKS_BUSY_RETRY_MS, SLOW_CHECKS_MAX, TokenStore

__all__ = ["SecurityPaths", "SecurityPolicy", "bearer_token"]

# Token, ACL and quota files are small text files; anything larger is a mistake.
POLICY_FILE_BYTES_MAX = 16 * 1024 * 1024


@dataclass(frozen=True)
class SecurityPaths:
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    auth_tokens: str | None = None
    acl: str | None = None
    quotas: str | None = None


@dataclass(frozen=True)
class _Loaded:
    tls: TlsMaterial | None
    token_entries: dict | None
    acl: Acl | None
    quota_overrides: dict[str, PrincipalQuota]


class SecurityPolicy:
    def __init__(
        self, paths: SecurityPaths, quota_defaults: PrincipalQuota, *, token_cache_max: int,
        quota_window_ms: int, quota_delay_ms_max: int, slow_checks_max: int = SLOW_CHECKS_MAX,
    ) -> None:
        self.paths = paths
        self._quota_defaults = quota_defaults
        loaded = self._load_all()
        self.tls = loaded.tls
        self.acl = loaded.acl
        self.tokens = (TokenStore(loaded.token_entries, token_cache_max, slow_checks_max)
                       if loaded.token_entries is not None else None)
        self.quotas = QuotaBook(quota_defaults, loaded.quota_overrides, window_ms=quota_window_ms,
                                delay_ms_max=quota_delay_ms_max)
        # Moves on at every successful reload: an open stream's cached "allowed" is good only
        # for the generation it was decided under (call_gate.CallGate.recheck).
        self.generation = 0
        self._reload_listeners: list[Callable[[], None]] = []

    def add_reload_listener(self, listener: Callable[[], None]) -> None:
        """``listener()`` runs after each successful reload, on the thread that reloaded (the
        event loop's, for SIGHUP): the call gate wakes streams parked at the tail with it."""
        self._reload_listeners.append(listener)

    @property
    def mutual_tls(self) -> bool:
        return self.tls is not None and self.tls.mutual

    @property
    def authenticates(self) -> bool:
        """Whether every call must carry credentials (a token or a client certificate)."""
        return self.tokens is not None or self.mutual_tls

    def verify_bearer(self, header: str | None) -> str | None:
        """The principal an ``Authorization: Bearer <token>`` value authenticates as, or None.
        For callers on their own thread, such as an HTTP endpoint (the metrics port's hook for
        requiring a token); None when no token file is configured. The cheap answers first (a
        cached one, a malformed token or unknown key id); a slow hash only within the bound the
        gRPC gate shares, else AuthenticationBusyError (a cached token is never refused so)."""
        tokens = self.tokens
        token = bearer_token(header)
        if token is None or tokens is None:
            return None
        entry = tokens.cached_entry(token)
        if entry is not None:
            return entry.principal
        if tokens.cached_refusal(token) or not tokens.precheck(token):
            return None
        if not tokens.begin_slow_check():
            raise AuthenticationBusyError(
                f"too many new credentials being checked ({tokens.slow_checks_max} at once)",
                SLOW_CHECKS_BUSY_RETRY_MS,
            )
        try:
            return tokens.verify(token)
        finally:
            tokens.end_slow_check()

    def describable_topics(self, principal: str) -> Callable[[str], bool] | None:
        """Which topics ``principal`` may describe, for views that list topics outside gRPC
        (the metrics port): None when it may describe every topic (or no ACL is set)."""
        acl = self.acl
        if acl is None or acl.allows(principal, Operation.DESCRIBE, None):
            return None
        return lambda topic: acl.allows(principal, Operation.DESCRIBE, topic)

    def reload(self) -> TlsMaterial | None:
        """Reads every file again; on success swaps them in and returns the TLS material (for
        the credentials fetcher). On SecurityFileError nothing changes."""
        loaded = self._load_all()
        self.tls = loaded.tls
        self.acl = loaded.acl
        if self.tokens is not None and loaded.token_entries is not None:
            self.tokens.replace_entries(loaded.token_entries)
        self.quotas.replace_overrides(loaded.quota_overrides)
        self.generation += 1
        for listener in self._reload_listeners:
            listener()
        return loaded.tls

    def _load_all(self) -> _Loaded:
        paths = self.paths
        tls = None
        if paths.tls_cert and paths.tls_key:
            tls = load_tls_material(paths.tls_cert, paths.tls_key, paths.tls_client_ca)
        tokens = parse_token_file(_read_text("auth_tokens", paths.auth_tokens)) \
            if paths.auth_tokens else None
        acl = parse_acl(_read_text("acl", paths.acl)) if paths.acl else None
        overrides = parse_quota_file(_read_text("quotas", paths.quotas), self._quota_defaults) \
            if paths.quotas else {}
        return _Loaded(tls, tokens, acl, overrides)


def bearer_token(header: str | None) -> str | None:
    """The token of an ``authorization`` value ``Bearer <token>`` (scheme case-insensitive)."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _read_text(setting: str, path: str) -> str:
    try:
        with open(path, "rb") as file:
            data = file.read(POLICY_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise SecurityFileError(f"{setting}: cannot read {path}: {exc.strerror}") from None
    if len(data) > POLICY_FILE_BYTES_MAX:
        raise SecurityFileError(f"{setting}: {path} is larger than {POLICY_FILE_BYTES_MAX} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecurityFileError(f"{setting}: {path} is not UTF-8 text") from None
