"""The bidirectional streams of seglog.v1.LogService: ProduceStream and LookupStream.

Every unary call opens an HTTP/2 stream of its own, and that is most of a small call's cost
(bench/bench_streams.py measures an empty unary call against a request on an open stream). On an
open stream a request costs one message each way. The shape of one stream (``_serve``):

    open      the call gate authenticates the stream's credentials once and takes a stream slot
              of its principal (``CallGate.admit_stream``); admission counts it as a stream
              (``consume_streams_max``, per client too); the initial metadata entry
              ``seglog-stream-in-flight-max`` says how far ahead of its answers the service reads.
    each      read one request; admit it as its unary twin would be (a request slot,
    message   ``Admission.message``; the ACL, the principal's request cap and byte quota,
              ``CallGate.message``); do the twin's work (``ProduceRpcs.append``,
              ``LookupRpcs.offsets_for_times``); answer it. Requests are worked on one at a time, in the
              order read, so a stream's batches are appended in the order sent. An answer that
              must wait (ACKS_FSYNCED's group commit, a produce quota's delay) waits in
              ``OrderedReplies`` while the next requests are read and worked on; answers leave in
              request order, each with its request's correlation id. The stream stops reading
              while 64 answers are owed or its answers not yet written hold 256 KiB
              (``STREAM_HELD_BYTES_MAX``); a write that failed ends it before the next request
              read is worked on.
    batches   a ProduceStream message may carry several batches (``produce``, then ``more``; at
              most ``seglog-stream-batches-max``, announced at open): each is admitted, appended
              or refused as a message of its own would be, in order, and answered in its slot
              of the one answer (``more``); grpc.aio's per-message cost, not the append, is
              most of a 16 KiB batch's cost on each side. The open also announces the largest
              message taken (``seglog-stream-request-bytes-max``): producers pack under it.
    refusal   a request the twin would refuse is answered with ``error`` set (the twin's status
              code, message, error class and retry hint); the stream goes on. Not so a stream
              whose rights a reload revoked (``CallGate.recheck``, run before each message takes
              anything, and before each batch of a message after its first: the rest of that
              message is not appended and has no slot in its answer): it ends UNAUTHENTICATED
              or PERMISSION_DENIED.
    end       the client half-closes: the answers still owed are sent, then OK. Or the stream
              ends with a status: a message that does not parse (INVALID_ARGUMENT: no
              correlation id to answer), the service stopping (UNAVAILABLE, after every request
              read was answered), an internal error (INTERNAL), the client cancelling.

Metrics: each message is one observation of ``seglog_rpc_duration_seconds`` under the stream's
method name and the message's own status code; the stream itself counts one call.
"""

from __future__ import annotations

import asyncio
import time
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

import grpc

from seglog.v1 import log_service_pb2 as pb

from seglog_server.config import REQUEST_OVERHEAD_BYTES

from . import conversions
from .admission import client_of
from .boundary import _abort, _answer_if_cut, _check_parsed
from .cluster_routing import EPOCH_METADATA_KEY, OWNER_ADDRESS_METADATA_KEY, OWNER_ID_METADATA_KEY
from .errors import InvalidRequestError, ServiceStoppingError
from .lookup_rpcs import LookupRpcs
from .produce_rpcs import ProduceRpcs
from .service_core import ServiceCore
from .status import status_for

__all__ = [
    "BATCHES_METADATA_KEY", "IN_FLIGHT_METADATA_KEY", "REQUEST_BYTES_METADATA_KEY", "STREAM_BATCHES_MAX", "STREAM_HELD_BYTES_MAX", "STREAM_IN_FLIGHT_MAX",
    "OrderedReplies",
    "StreamRpcs",
]

# Requests a stream may have read and not yet answered. The batch of a produce request is
# appended before the next request is read, so what waits is only answers (behind group commit
# or a quota delay): small. 64: a producer keeps 5 batches in flight per partition, so one
# stream carries a dozen partitions' windows at full depth, and 64 fsynced batches share one or
# two fdatasyncs (group_commit.py). Beyond it the service stops reading, and HTTP/2 flow control
# holds the client back.
STREAM_IN_FLIGHT_MAX = 64
IN_FLIGHT_METADATA_KEY = "seglog-stream-in-flight-max"
# The bytes a stream's answers may hold before it stops reading: those written and not yet
# reported complete by grpc.aio plus those queued behind them. Writes are not waited for, so
# without it a client that does not read would have the service build and hold 64 answers of up
# to response_bytes_max each (a GiB a stream). 256 KiB: the small answers that gain from not
# waiting (produce acknowledgements, single lookups: tens to hundreds of bytes) fill the count
# bound long before it; an answer above it is written one at a time, each waited for, which
# costs one report of a write's completion against the milliseconds such an answer took to
# build. One response_bytes_max instead would let a stream hold two of the largest answers
# and gain nothing. A stream holds at most this plus the one answer that crossed it.
STREAM_HELD_BYTES_MAX = 256 << 10
# The ProduceStream's initial metadata entry: how many batches one message may carry (its
# ``produce`` and ``more``). Each costs the service as a message of its own would, minus the
# message: grpc.aio's per-message cost on each side is what makes 16 KiB batches (Kafka's
# default batch.size) slow one a message. 16: a producer's window is 5 batches a partition.
BATCHES_METADATA_KEY = "seglog-stream-batches-max"
STREAM_BATCHES_MAX = 16
# The ProduceStream's: the largest message the service takes (its request_bytes_max, gRPC's
# receive limit): a producer packs a message's batches under it, or the stream would end.
REQUEST_BYTES_METADATA_KEY = "seglog-stream-request-bytes-max"

_Reply = Any  # a response message, or a future of one (an answer that must wait)


def _message_bytes(message: Any) -> int:
    return message.ByteSize()


class OrderedReplies:
    """Writes a stream's answers in request order, with at most ``in_flight_max`` unanswered and
    at most ``held_bytes_max`` bytes of ready answers held, plus the one that crossed it.

    A ready answer with nothing owed before it starts its write at once, in the caller's step
    (the common case); otherwise it queues behind the answers owed, and one drainer task writes
    them as they become ready. A write under way counts as owed until it completes, and is not
    waited for: grpc.aio reports a write's completion only once grpc's poller thread and the
    loop have run, and a stream that waited for it read its next request that much later (a
    producer's next batch, sent meanwhile, waited in the transport). A write blocks while the
    client does not read: the owed answers then reach a bound and the reader stops reading.
    The bytes bound counts each ready answer (``size_of``) from when it is sent, a late answer
    (a future: a produce answer behind group commit or a quota delay, a few entries) from when
    the drainer takes its result, until its write completes. ``encode``: what is written for an
    answer (a stream's: its serialization, measured by ``len``: one encoding, which grpc.aio
    would otherwise do in the write's first step, registration.py).
    """

    def __init__(
        self, write: Callable[[Any], Awaitable[None]], in_flight_max: int,
        held_bytes_max: int = STREAM_HELD_BYTES_MAX, size_of: Callable[[Any], int] = _message_bytes,
        encode: Callable[[Any], Any] | None = None,
    ) -> None:
        assert in_flight_max >= 1
        self._write = write
        self._in_flight_max = in_flight_max
        self._held_bytes_max = held_bytes_max
        self._size_of = size_of
        self._encode = encode
        self._pending: deque[_Reply] = deque()
        self._sizes: deque[int] = deque()  # beside _pending: each answer's bytes as counted
        self.held_bytes = 0  # the sum of _sizes
        self._drainer: asyncio.Task[None] | None = None  # None whenever it is not running
        self.failure: BaseException | None = None  # what stopped the drainer
        self._room = asyncio.Event()
        self.in_flight_high = 0  # the most answers ever owed at once (statistics, tests)
        self.held_bytes_high = 0  # the most bytes ever held at once (statistics, tests)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def has_room(self) -> bool:
        """Fewer than ``in_flight_max`` answers owed, fewer than ``held_bytes_max`` bytes held
        and nothing failed: ``wait_for_room`` would return at once (a stream's read loop asks
        this first, no coroutine a message)."""
        return (
            len(self._pending) < self._in_flight_max and self.held_bytes < self._held_bytes_max
            and self.failure is None
        )

    async def wait_for_room(self) -> None:
        """Returns once fewer than ``in_flight_max`` answers are owed and fewer than
        ``held_bytes_max`` bytes held."""
        while len(self._pending) >= self._in_flight_max or self.held_bytes >= self._held_bytes_max:
            self._raise_if_failed()
            self._room.clear()
            await self._room.wait()
        self._raise_if_failed()

    async def send(self, reply: _Reply) -> None:
        """The answer to the next request in order (a message, or a future of one). A write that
        fails as it starts raises here; one that fails later is kept in ``failure`` (the read
        loop looks at it after each read) and raised at the next ``send``, ``wait_for_room``
        or ``finish``."""
        self._raise_if_failed()
        if isinstance(reply, asyncio.Future):
            size = 0  # counted once the drainer takes its result
        else:
            if self._encode is not None:
                reply = self._encode(reply)
            if not self._pending:
                write = self._write(reply)
                try:
                    waiting_on = write.send(None)  # to the transport now, not a loop turn later
                except StopIteration:
                    return  # written and completed at once
                # Under way: the drainer completes it (and writes what queues behind it).
                size = self._size_of(reply)
                self._pending.append(reply)
                self._sizes.append(size)
                self.held_bytes = size
                if size > self.held_bytes_high:
                    self.held_bytes_high = size
                self.in_flight_high = max(self.in_flight_high, 1)
                self._drainer = asyncio.ensure_future(self._drain(_resumed(write, waiting_on)))
                return
            size = self._size_of(reply)
        self._pending.append(reply)
        self._sizes.append(size)
        self._held(size)
        self.in_flight_high = max(self.in_flight_high, len(self._pending))
        if self._drainer is None:
            self._drainer = asyncio.ensure_future(self._drain())

    async def finish(self) -> None:
        """Waits until every owed answer was written (raises what stopped the drainer)."""
        if self._drainer is not None:
            await asyncio.shield(self._drainer)
        self._raise_if_failed()

    def cancel(self) -> None:
        """The stream ends without answering: drop what is owed."""
        for reply in self._pending:
            if isinstance(reply, asyncio.Future):
                reply.cancel()
        self._pending.clear()
        self._sizes.clear()
        self.held_bytes = 0
        if self._drainer is not None:
            self._drainer.cancel()

    async def _drain(self, started: Awaitable[None] | None = None) -> None:
        """Writes the owed answers in order; ``started``: the rest of the first one's write,
        begun by ``send``."""
        try:
            if started is not None:
                await started
                self._written()
            while self._pending:
                head = self._pending[0]
                if isinstance(head, asyncio.Future):
                    message = await head
                    if self._encode is not None:
                        message = self._encode(message)
                    size = self._size_of(message)
                    self._sizes[0] = size
                    self._held(size)
                else:
                    message = head
                await self._write(message)
                self._written()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which ends the stream
            self.failure = exc
        finally:
            self._drainer = None
            self._room.set()  # a reader waiting for room learns of the failure

    def _held(self, size: int) -> None:
        self.held_bytes += size
        if self.held_bytes > self.held_bytes_high:
            self.held_bytes_high = self.held_bytes

    def _written(self) -> None:
        """The head's write completed."""
        self._pending.popleft()
        self.held_bytes -= self._sizes.popleft()
        self._room.set()

    def _raise_if_failed(self) -> None:
        if self.failure is not None:
            raise self.failure


class _Session:
    """One open stream, as the shutdown sees it: stop reading, answer what was read."""

    __slots__ = ("reading", "stopping", "task")

    def __init__(self, stopping: bool) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.reading = False
        self.stopping = stopping

    def stop(self) -> None:
        self.stopping = True
        if self.reading:  # parked in a read: nothing to finish but the owed answers
            self.task.cancel()


class _Stopped(Exception):
    """Internal: the shutdown stopped the stream's reading."""


class StreamRpcs:
    """The two bidirectional streams (see the module docstring), over the service core; each
    message does the work of its unary twin's family (``produce``, ``lookups``)."""

    def __init__(self, core: ServiceCore, produce: ProduceRpcs, lookups: LookupRpcs) -> None:
        self.core = core
        self._produce = produce
        self._lookups = lookups
        self._stream_sessions: set[_Session] = set()
        self.stream_in_flight_high = 0
        self.stream_held_bytes_high = 0

    def stop_streams(self) -> None:
        """The shutdown: every open stream stops reading, answers what it read, and ends
        UNAVAILABLE (the client sends the rest on a running service)."""
        for session in list(self._stream_sessions):
            session.stop()

    @property
    def open_stream_count(self) -> int:
        return len(self._stream_sessions)

    # -- the RPCs ---------------------------------------------------------------------------------
    async def ProduceStream(self, requests: Any, context: Any) -> None:
        await self._serve("ProduceStream", context, self._produce_message)

    async def LookupStream(self, requests: Any, context: Any) -> None:
        await self._serve("LookupStream", context, self._lookup_message)

    # -- one stream -------------------------------------------------------------------------------
    async def _serve(
        self, name: str, context: Any, handle: Callable[[str, Any, Any], Awaitable[_Reply]]
    ) -> None:
        core = self.core
        core.counters.calls[name] += 1
        call = None
        replies: OrderedReplies | None = None
        try:
            call = await core.gate.admit_stream(name, context)
            with core.admission.stream(client_of(context)):
                metadata: tuple[tuple[str, str], ...] = ((IN_FLIGHT_METADATA_KEY, str(STREAM_IN_FLIGHT_MAX)),)
                if name == "ProduceStream":
                    request_bytes_max = core.limits.message_bytes_max + REQUEST_OVERHEAD_BYTES
                    metadata += (
                        (BATCHES_METADATA_KEY, str(STREAM_BATCHES_MAX)),
                        (REQUEST_BYTES_METADATA_KEY, str(request_bytes_max)),
                    )
                await context.send_initial_metadata(metadata)
                response_class = pb.ProduceStreamResponse if name == "ProduceStream" else pb.LookupStreamResponse
                replies = OrderedReplies(
                    context.write, STREAM_IN_FLIGHT_MAX, STREAM_HELD_BYTES_MAX, len,
                    response_class.SerializeToString,  # a C call: no frame of ours an answer
                )
                session = _Session(core.stopping)
                self._stream_sessions.add(session)
                try:
                    await self._read_loop(name, session, call, replies, context, handle)
                finally:
                    self._stream_sessions.discard(session)
                    self.stream_in_flight_high = max(self.stream_in_flight_high, replies.in_flight_high)
                    self.stream_held_bytes_high = max(self.stream_held_bytes_high, replies.held_bytes_high)
        except asyncio.CancelledError:
            if replies is not None:
                replies.cancel()
            await _answer_if_cut(core, name, context)
            raise
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001 - the boundary: every error becomes a status
            if replies is not None:
                replies.cancel()
            await _abort(core, name, exc, context)
        finally:
            if call is not None:
                call.release()

    async def _read_loop(
        self, name: str, session: _Session, call: Any, replies: OrderedReplies, context: Any,
        handle: Callable[[str, Any, Any], Awaitable[_Reply]],
    ) -> None:
        gate = self.core.gate
        try:
            while True:
                if not replies.has_room:
                    await replies.wait_for_room()
                request = await _next_request(session, context)
                if replies.failure is not None:
                    # An answer's write failed while the request was read: the stream ends
                    # before working on anything more (a batch appended, never acknowledged).
                    raise replies.failure
                if request is None:
                    break
                _check_parsed(request)  # no correlation id to answer: the stream ends
                if call.generation != gate.generation:  # a reload since the last check (``recheck``)
                    await self._recheck(call, replies)
                await replies.send(await handle(name, call, request))
                if call.revoked is not None:  # revoked during the message (_produce_message)
                    await self._recheck(call, replies)
        except _Stopped:
            await replies.finish()
            raise ServiceStoppingError(
                "seglog is shutting down: every request read on this stream was answered; "
                "send the rest on a running service"
            ) from None
        await replies.finish()

    async def _recheck(self, call: Any, replies: OrderedReplies) -> None:
        """Before a message takes anything (a request slot included): the stream's rights again
        after a reload (``CallGate.recheck``). Revoked, the stream ends with that status
        (UNAUTHENTICATED or PERMISSION_DENIED and the seglog trailer) once the answers owed to
        the messages admitted before were sent."""
        try:
            self.core.gate.recheck(call)
        except Exception:
            await replies.finish()
            raise

    # -- one message ------------------------------------------------------------------------------
    async def _produce_message(self, name: str, call: Any, request: pb.ProduceStreamRequest) -> _Reply:
        if not request.more:
            return await self._produce_batch(name, call, request.correlation_id, request.produce)
        correlation_id = request.correlation_id
        if len(request.more) >= STREAM_BATCHES_MAX:
            started_ns = time.perf_counter_ns()
            exc = InvalidRequestError(
                f"a ProduceStream message carries at most {STREAM_BATCHES_MAX} batches "
                f"({BATCHES_METADATA_KEY}); this one carried {len(request.more) + 1}"
            )
            return self._refused(pb.ProduceStreamResponse, name, correlation_id, exc, started_ns)
        # One batch after the other, each as a message of its own would be (admitted, appended
        # or refused alone): a refused batch does not stop the ones after it. Rights revoked
        # by a reload meanwhile stop it: the batches after have no slot in the answer (not
        # appended; the client sends them again) and the stream ends once it is answered, as
        # it would before a message of one batch (``_read_loop``).
        replies: list[_Reply] = []
        try:
            for produce in (request.produce, *request.more):
                if replies and not self._still_allowed(call):
                    break
                replies.append(await self._produce_batch(name, call, correlation_id, produce))
        except BaseException:
            # The stream ended (cancelled) or a batch raised (a bug): the answers under way for
            # the batches before end with it.
            for reply in replies:
                if isinstance(reply, asyncio.Future):
                    reply.cancel()
            raise
        if any(isinstance(reply, asyncio.Future) for reply in replies):
            return asyncio.ensure_future(_joined_later(replies))
        return _joined(replies)

    def _still_allowed(self, call: Any) -> bool:
        try:
            self.core.gate.recheck(call)
        except Exception:  # noqa: BLE001 - remembered on the call: _read_loop ends the stream with it
            return False
        return True

    async def _produce_batch(
        self, name: str, call: Any, correlation_id: int, produce: pb.ProduceRequest
    ) -> _Reply:
        started_ns = time.perf_counter_ns()
        core = self.core
        waiters = core.waiters
        woken = waiters.woken_count
        try:
            (log, info, acks), delay_s = await self._admitted(
                call, produce, self._produce.append(produce)
            )
        except Exception as exc:  # noqa: BLE001 - answered on the stream (or raised: a bug)
            return self._refused(pb.ProduceStreamResponse, name, correlation_id, exc, started_ns)
        if waiters.woken_count != woken:
            # The append woke streams parked at the tail: one loop turn for them to read it and
            # start their push before this answer's write, so a record reaches its consumers
            # without waiting behind its producer's acknowledgement.
            await asyncio.sleep(0)
        if acks != pb.ACKS_FSYNCED and delay_s <= 0:
            try:
                self._produce.check_may_acknowledge(log)
            except Exception as exc:  # noqa: BLE001 - answered on the stream (or raised: a bug)
                return self._refused(pb.ProduceStreamResponse, name, correlation_id, exc, started_ns)
            self._message_finished(name, "OK", started_ns)
            return pb.ProduceStreamResponse(
                correlation_id=correlation_id, produce=conversions.produce_response(info)
            )
        return asyncio.ensure_future(
            self._produce_answer_later(name, correlation_id, log, info, acks, delay_s, started_ns)
        )

    async def _produce_answer_later(
        self, name: str, correlation_id: int, log: Any, info: Any, acks: int, delay_s: float,
        started_ns: int,
    ) -> pb.ProduceStreamResponse:
        try:
            if acks == pb.ACKS_FSYNCED:
                await self.core.durable(log, info.last_offset + 1)
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            self._produce.check_may_acknowledge(log)
        except Exception as exc:  # noqa: BLE001 - answered on the stream (or raised: a bug)
            return self._refused(pb.ProduceStreamResponse, name, correlation_id, exc, started_ns)
        self._message_finished(name, "OK", started_ns)
        return pb.ProduceStreamResponse(correlation_id=correlation_id, produce=conversions.produce_response(info))

    async def _lookup_message(self, name: str, call: Any, request: pb.LookupStreamRequest) -> _Reply:
        started_ns = time.perf_counter_ns()
        correlation_id = request.correlation_id
        reply = pb.LookupStreamResponse()
        reply.correlation_id = correlation_id  # (field by field: quicker than a keyword)
        lookup = request.offsets_for_times
        try:
            await self._admitted(
                call, lookup, self._lookups.offsets_for_times(lookup, reply.offsets_for_times)
            )
        except Exception as exc:  # noqa: BLE001 - answered on the stream (or raised: a bug)
            return self._refused(pb.LookupStreamResponse, name, correlation_id, exc, started_ns)
        self._message_finished(name, "OK", started_ns)
        return reply

    async def _admitted(
        self, call: Any, request: Any, work: Coroutine[Any, Any, Any]
    ) -> tuple[Any, float]:
        """Runs ``work`` (the message's append or lookup, not started) admitted as its unary twin
        would be; returns what it returns and the produce quota's delay. Where nothing binds (no
        reload, ACL or byte quota; a free slot: ``CallGate.admits_message_at_once``), its first
        step runs with no slot taken, and the slots are taken (``_begin_message``) only if it
        waits (the pool, a busy log), for as long as it waits, as the twin would hold them
        meanwhile: work answered inline in this step, the common case, would take and give them
        back unseen, and owes no delay. Anything else takes them first. Refused, ``work`` is
        closed unfinished."""
        core = self.core
        if core.admission.request_slot_free() and core.gate.admits_message_at_once(call):
            try:
                waiting_on = work.send(None)
            except StopIteration as finished:
                return finished.value, 0.0
            rest: Awaitable[Any] = _resumed(work, waiting_on)
        else:
            rest = work
        try:
            delay_s = self._begin_message(call, request)
        except BaseException:
            work.close()
            raise
        try:
            return await rest, delay_s
        finally:
            self._end_message(call)

    def _begin_message(self, call: Any, request: Any) -> float:
        """Admits one message as its unary twin: a request slot (admission) and the gate's
        checks; returns the produce quota's delay. ``_end_message`` once it is answered."""
        core = self.core
        core.admission.take_request_slot()
        try:
            return core.gate.begin_message(call, request)
        except BaseException:
            core.admission.give_back_request_slot()
            raise

    def _end_message(self, call: Any) -> None:
        self.core.gate.end_message(call)
        self.core.admission.give_back_request_slot()

    def _refused(
        self, response_class: Any, name: str, correlation_id: int, exc: Exception, started_ns: int
    ) -> Any:
        """The answer to a request its unary twin would have refused with ``exc``'s status."""
        status = status_for(exc)
        if not status.expected:
            raise exc  # a bug: the stream ends INTERNAL and the traceback is logged (boundary)
        self.core.counters.errors[status.code.name] += 1
        self._message_finished(name, status.code.name, started_ns)
        error = pb.StreamError(
            code=status.code.value[0], message=self.core.log_dir_names.redact(status.message),
            error_class=status.error_class, retry_after_ms=status.retry_after_ms or 0,
        )
        if status.extra_metadata:
            _owner_hint_into(error, status.extra_metadata)
        return response_class(correlation_id=correlation_id, error=error)

    def _message_finished(self, name: str, code: str, started_ns: int) -> None:
        metrics = self.core.metrics
        if metrics is not None:
            metrics.rpc_finished(name, code, (time.perf_counter_ns() - started_ns) / 1e9)


def _owner_hint_into(error: pb.StreamError, trailing: tuple[tuple[str, str], ...]) -> None:
    """The owner's hint a refusal's unary twin carries in trailing metadata (``seglog-owner-*``,
    ``seglog-epoch``: cluster_routing.py), as the StreamError's fields: every refusal that names
    the owner names it on the stream too, as data."""
    for key, value in trailing:
        if key == OWNER_ID_METADATA_KEY:
            error.owner_id = value
        elif key == OWNER_ADDRESS_METADATA_KEY:
            error.owner_address = value
        elif key == EPOCH_METADATA_KEY:
            error.owner_epoch = int(value)


def _joined(replies: list[pb.ProduceStreamResponse]) -> pb.ProduceStreamResponse:
    """One message's answer from its batches' answers: the first in ``produce`` or ``error``, the
    rest in ``more``."""
    first, *rest = replies
    for reply in rest:
        answer = first.more.add()
        if reply.HasField("error"):
            answer.error.CopyFrom(reply.error)
        else:
            answer.produce.CopyFrom(reply.produce)
    return first


async def _joined_later(replies: list[_Reply]) -> pb.ProduceStreamResponse:
    """``_joined`` once every batch's answer is in (some wait: ACKS_FSYNCED, a quota delay)."""
    done = []
    try:
        for reply in replies:
            done.append((await reply) if isinstance(reply, asyncio.Future) else reply)
    except asyncio.CancelledError:  # the stream ended without answering: so do they
        for reply in replies:
            if isinstance(reply, asyncio.Future):
                reply.cancel()
        raise
    return _joined(done)


@types.coroutine
def _resumed(write: Any, waiting_on: Any) -> Generator[Any, Any, Any]:
    """The rest of ``write`` (a coroutine whose first step yielded ``waiting_on``), as ``await``
    would run it in the awaiting task: each value sent or exception thrown passed on to it;
    returns what ``write`` returns."""
    while True:
        try:
            sent = yield waiting_on
        except GeneratorExit:
            write.close()
            raise
        except BaseException as error:  # noqa: BLE001 - handed to the write, as await does
            step, argument = write.throw, error
        else:
            step, argument = write.send, sent
        try:
            waiting_on = step(argument)
        except StopIteration as finished:
            return finished.value


async def _next_request(session: _Session, context: Any) -> Any:
    """The next request, or None when the client half-closed; ``_Stopped`` on shutdown."""
    if session.stopping:
        raise _Stopped()
    session.reading = True
    try:
        request = await context.read()
    except asyncio.CancelledError:
        if not session.stopping:
            raise  # the client went away, or the drain cut the stream
        task = asyncio.current_task()
        assert task is not None
        task.uncancel()
        raise _Stopped() from None
    finally:
        session.reading = False
    return None if request is grpc.aio.EOF else request
