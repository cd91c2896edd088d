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

Revocation reaches open streams: every stream message, every response a Consume stream is about
to write (``before_stream_write``), and a Consume parked at the tail when a reload lands
(``AdmittedCall.park``) pass ``recheck`` first. It compares the policy's generation (moved on by
each SIGHUP reload) with the one the call was last checked under: equal, and that is all it
costs; otherwise the token the call authenticated with must still be a line of the token file
(UNAUTHENTICATED) and the ACL must still allow the stream's topics (PERMISSION_DENIED). A failed
recheck ends the stream with that status (logged and counted once: the call remembers it).

Token checks, cheapest first: a cached answer (a digest); a token that is malformed or names an
unknown key id, refused at once (``TokenStore.precheck``); only then a slow hash, on
``_VERIFIER_THREADS`` threads, at most ``TokenStore.slow_checks_max`` checks running or queued
(a bound the metrics endpoint's checks share). A full bound refuses the new caller (``AuthenticationBusyError``, RESOURCE_EXHAUSTED with a retry hint);
callers whose token is cached never wait in it. The same token presented by many calls at once
is hashed once (they share the check, within one token-file generation); an acceptance a reload
made stale before it reached the loop is not delivered, the token is decided again.

The admitted call is the *principal layer* other per-client limits key on: ``current_call()``
(a ContextVar, one value per RPC task) gives its principal, kind and row to any code that runs
inside the handler. ``release`` frees its slot when the handler ends. Health and reflection are
other services and never meet the gate.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from seglog_server.security import (
    ANONYMOUS,
    AuthenticationBusyError,
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
from seglog_server.security.token_file import TokenEntry
from seglog_server.security.token_store import SLOW_CHECKS_BUSY_RETRY_MS, TokenStoreStatistics

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
# Rounds of a token check whose acceptance a reload made stale before it was delivered; each
# takes a SIGHUP landing inside a slow hash, so more than this means a file still being edited.
_STALE_ANSWER_ROUNDS_MAX = 3

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
    verifier_busy_count: int = 0  # new tokens refused because the check queue was full
    revoked_stream_count: int = 0  # open streams refused after a reload took their rights


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
    # What ``recheck`` needs after a reload: the token file entry the call authenticated with
    # (None for a certificate or ANONYMOUS), the request whose topics it was allowed (a
    # server stream's), and the policy generation it was last checked under.
    token_entry: TokenEntry | None = field(default=None, repr=False)
    request: Any = field(default=None, repr=False)
    generation: int = 0
    # What a failed ``recheck`` raised: the stream is over, and later rechecks raise it again
    # without a second log line or count.
    revoked: Exception | None = field(default=None, repr=False)
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
        """Before each response of a server stream: ``recheck`` (a reload may have revoked the
        principal's token or its ACL rule: the stream ends UNAUTHENTICATED or
        PERMISSION_DENIED), then the fetch quota: a stream is never refused mid-way for its
        rate, it waits out its debt, then takes the bytes."""
        self.gate.recheck(self)
        delay_s = self.gate.quotas.stream_delay(self.principal, response_bytes)
        if delay_s > 0:
            await asyncio.sleep(delay_s)

    async def park(self, wait: Callable[[asyncio.Future[None]], Awaitable[bool]]) -> bool:
        """A server stream parked at the tail until the next append: ``wait(reloaded)`` waits
        for it, or for the ``reloaded`` future (the next policy reload) to interrupt it, and says
        whether the append came (``AppendWaiters.wait_ticket``: the append wakes this task one
        loop turn later, with no task or callback between). At each reload the stream's rights are
        rechecked at once, so a revoked stream ends then (``recheck`` raises) rather than at
        the next write to an idle topic; then it waits again. Returns what ``wait`` said last
        without a reload."""
        while True:
            # A reload that landed after the stream's last check but before it parked would
            # otherwise be missed: next_reload() waits for the one after it.
            self.gate.recheck(self)
            reloaded = self.gate.next_reload()
            appended = await wait(reloaded)
            if appended or not reloaded.done():
                return appended

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
        # Slow checks under way, by (token store generation, token).
        self._checks: dict[tuple[int, str], asyncio.Future[TokenEntry | None]] = {}
        self.auth_failure_count = 0
        self.denied_count = 0
        self.verifier_busy_count = 0
        self.revoked_stream_count = 0
        self._reload_future: asyncio.Future[None] | None = None  # completed by the next reload
        if policy is not None:
            policy.add_reload_listener(self._policy_reloaded)

    def statistics(self) -> CallGateStatistics:
        tokens = self._policy.tokens if self._policy is not None else None
        return CallGateStatistics(
            self.auth_failure_count, self.denied_count, self.quotas.statistics(),
            tokens.statistics() if tokens is not None else None,
            self.verifier_busy_count, self.revoked_stream_count,
        )

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.shutdown(wait=False, cancel_futures=True)

    # -- the gate --------------------------------------------------------------------------------
    async def admit(self, method: str, request: Any, context: Any) -> AdmittedCall:
        row = operation_of(method)
        principal, entry = await self._authenticate(method, context)
        generation = self.generation  # the entry is valid under this one (``_check_token``)
        self._authorize(principal, row, request)
        kind = row.kind(request)
        quota_direction = _DIRECTIONS[row.quota]
        if quota_direction is not None and kind is not CallKind.STREAM:
            self.quotas.admit_bytes(principal, quota_direction)
        self.quotas.acquire(principal, kind)
        call = AdmittedCall(principal, method, row, kind, self, token_entry=entry,
                            request=request if kind is CallKind.STREAM else None,
                            generation=generation)
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
        principal, entry = await self._authenticate(method, context)
        generation = self.generation  # the entry is valid under this one (``_check_token``)
        self.quotas.acquire(principal, CallKind.STREAM)
        call = AdmittedCall(
            principal, method, row, CallKind.STREAM, self, message_row=operation_of(row.message_method),
            token_entry=entry, generation=generation,
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
        self.recheck(call)  # the token still in the file (the ACL is checked just below)
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

    def admits_message_at_once(self, call: AdmittedCall) -> bool:
        """Whether ``begin_message`` of any message of ``call``'s stream would admit it with
        nothing to check or charge that could refuse or delay it: no reload since the stream's
        last check, no ACL over the message's row, no byte quota on it, room under the
        principal's cap on concurrent requests (a produce message: no produce byte rate for the
        principal). Then its only effect is the principal's request slot, taken and given back;
        a message answered within one step of the loop (nothing else runs meanwhile) needs no
        slot at all, and one that waits takes it through ``begin_message`` when it starts
        waiting (``StreamRpcs._admitted``). False: ``begin_message`` decides."""
        row = call.message_row
        policy = self._policy
        if policy is not None and (
            call.generation != policy.generation
            or (policy.acl is not None and row.scope in _ACL_SCOPES)  # type: ignore[union-attr]
        ):
            return False
        quota = row.quota  # type: ignore[union-attr]
        quotas = self.quotas
        return quotas.request_room(call.principal) and (
            quota is Quota.NONE
            # A produce message binds no byte quota where its principal has no produce rate: then
            # ``admit_bytes`` refuses nothing and ``begin_message`` charges nothing.
            or (quota is Quota.PRODUCE and not quotas.limits_bytes(call.principal))
        )

    def end_message(self, call: AdmittedCall) -> None:
        self.quotas.release(call.principal, CallKind.REQUEST)

    @property
    def generation(self) -> int:
        """The policy's reload count (0 without a policy)."""
        return self._policy.generation if self._policy is not None else 0

    def recheck(self, call: AdmittedCall) -> None:
        """An open stream's rights, again, if the policy was reloaded since they were last
        checked: the token it authenticated with must still be in the file, and its request's
        topics still allowed by the ACL. One integer comparison when nothing was reloaded. A
        failure is the stream's end: remembered on the call, logged and counted once."""
        generation = self.generation
        if call.generation == generation:
            return
        if call.revoked is not None:
            raise call.revoked
        tokens = self._policy.tokens if self._policy is not None else None
        if call.token_entry is not None and (tokens is None or not tokens.still_valid(call.token_entry)):
            self.revoked_stream_count += 1
            self.auth_failure_count += 1
            _log.warning("authentication revoked: %s's open %s ends", call.principal, call.method)
            call.revoked = AuthenticationFailedError("the token this stream authenticated with was revoked")
            raise call.revoked
        if call.request is not None:
            try:
                self._authorize(call.principal, call.row, call.request)
            except PermissionDeniedError as exc:
                self.revoked_stream_count += 1
                call.revoked = exc
                raise
        call.generation = generation

    def next_reload(self) -> asyncio.Future[None]:
        """A future the next policy reload completes (``AdmittedCall.park`` waits on it)."""
        if self._reload_future is None or self._reload_future.done():
            self._reload_future = asyncio.get_running_loop().create_future()
        return self._reload_future

    def _policy_reloaded(self) -> None:
        """The policy's reload listener: wakes the streams parked on ``next_reload``, on their
        loop (a reload from another thread hands the wake-up over)."""
        future, self._reload_future = self._reload_future, None
        if future is None or future.done():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is future.get_loop():
            future.set_result(None)
            return
        try:
            future.get_loop().call_soon_threadsafe(_complete, future)
        except RuntimeError:
            pass  # the loop is closed: nobody is parked any more

    def allows(self, principal: str, operation: Operation, topic: str | None) -> bool:
        acl = self._policy.acl if self._policy is not None else None
        return acl is None or acl.allows(principal, operation, topic)

    # -- steps -----------------------------------------------------------------------------------
    async def _authenticate(self, method: str, context: Any) -> tuple[str, TokenEntry | None]:
        """(principal, the token file entry when a token authenticated it)."""
        policy = self._policy
        if policy is None or not policy.authenticates:
            return ANONYMOUS, None
        header = _authorization_header(context)
        entry: TokenEntry | None = None
        principal: str | None = None
        try:
            if header is not None and policy.tokens is not None:
                entry = await self._check_token(header)
                principal = entry.principal if entry is not None else None
            elif policy.mutual_tls:
                principal = _certificate_principal(context)
            if principal is None:
                raise AuthenticationFailedError()
        except AuthenticationFailedError:
            self.auth_failure_count += 1
            _log.warning("authentication failed: %s from %s", method, _peer(context))
            raise
        return principal, entry

    async def _check_token(self, header: str) -> TokenEntry | None:
        """The token's file entry, or None. Cheap answers on the event loop; a slow hash only for
        a well-formed token with a known key id not seen before, behind a bounded queue.

        A check's answer reaches the loop a moment after its thread gave it, and a SIGHUP may
        land in between: an acceptance is delivered only while the token store still holds the
        entry it matched (``still_valid``), else the token is decided again against the new
        file. Checks are shared per (generation, token), so a caller that arrives after a reload
        never joins a check begun under the entries it replaced."""
        token = bearer_token(header)
        if token is None:
            return None
        tokens = self._policy.tokens  # type: ignore[union-attr]
        for _ in range(_STALE_ANSWER_ROUNDS_MAX):
            entry = tokens.cached_entry(token)
            if entry is not None:
                return entry
            if tokens.cached_refusal(token) or not tokens.precheck(token):
                return None
            key = (tokens.generation, token)
            check = self._checks.get(key)
            if check is None:
                check = self._start_check(tokens, key)
            entry = await asyncio.shield(check)
            if entry is None or tokens.still_valid(entry):
                return entry
        return None  # reloaded during every round: the caller retries against a settled file

    def _start_check(self, tokens: Any, key: tuple[int, str]) -> asyncio.Future[TokenEntry | None]:
        """A slow check within the token store's bound (shared with the metrics endpoint)."""
        if not tokens.begin_slow_check():
            self.verifier_busy_count += 1
            raise AuthenticationBusyError(
                f"too many new credentials being checked ({tokens.slow_checks_max} at once)",
                SLOW_CHECKS_BUSY_RETRY_MS,
            )
        try:
            if self._verifier is None:
                self._verifier = ThreadPoolExecutor(_VERIFIER_THREADS, thread_name_prefix="seglog-auth")
            check = asyncio.get_running_loop().run_in_executor(self._verifier, tokens.verify_entry, key[1])
        except BaseException:
            tokens.end_slow_check()
            raise
        self._checks[key] = check

        def checked(_: object) -> None:
            self._checks.pop(key, None)
            tokens.end_slow_check()

        check.add_done_callback(checked)
        return check

    def _authorize(self, principal: str, row: RpcOperation, request: Any) -> None:
        if self._policy is None or self._policy.acl is None or row.scope not in _ACL_SCOPES:
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


def _complete(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


# The rows an ACL governs: ``_authorize`` checks exactly these, ``admits_message_at_once`` sends
# them to ``begin_message`` whenever an ACL is loaded.
_ACL_SCOPES = (Scope.TOPICS, Scope.SOME_TOPIC)
_DIRECTIONS: dict[Quota, str | None] = {Quota.NONE: None, Quota.PRODUCE: "produce", Quota.FETCH: "fetch"}


def _produce_bytes(request: Any) -> int:
    return len(request.records) if request.records else request.ByteSize()


def _authorization_header(context: Any) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == AUTHORIZATION_METADATA_KEY:
            return value if isinstance(value, str) else None
    return None


def _certificate_principal(context: Any) -> str | None:
    """The verified client certificate's subject common name; None without a certificate.
    A certificate without a CN (or an empty one) is refused with that reason: its principal
    would be the empty name, which no ACL rule means to grant."""
    auth = context.auth_context() or {}
    if not auth.get("x509_pem_cert") and not auth.get("x509_subject"):
        return None  # no client certificate at all
    names = [bytes(value).decode("utf-8", "replace").strip() for value in auth.get("x509_common_name") or ()]
    if not names or not names[0]:
        raise AuthenticationFailedError(
            "the client certificate has no subject common name (CN); seglog takes the principal "
            "from it: issue the certificate with a CN"
        )
    return names[0]


def _peer(context: Any) -> str:
    peer: Callable[[], str] | None = getattr(context, "peer", None)
    try:
        return peer() if peer is not None else "unknown peer"
    except Exception:  # noqa: BLE001 - only for a log line
        return "unknown peer"
