"""Per-principal quotas: produce and fetch byte rates, and caps on concurrent calls.

Byte rates follow Kafka's quota model: a call is never dropped for using bytes; the principal
goes into debt and its responses are delayed until the debt is paid. Each principal has one
bucket per direction holding up to ``rate * window`` bytes of credit, refilled at ``rate``:

    admit   the current debt would take ``throttle_ms`` to pay. Up to ``delay_ms_max``: admitted.
            Beyond it the call is refused with QuotaExceededError and ``retry_after_ms`` (the time
            until the debt is paid): the client waits instead of holding a connection slot.
    charge  after the bytes are known (a Produce's request, a Fetch's response) they are taken
            from the bucket; the call's response is delayed by the new debt, at most
            ``delay_ms_max``. A large burst therefore delays this call and refuses the next ones
            until the rate is back under the quota, and other principals never notice.

Concurrent calls are capped per principal and kind (plain requests, long-poll waiters, Consume
streams); above a cap the call is refused with PrincipalLimitError. A rate or cap of 0 is
unlimited. Everything here runs on the event loop (no locks); time comes from ``clock``.
"""

from __future__ import annotations

import enum
import math
import time
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace


from .errors import PrincipalLimitError, QuotaExceededError, SecurityFileError
from .token_file import PRINCIPAL_NAME

__all__ = [
    "LIMIT_RETRY_AFTER_MS",
    "ByteRate",
    "CallKind",
    "PrincipalQuota",
    "QuotaBook",
    "QuotaStatistics",
    "parse_quota_file",
]

# The retry-after hint for a refused concurrent call. A plain call ends within milliseconds and
# frees its slot; 100 ms lets a few finish without the client spinning on refusals.
LIMIT_RETRY_AFTER_MS = 100


class CallKind(enum.StrEnum):  # StrEnum: a dict key on every call (hashed in C, not Python)
    REQUEST = "requests"  # any unary call that does not wait on purpose
    WAITER = "waiters"  # a Fetch long poll (max_wait_ms > 0)
    STREAM = "streams"  # a Consume stream


@dataclass(frozen=True)
class PrincipalQuota:
    """One principal's limits; 0 is unlimited."""

    produce_bytes_per_s: int = 0
    fetch_bytes_per_s: int = 0
    requests_max: int = 0
    waiters_max: int = 0
    streams_max: int = 0

    def cap(self, kind: CallKind) -> int:
        return getattr(self, _CAP_FIELDS[kind])  # (no name formatted per call: it runs per request)


_QUOTA_KEYS = frozenset(PrincipalQuota.__dataclass_fields__)
_CAP_FIELDS = {kind: f"{kind.value}_max" for kind in CallKind}


class ByteRate:
    """A token bucket of bytes: ``rate_bytes_per_s`` refill, ``rate * window`` capacity."""

    def __init__(self, rate_bytes_per_s: int, window_ms: int, now_s: float) -> None:
        assert rate_bytes_per_s > 0 and window_ms > 0
        self.rate = rate_bytes_per_s
        self.capacity = rate_bytes_per_s * window_ms / 1000
        self.credit = self.capacity
        self._updated_s = now_s

    def throttle_ms(self, now_s: float) -> float:
        """How long the current debt takes to pay (0 when in credit)."""
        self._refill(now_s)
        return 0.0 if self.credit >= 0 else -self.credit / self.rate * 1000

    def charge(self, byte_count: int, now_s: float) -> float:
        """Takes ``byte_count`` bytes; returns the throttle time afterwards, in ms."""
        self._refill(now_s)
        self.credit -= byte_count
        return self.throttle_ms(now_s)

    def _refill(self, now_s: float) -> None:
        elapsed_s = max(0.0, now_s - self._updated_s)
        self._updated_s = now_s
        self.credit = min(self.capacity, self.credit + elapsed_s * self.rate)


@dataclass
class _PrincipalState:
    quota: PrincipalQuota
    produce: ByteRate | None
    fetch: ByteRate | None
    in_use: dict[CallKind, int] = field(default_factory=lambda: dict.fromkeys(CallKind, 0))
    throttled_ms_total: float = 0.0
    refused_count: int = 0


@dataclass(frozen=True)
class QuotaStatistics:
    principal_count: int
    throttled_ms_by_principal: dict[str, float]
    refused_by_principal: dict[str, int]
    in_use_by_principal: dict[str, dict[str, int]]


class QuotaBook:
    """The quota state of every principal seen; the limits come from defaults plus overrides."""

    def __init__(
        self,
        defaults: PrincipalQuota,
        overrides: Mapping[str, PrincipalQuota],
        *,
        window_ms: int,
        delay_ms_max: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert window_ms > 0 and delay_ms_max >= 0
        self._defaults = defaults
        self._overrides = dict(overrides)
        self._window_ms = window_ms
        self._delay_ms_max = delay_ms_max
        self._clock = clock
        self._states: dict[str, _PrincipalState] = {}

    def replace_overrides(self, overrides: Mapping[str, PrincipalQuota]) -> None:
        """A reloaded quota file. Debts and slots in use carry over; new limits apply."""
        self._overrides = dict(overrides)
        for principal, state in list(self._states.items()):
            quota = self.quota_of(principal)
            if quota != state.quota:
                fresh = self._new_state(principal)
                fresh.in_use = state.in_use
                self._states[principal] = fresh

    def quota_of(self, principal: str) -> PrincipalQuota:
        return self._overrides.get(principal, self._defaults)

    # -- byte rates ----------------------------------------------------------------------------
    def admit_bytes(self, principal: str, direction: str) -> None:
        """Refuses (QuotaExceededError) when the principal's debt exceeds the delay bound."""
        state = self._state(principal)
        bucket = state.produce if direction == "produce" else state.fetch
        if bucket is None:
            return
        throttle_ms = bucket.throttle_ms(self._clock())
        if throttle_ms > self._delay_ms_max:
            state.refused_count += 1
            raise QuotaExceededError(
                f"principal {principal!r} is over its {direction} quota of {bucket.rate} bytes/s",
                math.ceil(throttle_ms),
            )

    def charge_bytes(self, principal: str, direction: str, byte_count: int) -> float:
        """Takes the bytes; returns how long to delay the response, in seconds."""
        state = self._state(principal)
        bucket = state.produce if direction == "produce" else state.fetch
        if bucket is None or byte_count <= 0:
            return 0.0
        delay_ms = min(bucket.charge(byte_count, self._clock()), self._delay_ms_max)
        state.throttled_ms_total += delay_ms
        return delay_ms / 1000

    def stream_delay(self, principal: str, byte_count: int) -> float:
        """For a stream's next response: the current debt (waited out in full, never refused),
        then the bytes are taken. Returns seconds."""
        state = self._state(principal)
        if state.fetch is None:
            return 0.0
        now_s = self._clock()
        throttle_ms = state.fetch.throttle_ms(now_s)
        state.fetch.charge(byte_count, now_s)
        state.throttled_ms_total += throttle_ms
        return throttle_ms / 1000

    def limits_bytes(self, principal: str) -> bool:
        """Whether the principal has a produce rate (so the caller measures the request)."""
        return self._state(principal).produce is not None

    # -- concurrent calls ----------------------------------------------------------------------
    def acquire(self, principal: str, kind: CallKind) -> None:
        state = self._state(principal)
        cap = state.quota.cap(kind)
        if cap and state.in_use[kind] >= cap:
            state.refused_count += 1
            raise PrincipalLimitError(
                f"principal {principal!r} has {state.in_use[kind]} {kind.value} in progress, "
                f"its limit", LIMIT_RETRY_AFTER_MS,
            )
        state.in_use[kind] += 1

    def request_room(self, principal: str) -> bool:
        """Whether ``acquire(principal, REQUEST)`` would take a slot now (a check, nothing taken;
        False for a principal not seen yet: ``acquire`` decides)."""
        state = self._states.get(principal)
        if state is None:
            return False
        cap = state.quota.requests_max
        return not cap or state.in_use[CallKind.REQUEST] < cap

    def release(self, principal: str, kind: CallKind) -> None:
        state = self._states[principal]
        assert state.in_use[kind] > 0, (principal, kind)
        state.in_use[kind] -= 1

    def statistics(self) -> QuotaStatistics:
        return QuotaStatistics(
            principal_count=len(self._states),
            throttled_ms_by_principal={p: s.throttled_ms_total for p, s in self._states.items()},
            refused_by_principal={p: s.refused_count for p, s in self._states.items()},
            in_use_by_principal={
                p: {kind.value: count for kind, count in s.in_use.items()}
                for p, s in self._states.items()
            },
        )

    def _state(self, principal: str) -> _PrincipalState:
        state = self._states.get(principal)
        if state is None:
            state = self._states[principal] = self._new_state(principal)
        return state

    def _new_state(self, principal: str) -> _PrincipalState:
        quota = self.quota_of(principal)
        now_s = self._clock()
        return _PrincipalState(
            quota,
            ByteRate(quota.produce_bytes_per_s, self._window_ms, now_s) if quota.produce_bytes_per_s else None,
            ByteRate(quota.fetch_bytes_per_s, self._window_ms, now_s) if quota.fetch_bytes_per_s else None,
        )


def parse_quota_file(text: str, defaults: PrincipalQuota) -> dict[str, PrincipalQuota]:
    """Per-principal overrides from the quota file's TOML; unset keys keep the defaults::

        [principals.alice]
        produce_bytes_per_s = 1048576   # 0: unlimited
        fetch_bytes_per_s = 4194304
        requests_max = 32               # concurrent unary calls
        waiters_max = 16                # concurrent Fetch long polls
        streams_max = 4                 # concurrent Consume streams
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SecurityFileError(f"quota file is not valid TOML: {exc}") from None
    if set(document) - {"principals"} or not isinstance(document.get("principals", {}), dict):
        raise SecurityFileError("quota file: only [principals.NAME] tables are allowed")
    overrides = {}
    for name, table in document.get("principals", {}).items():
        if not PRINCIPAL_NAME.fullmatch(name) or not isinstance(table, dict):
            raise SecurityFileError(f"quota file: bad principal table {name!r}")
        unknown = set(table) - _QUOTA_KEYS
        if unknown:
            raise SecurityFileError(f"quota file [principals.{name}]: unknown keys {sorted(unknown)}")
        for key, value in table.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SecurityFileError(f"quota file [principals.{name}]: {key} must be an integer >= 0")
        overrides[name] = replace(defaults, **table)
    return overrides


