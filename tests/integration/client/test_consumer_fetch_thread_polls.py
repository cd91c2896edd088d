"""The synchronous Consumer in fetch mode (the default) takes what its Fetches buffered from the
polling thread, without a call into the shared loop thread, and a poll that drains a partition
has its next Fetch started at once (fetched ahead while the caller handles the records). Against
a real service: every record exactly once and in order whatever the poll sizes; errors, seeks
and close still reach the polling thread."""

from __future__ import annotations

import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import Consumer, Producer
from seglog._sync import LoopThread
from seglog.errors import SeglogError

pytestmark = pytest.mark.integration


def _produce(address: str, topic: str, values: list[bytes], partition: int = 0) -> None:
    with Producer(address) as producer:
        producer.send_many(topic, values, partition=partition)
        producer.flush()


def _offsets(polled: list, method: str) -> list[int]:
    if method == "poll":
        return [r.offset for r in polled]
    if method == "poll_batches":
        return [offset for view in polled for offset in view.offsets]
    return [offset for raw in polled for offset in range(raw.position, raw.last_offset + 1)]


@pytest.mark.parametrize("method", ["poll", "poll_batches", "poll_raw"])
def test_polls_of_buffered_records_make_no_call_into_the_loop_thread(seglog_service, make_topic, monkeypatch, method):
    topic = make_topic()
    values = [b"v%d" % i for i in range(60)]
    _produce(seglog_service.address, topic, values)
    calls = []
    original = LoopThread.run

    def counted(self, coroutine):
        calls.append(coroutine.__qualname__)
        return original(self, coroutine)

    with Consumer(seglog_service.address, topic, 0, start="earliest", max_poll_records=7) as consumer:
        seen = _offsets(getattr(consumer, method)(timeout_ms=5000), method)  # the first Fetch, on the loop
        assert seen and seen[0] == 0
        monkeypatch.setattr(LoopThread, "run", counted)
        while len(seen) < len(values):
            polled = getattr(consumer, method)(timeout_ms=5000)
            assert polled, f"only {len(seen)} of {len(values)} records came back"
            seen += _offsets(polled, method)
        assert calls == []
        assert consumer.statistics().records_consumed == len(values)
    assert seen == list(range(len(values)))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rounds=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=4),
    max_poll_records=st.integers(min_value=1, max_value=25),
)
def test_records_come_once_and_in_order_whatever_the_poll_sizes(seglog_service, make_topic, rounds, max_poll_records):
    """Records produced between polls (after a poll drained the buffer and its Fetch ahead is in
    flight, or waits at the service) all come back, once, in order."""
    topic = make_topic()
    seen: list[int] = []
    produced = 0
    with Consumer(seglog_service.address, topic, 0, start="earliest", max_poll_records=max_poll_records,
                  fetch_max_wait_ms=50) as consumer:
        for count in rounds:
            _produce(seglog_service.address, topic, [b"x"] * count)
            produced += count
            while len(seen) < produced:
                polled = consumer.poll_batches(timeout_ms=5000)
                assert polled, f"only {len(seen)} of {produced} records came back"
                seen += _offsets(polled, "poll_batches")
                assert len(polled) <= max_poll_records or len(_offsets(polled, "poll_batches")) <= max_poll_records
    assert seen == list(range(produced))


def test_a_seek_between_thread_polls_drops_the_buffer_and_reads_from_there(seglog_service, make_topic):
    topic = make_topic()
    _produce(seglog_service.address, topic, [b"v%d" % i for i in range(30)])
    with Consumer(seglog_service.address, topic, 0, start="earliest", max_poll_records=5) as consumer:
        assert [r.offset for r in consumer.poll(timeout_ms=5000)] == [0, 1, 2, 3, 4]
        consumer.seek(20)
        assert [r.offset for r in consumer.poll(timeout_ms=5000)] == [20, 21, 22, 23, 24]


def test_a_failed_fetch_ahead_is_raised_by_the_next_poll(seglog_service, make_topic):
    """The Fetch started ahead when a poll drained the buffer fails (the service is paused with
    SIGSTOP under it, past the request timeout): the next poll raises the failure, after every
    buffered record was returned; the consumer reads on once the service runs again."""
    topic = make_topic()
    _produce(seglog_service.address, topic, [b"v%d" % i for i in range(10)])
    with Consumer(seglog_service.address, topic, 0, start="earliest", request_timeout_ms=1500) as consumer:
        seen = [r.offset for r in consumer.poll(timeout_ms=5000)]
        assert seen == list(range(10))
        seglog_service.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(SeglogError):
                while True:
                    assert consumer.poll(timeout_ms=5000) == []
        finally:
            seglog_service.process.send_signal(signal.SIGCONT)
        _produce(seglog_service.address, topic, [b"w"])
        polled = []
        while not polled:
            polled = consumer.poll(timeout_ms=5000)
        assert [r.offset for r in polled] == [10]
