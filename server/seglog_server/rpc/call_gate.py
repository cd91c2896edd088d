"""Every LogService call passes the gate once, before its handler runs:

    authenticate   who is calling: a bearer token (``authorization: Bearer ...``), else the
                   client certificate's subject (mutual TLS), else ANONYMOUS where no
                   credentials are required; otherwise AuthenticationFailedError
    authorize      the method's row in ``operations.OPERATIONS`` against the ACL
    admit          per-principal caps on concurrent requests, long-poll waiters and streams, and
                   the byte-rate quotas (refuse when the debt is above the delay bound)

A bidirectional stream (``operations.Scope.MESSAGES``) is authenticated once, at open
(``admit_stream``: the credentials travel with the stream), and takes a stream slot; each of its
messages then passes ``begin_message`` (and ``end_message`` once answered): the ACL, the
principal's request cap and byte quota of the unary call it stands for, exactly as that call
would.

The admitted call is the *principal layer* other per-client limits key on: ``current_call()``
(a ContextVar, one value per RPC task) gives its principal, kind and row to any code that runs
inside the handler. ``release`` frees its slot when the handler ends. Health and reflection are
other services and never meet the gate.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from seglog_server.security import (
    ANONYMOUS,
    AuthenticationFailedError,
    CallKind,
    Operation,
    PermissionDeniedError,
    PrincipalQuota,
    QuotaBook,
    SecurityPolicy,
)
from seglog_server.security.policy import bearer_token
from seglog_server.security.quotas import QuotaStatistics
from seglog_server.security.token_store import TokenStoreStatistics

from .operations import Quota, RpcOperation, Scope, operation_of

__all__ = [
    "AUTHORIZATION_METADATA_KEY",
    "AdmittedCall",
    "CallGate",
    "CallGateStatistics",
    "current_call",
    "current_principal",
]

AUTHORIZATION_METADATA_KEY = "authorization"
# Slow hashes run here, off the event loop. Two threads: the machine kind has two cores, and
# hashlib.scrypt releases the GIL, so two checks overlap; more would only queue on the CPUs.
_VERIFIER_THREADS = 2

_log = logging.getLogger("seglog_server.security")
_CURRENT: contextvars.ContextVar[AdmittedCall | None] = contextvars.ContextVar(
    "seglog_current_call", default=None
)


def current_call() -> AdmittedCall | None:
    """The call the running RPC task was admitted as (None outside an RPC)."""
    return _CURRENT.get()


def current_principal() -> str:
    call = _CURRENT.get()
    return call.principal if call is not None else ANONYMOUS


@dataclass(frozen=True)
class CallGateStatistics:
    authentication_failure_count: int
    permission_denied_count: int
    quotas: QuotaStatistics
    tokens: TokenStoreStatistics | None  # None without a token file


@dataclass
class AdmittedCall:
    principal: str
    method: str
    row: RpcOperation
    kind: CallKind
    gate: CallGate
    response_delay_s: float = 0.0  # a produce quota's delay, applied before the response
    # A stream's: the row of the unary call each of its messages stands for (``begin_message``).
    message_row: RpcOperation | None = None
    _released: bool = field(default=False, repr=False)

    def may(self, operation: Operation, topic: str) -> bool:
        return self.gate.allows(self.principal, operation, topic)

    async def before_response(self, response: Any) -> None:
        """Applies the produce delay and charges a unary fetch response's bytes (with delay)."""
        delay_s = self.response_delay_s
        if self.row.quota is Quota.FETCH:
            size = len(response) if isinstance(response, bytes | memoryview) else response.ByteSize()
            delay_s += self.gate.quotas.charge_bytes(self.principal, "fetch", size)
        if delay_s > 0:
            await asyncio.sleep(delay_s)

    async def before_stream_write(self, response_bytes: int) -> None:
        """A stream is never refused mid-way: it waits out its debt, then takes the bytes."""
        delay_s = self.gate.quotas.stream_delay(self.principal, response_bytes)
        if delay_s > 0:
            await asyncio.sleep(delay_s)

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.gate.quotas.release(self.principal, self.kind)


class CallGate:
    def __init__(self, policy: SecurityPolicy | None = None, quotas: QuotaBook | None = None) -> None:
        """``policy`` None: an open gate (ANONYMOUS, every call allowed, quotas from ``quotas``
        or none). Otherwise the policy's credentials, ACL and quota book apply."""
        self._policy = policy
        if policy is not None:
            self.quotas = policy.quotas
        else:
            self.quotas = quotas or QuotaBook(PrincipalQuota(), {}, window_ms=1000, delay_ms_max=0)
        self._verifier: ThreadPoolExecutor | None = None
        self.auth_failure_count = 0
        self.denied_count = 0

    def statistics(self) -> CallGateStatistics:
        tokens = self._policy.tokens if self._policy is not None else None
        return CallGateStatistics(
            self.auth_failure_count, self.denied_count, self.quotas.statistics(),
            tokens.statistics() if tokens is not None else None,
        )

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.shutdown(wait=False, cancel_futures=True)

    # -- the gate --------------------------------------------------------------------------------
    async def admit(self, method: str, request: Any, context: Any) -> AdmittedCall:
        row = operation_of(method)
        principal = await self._authenticate(method, context)
        self._authorize(principal, row, request)
        kind = row.kind(request)
        quota_direction = _DIRECTIONS[row.quota]
        if quota_direction is not None and kind is not CallKind.STREAM:
            self.quotas.admit_bytes(principal, quota_direction)
        self.quotas.acquire(principal, kind)
        call = AdmittedCall(principal, method, row, kind, self)
        if row.quota is Quota.PRODUCE:
            call.response_delay_s = self.quotas.charge_bytes(
                principal, "produce", _produce_bytes(request) if self.quotas.limits_bytes(principal)
                else 0,
            )
        _CURRENT.set(call)
        return call

    async def admit_stream(self, method: str, context: Any) -> AdmittedCall:
        """Opens a bidirectional stream: its credentials, and a stream slot of its principal."""
        row = operation_of(method)
        assert row.scope is Scope.MESSAGES and row.message_method is not None, method
        principal = await self._authenticate(method, context)
        self.quotas.acquire(principal, CallKind.STREAM)
        call = AdmittedCall(
            principal, method, row, CallKind.STREAM, self, message_row=operation_of(row.message_method)
        )
        _CURRENT.set(call)
        return call

    def begin_message(self, call: AdmittedCall, request: Any) -> float:
        """One message of ``call``'s stream, admitted as its unary twin: the ACL on its topics,
        a request slot of the principal's, the byte quota (refused above the delay bound, else
        charged). Returns the delay its answer owes the produce quota, in seconds. Once this
        returns, ``end_message(call)`` must follow when the message is answered. Plain calls, not
        a context manager: they run once per stream message."""
        row = call.message_row
        assert row is not None, call.method
        principal = call.principal
        self._authorize(principal, row, request)
        direction = _DIRECTIONS[row.quota]
        if direction is not None:
            self.quotas.admit_bytes(principal, direction)
        self.quotas.acquire(principal, CallKind.REQUEST)
        if row.quota is not Quota.PRODUCE or not self.quotas.limits_bytes(principal):
            return 0.0
        try:
            return self.quotas.charge_bytes(principal, "produce", _produce_bytes(request))
        except BaseException:
            self.quotas.release(principal, CallKind.REQUEST)
            raise

    def end_message(self, call: AdmittedCall) -> None:
        self.quotas.release(call.principal, CallKind.REQUEST)

    def allows(self, principal: str, operation: Operation, topic: str | None) -> bool:
        acl = self._policy.acl if self._policy is not None else None
        return acl is None or acl.allows(principal, operation, topic)

    # -- steps -----------------------------------------------------------------------------------
    async def _authenticate(self, method: str, context: Any) -> str:
        policy = self._policy
        if policy is None or not policy.authenticates:
            return ANONYMOUS
        header = _authorization_header(context)
        principal: str | None
        if header is not None and policy.tokens is not None:
            principal = await self._check_token(header)
        elif policy.mutual_tls:
            principal = _certificate_principal(context)
        else:
            principal = None
        if principal is None:
            self.auth_failure_count += 1
            _log.warning("authentication failed: %s from %s", method, _peer(context))
            raise AuthenticationFailedError()
        return principal

    async def _check_token(self, header: str) -> str | None:
        token = bearer_token(header)
        if token is None:
            return None
        tokens = self._policy.tokens  # type: ignore[union-attr]
        known, principal = tokens.cached(token)
        if known:
            return principal
        if self._verifier is None:
            self._verifier = ThreadPoolExecutor(_VERIFIER_THREADS, thread_name_prefix="seglog-auth")
        return await asyncio.get_running_loop().run_in_executor(self._verifier, tokens.verify, token)

    def _authorize(self, principal: str, row: RpcOperation, request: Any) -> None:
        if self._policy is None or self._policy.acl is None or row.scope not in (Scope.TOPICS, Scope.SOME_TOPIC):
            return
        if row.scope is Scope.SOME_TOPIC:
            if not self._policy.acl.allows_on_some_topic(principal, row.operation):
                self.denied_count += 1
                _log.info("denied: %s may not %s any topic", principal, row.operation.value)
                raise PermissionDeniedError(principal, row.operation.value, None, any_topic=True)
            return
        for topic in row.topics(request):
            if not self._policy.acl.allows(principal, row.operation, topic):
                self.denied_count += 1
                _log.info("denied: %s may not %s %s", principal, row.operation.value,
                          "every topic" if topic is None else repr(topic))
                raise PermissionDeniedError(principal, row.operation.value, topic)


_DIRECTIONS: dict[Quota, str | None] = {Quota.NONE: None, Quota.PRODUCE: "produce", Quota.FETCH: "fetch"}


def _produce_bytes(request: Any) -> int:
    return len(request.records) if request.records else request.ByteSize()


def _authorization_header(context: Any) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION_METADATA_KEY:
            return value if isinstance(value, str) else None
    return None


def _certificate_principal(context: Any) -> str | None:
    """The verified client certificate's common name, else its whole subject (RFC 2253 text)."""
    auth = context.auth_context() or {}
    for key in ("x509_common_name", "x509_subject"):
        values = auth.get(key)
        if values:
            return bytes(values[0]).decode("utf-8", "replace")
    return None


def _peer(context: Any) -> str:
    peer: Callable[[], str] | None = getattr(context, "peer", None)
    try:
        return peer() if peer is not None else "unknown peer"
    except Exception:  # noqa: BLE001 - only for a log line
        return "unknown peer"
