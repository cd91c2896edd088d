"""A producer id retired while a partition's window is full (Kafka's producer since KIP-360):
every batch of the window the service holds none of, in flight or queued or a split piece, is
numbered afresh on the new id in its order, sequences from 0, and lands once, in order.

On a real service on loopback. The retirement is made at a drawn batch of the window by the
sender's own write step (``Sender._write_on``), just before the message that carries it:

- ``ghost``: another batch of the producer's own id and epoch, at the sequence the service
  expects next (and 200 records long, more than a run sends, so no later batch of the producer
  follows it by chance; compressed, within a split topic's limit), is appended first on the same stream. The drawn batch, every batch before it
  written, is refused out of order: a sequence nothing resolves but a new id. Every record
  of the producer lands, once, in send order, each future with its offset.
- ``corrupt``: the drawn batch's bytes reach the service corrupted (its CRC no longer matches):
  refused for good, it leaves a gap, and the batches after it are refused out of order. Only
  its records fail; the others land once, in order.

Today's main sent the batches after the retirement with the retired id's sequences past the
gap: refused out of order on every retry, they failed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import AsyncAdmin, AsyncProducer
from seglog import _sender
from seglog._sender import Sender
from seglog._streams import RequestStream
from seglog.errors import (
    ClientClosedError,
    CorruptRecordError,
    OutOfOrderSequenceError,
    SeglogError,
    ServiceUnavailableError,
)
from seglog.records import Compression, RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb
from seglog.records.header import (
    BASE_SEQUENCE_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORDS_COUNT_OFFSET,
)
from tests.support.in_process_service import until
from tests.support.integration_helpers import partition_values

pytestmark = pytest.mark.integration

# Bounds on waits that must not hang: generous, never a speed assertion.
_FLUSH_TIMEOUT_MS = 30_000
GHOST = b"ghost"
GHOST_RECORDS = 200  # more than any run sends after it
# A batch holds about nine 100-byte records; a topic limit of 600 bytes refuses a full batch
# as too large (it is split in two), and splits the ones after it before they are sent.
BATCH_SIZE = 1024
SPLIT_LIMIT_BYTES = 600


def _value(index: int) -> bytes:
    """A 100-byte value whose marker (``v00012.``) appears in no other value."""
    return (b"v%05d." % index) * 14 + b"xx"


def _header_fields(records: bytes) -> tuple[int, int, int]:
    return (
        int.from_bytes(records[PRODUCER_ID_OFFSET:PRODUCER_ID_OFFSET + 8], "big", signed=True),
        int.from_bytes(records[PRODUCER_EPOCH_OFFSET:PRODUCER_EPOCH_OFFSET + 2], "big", signed=True),
        int.from_bytes(records[BASE_SEQUENCE_OFFSET:BASE_SEQUENCE_OFFSET + 4], "big", signed=True),
    )


def _ghost(producer_id: int, epoch: int, sequence: int, records: int = GHOST_RECORDS) -> bytes:
    # Compressed: within a split topic's limit all the same.
    builder = RecordBatchBuilder(
        compression=Compression.GZIP, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
    )
    now_ms = int(time.time() * 1000)
    for _ in range(records):
        builder.append(GHOST, timestamp_ms=now_ms)
    return builder.build()


class _Retirement:
    """Armed for one run: the ``at``-th batch written after arming (1-based, counting every
    batch of every message), or the first after it that can be, is where the producer id is
    retired, as ``mode`` says: a ghost goes before a message, so at the first batch of one
    every batch before which was written (not refused for its size); a corrupt batch is one
    within the topic's limit."""

    def __init__(self) -> None:
        self.armed = False
        self.producer: AsyncProducer | None = None
        self.topic = ""
        self.at = 0
        self.mode = "ghost"
        self.batch_bytes_max = 0
        self.written = 0
        self.done = False
        self.in_ghost = False
        self.break_next = False
        self.ghost_next: int | None = None  # the retired id whose next write a ghost goes before

    def arm(self, producer: AsyncProducer, topic: str, at: int, mode: str, batch_bytes_max: int) -> None:
        self.producer, self.topic, self.at, self.mode = producer, topic, at, mode
        self.batch_bytes_max = batch_bytes_max
        self.written, self.done, self.in_ghost = 0, False, False
        self.armed = True

    async def before_write(self, message: Any) -> str:
        """What of ``message``'s answer, once it came, is lost (``lose``): "" nothing, "all", or
        "more" (the answers of the batches after its first)."""
        if self.armed and self.done and not self.in_ghost and message.produce.topic == self.topic:
            producer_id = _header_fields(message.produce.records)[0]
            if self.break_next and producer_id == self.ghost_next:
                self.break_next = False
                return "all"
            if self.ghost_next == producer_id:
                # The batches after those whose answers are lost are refused out of order (a
                # ghost took the sequence they follow): unwritten, numbered afresh on a new id
                # once those, sent again as they were, are answered as the duplicates they are.
                self.ghost_next = None
                await self._send_ghost(message.produce, GHOST_RECORDS)
                return ""
        if not self.armed or self.done or self.in_ghost:
            return ""
        for place, request in enumerate([message.produce, *message.more]):
            if request.topic != self.topic:
                continue
            self.written += 1
            if self.written < self.at:
                continue
            if self.mode in ("corrupt", "corrupt, then an answer is lost"):
                if len(request.records) > self.batch_bytes_max or (place and self.mode != "corrupt"):
                    continue  # refused for its size first: its pieces are sent, the next one fails
                if self.mode != "corrupt":
                    # A ghost of its sequences first (as many records): the service's state of
                    # the id goes on past the gap it leaves, so the write after it is appended.
                    if not await self._send_ghost(request, int.from_bytes(
                        request.records[RECORDS_COUNT_OFFSET:RECORDS_COUNT_OFFSET + 4], "big",
                    )):
                        continue
                    # The batches after it (appended: the ghost took its sequences) have their
                    # answers lost: those of its message, or of the write after it.
                    self.break_next = not message.more
                    self.ghost_next = _header_fields(request.records)[0]
                self.done = True
                records = bytearray(request.records)
                records[-1] ^= 0xFF  # the CRC no longer matches: refused for good, unwritten
                request.records = bytes(records)
                return "more" if self.mode != "corrupt" and message.more else ""
            # The ghost goes between messages: before this one's first batch (the drawn one's,
            # or the first of the message it is in, when every batch is in one).
            if not await self._send_ghost(message.produce, GHOST_RECORDS):
                continue  # a batch before this one was refused (for its size): the next one
            self.done = True
            return ""
        return ""

    async def _send_ghost(self, request: Any, records: int) -> bool:
        producer_id, epoch, sequence = _header_fields(request.records)
        assert self.producer is not None
        self.in_ghost = True
        try:  # on the same stream, answered before the drawn batch is written
            await self.producer.send_batch(self.topic, request.partition, _ghost(producer_id, epoch, sequence, records))
        except SeglogError:
            return False
        finally:
            self.in_ghost = False
        return True

    @staticmethod
    async def lose(answer: asyncio.Future[Any], what: str) -> asyncio.Future[Any]:
        """The service's answer comes (the batches appended), and is lost, all of it (as after
        a stream break) or the slots of the batches after the first (they fail retriably)."""
        try:
            response = await asyncio.shield(answer)
        except SeglogError:
            return answer
        lost = asyncio.get_running_loop().create_future()
        if what == "all":
            lost.set_exception(ServiceUnavailableError("injected: written, but the answer was lost"))
        else:
            kept = pb.ProduceStreamResponse()
            kept.CopyFrom(response)
            del kept.more[:]
            lost.set_result(kept)
        return lost


@pytest.fixture
def retirement(monkeypatch) -> _Retirement:
    state = _Retirement()
    real = Sender._write_on

    async def write_on(self, transport, stream, message, *, whole=False):
        lose = await state.before_write(message)
        answer = await real(self, transport, stream, message, whole=whole)
        return await state.lose(answer, lose) if lose else answer

    monkeypatch.setattr(Sender, "_write_on", write_on)
    return state


async def _run(address: str, topic: str, state: _Retirement, *, count: int, at: int, mode: str,
               in_flight: int, split: bool = False) -> tuple[list[Any], dict[str, int]]:
    counts = _sender.message_counts
    if mode == "corrupt, then an answer is lost":
        # One batch a message, so the corrupt one is a message's first, and the answers lost
        # and the ghosts fall between batches.
        _sender.message_counts = lambda sizes, *args, **kwargs: [1] * len(sizes)
    try:
        return await _run_producer(address, topic, state, count=count, at=at, mode=mode, in_flight=in_flight,
                                   split=split)
    finally:
        _sender.message_counts = counts


async def _run_producer(address: str, topic: str, state: _Retirement, *, count: int, at: int, mode: str,
                        in_flight: int, split: bool) -> tuple[list[Any], dict[str, int]]:
    async with AsyncProducer(
        address, batch_size=BATCH_SIZE, linger_ms=5, max_in_flight_per_partition=in_flight,
    ) as producer:
        # The stream confirmed and the id written on the partition: several batches in flight.
        await producer.send_and_wait(topic, b"warm-up", partition=0)
        state.arm(producer, topic, at, mode, SPLIT_LIMIT_BYTES if split else BATCH_SIZE * 2)
        futures = [await producer.send(topic, _value(index), partition=0) for index in range(count)]
        await producer.flush(_FLUSH_TIMEOUT_MS)
        outcomes = [future.exception() or (await future).offset for future in futures]
        statistics = producer.statistics()
        stats = {
            "producer_ids": producer._sender.idempotence.producer_ids_received,
            "renumbered": statistics.batches_renumbered,
            "split": statistics.batches_split,
            "failed": statistics.records_failed,
        }
    return outcomes, stats


def _check(address: str, topic: str, count: int, outcomes: list[Any], mode: str, stats: dict[str, int],
           *, renumbered: bool = True) -> None:
    values = [_value(index) for index in range(count)]
    failed = [index for index, outcome in enumerate(outcomes) if isinstance(outcome, BaseException)]
    if mode == "ghost":
        assert failed == [], [outcomes[index] for index in failed]
    else:  # corrupt
        # One batch (or a piece of one) failed: its records, one run of them, alone.
        assert failed and failed == list(range(failed[0], failed[-1] + 1)), failed
        assert all(isinstance(outcomes[index], CorruptRecordError) for index in failed), outcomes
    log = partition_values(address, topic)
    assert log[0] == b"warm-up"
    landed = [value for value in log[1:] if value != GHOST]
    expected = [value for index, value in enumerate(values) if index not in failed]
    assert landed == expected  # each once, in send order
    if mode == "ghost":
        assert log.count(GHOST) == GHOST_RECORDS
    # Each future's offset is its record's in the log.
    offsets = {value: offset for offset, value in enumerate(log) if value != GHOST}
    for index, outcome in enumerate(outcomes):
        if index not in failed:
            assert outcome == offsets[values[index]], (index, outcome)
    assert stats["failed"] == len(failed)
    if renumbered:
        assert stats["producer_ids"] == 2  # retired once, every batch after it on the new id
        assert stats["renumbered"] >= 1


@pytest.mark.parametrize("in_flight", [1, 5])
def test_a_full_window_refused_out_of_order_lands_once_in_order_on_a_new_id(seglog_service, make_topic, retirement, in_flight):
    """The default window: five batches in flight and more queued when the third batch is
    refused out of order (its sequence unresolvable): those in flight and queued go again on a
    new id in their order, every record once, every future its offset."""
    topic = make_topic()
    count = 120
    outcomes, stats = asyncio.run(_run(seglog_service.address, topic, retirement, count=count, at=3,
                                       mode="ghost", in_flight=in_flight))
    assert retirement.done
    _check(seglog_service.address, topic, count, outcomes, "ghost", stats)


def test_a_batch_refused_for_good_inside_a_full_window_fails_alone(seglog_service, make_topic, retirement):
    """The second batch of a full window fails for good (unwritten): the batches in flight
    after it are refused out of order past its gap, and go again on a new id, in order."""
    topic = make_topic()
    count = 120
    outcomes, stats = asyncio.run(_run(seglog_service.address, topic, retirement, count=count, at=2,
                                       mode="corrupt", in_flight=5))
    assert retirement.done
    _check(seglog_service.address, topic, count, outcomes, "corrupt", stats)


def test_batches_whose_fate_is_unknown_go_again_as_they_were_before_the_rest_is_renumbered(
    seglog_service, make_topic, retirement,
):
    """A batch of a full window fails for good (corrupt); the batch after it is appended (a ghost
    took the failed one's sequences) and its answer is lost; the one after that is refused out
    of order (another ghost). The id is retired: the batch whose answer was lost goes again
    first on the retired id, as it was, and the service answers it as the duplicate it is; only
    then is what the service holds none of numbered afresh. Numbered afresh with the rest, it
    was written twice. Every record but the failed batch's lands once, in order."""
    topic = make_topic()
    count = 120
    outcomes, stats = asyncio.run(_run(seglog_service.address, topic, retirement, count=count, at=2,
                                       mode="corrupt, then an answer is lost", in_flight=5))
    assert retirement.done and not retirement.break_next and retirement.ghost_next is None
    _check(seglog_service.address, topic, count, outcomes, "corrupt", stats)


def test_split_batches_of_a_window_renumbered_keep_their_place(seglog_service, make_topic, retirement):
    """Full batches above the topic's limit, split when refused, around a retirement: the
    pieces go again in their batch's place on the new id, before the batches behind it."""
    topic = make_topic(configs={"max.message.bytes": str(SPLIT_LIMIT_BYTES)})
    count = 120
    outcomes, stats = asyncio.run(_run(seglog_service.address, topic, retirement, count=count, at=4,
                                       mode="ghost", in_flight=5, split=True))
    assert retirement.done
    _check(seglog_service.address, topic, count, outcomes, "ghost", stats)
    assert stats["split"] >= 1


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    at_fraction=st.floats(min_value=0, max_value=0.99),
    in_flight=st.integers(min_value=1, max_value=5),
    split=st.booleans(),
    mode=st.sampled_from(["ghost", "corrupt", "corrupt, then an answer is lost"]),
    count=st.integers(min_value=20, max_value=90),
)
def test_wherever_the_id_is_retired_every_record_lands_once_in_order(
    seglog_service, make_topic, retirement, at_fraction, in_flight, split, mode, count,
):
    """Property: whichever batch of the window the retirement lands on, however many are in
    flight, with splits or not, refused out of order or failed for good (and the batch after it
    appended with its answer lost, its fate unknown: sent again as it was before any is
    renumbered):
    each record the producer did not fail lands once, in send order, at its future's offset;
    only the records of the one batch refused for good fail."""
    configs = {"max.message.bytes": str(SPLIT_LIMIT_BYTES)} if split else None
    topic = make_topic(configs=configs)
    at = 1 + int(at_fraction * (count // 12))  # within the batches sent (about nine records each)
    outcomes, stats = asyncio.run(_run(seglog_service.address, topic, retirement, count=count, at=at,
                                       mode=mode, in_flight=in_flight, split=split))
    assert retirement.done
    # Where the corrupt batch was the last, nothing followed it to number afresh.
    _check(seglog_service.address, topic, count, outcomes, "ghost" if mode == "ghost" else "corrupt", stats,
           renumbered=mode == "ghost")


class _LostAnswers:
    """Armed for one run: the answers of the producer's writes to ``topic`` come back from the
    service (each batch appended, or refused), and are lost: once ``appended`` records of the run
    are in the log (or ``in_flight`` batches wait for their answers), the topic's max.message.bytes is lowered to ``limit`` through the admin API
    and the stream is ended, as a connection lost after the writes would (every answer it owed,
    and the ones held back, fail retriably)."""

    def __init__(self) -> None:
        self.armed = False
        self.broken = False
        self.address = ""
        self.topic = ""
        self.appended = 0
        self.limit = 0
        self.lost: list[asyncio.Future[Any]] = []
        self.in_flight = 5
        self.lost_batches = 0

    def arm(self, address: str, topic: str, appended: int, limit: int, in_flight: int = 5) -> None:
        self.address, self.topic, self.appended, self.limit = address, topic, appended, limit
        self.in_flight, self.lost_batches = in_flight, 0
        self.armed, self.broken, self.lost = True, False, []

    async def after_write(self, stream: Any, message: Any, answer: asyncio.Future[Any]) -> asyncio.Future[Any]:
        if not self.armed or self.broken or getattr(stream, "_answer_field", "") != "produce":
            return answer
        requests = [message.produce, *message.more]
        if all(request.topic != self.topic for request in requests):
            return answer
        try:
            await asyncio.shield(answer)  # the service answered: what it carries was appended
        except SeglogError:
            return answer
        lost = asyncio.get_running_loop().create_future()
        self.lost.append(lost)
        self.lost_batches += len(requests)
        async with AsyncAdmin(self.address) as admin:
            end = (await admin.latest_offsets(self.topic, [0]))[0]
            # Or as many batches as the window holds wait for their answers: nothing more is sent.
            if end < 1 + self.appended and self.lost_batches < self.in_flight:
                return lost
            await admin.alter_topic_configs(self.topic, {"max.message.bytes": str(self.limit)})
        self.broken = True
        broke = ServiceUnavailableError("injected: the connection was lost after the writes")
        if stream._call is not None:
            stream._end(stream._call, broke)
        for future in self.lost:
            future.set_exception(broke)
        return lost


@pytest.fixture
def lost_answers(monkeypatch) -> _LostAnswers:
    state = _LostAnswers()
    real = RequestStream.send

    async def send(self, message, **options):
        return await state.after_write(self, message, await real(self, message, **options))

    monkeypatch.setattr(RequestStream, "send", send)
    return state


def _check_never_twice(address: str, topic: str, count: int, outcomes: list[Any]) -> list[bytes]:
    """No record is in the log twice, and each is either in it once at its future's offset or
    its future failed (a failure the caller may retry: the record may be in the log)."""
    log = partition_values(address, topic)
    assert log[0] == b"warm-up"
    values = [_value(index) for index in range(count)]
    landed = [value for value in log[1:] if value != GHOST]
    assert len(landed) == len(set(landed)), landed  # never written twice
    offsets = {value: offset for offset, value in enumerate(log)}
    for index, outcome in enumerate(outcomes):
        if not isinstance(outcome, BaseException):
            assert outcome == offsets[values[index]], (index, outcome)
    assert set(landed) <= set(values)
    return landed


def test_a_batch_split_after_its_answer_was_lost_is_never_written_twice(seglog_service, make_topic, lost_answers):
    """Two batches (v00-v08, v09-v15) appended, their answers lost with the connection; the
    topic's max.message.bytes lowered before they go again. The service checks the size before
    duplicates: the first is refused as too large and split, and its first piece is refused out
    of order (the records it numbers are in the log under the batch's sequences). That is no
    proof the piece was never appended: the id is not retired for it nor the window renumbered
    (which wrote every record from v00 twice), so the pieces fail as out of sequence, and the
    records are in the log once."""
    topic = make_topic()
    count = 16

    async def run() -> tuple[list[Any], dict[str, int]]:
        async with AsyncProducer(seglog_service.address, batch_size=BATCH_SIZE, linger_ms=5) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)
            lost_answers.arm(seglog_service.address, topic, count, SPLIT_LIMIT_BYTES)
            futures = [await producer.send(topic, _value(index), partition=0) for index in range(count)]
            await producer.flush(_FLUSH_TIMEOUT_MS)
            statistics = producer.statistics()
            outcomes = [future.exception() or (await future).offset for future in futures]
            return outcomes, {"split": statistics.batches_split, "renumbered": statistics.batches_renumbered}

    outcomes, stats = asyncio.run(run())
    assert lost_answers.broken and stats["split"] >= 1
    landed = _check_never_twice(seglog_service.address, topic, count, outcomes)
    assert landed == [_value(index) for index in range(count)]  # appended once, before the loss
    failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    assert failed and all(isinstance(outcome, OutOfOrderSequenceError) for outcome in failed), outcomes
    assert stats["renumbered"] == 0


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    appended_fraction=st.floats(min_value=0, max_value=1),
    in_flight=st.integers(min_value=1, max_value=5),
    count=st.integers(min_value=10, max_value=60),
)
def test_wherever_answers_are_lost_before_a_split_no_record_is_written_twice(
    seglog_service, make_topic, lost_answers, appended_fraction, in_flight, count,
):
    """Property: however many records are appended before the answers are lost and the topic's
    limit lowered (so what goes again is split, its pieces' fate unresolvable), however many are
    in flight: no record is in the log twice, the records landed keep their send order, and each
    future has its record's offset or failed."""
    topic = make_topic()
    appended = max(1, int(appended_fraction * count))

    async def run() -> list[Any]:
        async with AsyncProducer(
            seglog_service.address, batch_size=BATCH_SIZE, linger_ms=5, max_in_flight_per_partition=in_flight,
        ) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)
            lost_answers.arm(seglog_service.address, topic, appended, SPLIT_LIMIT_BYTES, in_flight)
            futures = [await producer.send(topic, _value(index), partition=0) for index in range(count)]
            await producer.flush(_FLUSH_TIMEOUT_MS)
            return [future.exception() or (await future).offset for future in futures]

    outcomes = asyncio.run(run())
    assert lost_answers.broken
    landed = _check_never_twice(seglog_service.address, topic, count, outcomes)
    order = {_value(index): index for index in range(count)}
    assert [order[value] for value in landed] == sorted(order[value] for value in landed)


@pytest.mark.parametrize("failing", ["once", "always"])
def test_no_new_producer_id_fails_the_batches_waiting_to_be_renumbered(seglog_service, make_topic, retirement, monkeypatch, failing):
    """The new producer id cannot be had when a window is to be numbered afresh: the batches
    waiting for it fail with the reason (those after the retirement), never hang flush; the
    others land once, in order, and the producer sends on once an id can be had again."""
    topic = make_topic()
    count = 60
    real = Sender.init_producer_id
    calls = {"count": 0, "failing": True}

    async def init_producer_id(self, request):
        calls["count"] += 1
        if calls["failing"] and calls["count"] > 1 and (failing == "always" or calls["count"] == 2):
            raise SeglogError("injected: no producer id")
        return await real(self, request)

    monkeypatch.setattr(Sender, "init_producer_id", init_producer_id)

    async def run() -> tuple[list[Any], Any]:
        async with AsyncProducer(seglog_service.address, batch_size=BATCH_SIZE, linger_ms=5) as producer:
            await producer.send_and_wait(topic, b"warm-up", partition=0)
            retirement.arm(producer, topic, 3, "ghost", BATCH_SIZE * 2)
            futures = [await producer.send(topic, _value(index), partition=0) for index in range(count)]
            await producer.flush(_FLUSH_TIMEOUT_MS)
            outcomes = [future.exception() or (await future).offset for future in futures]
            calls["failing"] = False
            after = await producer.send_and_wait(topic, b"after", partition=0)
            return outcomes, after

    outcomes, after = asyncio.run(run())
    assert retirement.done
    failed = [index for index, outcome in enumerate(outcomes) if isinstance(outcome, BaseException)]
    assert failed and all("injected: no producer id" in str(outcomes[index]) for index in failed)
    values = [_value(index) for index in range(count)]
    log = partition_values(seglog_service.address, topic)
    landed = [value for value in log if value != GHOST]
    assert landed == [b"warm-up", *(value for index, value in enumerate(values) if index not in failed), b"after"]
    assert after.offset == len(log) - 1


def test_a_close_while_the_new_producer_id_is_awaited_fails_the_waiting_batches(seglog_service, make_topic, retirement, monkeypatch):
    """The producer closes while a window waits for the new producer id to be numbered afresh
    on (InitProducerId never answers): close returns, the waiting batches fail as closed, and
    what was written before the retirement stays written, once."""
    topic = make_topic()
    count = 60
    real = Sender.init_producer_id
    calls = {"count": 0}

    async def init_producer_id(self, request):
        calls["count"] += 1
        if calls["count"] > 1:
            await asyncio.Event().wait()  # never answered
        return await real(self, request)

    monkeypatch.setattr(Sender, "init_producer_id", init_producer_id)

    async def run() -> list[Any]:
        producer = AsyncProducer(seglog_service.address, batch_size=BATCH_SIZE, linger_ms=5)
        await producer.send_and_wait(topic, b"warm-up", partition=0)
        retirement.arm(producer, topic, 3, "ghost", BATCH_SIZE * 2)
        futures = [await producer.send(topic, _value(index), partition=0) for index in range(count)]
        await until(lambda: calls["count"] > 1 and any(w.holding for w in producer._sender.windows.values()))
        await producer.close(timeout_ms=0)
        return [future.exception() or (await future).offset for future in futures]

    outcomes = asyncio.run(run())
    assert retirement.done
    failed = [index for index, outcome in enumerate(outcomes) if isinstance(outcome, BaseException)]
    assert failed and all(isinstance(outcomes[index], ClientClosedError) for index in failed)
    values = [_value(index) for index in range(count)]
    landed = [value for value in partition_values(seglog_service.address, topic) if value != GHOST]
    assert landed == [b"warm-up", *(value for index, value in enumerate(values) if index not in failed)]


def test_a_retirement_on_one_partition_leaves_the_others_in_order(seglog_service, make_topic, retirement):
    """The id is retired by partition 0's window while partition 1 has batches of it in flight
    and queued: partition 1's go on under the retired id (its sequences there are whole) and its
    later ones on the new id once those are answered; each partition's records land once, in
    order."""
    topic = make_topic(partitions=2)
    count = 160

    async def run() -> list[Any]:
        async with AsyncProducer(seglog_service.address, batch_size=BATCH_SIZE, linger_ms=5) as producer:
            for partition in (0, 1):
                await producer.send_and_wait(topic, b"warm-up", partition=partition)
            retirement.arm(producer, topic, 6, "ghost", BATCH_SIZE * 2)
            futures = [await producer.send(topic, _value(index), partition=index % 2) for index in range(count)]
            await producer.flush(_FLUSH_TIMEOUT_MS)
            return [future.exception() or (await future).offset for future in futures]

    outcomes = asyncio.run(run())
    assert retirement.done
    assert not [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    for partition in (0, 1):
        log = partition_values(seglog_service.address, topic, partition)
        mine = [index for index in range(count) if index % 2 == partition]
        assert [value for value in log if value != GHOST] == [b"warm-up", *(_value(index) for index in mine)]
        offsets = {value: offset for offset, value in enumerate(log)}
        assert [outcomes[index] for index in mine] == [offsets[_value(index)] for index in mine]
