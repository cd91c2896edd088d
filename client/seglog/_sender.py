"""The producer's sender: the task that drains the accumulator and puts batches on the wire.

Kafka's producer and aiokafka split the same way: the public API (``producer.py``) appends
records to the ``RecordAccumulator`` from any thread; this module owns everything after that, on
the producer's event loop. One ``Sender`` per producer:

- the loop (``_run``): wake on a new or full batch, a linger deadline, a completion or a flush;
  drain what is ready, as many batches as there is room in flight for, and start each one;
- the idempotent producer's id, asked for before the first batch (``_idempotence``);
- each partition's in-flight window (``_send_window``): ordered completion, holds and retries
  with backoff (the service's retry-after hint wins over a shorter one);
- each partition's send turns (``_send_turns.py``): its messages, each a task of its own, are
  sent in the order they were started, whatever one of them waits for before its send;
- the transport choice: the connection's ProduceStream, falling back to unary Produce for good
  on a service that does not serve it (UNIMPLEMENTED before the stream was confirmed);
- routing (``_routing.py``): each batch goes to its partition owner's connection; a refusal
  naming another owner is repeated once there with the same bytes (producer id and sequence
  kept, so the owner's idempotence check still holds), and the window's retries route afresh.
  An idempotent window follows a move as a whole instead (``_follow_move``): held at the first
  refusal naming another owner (or a move's final catch-up), its batches go again in their order
  once every answer owed is in, after MoveFollower's back-off, spending no retries, within the
  request timeout since that refusal (a move's target may refuse naming the old owner until its
  watch catches up); none is repeated on its own, so none lands behind a later one;
- closing: cancel what runs, complete the windows in order, fail whatever never left;
- a batch the service refused as too large (``_answer``): split into pieces sent first in its
  place, numbered from its first sequence (Kafka's ``splitAndReenqueue``); a batch of one record
  fails, and the partition's later batches are numbered down past it instead of retiring the id.

Figures go to the producer's statistics dict (shared, not copied); ``progress`` is set whenever
a batch completes, which is what ``flush`` and a wait for buffer space wait on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import struct
import threading
from collections.abc import Callable, Coroutine
from time import monotonic as _monotonic
from typing import Any

import grpc

from seglog._accumulator import ProducerBatch, RecordAccumulator
from seglog._idempotence import NO_PRODUCER_FIELDS, Idempotence, ProducerFields, earlier_sequence, next_sequence
from seglog._producer_config import ProducerConfig
from seglog._routing import _REFOLLOW_FIRST_S, _REFOLLOW_MAX_S, FOLLOWED_ERRORS, Router
from seglog._send_turns import SendTurn, SendTurns
from seglog._send_window import SendWindow, WindowEntry
from seglog._streams import error_from_stream
from seglog.client import Transport
from seglog.errors import (
    ClientClosedError,
    NotPartitionOwnerError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    SeglogError,
    ServiceError,
    ServiceOverloadedError,
    ServiceUnavailableError,
    TopicNotFoundError,
    translate_codec_errors,
)
from seglog.records import NO_PRODUCER_ID, NO_SEQUENCE, RECORD_BATCH_OVERHEAD, Compression
from seglog.records.crc import crc32c
from seglog.records.header import ATTRIBUTES_OFFSET, CRC_OFFSET, PRODUCER_ID_OFFSET
from seglog.structs import Acks, TopicPartition
from seglog.v1 import log_service_pb2 as pb

__all__ = ["Sender"]

_LOG = logging.getLogger("seglog.producer")

# A batch in a partition's send window: the batch, its bytes and its producer fields.
_Sent = tuple[ProducerBatch, bytes, ProducerFields]

_ACKS_TO_PROTO = {Acks.WRITTEN: pb.ACKS_WRITTEN, Acks.FSYNCED: pb.ACKS_FSYNCED}

# The service's refusals of a batch by its size that a smaller batch avoids (its ``seglog-error``
# classes): above the topic's max.message.bytes or segment.bytes, or more records than it takes.
# Nothing of such a batch was written.
_SPLIT_ERRORS = frozenset({"RecordTooLargeError", "RecordBatchTooLargeError", "RecordCountTooLargeError"})
# The limit a size refusal names (storage/log/log_validator.py): the pieces are made no larger.
# At most ten digits (a topic's limits are 32-bit), so a refusal naming a number too long for
# int() matches nothing; a limit outside (a batch header, 2**31 - 1] is taken as none named.
_REFUSED_LIMIT = re.compile(r"above (?:max\.message\.bytes|segment\.bytes) \((\d{1,10})\)")
_REFUSED_LIMIT_MAX = 2**31 - 1
# How long a topic's learned limit is kept (Kafka's metadata.max.age.ms): after it, the topic's
# batches go full-size again, so a limit the operator raised (or a topic made anew) is used.
LEARNED_LIMIT_MAX_AGE_MS = 300_000
# gRPC's own refusal of a message above its size limit (RESOURCE_EXHAUSTED, the service's or the
# client's channel): nothing of the message reached the service's handler. The limit is M.
_REQUEST_LIMIT_REFUSAL = re.compile(r"(?:Received|Sent) message larger than max \(\d+ vs\. (\d{1,10})\)")


def _now_ms() -> float:
    # time.monotonic, not loop.time(): appends from the caller's thread (the synchronous
    # Producer) stamp batches with the same clock the sender reads on the loop.
    return _monotonic() * 1000


class Sender:
    """Drains ``accumulator`` onto one transport, with windows, retries and stream fallback."""

    def __init__(
        self,
        config: ProducerConfig,
        accumulator: RecordAccumulator,
        *,
        enable_idempotence: bool,
        partition_counts: dict[str, int],
        stats: dict[str, int],
    ) -> None:
        self._config = config
        self._accumulator = accumulator
        # The producer's cache of partition counts: a TopicNotFoundError forgets the topic's.
        self._partition_counts = partition_counts
        self._stats = stats
        stats.setdefault("batches_renumbered", 0)
        # The producer id and per-partition sequences (_idempotence.py): a retried batch is
        # never written twice. On by default, as in Kafka since 3.0.
        self.idempotence = Idempotence(enable_idempotence, self.init_producer_id)
        self.windows: dict[TopicPartition, SendWindow[_Sent]] = {}
        self.requests: set[asyncio.Task[None]] = set()
        # Each partition's messages are sent in the order their tasks were started
        # (``_send_turns.py``): each task takes its turn when it is created.
        self.turns = SendTurns()
        # None until the service answered a ProduceStream (True) or does not serve it (False).
        self.streaming: bool | None = None
        # Batches a ProduceStream message may carry, as the service last said (1: one a message).
        # The largest message it takes is the live stream's word alone (_request_limits).
        self.stream_batches_max = 1
        # Set by the producer: closing stops the loop once the accumulator is empty; closed
        # stops retries.
        self.closing = False
        self.closed = False
        self.progress: asyncio.Event | None = None
        self._transport: Transport | None = None
        self._router: Router | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id: int | None = None
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._parked = False  # the loop waits for a wake-up (nothing of its own under way)
        # ProduceStream writes under way, by connection (grpc.aio writes one message of a call at
        # a time, each until grpc reports it done): at linger_ms=0 a partition whose connection
        # is writing keeps its open batch, which takes the records sent meanwhile, instead of
        # queueing a request of its own behind the write (``_can_send``, ``_write_on``).
        self._writing: dict[Transport, int] = {}
        # Groups whose start stopped at a retired producer id (``_start_requests``), started
        # by the loop before anything it drains next, after a new id.
        self._deferred: list[list[ProducerBatch]] = []
        # The groups the loop (or ``start_ready_now``) drained and holds in hand, not yet in a
        # window: each is consumed from its front as its batches go into their window
        # (``_start_requests``), so a batch is either here or owned by its window, never both.
        # Should the loop die, the crash path fails what is here (``abort``): flush returns.
        self._in_hand: list[list[ProducerBatch]] = []
        # The limit a topic's last size refusal named and when (``_size_refusal``): its batches
        # above it are split before they are sent (``_batch_bytes_max``), not refused one by one.
        # Kept for ``learned_limit_max_age_ms``, then forgotten: a limit raised later is used again.
        # A compressed producer's batches are not split by it (``_batch_bytes_max``).
        self._topic_batch_bytes: dict[str, tuple[int, float]] = {}
        self.learned_limit_max_age_ms: float = LEARNED_LIMIT_MAX_AGE_MS
        # The largest message a refusal by gRPC's own size limit named ("Received message larger
        # than max"), by connection, with the address it was refused at and when: with the limit
        # its current stream announced, messages are packed and batches split within it before
        # they are sent (``_request_limits``). Never used on another connection or address, and
        # forgotten after ``learned_limit_max_age_ms`` (a service restarted with another limit).
        self._refused_request_bytes: dict[Transport, tuple[str, int, float]] = {}
        # Set when the loop died of an unexpected error: what it had and what comes fails with it.
        self.crashed: BaseException | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, router: Router) -> None:
        """Start the loop on the running event loop, sending through ``router``'s channels (its
        bootstrap one for everything but Produce)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        self._wakeup = asyncio.Event()
        self.progress = asyncio.Event()
        self._router = router
        self._transport = router.bootstrap
        self._task = asyncio.create_task(self._run(), name="seglog-producer-sender")

    async def stop(self) -> None:
        """Cancel the loop and every request; complete the windows in order and fail the rest."""
        tasks = [task for task in (self._task, *self.requests) if task is not None and not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Batches still in the windows: in flight when cancelled, or answered and waiting for an
        # earlier one. Completed in order; what was never answered fails.
        closed = ClientClosedError("the producer was closed while this batch was in flight")
        for window in self.windows.values():
            for entry in window.abandon():
                if not SendWindow.succeeded(entry):
                    entry.outcome = closed
                self._complete_entry(entry)
        self.windows.clear()
        # Whatever never reached a request (cancelled before drain) fails instead of hanging.
        self.abort(ClientClosedError("the producer was closed before these records were sent"))

    def abort(self, error: BaseException) -> None:
        """Fail every batch still queued in the accumulator, and those drained but not yet in a
        window (held in hand by the loop, or deferred behind a new producer id)."""
        in_hand, self._in_hand = self._in_hand, []
        deferred, self._deferred = self._deferred, []
        for group in in_hand + deferred:
            self._fail_group(group, error)
        self._stats["records_failed"] += self._accumulator.abort_queued(error)

    def _fail_group(self, group: list[ProducerBatch], error: BaseException) -> None:
        """Fail the batches of ``group`` (taken off it one at a time: each is finished once)."""
        while group:
            batch = group.pop(0)
            self._record_failure(batch, error)
            self._finish(batch)

    def wake(self) -> None:
        """Wake the loop; callable from any thread."""
        if self._loop is None or self._wakeup is None:
            return
        if threading.get_ident() == self._loop_thread_id:
            self._wakeup.set()
        else:
            self._loop.call_soon_threadsafe(self._wake_on_loop)

    def _wake_on_loop(self) -> None:
        """A wake-up from another thread (the synchronous Producer's append), on the loop: at
        ``linger_ms=0`` with the loop parked, what it would start on waking is started here
        (``start_ready_now``), a loop turn before the woken loop would; otherwise the loop wakes."""
        if not self.start_ready_now():
            assert self._wakeup is not None
            self._wakeup.set()

    # -- the loop --------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._loop_until_closed()
        except asyncio.CancelledError:
            if not self.closed:
                # The event loop shuts down under an open producer (asyncio.run ending, a loop
                # thread's cleanup): nothing will send what the loop held or what is queued, so
                # it fails now, unsent (``stop`` does the same for a producer closed).
                self._fail_all(ClientClosedError("the event loop shut down before these batches were sent"))
            raise
        except BaseException as error:  # noqa: BLE001 - a bug: fail what waits, never hang flush
            self._crash(error)
            if not isinstance(error, Exception):
                raise

    def _crash(self, error: BaseException) -> None:
        """The loop died of an unexpected error (in itself or in ``start_ready_now``): every
        batch it held or would have started fails with it, and sends are refused from now on."""
        _LOG.error("the producer's sender stopped on an unexpected error", exc_info=error)
        self.crashed = error
        self._fail_all(SeglogError(f"the producer's sender stopped on an unexpected error: {error!r}"))

    def _fail_all(self, error: SeglogError) -> None:
        """The loop is gone: every batch it held in hand or would have started fails with
        ``error`` (the requests under way still complete their windows)."""
        self.abort(error)
        assert self.progress is not None
        self.progress.set()

    async def _loop_until_closed(self) -> None:
        assert self._wakeup is not None and self._loop is not None
        while True:
            self._wakeup.clear()
            now = _now_ms()
            deferred, self._deferred = self._deferred, []
            self._in_hand = deferred
            batches, next_due_ms = self._drain(now)
            self._in_hand += _by_partition(batches)
            await self._start_in_hand()
            if self.closing and self._accumulator.is_empty():
                return
            timer = None
            if next_due_ms is not None:
                timer = self._loop.call_later(max(0.0, next_due_ms - now) / 1000, self._wakeup.set)
            self._parked = True
            try:
                await self._wakeup.wait()
            finally:
                self._parked = False
            if timer is not None:
                timer.cancel()

    async def _start_in_hand(self) -> None:
        """Start the groups in hand, in order. A group stops where a batch that failed to build
        retired the producer id: the rest goes on after a new one. A group stays in hand until
        every batch of it is in its window or failed, so a crash fails the rest (``abort``)."""
        in_hand = self._in_hand
        while in_hand:
            group = in_hand[0]
            if group and self.idempotence.needs_producer_id:
                error = await self._producer_id_error()
                if self._in_hand is not in_hand:
                    return  # taken meanwhile by abort (close's timeout), which failed them
                if error is not None:
                    self._fail_group(group, error)
            if group:
                self._start_requests(group)
            if not group:
                in_hand.pop(0)

    def start_ready_now(self) -> bool:
        """At ``linger_ms=0``, what the loop would start on waking is started by the append
        itself: a record reaches the wire one loop turn sooner. Only on the loop's thread and
        while the loop is parked with a producer id in hand, so batches still start in the
        order they were drained; otherwise (False) the loop is woken as before."""
        if (
            self._config.linger_ms != 0
            or not self._parked
            or self.closing
            or self.idempotence.needs_producer_id
            or self._deferred
            or self.crashed is not None
            or threading.get_ident() != self._loop_thread_id
        ):
            return False
        in_hand = self._in_hand = _by_partition(self._drain(_now_ms())[0])
        try:
            while in_hand:
                group = in_hand[0]
                if not self._deferred:
                    self._start_requests(group)
                if group:  # a retired producer id: the loop starts the rest, in order
                    self._deferred.append(group)
                in_hand.pop(0)
        except Exception as error:  # noqa: BLE001 - a bug: fail what waits, never hang flush
            self._crash(error)
            assert self._task is not None
            self._task.cancel()  # parked: it would start what comes next on a broken path
            return True
        if self._deferred:
            self.wake()
        return True

    def _drain(self, now_ms: float) -> tuple[list[ProducerBatch], float | None]:
        """The batches ready to start now, as many as there is room in flight for (a request
        per partition with room in its window), and the next linger deadline. On a stream
        whose service takes several batches a message, a partition's request carries as many
        of its ready batches as its window has room for (``_batches_for``)."""
        room = self._config.max_in_flight_requests - len(self.requests)
        batches_for = self._batches_for if self.streaming and self.stream_batches_max > 1 else None
        return self._accumulator.drain(now_ms, self._can_send, room, batches_for)

    def _batches_for(self, topic_partition: TopicPartition) -> int:
        window = self.windows.get(topic_partition)
        room = self._in_flight_max_for(topic_partition)
        room = room if window is None else window.room(room)
        return min(room, self.stream_batches_max)

    def _can_send(self, topic_partition: TopicPartition) -> bool:
        window = self.windows.get(topic_partition)
        if window is not None and not window.can_send(self._in_flight_max_for(topic_partition)):
            return False
        if self._writing and self._config.linger_ms == 0:
            assert self._router is not None
            topic, partition = topic_partition  # the accumulator's key: a TopicPartition or a plain pair
            return self._router.transport_for(topic, partition) not in self._writing
        return True

    def in_flight_max(self) -> int:
        """Batches per partition in flight: the configured window on a stream the service
        confirmed; one until then and on the unary path (separate calls may land in any order)."""
        if self.streaming:
            return self._config.max_in_flight_per_partition
        return 1

    def _in_flight_max_for(self, topic_partition: TopicPartition) -> int:
        """``in_flight_max``, but one batch until the producer id wrote to the partition: the
        service takes an unknown id's first batch whatever its sequence, so a batch sent after
        one it refuses (as too large, say) could land first (``Idempotence.written_to``)."""
        return self.in_flight_max() if self.idempotence.written_to(topic_partition) else 1

    async def _producer_id_error(self) -> Exception | None:
        """Before the first batch (and after a retired id) the idempotent producer asks for a
        producer id; the loop waits for it, so batches keep the order they were drained in.
        If it cannot be had, the reason (the group in hand fails with it, the next ones ask
        again); None once it is had."""
        try:
            await self.idempotence.ensure_producer_id()
        except Exception as error:  # noqa: BLE001 - the batches fail, the producer goes on
            return error
        return None

    # -- one batch through its window ------------------------------------------------------------

    def _start_requests(self, batches: list[ProducerBatch]) -> None:
        """One partition's batches, oldest first, into its window and out as requests of their
        own, one a ProduceStream message: as many batches a message as the service takes and
        the request size allows (``message_counts``; ``_send_group_request`` for several), each
        message answered and settled in its window on its own, so a window of large batches
        (one a message) stays as pipelined as with one batch a request. A batch that fails to
        build fails alone; if that retired the producer id, the batches after it are not
        started and stay in ``batches``, to go out after a new id is had (``ensure_producer_id``).

        ``batches`` is the caller's group in hand, consumed from its front: each batch leaves
        it as its window (or its failure) takes it over. Should this fail on an unexpected
        error, what is left in ``batches`` is the caller's to fail, and the partition's window,
        holding batches of this call no request was started for, fails with the error
        (``_request_failed``): no batch is lost, none finished twice."""
        tp = batches[0].topic_partition
        placed: list[WindowEntry[_Sent]] = []
        to_send: list[WindowEntry[_Sent]] = []
        try:
            self._place_in_window(tp, batches, placed, to_send)
            self._start_placed(tp, to_send)
        except Exception as error:
            if placed:
                self._request_failed(tp, placed, error)
            raise

    def _place_in_window(
        self, tp: TopicPartition, batches: list[ProducerBatch],
        placed: list[WindowEntry[_Sent]], to_send: list[WindowEntry[_Sent]],
    ) -> None:
        """``_start_requests``' first half: ``batches`` (split within the known limits first)
        given their producer fields and built, each into the window as it leaves ``batches``
        (``placed``): ``to_send`` now, or queued beyond the partition's in-flight limit."""
        bytes_max = self._batch_bytes_max(tp)
        if bytes_max is not None:
            self._within_limit(batches, bytes_max)
        while batches:
            batch = batches[0]
            if self.idempotence.needs_producer_id:
                return
            # The producer id and this partition's next sequence, given once: a retry resends
            # the same bytes, so the service can answer it with the offsets it got the first time.
            fields = self.idempotence.fields_now(tp, batch.record_count)
            try:
                with translate_codec_errors():
                    records = self._accumulator.build(batch, *fields)
            except Exception as error:  # noqa: BLE001 - the batch fails, the others go on
                self.idempotence.batch_failed(fields)
                batches.pop(0)
                self._record_failure(batch, error)
                self._finish(batch)
                continue
            too_large = self._above_request_limit(tp, batch, records)
            if too_large is not None:
                # Not sent: gRPC would end the connection's whole stream refusing it, failing
                # every batch in flight on it. Its sequences were the partition's last given.
                self.idempotence.batch_unwritten(tp, fields, batch.record_count)
                batches.pop(0)
                self._record_failure(batch, too_large)
                self._finish(batch)
                continue
            window = self.windows.get(tp)
            if window is None:
                window = self.windows[tp] = SendWindow()
            # Beyond the partition's in-flight limit (a batch split within its topic's limit, a
            # group started after a new producer id), it waits in the window, sent as the ones
            # before it are answered.
            if window.can_send(self._in_flight_max_for(tp)):
                entry = window.sent((batch, records, fields))
                to_send.append(entry)
            else:
                entry = window.queued((batch, records, fields))
            placed.append(entry)
            batches.pop(0)

    def _start_placed(self, tp: TopicPartition, entries: list[WindowEntry[_Sent]]) -> None:
        """``_start_requests``' second half: a request task for the window's ``entries`` to
        send now, several a message where the stream takes them."""
        if not entries:
            return
        if len(entries) == 1:
            self._send_entry(tp, entries[0])
            return
        bytes_max = self._message_bytes_max(self._request_limits(self._connection_for(tp)))
        position = 0
        sizes = [len(entry.item[1]) for entry in entries]
        for count in message_counts(sizes, tp.topic, self.stream_batches_max, bytes_max, tp.partition):
            if count == 1:
                self._send_entry(tp, entries[position])
            else:
                turn = self.turns.take(tp)
                group = entries[position:position + count]
                self._start_request(tp, group, lambda group=group, turn=turn: self._send_group_request(tp, group, turn), turn)
            position += count

    def _batch_bytes_max(self, tp: TopicPartition) -> int | None:
        """The largest batch of ``tp`` to send (None: no limit known): within the limit its
        topic's last size refusal named (``_learned_topic_limit``) and within the request limits
        known for its connection (``_request_batch_bytes``), less a message's envelope."""
        limits = [limit for limit in (self._learned_topic_limit(tp.topic), self._request_batch_bytes(tp)) if limit]
        return min(limits) if limits else None

    def _connection_for(self, tp: TopicPartition) -> Transport:
        assert self._router is not None
        return self._router.transport_for(tp.topic, tp.partition)

    def _request_limits(self, transport: Transport, stream: Any = None) -> list[int]:
        """The service's request limits known for ``transport``'s connection now, each left out
        where unknown: the one its current ProduceStream (``stream``, else the connection's)
        announced when it opened, and the one a refusal of gRPC's named on this connection at
        its current address. A limit seen on another stream, connection or service is not one
        of them (an older build, another owner, a restarted service may take another)."""
        known: list[int] = []
        if stream is None and self.streaming is not False:
            try:
                stream = transport.produce_stream()
            except ClientClosedError:
                stream = None
        # The stream's own: reset when it ends or reopens, set when the service answers the open.
        if stream is not None and stream.request_bytes_max:
            known.append(stream.request_bytes_max)
        refused = self._refused_request_bytes.get(transport)
        if refused is not None:
            server, limit, refused_at_ms = refused
            if _now_ms() - refused_at_ms >= self.learned_limit_max_age_ms:
                del self._refused_request_bytes[transport]
            elif server == transport.server:
                known.append(limit)
        return known

    def _message_bytes_max(self, known: list[int]) -> int:
        """The largest ProduceStream message to pack batches into: within the client's
        max_request_bytes and every limit ``known`` (``_request_limits``; none may be)."""
        return min([self._config.max_request_bytes, *known])

    def _learned_topic_limit(self, topic: str) -> int | None:
        """The limit ``topic``'s last size refusal named, while younger than
        ``learned_limit_max_age_ms`` (then forgotten). None for a compressed producer: the
        service applies the limit to the compressed batch and the bound here is uncompressed,
        so its batches are split only when refused (``_split``), not all cut to the limit."""
        learned = self._topic_batch_bytes.get(topic)
        if learned is None:
            return None
        limit, learned_at_ms = learned
        if _now_ms() - learned_at_ms >= self.learned_limit_max_age_ms:
            del self._topic_batch_bytes[topic]
            return None
        return limit if self._config.compression == Compression.NONE else None

    def _request_batch_bytes(self, tp: TopicPartition) -> int | None:
        """The largest batch of ``tp`` a message of its own takes, by the request limits known
        for the connection it goes out on (``_request_limits``); None where none is known."""
        if self._router is None:
            return None  # not started: no connection, no limit known
        known = self._request_limits(self._connection_for(tp))
        if not known:
            return None
        return _batch_bytes_within(min(known), tp.topic, tp.partition)

    def _above_request_limit(self, tp: TopicPartition, batch: ProducerBatch, records: bytes) -> RecordTooLargeError | None:
        """The refusal of a record alone (a batch of one, which no split makes smaller) whose
        built batch is above the request limit known for the connection it would go out on
        (its current stream's announced one, or one a refusal of gRPC's named there:
        ``_request_batch_bytes``); None for any other batch, or where no limit is known."""
        if batch.record_count != 1:
            return None
        limit = self._request_batch_bytes(tp)
        if limit is None or len(records) <= limit:
            return None
        return RecordTooLargeError(
            f"a record of {len(records)} bytes (as a batch) is above the service's request limit: "
            f"a batch alone in a message takes at most {limit} bytes; not sent",
        )

    def _within_limit(self, batches: list[ProducerBatch], limit: int) -> None:
        """A partition's batches, those above ``limit`` (``_batch_bytes_max``) split into pieces
        within it (``RecordAccumulator.split``) before they get sequences, in place: each batch
        split is replaced by its pieces as it is split (a split batch is never finished)."""
        index = 0
        while index < len(batches):
            batch = batches[index]
            if batch.record_count > 1 and batch.size_bytes_bound > limit:
                pieces = self._accumulator.split(batch, limit)
                batches[index:index + 1] = pieces
                self._stats["batches_split"] += 1
                index += len(pieces)
            else:
                index += 1

    def _send_entry(self, tp: TopicPartition, entry: WindowEntry[_Sent]) -> None:
        turn = self.turns.take(tp)
        self._start_request(tp, [entry], lambda: self._send_batch_request(tp, entry, turn), turn)

    def _start_request(
        self, tp: TopicPartition, entries: list[WindowEntry[_Sent]],
        request: Callable[[], Coroutine[Any, Any, None]], turn: SendTurn | None = None, *, resend: bool = False,
    ) -> None:
        """``request()`` (a step of ``tp``'s requests, owning ``entries``; ``resend``: their
        resend after a backoff) as a task of its own. Should it fail on an unexpected error (a
        bug: it raises, or cannot even be called), the partition's batches fail with that error
        (``_request_failed``): flush and close return. So too if it ends cancelled
        (``_request_cancelled``)."""
        try:
            task = asyncio.create_task(request())
        except Exception as error:  # noqa: BLE001 - a bug: fail the batches, never hang flush
            if turn is not None:
                turn.release()
            self._request_failed(tp, entries, error)
            return
        self._track(task, turn)
        task.add_done_callback(lambda done: self._request_done(tp, entries, done, resend))

    def _request_done(
        self, tp: TopicPartition, entries: list[WindowEntry[_Sent]], task: asyncio.Task[None], resend: bool
    ) -> None:
        if task.cancelled():
            self._request_cancelled(tp, entries, task, resend)
        elif task.exception() is not None:
            self._request_failed(tp, entries, task.exception())

    def _shutting_down(self, task: asyncio.Task[None]) -> bool:
        """Whether a request task ended cancelled because the producer or its event loop is
        going away: the producer closed (``stop`` cancels its tasks and completes the windows
        itself), the task cancelled by ``cancel()`` (only ``stop`` and the loop's own shutdown
        do that: asyncio.run, or a loop thread cancelling what is left) or the sender's loop
        task cancelled. Otherwise the CancelledError came from underneath (a gRPC call
        cancelled) while the producer runs on."""
        loop_task = self._task
        return (
            self.closed
            or task.cancelling() > 0
            or loop_task is None
            or loop_task.cancelling() > 0
            or loop_task.cancelled()
        )

    def _request_cancelled(
        self, tp: TopicPartition, entries: list[WindowEntry[_Sent]], task: asyncio.Task[None], resend: bool
    ) -> None:
        """A request task of ``tp`` ended cancelled. Cancelled from underneath while the
        producer runs on: a send's batches, in flight and unanswered, fail retriably as after a
        stream break (sent again after the backoff while retries are left, in order:
        ``_answer``); a resend's, waiting its backoff, fail with the cancellation. As the loop
        shuts down (``_shutting_down``) nothing is sent again: nothing new may start then, and
        a task started would be cancelled in its turn, and so on. There, unless the producer
        closed (``stop`` completes the windows), the partition's batches fail at once."""
        window = self.windows.get(tp)
        if window is None or not any(window.holds(entry) for entry in entries):
            return
        if self._shutting_down(task):
            if not self.closed:
                del self.windows[tp]
                stopped = ClientClosedError("the event loop shut down while this batch was in flight")
                for entry in window.fail_all(stopped):
                    self._complete_entry(entry)
                assert self.progress is not None
                self.progress.set()
            return
        cancelled = ServiceUnavailableError("the request was cancelled before it was answered")
        if resend:
            self._request_failed(tp, entries, cancelled)
            return
        for entry in entries:
            if self.windows.get(tp) is window and window.holds(entry):
                self._answer(tp, window, entry, cancelled, True)

    def _request_failed(self, tp: TopicPartition, entries: list[WindowEntry[_Sent]], error: BaseException) -> None:
        """A request step of ``tp`` failed on an unexpected error: every batch of its window but
        those that succeeded fails with ``error``, in order, and the window is dropped (answers
        still owed to it are ignored). Nothing where its entries were completed already."""
        window = self.windows.get(tp)
        if window is None or not any(window.holds(entry) for entry in entries):
            return
        _LOG.error("%s-%d: a request failed on an unexpected error; its partition's batches fail with it",
                   tp.topic, tp.partition, exc_info=error)
        del self.windows[tp]
        for entry in window.fail_all(error):
            self._complete_entry(entry)
        self.wake()

    def _track(self, task: asyncio.Task[None], turn: SendTurn | None = None) -> None:
        self.requests.add(task)
        task.add_done_callback(self._request_ended)
        if turn is not None:  # a task that ends (or is cancelled) before its send hands its turn on
            task.add_done_callback(lambda _: turn.release())

    def _request_ended(self, task: asyncio.Task[None]) -> None:
        """A request task ended: its room in ``max_in_flight_requests`` is free only now, in
        this done callback, which runs after the loop was woken by the task's own answer (the
        wake-up is scheduled as the answer settles, the callback only as the task returns). So
        the room freed wakes the loop itself: otherwise, with every request task ending in one
        loop turn, the woken loop drained with no room, parked, and nothing woke it again until
        the next append (no linger timer is set for batches ready but blocked for room), and
        ``flush`` waited for ever. Only when the room was all taken (the loop may have left
        batches for want of it): with room left, its last drain was not held back by this."""
        full = len(self.requests) >= self._config.max_in_flight_requests
        self.requests.discard(task)
        if full:
            self.wake()

    async def _send_batch_request(self, tp: TopicPartition, entry: WindowEntry[_Sent], turn: SendTurn) -> None:
        """One attempt of one batch; its answer goes to the partition's window, which says what
        completes and what is sent again."""
        records = entry.item[1]
        window = self.windows.get(tp)
        if window is None or not window.holds(entry):
            return  # its partition's batches failed meanwhile (``_request_failed``)
        if window.holding:  # a retry is due: sending this now would land it before the retry
            not_sent = ServiceUnavailableError("not sent: an earlier batch of its partition is retried first")
            self._settle(tp, window, *window.sent_while_holding(entry, not_sent))
            return
        window.handed_to_send(entry)
        failed = True
        outcome: Any
        try:
            outcome = await self.produce_once(tp.topic, tp.partition, records, turn)
            failed = False
        except SeglogError as error:
            outcome = error
        except asyncio.CancelledError:
            raise  # closing: stop() completes what the windows still hold
        except Exception as error:  # noqa: BLE001 - a bug or an unexpected failure: still complete it
            outcome = error
        self._answer(tp, window, entry, outcome, failed)

    async def _send_group_request(
        self, tp: TopicPartition, entries: list[WindowEntry[_Sent]], turn: SendTurn
    ) -> None:
        """The first attempt of several batches of one partition in one request; each answer
        goes to the window as a request of its own would (``_send_batch_request``)."""
        window = self.windows.get(tp)
        if window is None or not window.holds(entries[0]):
            return  # its partition's batches failed meanwhile (``_request_failed``)
        if window.holding:
            not_sent = ServiceUnavailableError("not sent: an earlier batch of its partition is retried first")
            for entry in entries:
                self._settle(tp, window, *window.sent_while_holding(entry, not_sent))
            return
        for entry in entries:
            window.handed_to_send(entry)
        outcomes: list[Any]
        try:
            records = [entry.item[1] for entry in entries]
            outcomes = await self.produce_group_once(tp.topic, tp.partition, records, turn)
        except asyncio.CancelledError:
            raise  # closing: stop() completes what the windows still hold
        except Exception as error:  # noqa: BLE001 - every batch of the request fails with it
            outcomes = [error] * len(entries)
        for entry, outcome in zip(entries, outcomes, strict=True):
            self._answer(tp, window, entry, outcome, isinstance(outcome, BaseException))

    def _answer(self, tp: TopicPartition, window: SendWindow[_Sent], entry: WindowEntry[_Sent], outcome: Any, failed: bool) -> None:
        """One batch's answer into its window. A batch refused as too large is split, or fails
        alone if it holds one record (``_split``, ``_failed_unwritten``). With idempotence, a
        batch sent after one that failed is refused as out of order (the service never wrote the
        one before it): it is retried with that one, in order, and without counting when the
        one before was split or failed unwritten (``SendWindow.hold_is_free``)."""
        if self.windows.get(tp) is not window:
            return  # its partition's batches failed meanwhile (``_request_failed``)
        refusal = self._size_refusal(tp, entry, outcome) if failed and not self.closed else None
        if refusal is not None:
            outcome, limit = refusal
            if entry.item[0].record_count > 1:
                self._settle(tp, window, *self._split(window, entry, outcome, limit))
            else:
                self._settle(tp, window, *self._failed_unwritten(tp, window, entry, outcome))
            return
        fields = entry.item[2]
        if not failed:
            self.idempotence.batch_written(tp, fields)
            window.move_deadline, window.move_delay_s = None, 0.0  # a move, if any, is followed
        elif _refused_by_move(outcome) and fields[0] != NO_PRODUCER_ID and not self.closed \
                and self._following_move(window):
            # Refused naming another owner (a move; its target maybe not caught up yet) or for a
            # move's final catch-up: an idempotent window follows it in its order, within the
            # request timeout, spending no retries (a resend is deduplicated where it landed).
            self._settle(tp, window, *window.moved(entry, outcome))
            return
        # Refused out of order: nothing of it was appended (a batch the service holds is
        # answered as a duplicate), so it may be numbered afresh (``_renumber``). Not so for an
        # unresolvable one (a piece of a batch that may have been appended, or sent behind one:
        # ``WindowEntry.unresolvable``): what the service holds of it no answer tells, so it
        # fails as out of sequence, never sent again nor renumbered (either could write its
        # records twice). Its failure retires the id as any batch failed for good does
        # (``Idempotence.batch_failed``): the batches never sent behind it go on a new id.
        out_of_order = isinstance(outcome, OutOfOrderSequenceError)
        unresolved = out_of_order and entry.unresolvable
        out_of_order = out_of_order and not unresolved
        if out_of_order:
            entry.unwritten = True
        # Refused for following a batch that failed, was split or is retried (the window holds),
        # or numbered on a producer id retired since: sent again, on a new id where retired,
        # without counting where the hold began with what was not its own failure.
        retired = self._retired(fields)
        free = out_of_order and (window.hold_is_free or retired)
        if out_of_order and not window.holding and not retired and window.first_owed(entry):
            # Every batch before it was written, yet the service expects another sequence (it
            # lost or never had the id's state as the producer knows it): nothing resolves that
            # but a new id, on which the partition's batches are numbered again from this one.
            self.idempotence.sequence_refused(fields)
            window.gap_producer_id = fields[0]
        elif out_of_order and retired:
            window.gap_producer_id = fields[0]  # refused past the gap that retired its id
        retriable = isinstance(outcome, SeglogError) and (outcome.retriable or out_of_order)
        retry = (
            failed and retriable and not unresolved and (free or entry.attempt < self._config.retries)
            and not self.closed
        )
        if failed and not retry and fields[0] != NO_PRODUCER_ID:
            # Its sequences leave a gap the service refuses every later batch of its id past:
            # those in flight are answered before anything of the partition goes again, and
            # its batches the service holds none of are numbered afresh on a new id.
            window.gap_producer_id = fields[0]
            self._settle(tp, window, *window.failed_holding(entry, outcome))
            return
        self._settle(tp, window, *window.answered(entry, outcome, failed=failed, retry=retry, free=free))

    def _following_move(self, window: SendWindow[_Sent]) -> bool:
        """Whether the window still follows a move: within the request timeout since its first
        batch refused naming another owner after its last answer."""
        assert self._router is not None
        now = asyncio.get_running_loop().time()
        if window.move_deadline is None:
            window.move_deadline, window.move_delay_s = now + self._router.request_timeout_s, 0.0
        return now < window.move_deadline

    def _size_refusal(
        self, tp: TopicPartition, entry: WindowEntry[_Sent], outcome: Any
    ) -> tuple[SeglogError, int | None] | None:
        """Where ``outcome`` refused ``entry``'s batch as too large, nothing of it written: the
        refusal (gRPC's as a RecordTooLargeError) and the batch limit it names, kept for the
        batches after it; None for any other outcome."""
        if _refused_for_size(outcome):
            limit = _refused_limit(outcome)
            if limit is None:  # the last refusal named no usable limit: none is kept
                self._topic_batch_bytes.pop(tp.topic, None)
            else:
                self._topic_batch_bytes[tp.topic] = (limit, _now_ms())
            return outcome, limit
        limit = self._refused_above_request_limit(tp, entry, outcome)
        if limit is not None:
            refusal = RecordTooLargeError(
                f"a batch of {entry.item[0].record_count} records ({len(entry.item[1])} bytes) is above the "
                f"service's request limit: {outcome}", code=outcome.code,
            )
            return refusal, limit
        return None

    def _refused_above_request_limit(self, tp: TopicPartition, entry: WindowEntry[_Sent], outcome: Any) -> int | None:
        """Where ``outcome`` is gRPC's own refusal of a message above its size limit ("Received
        message larger than max (N vs. M)", nothing of it written) and ``entry``'s batch alone,
        in a message of its own, is above M: the largest batch to split it into (within M and
        any smaller limit known for its connection now), or it fails, a record alone. M is the
        answer's own, whatever its age; it was kept for the connection the message went out on
        when the refusal came (``_note_request_refusal``). None for any other outcome, and for
        a batch within M that failed with it (its stream broke on another's message): retried
        as any other."""
        named = _named_request_limit(outcome)
        if named is None:
            return None
        limit = _batch_bytes_within(named, tp.topic, tp.partition)
        if len(entry.item[1]) <= limit:
            return None
        known = self._request_batch_bytes(tp)
        return limit if known is None else min(limit, known)

    def _note_request_refusal(self, transport: Transport, error: BaseException) -> None:
        """Where ``error`` is gRPC's own refusal of a message above its size limit, the limit it
        names is kept for ``transport``, the connection the message went out on, at its address
        now (``_request_limits``): not for wherever its partition routes when the answer is read."""
        limit = _named_request_limit(error)
        if limit is not None:
            self._refused_request_bytes[transport] = (transport.server, limit, _now_ms())

    def _split(
        self, window: SendWindow[_Sent], entry: WindowEntry[_Sent], refusal: SeglogError, limit: int | None
    ) -> tuple[list[WindowEntry[_Sent]], list[WindowEntry[_Sent]]]:
        """Kafka's split of a batch refused as too large: its records as pieces of at most
        batch_size, half the refused batch's bound and ``limit`` (the one the refusal names),
        whichever is least (``RecordAccumulator.split``), in its place in the window, sent
        first. The pieces carry its producer id and its sequences from its first (they number
        the same records), so batches after it keep theirs; their records' futures resolve from
        their pieces."""
        batch, _, (producer_id, epoch, sequence) = entry.item
        piece_bytes = min(self._config.batch_size, batch.size_bytes_bound // 2, limit or self._config.batch_size)
        items: list[_Sent] = []
        for piece in self._accumulator.split(batch, piece_bytes):
            fields = (producer_id, epoch, sequence)
            with translate_codec_errors():
                items.append((piece, piece.build(*fields), fields))  # built before from the same records
            if sequence != NO_SEQUENCE:
                sequence = next_sequence(sequence, piece.record_count)
        self._stats["batches_split"] += 1
        _LOG.info(
            "%s-%d: a batch of %d records refused as too large (%s) is sent again as %d batches",
            batch.topic_partition.topic, batch.topic_partition.partition, batch.record_count, refusal, len(items),
        )
        return window.split(entry, items)

    def _failed_unwritten(
        self, tp: TopicPartition, window: SendWindow[_Sent], entry: WindowEntry[_Sent], refusal: SeglogError
    ) -> tuple[list[WindowEntry[_Sent]], list[WindowEntry[_Sent]]]:
        """A batch of one record refused as too large fails with the refusal. Nothing of it was
        written, so no gap: the partition's later batches of its producer id are renumbered
        down by its count (sent again after it, the ones in flight refused out of order) and
        the producer id stays (``Idempotence.batch_unwritten``)."""
        batch, records, fields = entry.item
        if fields[0] != NO_PRODUCER_ID and (entry.unresolvable or not entry.unwritten_before_send):
            # An earlier send of it may have been appended (the refusal proves only that this
            # one appended nothing): it fails for good leaving a gap, as any other failure, and
            # the batches behind it keep their numbers (renumbered down, they could be taken
            # again where the service holds them).
            window.gap_producer_id = fields[0]
            window.may_hold_unresolvably(entry)
            return window.failed_holding(entry, refusal)
        if fields[0] != NO_PRODUCER_ID:
            self.idempotence.batch_unwritten(tp, fields, batch.record_count)
            for later in window.after(entry):
                later_batch, _, (producer_id, epoch, sequence) = later.item
                if producer_id == fields[0]:
                    renumbered = (producer_id, epoch, earlier_sequence(sequence, batch.record_count))
                    later.item = (later_batch, with_producer_fields(later.item[1], renumbered), renumbered)
        entry.item = (batch, records, NO_PRODUCER_FIELDS)  # completes without retiring the id
        return window.failed_unwritten(entry, refusal)

    def _settle(
        self, tp: TopicPartition, window: SendWindow[_Sent],
        complete: list[WindowEntry[_Sent]],
        again: list[WindowEntry[_Sent]],
    ) -> None:
        for done in complete:
            self._complete_entry(done)
        if again:
            self._start_request(tp, again, lambda: self._resend(tp, window, again), resend=True)
        elif self.windows.get(tp) is window:
            for entry in window.refill(self._in_flight_max_for(tp)):  # a paced window's next pieces
                self._send_entry(tp, entry)
        if window.is_empty() and self.windows.get(tp) is window:
            del self.windows[tp]
        self.wake()

    async def _resend(
        self, tp: TopicPartition, window: SendWindow[_Sent],
        entries: list[WindowEntry[_Sent]],
    ) -> None:
        """After the backoff (the service's retry-after hint wins over a shorter one), the
        failed batches of a held partition go out again, oldest first, before anything new, and
        no more at once than its in-flight limit (one where its producer id has not written yet,
        ``_in_flight_max_for``): the rest go once those are answered. Only what was split, failed
        unwritten or queued, or was refused for following such a batch (``free``), goes without
        the backoff, and only when all that goes now is such: a batch among them that failed
        on its own (a quota's retry-after, a stream break) waits as any retry does."""
        deadline = window.move_deadline
        if deadline is not None and asyncio.get_running_loop().time() < deadline:
            # Following a move: the first resend at once (its route was followed), the next ones
            # after MoveFollower's back-off (the target not caught up yet), the hint and metadata
            # taken afresh by each refusal.
            delay_s = window.move_delay_s
            window.move_delay_s = min(max(delay_s * 2, _REFOLLOW_FIRST_S), _REFOLLOW_MAX_S)
            if delay_s:
                await asyncio.sleep(delay_s)
                if self.windows.get(tp) is not window:
                    return  # its partition's batches failed meanwhile (``_request_failed``)
        held = max(0, len(entries) - self._in_flight_max_for(tp))
        entries, later = entries[:len(entries) - held], entries
        if not all(entry.free for entry in entries):
            hints = [e.outcome.retry_after_ms or 0 for e in entries if isinstance(e.outcome, SeglogError)]
            await asyncio.sleep(max(self._config.retry_backoff_ms, *hints) / 1000)
            if self.windows.get(tp) is not window:
                return  # its partition's batches failed meanwhile (``_request_failed``)
        first = next((index for index, entry in enumerate(later) if self._to_renumber(window, entry)), None)
        if first == 0:
            if not await self._renumber(tp, window):
                return
            held = max(0, len(later) - self._in_flight_max_for(tp))
        elif first is not None:
            # Those before it may have been appended under their retired id: sent again as they
            # are (the service answers a duplicate with its offsets, or refuses it out of order,
            # proving it unwritten), and it and the rest once they are answered.
            held = max(held, len(later) - first)
        entries = later[:len(later) - held]
        self._stats["retries"] += sum(not entry.free for entry in entries)
        window.resending(later, held=held)
        for entry in entries:
            self._send_entry(tp, entry)
        self.wake()

    def _retired(self, fields: ProducerFields) -> bool:
        """Whether ``fields`` carry a producer id retired since (not the current one)."""
        return fields[0] != NO_PRODUCER_ID and fields[0] != self.idempotence.producer_id

    def _to_renumber(self, window: SendWindow[_Sent], entry: WindowEntry[_Sent]) -> bool:
        """Whether ``entry`` must be numbered afresh before it is sent: it carries a retired
        producer id that left a gap in its partition (``SendWindow.gap_producer_id``) and the
        service holds none of it (``WindowEntry.unwritten``): sent under that id, the service
        would refuse it past the gap. A batch of a retired id that left no gap in its partition
        goes as it is (its partition's sequences of that id are whole)."""
        producer_id = entry.item[2][0]
        return entry.unwritten and producer_id == window.gap_producer_id and self._retired(entry.item[2])

    async def _renumber(self, tp: TopicPartition, window: SendWindow[_Sent]) -> bool:
        """The window's batches owed (none in flight: its hold ended), the oldest of them
        numbered on a retired producer id and unwritten, numbered afresh in their order on the
        current id (a new one asked for first): the partition's sequences start again from the
        first of them, and each batch keeps its encoded records, its header's producer fields
        and CRC rewritten (``with_producer_fields``): the run of them the service holds none of
        (numbered past the gap that retired its id, or never sent), up to the first that may
        have been appended. False where the window's batches failed meanwhile, or fail now: no
        producer id could be had."""
        if self.idempotence.needs_producer_id:
            error = await self._producer_id_error()
            if self.windows.get(tp) is not window:
                return False  # its partition's batches failed meanwhile (``_request_failed``)
            if error is not None:
                del self.windows[tp]
                for entry in window.fail_all(error):
                    self._complete_entry(entry)
                self.wake()
                return False
        owed = window.owed()
        current = self.idempotence.producer_id
        # Only the run the service holds none of, up to the first batch that may have been
        # appended: that one and those behind it go as they are (a duplicate is answered as one;
        # the rest, refused out of order, are numbered afresh in their turn), so none numbered
        # afresh lands before it. The current id's batches of the run were its last numbers
        # given (unless one behind it carries the id): given back, numbered again in order.
        run = next((index for index, entry in enumerate(owed) if not entry.unwritten), len(owed))
        owed, behind = owed[:run], owed[run:]
        given = [] if any(entry.item[2][0] == current for entry in behind) else [
            entry for entry in owed if entry.item[2][0] == current
        ]
        self.idempotence.renumbering(tp, sum(entry.item[0].record_count for entry in given))
        for entry in owed:
            batch, records, fields = entry.item
            if fields[0] == current and entry not in given:
                continue
            renumbered = self.idempotence.fields_now(tp, batch.record_count)
            if renumbered != fields:
                entry.item = (batch, with_producer_fields(records, renumbered), renumbered)
                self._stats["batches_renumbered"] += 1
        window.gap_producer_id = None
        return True

    def _complete_entry(self, entry: WindowEntry[_Sent]) -> None:
        batch, records, fields = entry.item
        if SendWindow.succeeded(entry):
            response = entry.outcome
            batch.succeed(response.base_offset, response.log_append_time_ms)
            self._stats["records_sent"] += batch.record_count
            self._stats["batches_sent"] += 1
            self._stats["bytes_sent"] += len(records)
        else:
            self.idempotence.batch_failed(fields)  # its sequences left a gap: a new producer id
            self._record_failure(batch, entry.outcome)
        self._finish(batch)

    def _finish(self, batch: ProducerBatch) -> None:
        """``batch`` ended, either way: its buffer space freed, and the loop woken to drain
        again. A batch ended unsent (its build failed, it was above the request limit, no
        producer id could be had) took its partition's turn in the drain, and may have been
        all of it there was room for (one batch in flight): with nothing in flight to answer
        and wake the loop, the batches queued behind it were never drained."""
        self._accumulator.complete(batch)
        assert self.progress is not None
        self.progress.set()
        self.wake()

    def _record_failure(self, batch: ProducerBatch, error: BaseException) -> None:
        if isinstance(error, TopicNotFoundError):
            # The topic may have been deleted or re-created with another partition count.
            self._partition_counts.pop(batch.topic_partition.topic, None)
        batch.fail(error)
        self._stats["records_failed"] += batch.record_count
        self._stats["batches_failed"] += 1

    # -- requests --------------------------------------------------------------------------------

    async def produce(self, topic: str, partition: int, records: bytes) -> pb.ProduceResponse:
        """One batch outside the windows (``send_batch``), with its own retries."""
        return await self._with_retries(lambda: self.produce_once(topic, partition, records))

    async def init_producer_id(self, request: pb.InitProducerIdRequest) -> pb.InitProducerIdResponse:
        """InitProducerId with the same retries as a Produce."""
        assert self._transport is not None
        transport = self._transport
        return await self._with_retries(lambda: transport.init_producer_id(request))

    async def _with_retries(self, call: Callable[[], Any]) -> Any:
        attempt = 0
        while True:
            try:
                return await call()
            except SeglogError as error:
                if not error.retriable or attempt >= self._config.retries or self.closed:
                    raise
                # The service's retry-after hint (quotas) wins over a shorter backoff.
                backoff_ms = max(self._config.retry_backoff_ms, error.retry_after_ms or 0)
            attempt += 1
            self._stats["retries"] += 1
            await asyncio.sleep(backoff_ms / 1000)

    def _on_stream_break(self, error: SeglogError) -> None:
        """The stream ended with batches owed: every partition with batches in flight holds
        (sends nothing new) until their failures are in and their retries are sent, in order."""
        for window in self.windows.values():
            window.hold()

    async def produce_once(
        self, topic: str, partition: int, records: bytes, turn: SendTurn | None = None
    ) -> pb.ProduceResponse:
        """One Produce at the partition's owner, sent in ``turn``; a refusal naming another owner
        (or a routed owner gone) is repeated once where the partition routes now, with the same
        bytes. An idempotent window's batch (sent in a turn) follows a move with its window
        instead: a refusal naming another owner holds the window, routes the partition and is
        raised, for the window to send its batches again in their order (``_follow_move``)."""
        assert self._router is not None
        transport = self._router.transport_for(topic, partition)
        try:
            response = await self._produce_on(transport, topic, partition, records, turn)
        except FOLLOWED_ERRORS as error:
            moves = self._window_following(topic, partition, turn)
            if moves is not None and _refused_by_move(error):
                await self._follow_move(moves, topic, partition, error, transport)
                raise
            if self.closed or not await self._router.follow(topic, partition, error, transport):
                raise
        else:
            self._router.confirm(topic, partition, transport)  # the route held answered: not an old one
            return response
        return await self._produce_on(self._router.transport_for(topic, partition), topic, partition, records)

    async def produce_group_once(
        self, topic: str, partition: int, records: list[bytes], turn: SendTurn | None = None
    ) -> list[Any]:
        """Several batches of one partition at its owner, in order: each one's ProduceResponse or
        the SeglogError it was refused with. A refusal of all of them naming another owner (or a
        routed owner gone) is repeated once where the partition routes now, with the same bytes.
        An idempotent window's batches follow a move with it, as in ``produce_once``: any of them
        refused naming another owner holds the window and routes the partition, and the outcomes
        are returned as they are."""
        assert self._router is not None
        transport = self._router.transport_for(topic, partition)
        raised = None
        try:
            outcomes = await self._produce_group_on(transport, topic, partition, records, turn)
        except FOLLOWED_ERRORS as error:
            raised = followed = error
            outcomes = [error] * len(records)
        else:
            followed = outcomes[0]
        moves = self._window_following(topic, partition, turn)
        if moves is not None:
            moved = next((o for o in outcomes if _refused_by_move(o)), None)
            if moved is not None:
                await self._follow_move(moves, topic, partition, moved, transport)
                if raised is not None:
                    raise raised
                return outcomes
        if raised is None and not all(isinstance(outcome, FOLLOWED_ERRORS) for outcome in outcomes):
            if not isinstance(outcomes[0], BaseException):
                self._router.confirm(topic, partition, transport)  # the route held answered: not an old one
            return outcomes
        if self.closed or not await self._router.follow(topic, partition, followed, transport):
            if raised is not None:
                raise raised
            return outcomes
        return await self._produce_group_on(self._router.transport_for(topic, partition), topic, partition, records)

    def _window_following(self, topic: str, partition: int, turn: SendTurn | None) -> SendWindow[_Sent] | None:
        """The partition's window where its batches follow a move with it: sent in a turn (a
        window's send; ``produce``, outside the windows, repeats on its own), idempotent (the
        service's sequence check keeps a resent batch from landing twice or behind a later one:
        without it, the window's batches go on following once an attempt, within their retries)."""
        if turn is None or self.closed or not self.idempotence.enabled:
            return None
        return self.windows.get(TopicPartition(topic, partition))

    async def _follow_move(self, window: SendWindow[_Sent], topic: str, partition: int,
                           error: SeglogError, transport: Transport) -> None:
        """A batch of ``window`` refused naming another owner, or by the old owner fenced for a
        move's final catch-up (``_refused_by_move``): nothing new of the partition is sent from
        now on, whichever answer comes first (``SendWindow.hold_for_move``), and the partition
        is routed where the refusal and Metadata say. Its batches go again, in their
        order, once every answer owed is in (``_answer``: without counting, within the request
        timeout): none of them is repeated on its own, so none lands before an earlier one."""
        assert self._router is not None
        if self.windows.get(TopicPartition(topic, partition)) is window:
            epoch = getattr(error, "epoch", None)
            if epoch is not None and (window.move_epoch is None or epoch > window.move_epoch):
                # A new move's hold begins: its follow gets the request timeout from now, even
                # where the window had no success since a follow that timed out (the deadline
                # is otherwise reset by a success only). A lagging target's hint (older) or the
                # same move's refusals again (the same epoch) keep the deadline running.
                window.move_epoch = epoch
                window.move_deadline, window.move_delay_s = None, 0.0
            elif epoch is None and not isinstance(error, NotPartitionOwnerError):
                # The owner routed to, fenced for a move's final catch-up (PartitionMovingError,
                # no epoch): the first such refusal at this route's epoch begins a new move's
                # hold with the request timeout from now, as a newer epoch named does; the same
                # fence refusing again keeps the deadline running (a fence that never lifts
                # ends in the ordinary retries).
                route_epoch = self._router.route_epoch(topic, partition)
                if window.move_fenced_epoch != route_epoch:
                    window.move_fenced_epoch = route_epoch
                    window.move_deadline, window.move_delay_s = None, 0.0
            window.hold_for_move()
        await self._router.follow(topic, partition, error, transport)

    async def _produce_group_on(
        self, transport: Transport, topic: str, partition: int, records: list[bytes], turn: SendTurn | None = None
    ) -> list[Any]:
        """Several batches on the connection's ProduceStream, as many a message as its service
        takes and the request size allows; where the stream does not take several (not
        confirmed yet, an older service), a request each, all under way at once and in order.
        Every message is sent in ``turn``: none of the partition's started after it goes first."""
        if transport.choosing:
            await transport.ready()
        if turn is not None:
            await turn.wait()  # before reading the stream's state: an earlier send may reopen it
        stream = transport.produce_stream()
        if not stream.confirmed or stream.batches_max <= 1:
            return await self._produce_each_on(transport, topic, partition, records, turn)
        try:
            sent = await self._write_group_on(transport, stream, topic, partition, records)
        except ServiceOverloadedError as error:
            self._note_request_refusal(transport, error)
            raise
        finally:
            if turn is not None:
                turn.release()
        outcomes: list[Any] = []
        for answer, count in sent:
            try:
                response = await stream.wait(answer, transport.request_timeout_s)
            except SeglogError as error:
                self._note_request_refusal(transport, error)
                outcomes += [error] * count
            else:
                outcomes += _answers(response, count)
        if stream.confirmed:  # what the service (maybe another build since a reopen) said at open
            self.stream_batches_max = stream.batches_max
        return outcomes

    async def _produce_each_on(
        self, transport: Transport, topic: str, partition: int, records: list[bytes], turn: SendTurn | None
    ) -> list[Any]:
        """Several batches a request each, all under way at once, sent in order in ``turn``
        (split into one a request: each request is a task of its own under ``gather``)."""
        turns: list[SendTurn | None] = list(turn.split(len(records))) if turn is not None else [None] * len(records)
        try:
            answers = await asyncio.gather(
                *(self._produce_on(transport, topic, partition, one, each) for one, each in zip(records, turns)),
                return_exceptions=True,
            )
        finally:
            for each in turns:
                if each is not None:
                    each.release()
        for answer in answers:
            if isinstance(answer, asyncio.CancelledError):
                raise answer
        return list(answers)

    async def _write_group_on(
        self, transport: Transport, stream: Any, topic: str, partition: int, records: list[bytes]
    ) -> list[tuple[asyncio.Future[Any], int]]:
        """Several batches written on ``stream`` in messages of as many as it takes (its own
        limits, which may not be the ones the sender last saw); each message's answer and count."""
        stream.on_break = self._on_stream_break
        acks = _ACKS_TO_PROTO[self._config.acks]
        sent: list[tuple[asyncio.Future[Any], int]] = []
        position = 0
        counts = message_counts(
            [len(one) for one in records], topic, stream.batches_max,
            self._message_bytes_max(self._request_limits(transport, stream)), partition,
        )
        for count in counts:
            # Built in place inside the message, as _produce_on does (no copy of the batches).
            message = pb.ProduceStreamRequest()
            request = message.produce
            for index, one in enumerate(records[position:position + count]):
                if index:
                    request = message.more.add()
                request.topic = topic
                request.partition = partition
                request.records = one
                request.acks = acks
            sent.append((await self._write_on(transport, stream, message, whole=True), count))
            position += count
        return sent

    async def _produce_on(
        self, transport: Transport, topic: str, partition: int, records: bytes, turn: SendTurn | None = None
    ) -> pb.ProduceResponse:
        """One Produce, sent in ``turn``: on the connection's ProduceStream, or unary where it is
        not served."""
        if transport.choosing:  # a bootstrap list not yet connected
            await transport.ready()
        try:
            if turn is None:
                return await self._produce_in_turn(transport, topic, partition, records, None)
            try:
                await turn.wait()
                return await self._produce_in_turn(transport, topic, partition, records, turn)
            finally:
                turn.release()
        except ServiceOverloadedError as error:
            self._note_request_refusal(transport, error)
            raise

    async def _produce_in_turn(
        self, transport: Transport, topic: str, partition: int, records: bytes, turn: SendTurn | None
    ) -> pb.ProduceResponse:
        """``_produce_on`` once its turn came: ``turn`` is handed on as soon as the stream
        message is written (a unary call keeps it until answered: separate calls may land in
        any order)."""
        # Built in place inside the stream's message: handing it a built ProduceRequest would
        # copy the batch (590 us for 512 KiB against 12; bench/bench_stream_messages.py).
        message = pb.ProduceStreamRequest() if self.streaming is not False else None
        request = message.produce if message is not None else pb.ProduceRequest()
        request.topic = topic
        request.partition = partition
        request.records = records
        request.acks = _ACKS_TO_PROTO[self._config.acks]
        if message is not None:
            stream = transport.produce_stream()
            stream.on_break = self._on_stream_break
            try:
                try:
                    answer = await self._write_on(transport, stream, message)
                finally:
                    if turn is not None:
                        turn.release()
                response: pb.ProduceResponse = await stream.wait(answer, transport.request_timeout_s)
            except ServiceError as error:
                if error.code is not grpc.StatusCode.UNIMPLEMENTED or stream.confirmed:
                    raise
                self.streaming = False  # an older service: unary from now on
            else:
                return response
            finally:
                if stream.confirmed:  # the service answered the open: it serves the stream
                    self.streaming = True
                    self.stream_batches_max = stream.batches_max
        return await transport.produce(request)

    async def _write_on(
        self, transport: Transport, stream: Any, message: pb.ProduceStreamRequest, *, whole: bool = False
    ) -> Any:
        """``stream.send(message, whole=whole)``, counted as a write under way on ``transport``
        until it is done; then the loop is woken to start what waited for it (``_can_send``)."""
        self._writing[transport] = self._writing.get(transport, 0) + 1
        try:
            return await stream.send(message, whole=whole)
        finally:
            left = self._writing[transport] - 1
            if left:
                self._writing[transport] = left
            else:
                del self._writing[transport]
                self.wake()


# A batch's producer fields and CRC in its header (seglog.records.header): rewritten in place
# of a new build when a batch is numbered afresh (``with_producer_fields``).
_PRODUCER_FIELDS = struct.Struct(">qhi")
_CRC = struct.Struct(">I")


def with_producer_fields(records: bytes, fields: ProducerFields) -> bytes:
    """``records`` (one built batch) carrying ``fields`` (producer id, epoch, base sequence):
    the header's three fields and its CRC (of everything after it) rewritten, the records as
    they were encoded (and compressed); the bytes a build with ``fields`` gives."""
    out = bytearray(records)
    _PRODUCER_FIELDS.pack_into(out, PRODUCER_ID_OFFSET, *fields)
    _CRC.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


# A ProduceStream message's bytes beyond its batches' fields (log_service.proto): its
# correlation id's tag and value, an int64 varint at its largest positive (ids count up from 1).
_MESSAGE_OVERHEAD_BYTES = 1 + 9
# A ProduceRequest's acks field: its tag and ACKS_WRITTEN or ACKS_FSYNCED (always set, never 0).
_ACKS_FIELD_BYTES = 2
# A partition's field at its largest (a non-negative int32 varint), where the partition is not said.
_PARTITION_FIELD_MAX_BYTES = 1 + 5


def _varint_bytes(value: int) -> int:
    """The bytes of a non-negative ``value`` as a protobuf varint."""
    return max(1, (value.bit_length() + 6) // 7)


def _batch_field_bytes(topic_bytes: int, partition: int | None, records: int) -> int:
    """The bytes one batch of ``records`` bytes takes in a ProduceStream message as serialized:
    its field's tag and length and its ProduceRequest (topic, partition, records and acks; proto3
    leaves out an empty or zero field). ``partition`` None: its field at its largest."""
    if partition is None:
        partition_bytes = _PARTITION_FIELD_MAX_BYTES
    else:
        partition_bytes = 1 + _varint_bytes(partition) if partition else 0
    request = (
        (1 + _varint_bytes(topic_bytes) + topic_bytes if topic_bytes else 0)
        + partition_bytes
        + (1 + _varint_bytes(records) + records if records else 0)
        + _ACKS_FIELD_BYTES
    )
    return 1 + _varint_bytes(request) + request


def message_counts(
    sizes: list[int], topic: str, batches_max: int, bytes_max: int, partition: int | None = None,
) -> list[int]:
    """How many of a partition's batches (their records' ``sizes``, in order) go in each
    ProduceStream message: at most ``batches_max`` a message, and the message as serialized no
    larger than ``bytes_max`` (the smaller of the client's and the service's request limits),
    envelope included, exactly (``_batch_field_bytes``; ``partition`` None: its field at its
    largest). A batch that alone exceeds it goes alone (the service refuses it with its own
    clear error, as for a message of one batch)."""
    topic_bytes = len(topic.encode())
    counts: list[int] = []
    count = 0
    size = _MESSAGE_OVERHEAD_BYTES
    for one in sizes:
        field = _batch_field_bytes(topic_bytes, partition, one)
        if count and (count >= batches_max or size + field > bytes_max):
            counts.append(count)
            count = 0
            size = _MESSAGE_OVERHEAD_BYTES
        count += 1
        size += field
    if count:
        counts.append(count)
    return counts


def _named_request_limit(outcome: Any) -> int | None:
    """The limit M of gRPC's own refusal of a message above its size limit ("Received message
    larger than max (N vs. M)"); None for any other outcome."""
    if not isinstance(outcome, ServiceOverloadedError) or outcome.service_error is not None:
        return None
    found = _REQUEST_LIMIT_REFUSAL.search(str(outcome))
    return int(found.group(1)) if found is not None else None


@functools.lru_cache(maxsize=1024)
def _batch_bytes_within(request_bytes: int, topic: str, partition: int | None = None) -> int:
    """The largest batch of ``topic`` (and ``partition``; None: any) a ProduceStream message of
    its own takes within ``request_bytes``, as serialized (at least 1). Remembered: the sender
    asks it for every batch it drains, with the same few arguments."""
    topic_bytes = len(topic.encode())
    room = request_bytes - _MESSAGE_OVERHEAD_BYTES
    # The envelope at its largest for this limit, then the few bytes its shorter varints leave.
    largest = max(0, room - (_batch_field_bytes(topic_bytes, partition, max(1, room)) - max(1, room)))
    while _batch_field_bytes(topic_bytes, partition, largest + 1) <= room:
        largest += 1
    return max(1, largest)


def _refused_for_size(outcome: Any) -> bool:
    return isinstance(outcome, RecordTooLargeError) and outcome.service_error in _SPLIT_ERRORS


def _refused_limit(refusal: SeglogError) -> int | None:
    """The byte limit a size refusal names: None where it names none, or one no batch could be
    within (not above a batch's header) or beyond any topic's (above 2**31 - 1); such a refused
    batch is halved (``_split``)."""
    found = _REFUSED_LIMIT.search(str(refusal))
    if found is None:
        return None
    limit = int(found.group(1))
    return limit if RECORD_BATCH_OVERHEAD < limit <= _REFUSED_LIMIT_MAX else None


def _refused_by_move(outcome: Any) -> bool:
    """Whether ``outcome`` refused a batch for a partition move: another owner named
    (``NotPartitionOwnerError``), or the old owner fenced for the move's final catch-up (the
    service's ``PartitionMovingError``, UNAVAILABLE)."""
    return isinstance(outcome, NotPartitionOwnerError) or (
        isinstance(outcome, ServiceUnavailableError) and outcome.service_error == "PartitionMovingError")


def _by_partition(batches: list[ProducerBatch]) -> list[list[ProducerBatch]]:
    """Drained batches, a partition's (consecutive, oldest first) together."""
    groups: list[list[ProducerBatch]] = []
    for batch in batches:
        if groups and groups[-1][0].topic_partition == batch.topic_partition:
            groups[-1].append(batch)
        else:
            groups.append([batch])
    return groups


def _answers(response: pb.ProduceStreamResponse, count: int) -> list[Any]:
    """The outcomes of a message's ``count`` batches from its answer: a ProduceResponse, or the
    exception the batch was refused with. The service answers each batch in its slot, in
    order; batches with no slot (an older service, which appends only ``produce`` and ignores
    ``more``, or the refusal of a whole message) were not appended: they fail retriably, and
    a retry writes them once (sent again one a message), with or without idempotence. More
    slots than batches is a broken answer: every batch fails with it."""
    first: Any = error_from_stream(response.error) if response.HasField("error") else response.produce
    outcomes = [first]
    for answer in response.more:
        outcomes.append(error_from_stream(answer.error) if answer.HasField("error") else answer.produce)
    if len(outcomes) > count:
        error = ServiceError(f"the service answered {len(outcomes)} slots for the {count} batches of a message")
        return [error] * count
    if len(outcomes) < count:
        unanswered = ServiceUnavailableError(
            f"not appended: the service answered {len(outcomes)} of the {count} batches of a message "
            "(an older service takes one a message); sent again"
        )
        outcomes += [unanswered] * (count - len(outcomes))
    return outcomes
