"""The edge of every RPC: the call gate admits it (``call_gate.py``: who, may they, within
their quotas), exceptions become statuses (via ``status.py``), calls are counted, and server-side
time is reported when a client asks for it.

``@unary_rpc`` and ``@stream_rpc`` wrap the RPC methods of each family (admin_rpcs.py, ...); they
read the family's ``core`` (service_core.py). Each call is admitted first (``core.admission``, see
admission.py): a unary call as a request, a stream as a stream; and passes the call gate
(``core.gate``): its principal, the ACL, per-principal quotas and caps. In cluster mode a call
naming a partition another instance owns is then refused with the owner's hint (``_check_owner``).
An exception with a row in the status table is an expected outcome (logged at DEBUG); any other exception is a bug: INTERNAL, and
its traceback is logged. Either way the service keeps serving. Cancellation (the client went
away) passes through untouched, except a handler cut by the shutdown: it answers UNAVAILABLE.

Server timing (for benchmarks and debugging): a request carrying the metadata entry
``seglog-debug-timing: 1`` gets the time spent inside the servicer, in microseconds, back in the
trailing metadata entry ``seglog-server-time-us``. Without the header nothing extra is sent.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from .admission import client_of
from .errors import InvalidRequestError, ServiceStoppingError
from .operations import operation_of
from .registration import UnparseableRequest
from .status import ERROR_CLASS_METADATA_KEY, status_for

__all__ = [
    "DEBUG_TIMING_METADATA_KEY",
    "SERVER_TIME_METADATA_KEY",
    "RpcCounters",
    "RpcStatistics",
    "stream_rpc",
    "unary_rpc",
]

DEBUG_TIMING_METADATA_KEY = "seglog-debug-timing"
SERVER_TIME_METADATA_KEY = "seglog-server-time-us"

_log = logging.getLogger("seglog_server.rpc")
# A refusal's message travels in the grpc-message trailer, each UTF-8 byte outside printable
# ASCII percent-encoded as 3 characters, under the client's limits on received metadata: 8 KiB
# soft (past it a call is dropped at random as RESOURCE_EXHAUSTED "received metadata size exceeds
# soft limit", which clients retry as an overload) and 16 KiB hard ("Stream removed"). Messages
# echo client-sent ids (a group id may be 32,767 bytes), so they are cut here by their UTF-8
# size, never inside a character: 1,500 bytes encode to at most 4,500 characters, which with the
# other trailers (the error class, an owner's id and address) stays well under the soft limit.
MESSAGE_BYTES_MAX = 1500
_Handler = TypeVar("_Handler", bound=Callable[..., Awaitable[Any]])


@dataclass(frozen=True)
class RpcStatistics:
    calls_by_method: dict[str, int]
    errors_by_code: dict[str, int]
    internal_error_count: int


class RpcCounters:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.internal_errors = 0

    def snapshot(self) -> RpcStatistics:
        return RpcStatistics(dict(self.calls), dict(self.errors), self.internal_errors)


def _wants_timing(context: grpc.aio.ServicerContext) -> bool:
    metadata = context.invocation_metadata() or ()
    return any(key == DEBUG_TIMING_METADATA_KEY for key, _ in metadata)


async def _abort(
    core: Any, name: str, exc: Exception, context: grpc.aio.ServicerContext
) -> None:
    status = status_for(exc)
    core.counters.errors[status.code.name] += 1
    message = _bounded(core.log_dir_names.redact(status.message))  # no server paths leave the service
    if status.expected:
        _log.debug("%s -> %s: %s", name, status.code.name, status.message)
    else:
        core.counters.internal_errors += 1
        _log.error("%s failed unexpectedly", name, exc_info=exc)
    await context.abort(status.code, message, trailing_metadata=status.trailing_metadata)


def _bounded(message: str) -> str:
    """``message`` within MESSAGE_BYTES_MAX UTF-8 bytes: a longer one is cut at a character's
    boundary and says so (a lone surrogate, which gRPC could not send, is escaped)."""
    encoded = message.encode("utf-8", "backslashreplace")
    if len(encoded) <= MESSAGE_BYTES_MAX:
        return encoded.decode("utf-8")
    cut = f" ... (message cut: {len(encoded)} bytes)"
    # "ignore" drops only the partial character the byte cut may leave at the end.
    return encoded[: MESSAGE_BYTES_MAX - len(cut)].decode("utf-8", "ignore") + cut


def _check_parsed(request: Any) -> None:
    if isinstance(request, UnparseableRequest):
        raise InvalidRequestError(
            f"the request is not a valid {request.message_name}: {request.reason}"
        )


async def _answer_if_cut(core: Any, name: str, context: grpc.aio.ServicerContext) -> None:
    """A handler cancelled by the shutdown (not by its client) answers UNAVAILABLE: retriable,
    where the CANCELLED gRPC would send is not. Otherwise the cancellation goes on untouched."""
    if not core.admission.was_cut():
        return
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    core.counters.errors[grpc.StatusCode.UNAVAILABLE.name] += 1
    _log.info("%s cut by the shutdown after the grace period", name)
    await context.abort(
        grpc.StatusCode.UNAVAILABLE,
        "seglog stopped before this call finished (the shutdown grace period ran out); it may or "
        "may not have taken effect: retry on a running service",
        trailing_metadata=((ERROR_CLASS_METADATA_KEY, ServiceStoppingError.__name__),),
    )


def _finished(core: Any, name: str, code: str, started_ns: int) -> int:
    """Reports the call's latency to the core's metrics hook (if any); returns it in ns."""
    elapsed_ns = time.perf_counter_ns() - started_ns
    hook = core.metrics
    if hook is not None:
        hook.rpc_finished(name, code, elapsed_ns / 1e9)
    return elapsed_ns


def _check_owner(core: Any, name: str, request: Any) -> None:
    """Cluster mode: a call naming a partition another instance owns is refused here, with the
    owner's hint, whatever its handler (cluster_routing.ClusterRouting.check_request, by the
    method's row). After the gate: a caller the ACL refuses learns no owner."""
    cluster = core.cluster
    if cluster is not None:
        cluster.check_request(operation_of(name), request)


def unary_rpc(method: _Handler) -> _Handler:
    name = method.__name__

    @functools.wraps(method)
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        started_ns = time.perf_counter_ns()
        core = self.core
        core.counters.calls[name] += 1
        call = None
        try:
            with core.admission.handler():
                _check_parsed(request)
                # Authenticated before it takes a request slot: a caller whose credentials are
                # wrong, or still being checked, never holds a slot others need (admission.py).
                call = await core.gate.admit(name, request, context)
                _check_owner(core, name, request)
                with core.admission.request_slot():
                    response = await method(self, request, context)
                    await call.before_response(response)
        except asyncio.CancelledError:
            _finished(core, name, "CANCELLED", started_ns)
            await _answer_if_cut(core, name, context)
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - the boundary: every error becomes a status
            _finished(core, name, status_for(exc).code.name, started_ns)
            await _abort(core, name, exc, context)
            raise AssertionError("context.abort returned") from exc  # pragma: no cover
        finally:
            if call is not None:
                call.release()
        elapsed_ns = _finished(core, name, "OK", started_ns)
        if _wants_timing(context):
            context.set_trailing_metadata(((SERVER_TIME_METADATA_KEY, str(elapsed_ns // 1000)),))
        return response

    return handler  # type: ignore[return-value]


def stream_rpc(method: _Handler) -> _Handler:
    """For server-streaming methods that write with ``await context.write`` and return None."""
    name = method.__name__

    @functools.wraps(method)
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> None:
        core = self.core
        core.counters.calls[name] += 1
        call = None
        try:
            _check_parsed(request)
            # Admitted by the gate first, so the stream counts against its principal (client_of).
            call = await core.gate.admit(name, request, context)
            _check_owner(core, name, request)
            with core.admission.stream(client_of(context)):
                await method(self, request, context)
        except asyncio.CancelledError:
            await _answer_if_cut(core, name, context)
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - the boundary: every error becomes a status
            await _abort(core, name, exc, context)
        finally:
            if call is not None:
                call.release()

    return handler  # type: ignore[return-value]
