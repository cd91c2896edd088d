"""The synchronous Consumer in stream mode polls from its own thread: once the Consume streams
run, a poll takes what they buffered (or waits for their next response) without a call into the
shared loop thread. Against a real service: every record exactly once and in order, whatever the
poll sizes and the stream's stops for room; errors and close still reach the polling thread."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import Consumer, Producer
from seglog._sync import LoopThread
from seglog.errors import ClientClosedError, OffsetOutOfRangeError

pytestmark = pytest.mark.integration


def _produce(address: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    with Producer(address, linger_ms=0) as producer:
        for value in values:
            producer.send(topic, value, partition=partition)
        producer.flush()


@pytest.mark.parametrize("method", ["poll", "poll_batches", "poll_raw"])
def test_polls_after_the_stream_opened_make_no_call_into_the_loop_thread(
    seglog_service, make_topic, monkeypatch, method
):
    topic = make_topic()
    values = [b"v%d" % i for i in range(40)]
    _produce(seglog_service.address, topic, values[:1])
    calls = []
    original = LoopThread.run

    def counted(self, coroutine):
        calls.append(coroutine.__qualname__)
        return original(self, coroutine)

    with Consumer(seglog_service.address, topic, 0, start="earliest", mode="stream", max_poll_records=7) as consumer:
        seen = [r.offset for r in consumer.poll(timeout_ms=5000)]  # opens the Consume stream
        assert seen == [0]
        monkeypatch.setattr(LoopThread, "run", counted)
        _produce(seglog_service.address, topic, values[1:])
        calls.clear()  # the producer's own calls
        while len(seen) < len(values):
            polled = getattr(consumer, method)(timeout_ms=5000)
            assert polled, f"only {len(seen)} of {len(values)} records came back"
            if method == "poll":
                seen += [r.offset for r in polled]
            elif method == "poll_batches":
                seen += [offset for view in polled for offset in view.offsets]
            else:
                seen += [offset for raw in polled for offset in range(raw.position, raw.last_offset + 1)]
        assert calls == []
        assert consumer.statistics().records_consumed == len(values)
    assert seen == list(range(len(values)))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(count=st.integers(1, 300), max_poll_records=st.integers(1, 20), max_records=st.none() | st.integers(1, 30))
def test_records_produced_while_a_thread_polls_come_once_and_in_order(
    seglog_service, make_topic, count, max_poll_records, max_records
):
    """The stream stops for room every max_poll_records (the poll's take wakes it from its
    thread) while a producer in another thread appends record by record."""
    topic = make_topic()
    values = [b"%d" % i for i in range(count)]
    producer = threading.Thread(target=_produce, args=(seglog_service.address, topic, values))
    seen: list[bytes] = []
    with Consumer(seglog_service.address, topic, 0, start="earliest", mode="stream",
                  max_poll_records=max_poll_records) as consumer:
        producer.start()
        while len(seen) < count:
            polled = consumer.poll(timeout_ms=10_000, max_records=max_records)
            assert polled, f"only {len(seen)} of {count} records came back"
            assert len(polled) <= (max_records or max_poll_records)
            seen += [r.value for r in polled]
        assert consumer.poll(timeout_ms=0) == []
    producer.join()
    assert seen == values


def test_a_seek_between_thread_polls_restarts_the_stream_there(seglog_service, make_topic):
    topic = make_topic()
    values = [b"%d" % i for i in range(20)]
    _produce(seglog_service.address, topic, values)
    with Consumer(seglog_service.address, topic, 0, start="earliest", mode="stream", max_poll_records=5) as consumer:
        assert [r.value for r in consumer.poll(timeout_ms=5000)] == values[:5]
        consumer.seek(2)
        seen: list[bytes] = []
        while len(seen) < 18:
            polled = consumer.poll(timeout_ms=5000)
            assert polled
            seen += [r.value for r in polled]
    assert seen == values[2:]


def test_a_close_from_another_thread_ends_a_waiting_poll_with_client_closed(seglog_service, make_topic):
    topic = make_topic()
    _produce(seglog_service.address, topic, [b"first"])
    outcome: list[BaseException | list] = []
    with Consumer(seglog_service.address, topic, 0, start="earliest", mode="stream") as consumer:
        assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"first"]
        waiting = threading.Event()
        original_wait = consumer._async._thread_ready.wait

        def wait(timeout=None):
            waiting.set()
            return original_wait(timeout)

        consumer._async._thread_ready.wait = wait

        def poll_forever() -> None:
            try:
                outcome.append(consumer.poll(timeout_ms=None))
            except BaseException as error:  # noqa: BLE001 - what the polling thread saw
                outcome.append(error)

        poller = threading.Thread(target=poll_forever)
        poller.start()
        assert waiting.wait(30)  # the poll waits on its thread, at the tail
    poller.join(30)
    assert not poller.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ClientClosedError)


def test_a_stream_error_while_the_thread_waits_is_raised_by_poll(seglog_service, make_topic):
    """The records the stream stands at are deleted under it (delete_records past the log end is
    refused, so the stream is moved past the end by a seek instead): OffsetOutOfRange with
    auto_offset_reset none reaches the polling thread from the loop's poll."""
    topic = make_topic()
    _produce(seglog_service.address, topic, [b"a", b"b"])
    with Consumer(seglog_service.address, topic, 0, start="earliest", mode="stream",
                  auto_offset_reset="none") as consumer:
        assert [r.value for r in consumer.poll(timeout_ms=5000)] == [b"a", b"b"]
        consumer.seek(50)  # beyond the log end: the reopened stream is refused
        with pytest.raises(OffsetOutOfRangeError):
            while True:
                assert consumer.poll(timeout_ms=5000) == []
