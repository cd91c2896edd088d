"""The client on the service's streams: the producer's in-flight window on ProduceStream (order
kept, retries in order after injected stream failures, the unary fallback), lookups on
LookupStream."""

from __future__ import annotations

import asyncio
import concurrent.futures

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import Admin, AsyncProducer, Consumer, Producer, TopicPartition
from seglog._send_window import SendWindow
from seglog._streams import RequestStream
from seglog.errors import RequestTimeoutError, ServiceUnavailableError
from seglog.v1 import log_service_pb2 as pb

pytestmark = pytest.mark.integration


def _values(address: str, topic: str, partition: int, count: int | None = None) -> list[bytes]:
    """The partition's values (``count``: that many; None: all up to the log end offset)."""
    if count is None:
        with Admin(address) as admin:
            count = admin.latest_offsets(topic, [partition])[partition]
    with Consumer(address, topic, partition, start="earliest") as consumer:
        seen: list[bytes] = []
        while len(seen) < count:
            batch = consumer.poll(timeout_ms=2000)
            assert batch, f"only {len(seen)} of {count} records came back"
            seen += [record.value for record in batch]
        return seen


def test_linger_zero_sends_several_batches_per_partition_on_one_stream_in_order(seglog_service, make_topic, monkeypatch):
    """A partition's next batch starts once the write of the one before is done, before its
    answer: several batches of a partition under way on one stream (the deepest window seen at
    every batch's start), answered in order."""
    topic = make_topic(partitions=2)
    deepest = 0
    sent = SendWindow.sent

    def counted(self, item):
        nonlocal deepest
        entry = sent(self, item)
        deepest = max(deepest, self.in_flight_count)
        return entry

    monkeypatch.setattr(SendWindow, "sent", counted)

    async def run() -> None:
        async with AsyncProducer(seglog_service.address, linger_ms=0, max_in_flight_per_partition=5) as producer:
            # Until the service has answered on the stream the window is one batch deep.
            await (await producer.send(topic, b"warm-up", partition=1))
            futures = []
            for i in range(600):
                futures.append(await producer.send(topic, b"%d" % i, partition=i % 2))
                for _ in range(3):
                    await asyncio.sleep(0)  # the sender runs, as between an application's sends
            metadata = [await future for future in futures]
            transport = producer._transport.statistics()
        for partition in range(2):
            offsets = [m.offset for m in metadata if m.partition == partition]
            assert offsets == list(range(partition, 300 + partition))
        assert deepest > 1, "never more than one batch in flight for a partition"
        # No unary Produce: the one unary call is the idempotent producer's InitProducerId.
        assert transport.streams_opened == 1 and transport.requests_sent == 1
        assert producer._sender.idempotence.producer_ids_received == 1

    asyncio.run(run())
    for partition in range(2):
        expected = [b"%d" % i for i in range(partition, 600, 2)]
        assert _values(seglog_service.address, topic, partition, 300 + partition)[partition:] == expected


def test_at_linger_zero_the_send_itself_starts_its_batch(seglog_service, make_topic):
    """linger_ms=0: the record's request is under way when send() returns (no turn of the loop
    waiting for the sender); with a linger it waits in the queue, and so does a record whose
    partition's window is full."""
    topic = make_topic(partitions=2)

    async def run() -> None:
        async with AsyncProducer(seglog_service.address, linger_ms=0, max_in_flight_per_partition=1) as producer:
            await (await producer.send(topic, b"warm-up", partition=1))  # the producer id is in hand
            first = await producer.send(topic, b"a", partition=0)
            statistics = producer.statistics()
            assert (statistics.requests_in_flight, statistics.batches_queued) == (1, 0)
            second = await producer.send(topic, b"b", partition=0)  # the window (1) is full
            statistics = producer.statistics()
            assert (statistics.requests_in_flight, statistics.batches_queued) == (1, 1)
            assert [(await first).offset, (await second).offset] == [0, 1]
        async with AsyncProducer(seglog_service.address, linger_ms=50) as producer:
            await (await producer.send(topic, b"warm-up", partition=1))
            lingering = await producer.send(topic, b"c", partition=0)
            statistics = producer.statistics()
            assert (statistics.requests_in_flight, statistics.batches_queued) == (0, 1)
            assert (await lingering).offset == 2

    asyncio.run(run())
    assert _values(seglog_service.address, topic, 0) == [b"a", b"b", b"c"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    window=st.integers(1, 5),
    linger_ms=st.sampled_from([0, 0, 1]),
    sends=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3)), min_size=1, max_size=60),
)
def test_any_mix_of_sends_and_loop_turns_lands_in_send_order(seglog_service, make_topic, window, linger_ms, sends):
    """Whoever starts a batch (the send itself at linger 0 with room in the window, or the sender
    when it was busy, the window full or a linger due), each partition's records land in the
    order they were sent and each future answers its own record's offset. ``sends``: (partition,
    loop turns before the next send)."""
    topic = make_topic(partitions=3)

    async def run() -> list:
        async with AsyncProducer(seglog_service.address, linger_ms=linger_ms, max_in_flight_per_partition=window) as producer:
            futures = []
            for number, (partition, turns) in enumerate(sends):
                futures.append((partition, number, await producer.send(topic, b"%d" % number, partition=partition)))
                for _ in range(turns):
                    await asyncio.sleep(0)
            return [(partition, number, (await future).offset) for partition, number, future in futures]

    landed = asyncio.run(run())
    for partition in range(3):
        mine = [(number, offset) for p, number, offset in landed if p == partition]
        assert [offset for _, offset in mine] == list(range(len(mine)))
        if mine:
            assert _values(seglog_service.address, topic, partition) == [b"%d" % number for number, _ in mine]


def test_at_linger_zero_a_send_from_another_thread_starts_its_batch_in_the_wake_up(seglog_service, make_topic):
    """The synchronous Producer at linger_ms=0 appends from the caller's thread: the wake-up it
    hands the loop starts the record's request itself (a callback queued right behind it finds
    the request under way, not the batch waiting for the woken sender); with a linger the
    batch still waits in the queue."""
    topic = make_topic(partitions=1)
    for linger_ms, expected in ((0, (1, 0)), (50, (0, 1))):
        with Producer(seglog_service.address, linger_ms=linger_ms) as producer:
            producer.send(topic, b"warm-up", partition=0).result(10)  # the producer id is in hand
            sender = producer._async._sender

            async def parked() -> None:
                # Idle: parked, nothing in flight, and the warm-up's write reported done (its
                # answer can come first; at linger 0 a batch waits for a write under way).
                while not sender._parked or sender.requests or sender._writing:
                    await asyncio.sleep(0)

            producer._portal.run(parked())
            seen: concurrent.futures.Future[tuple[int, int]] = concurrent.futures.Future()

            def look() -> None:
                statistics = producer._async.statistics()
                seen.set_result((statistics.requests_in_flight, statistics.batches_queued))

            future = producer.send(topic, b"x", partition=0)
            producer._portal.call_soon(look)
            assert seen.result(10) == expected
            future.result(10)
    assert _values(seglog_service.address, topic, 0) == [b"warm-up", b"x"] * 2


def test_at_linger_zero_records_sent_while_the_connection_writes_go_out_in_one_batch_after(seglog_service, make_topic):
    """At linger_ms=0 a partition whose connection has a ProduceStream write under way keeps its
    open batch: the records sent meanwhile join it (no request of their own queued behind the
    write), and the batch goes out, in order, once the write is done. The write is held here
    by counting one under way on the connection, as ``_write_on`` does while grpc writes."""
    topic = make_topic(partitions=1)

    async def run() -> None:
        async with AsyncProducer(seglog_service.address, linger_ms=0) as producer:
            await (await producer.send(topic, b"warm-up", partition=0))  # the stream is open
            sender = producer._sender
            transport = sender._router.transport_for(topic, 0)
            sent_before = producer.statistics().batches_sent
            sender._writing[transport] = 1
            futures = [await producer.send(topic, b"%d" % i, partition=0) for i in range(3)]
            for _ in range(3):
                await asyncio.sleep(0)
            statistics = producer.statistics()
            assert (statistics.requests_in_flight, statistics.batches_queued) == (0, 1)
            del sender._writing[transport]
            sender.wake()  # as the end of the write does
            assert [(await future).offset for future in futures] == [1, 2, 3]
            assert producer.statistics().batches_sent == sent_before + 1

    asyncio.run(run())
    assert _values(seglog_service.address, topic, 0) == [b"warm-up", b"0", b"1", b"2"]


RECORDS_A_REQUEST = 15


async def _until_more(count, than: int, within_s: float = 30.0) -> None:
    """Wait (a loop turn at a time) until ``count()`` is above ``than``; fail after ``within_s``."""
    deadline = asyncio.get_running_loop().time() + within_s
    while count() <= than:
        assert asyncio.get_running_loop().time() < deadline, f"still {count()} after {within_s} s"
        await asyncio.sleep(0.001)


def test_stream_failures_are_retried_in_order(seglog_service, make_topic, monkeypatch):
    """Every fourth produce request on the stream (eight times) ends it right after the write (as
    a lost connection would): every request it owed fails retriably, whether or not the service
    appended it. The window sends them again in order, so the log's first occurrences keep the
    send order (without idempotence a request appended before the break may be there twice) and
    every future resolves to an offset holding its own record."""
    topic = make_topic(partitions=2)
    real_send = RequestStream.send
    sends = breaks = 0

    async def flaky_send(self, request, **options):
        nonlocal sends, breaks
        answer = await real_send(self, request, **options)
        if self._answer_field != "produce":
            return answer  # the consumer's lookups below
        sends += 1
        if sends % 4 == 0 and breaks < 8:
            breaks += 1
            broke = ServiceUnavailableError("injected: the stream broke")
            if self._call is not None:
                self._end(self._call, broke)  # everything it owed fails
            if answer.done():  # answered already: the answer is lost all the same
                answer = asyncio.get_running_loop().create_future()
                answer.set_exception(broke)
        return answer

    monkeypatch.setattr(RequestStream, "send", flaky_send)
    count = 600

    async def run() -> list:
        async with AsyncProducer(
            seglog_service.address, linger_ms=0, max_in_flight_per_partition=5, retries=50,
            retry_backoff_ms=1,
        ) as producer:
            # Until the service has answered on the stream the window is one batch deep.
            await (await producer.send(topic, b"warm-up", partition=1))
            futures = []
            requests = sends
            done_order: list[int] = []
            for i in range(count):
                future = await producer.send(topic, b"%d" % i, partition=0)
                future.add_done_callback(lambda _, index=i: done_order.append(index))
                futures.append(future)
                for _ in range(3):
                    await asyncio.sleep(0)
                if i % RECORDS_A_REQUEST == RECORDS_A_REQUEST - 1:
                    # At linger 0 the records sent while a write is under way join one batch, so
                    # how many requests 600 sends make depends on the machine's pace (10 to 30
                    # seen): a request is waited for every RECORDS_A_REQUEST records, so there are
                    # at least 40 and the stream breaks its eight times.
                    await _until_more(lambda: sends, requests)
                    requests = sends
            metadata = [await future for future in futures]
            assert producer.statistics().retries > 0
            assert done_order == sorted(done_order)  # completions in send order
            return metadata

    metadata = asyncio.run(run())
    assert breaks == 8, f"only {breaks} breaks in {sends} produce requests"
    stored = _values(seglog_service.address, topic, 0)
    firsts = list(dict.fromkeys(stored))
    assert firsts == [b"%d" % i for i in range(count)]
    for i, meta in enumerate(metadata):
        assert stored[meta.offset] == b"%d" % i


def test_a_service_without_the_stream_gets_unary_produce_one_batch_per_partition(seglog_service, make_topic, monkeypatch):
    topic = make_topic(partitions=1)
    from seglog.client import Transport

    real = Transport._stream_call

    def missing_method(self, rpc):  # a method the service does not serve: UNIMPLEMENTED
        return real(self, self._channel.stream_stream(
            "/seglog.v1.LogService/NoSuchStream",
            request_serializer=pb.ProduceStreamRequest.SerializeToString,
            response_deserializer=pb.ProduceStreamResponse.FromString,
        ))

    monkeypatch.setattr(Transport, "_stream_call", missing_method)

    async def run() -> None:
        async with AsyncProducer(seglog_service.address, linger_ms=0, max_in_flight_per_partition=5) as producer:
            futures = [await producer.send(topic, b"%d" % i, partition=0) for i in range(50)]
            metadata = [await future for future in futures]
            assert producer._sender.streaming is False
            assert producer._sender.in_flight_max() == 1
            assert producer._transport.statistics().requests_sent >= 1
        assert [m.offset for m in metadata] == list(range(50))

    asyncio.run(run())


def test_lookups_go_on_the_lookup_stream_and_match_the_unary_answer(seglog_service, make_topic):
    topic = make_topic(partitions=3)
    with Admin(seglog_service.address) as admin:
        targets = {TopicPartition(topic, p): ts for p, ts in enumerate([-2, -1, 0])}
        streamed = admin.offsets_for_times(targets)
        statistics = admin._async._transport.statistics()
        assert statistics.streams_opened == 1
        assert admin.offsets_for_times(targets) == streamed
        assert admin._async._transport.statistics().streams_opened == 1  # the same stream
    from seglog.v1 import log_service_pb2_grpc as pb_grpc

    with grpc.insecure_channel(seglog_service.address) as channel:
        unary = pb_grpc.LogServiceStub(channel).OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[
            pb.PartitionTimestamp(topic=tp.topic, partition=tp.partition, timestamp_ms=ts) for tp, ts in targets.items()
        ]))
    assert {TopicPartition(r.topic, r.partition): r.offset for r in unary.results} == {
        tp: (hit.offset if hit else -1) for tp, hit in streamed.items()
    }


def test_many_timestamps_per_partition_go_on_the_lookup_stream_in_one_request(seglog_service, make_topic):
    topic = make_topic(partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    targets = [(tp, ts) for ts in (-3, -2, -1, 0, 5) for tp in (tp0, tp1)]
    with Admin(seglog_service.address) as admin:
        found = admin.offsets_for_times_many(targets)
        statistics = admin._async._transport.statistics()
        assert statistics.streams_opened == 1 and statistics.requests_sent == 1
        assert found == [admin.offsets_for_times({tp: ts})[tp] for tp, ts in targets]
        assert admin._async._transport.statistics().streams_opened == 1  # the same stream


async def test_nothing_is_written_before_the_open_is_answered_and_an_unanswered_open_times_out():
    """A real gRPC server whose stream handler never answers the open (no initial metadata):
    the request is not written, and it fails RequestTimeoutError after ``open_timeout_s``."""
    received: list[object] = []

    async def silent(request_iterator, context):
        async for request in request_iterator:
            received.append(request)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "test.Silent", {"Stream": grpc.stream_stream_rpc_method_handler(
            silent, request_deserializer=pb.ProduceStreamRequest.FromString,
            response_serializer=pb.ProduceStreamResponse.SerializeToString,
        )},
    ),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            open_call = channel.stream_stream(
                "/test.Silent/Stream", request_serializer=pb.ProduceStreamRequest.SerializeToString,
                response_deserializer=pb.ProduceStreamResponse.FromString,
            )
            stream = RequestStream(open_call, "produce", open_timeout_s=0.3)
            with pytest.raises(RequestTimeoutError, match="did not answer the stream's open"):
                await stream.request(pb.ProduceStreamRequest(produce=pb.ProduceRequest(topic="t", partition=0)), timeout_s=10)
            assert not stream.confirmed
            await stream.close()
        assert received == []
    finally:
        await server.stop(0)


# -- a send cancelled before or after its write ------------------------------------------------
def _produce(topic: str, value: bytes) -> pb.ProduceStreamRequest:
    from seglog.records import RecordBatchBuilder

    builder = RecordBatchBuilder()
    builder.append(value, timestamp_ms=1_700_000_000_000)
    message = pb.ProduceStreamRequest()
    message.produce.topic, message.produce.partition = topic, 0
    message.produce.records = builder.build()
    return message


async def _cancel_some_sends(address: str, topic: str, cancelled: list[bool]) -> tuple[list[int], int]:
    """Sends one request per entry of ``cancelled`` at once, on a stream not yet open (each
    waits for the open or an earlier write), cancels those marked before they are written, then
    sends one more: (the offsets answered, streams opened)."""
    from seglog.v1 import log_service_pb2_grpc as pb_grpc

    async with grpc.aio.insecure_channel(address) as channel:
        stream = RequestStream(pb_grpc.LogServiceStub(channel).ProduceStream, "produce", open_timeout_s=30)
        sends = [asyncio.ensure_future(stream.send(_produce(topic, b"%d" % i))) for i in range(len(cancelled))]
        await asyncio.sleep(0)  # each send is waiting: the first for the open, the others for the lock
        for send, cancel in zip(sends, cancelled):
            if cancel:
                send.cancel()
        answers = [await send for send, cancel in zip(sends, cancelled) if not cancel]
        answers.append(await stream.send(_produce(topic, b"later")))
        offsets = [(await answer).base_offset for answer in answers]
        opened = stream.opened_count
        await stream.close()
    return offsets, opened


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cancelled=st.lists(st.booleans(), min_size=1, max_size=8))
def test_a_send_cancelled_before_its_write_leaves_the_stream_to_the_others(seglog_service, make_topic, cancelled):
    topic = make_topic(partitions=1)
    offsets, opened = asyncio.run(_cancel_some_sends(seglog_service.address, topic, cancelled))
    kept = cancelled.count(False)
    assert offsets == list(range(kept + 1))  # in order, nothing of the cancelled ones
    assert opened == 1  # the stream was never reset
    expected = [b"%d" % i for i, cancel in enumerate(cancelled) if not cancel] + [b"later"]
    assert _values(seglog_service.address, topic, 0) == expected


def test_a_send_cancelled_during_its_write_is_written_and_its_answer_dropped(seglog_service, make_topic):
    topic = make_topic(partitions=1)
    from seglog.v1 import log_service_pb2_grpc as pb_grpc

    async def run() -> tuple[list[int], int]:
        async with grpc.aio.insecure_channel(seglog_service.address) as channel:
            stream = RequestStream(pb_grpc.LogServiceStub(channel).ProduceStream, "produce", open_timeout_s=30)
            first = await stream.request(_produce(topic, b"first"))  # the stream is open
            send = asyncio.ensure_future(stream.send(_produce(topic, b"cancelled")))
            await asyncio.sleep(0)  # the send took the free lock and its write began
            send.cancel()
            with pytest.raises(asyncio.CancelledError):
                await send
            later = await stream.request(_produce(topic, b"later"))
            opened = stream.opened_count
            await stream.close()
        return [first.base_offset, later.base_offset], opened

    offsets, opened = asyncio.run(run())
    assert (offsets, opened) == ([0, 2], 1)
    assert _values(seglog_service.address, topic, 0) == [b"first", b"cancelled", b"later"]


@pytest.mark.parametrize("method", ["send", "ask"])
def test_a_write_on_a_call_that_ended_unseen_fails_its_request_and_the_next_reopens(seglog_service, make_topic, method):
    """The write starts in the caller's step (``_started``): on a call that ended before the
    stream's reader noticed, its first step fails at once; the request fails retriably, nothing
    of it is appended, the write lock is given back (the next request would wait on it
    forever) and the next request opens a new stream."""
    topic = make_topic(partitions=1)
    from seglog.v1 import log_service_pb2_grpc as pb_grpc

    async def run() -> tuple[list[int], int, BaseException]:
        async with grpc.aio.insecure_channel(seglog_service.address) as channel:
            stream = RequestStream(pb_grpc.LogServiceStub(channel).ProduceStream, "produce", open_timeout_s=30)
            first = await stream.request(_produce(topic, b"first"))  # the stream is open
            assert stream._call is not None
            stream._call.cancel()  # ended under the stream: its reader has not run since
            with pytest.raises(ServiceUnavailableError) as refused:
                if method == "send":
                    await (await stream.send(_produce(topic, b"lost")))
                else:
                    await stream.ask(_produce(topic, b"lost"), timeout_s=30)
            later = await stream.request(_produce(topic, b"later"))
            opened = stream.opened_count
            await stream.close()
        return [first.base_offset, later.base_offset], opened, refused.value

    offsets, opened, error = asyncio.run(run())
    assert (offsets, opened) == ([0, 1], 2)
    assert isinstance(error, ServiceUnavailableError)
    assert _values(seglog_service.address, topic, 0) == [b"first", b"later"]


# -- ask: a request whose caller waits for the answer, not for the write -----------------------
@pytest.mark.parametrize("turns", [0, 1, 3], ids=["before_the_write_ran", "one_turn_in", "three_turns_in"])
def test_an_ask_cancelled_after_its_write_began_is_written_and_its_answer_dropped(seglog_service, make_topic, turns):
    """``ask`` waits for the answer as soon as its write is under way: cancelled then (the write
    not yet run, running, or done), the message is written all the same, its answer dropped, and
    the next ask gets its own answer on the same stream."""
    topic = make_topic(partitions=1)
    from seglog.v1 import log_service_pb2_grpc as pb_grpc

    async def run() -> tuple[list[int], int]:
        async with grpc.aio.insecure_channel(seglog_service.address) as channel:
            stream = RequestStream(pb_grpc.LogServiceStub(channel).ProduceStream, "produce", open_timeout_s=30)
            first = await stream.ask(_produce(topic, b"first"), timeout_s=30)  # the stream is open
            ask = asyncio.ensure_future(stream.ask(_produce(topic, b"cancelled"), timeout_s=30))
            for _ in range(turns + 1):
                await asyncio.sleep(0)  # the ask took the free lock and its write began
            ask.cancel()
            with pytest.raises(asyncio.CancelledError):
                await ask
            later = await stream.ask(_produce(topic, b"later"), timeout_s=30)
            opened = stream.opened_count
            await stream.close()
        return [first.base_offset, later.base_offset], opened

    offsets, opened = asyncio.run(run())
    assert (offsets, opened) == ([0, 2], 1)
    assert _values(seglog_service.address, topic, 0) == [b"first", b"cancelled", b"later"]


def test_lookups_asked_together_each_get_their_own_answer_in_order(seglog_service, make_topic):
    """Many lookups at once on one connection's LookupStream (each an ``ask``: written in call
    order, each waiting for its answer only): each gets the answer to its own target."""
    from seglog import AsyncAdmin, Producer

    topic = make_topic(partitions=1)
    first_ms = 1_700_000_000_000
    with Producer(seglog_service.address, linger_ms=0) as producer:
        for offset in range(20):
            producer.send(topic, b"v", partition=0, timestamp_ms=first_ms + 10 * offset)
        producer.flush()
    tp = TopicPartition(topic, 0)

    async def run() -> tuple[list[int], int]:
        async with AsyncAdmin(seglog_service.address) as admin:
            found = await asyncio.gather(*(admin.offsets_for_times({tp: first_ms + 10 * n - 5}) for n in range(20)))
            assert admin._transport is not None
            return [one[tp].offset for one in found], admin._transport.statistics().streams_opened

    assert asyncio.run(run()) == (list(range(20)), 1)
