"""The parts of a split batch (``Sender._split``) without a service: the records' spans
(``piece_spans``), the accumulator's bookkeeping (``RecordAccumulator.split``: flush and buffer),
the delivery each record reads (``BatchDelivery.split_into``) and the window that sends the pieces
first (``SendWindow.split``, ``SendWindow.failed_unwritten``)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog._accumulator import RECORD_OVERHEAD_BYTES_MAX, RecordAccumulator, piece_spans
from seglog._delivery import BatchDelivery, DeliveryGroup, RecordFuture
from seglog._send_window import SendWindow
from seglog.records import RECORD_BATCH_OVERHEAD, Compression
from seglog.structs import TopicPartition

TP = TopicPartition("t", 0)


@given(st.lists(st.integers(min_value=0, max_value=5_000), max_size=60), st.integers(min_value=-100, max_value=20_000))
def test_piece_spans_cover_the_records_in_order_each_within_the_bound_or_alone(sizes, bound):
    spans = piece_spans(sizes, bound)
    assert [index for start, stop in spans for index in range(start, stop)] == list(range(len(sizes)))
    for number, (start, stop) in enumerate(spans):
        assert stop > start
        assert sum(sizes[start:stop]) <= bound or stop - start == 1
        if number + 1 < len(spans):  # greedy: the next record did not fit
            assert sum(sizes[start:stop + 1]) > bound


def _accumulator(batch_bytes: int = 10_000) -> RecordAccumulator:
    return RecordAccumulator(
        batch_bytes=batch_bytes, linger_ms=0, compression=Compression.NONE,
        buffer_bytes=1 << 20, request_bytes_max=1 << 20, wall_clock_ms=lambda: 1_000,
    )


def _drained_batch(accumulator: RecordAccumulator, values: list[bytes]):
    futures = [accumulator.append(TP, None, value, None, (), 0.0)[0] for value in values]
    (batch,), _ = accumulator.drain(0.0, lambda _: True, 1)
    return batch, futures


def test_a_flush_waits_for_the_last_piece_and_the_buffer_empties():
    accumulator = _accumulator()
    batch, _ = _drained_batch(accumulator, [bytes(100)] * 10)
    flushed_through = accumulator.begin_flush()
    pieces = accumulator.split(batch, RECORD_BATCH_OVERHEAD + 3 * (100 + RECORD_OVERHEAD_BYTES_MAX))
    assert [piece.record_count for piece in pieces] == [3, 3, 3, 1]
    for piece in pieces:
        assert not accumulator.flushed_through(flushed_through)
        accumulator.complete(piece)
    assert accumulator.flushed_through(flushed_through) and accumulator.is_empty()
    assert accumulator.statistics().buffered_bytes == 0


def test_each_record_reads_its_offset_or_its_error_from_its_piece():
    accumulator = _accumulator()
    batch, futures = _drained_batch(accumulator, [bytes([index]) for index in range(6)])
    called: list[RecordFuture] = []
    futures[0].add_done_callback(called.append)
    first, second = accumulator.split(batch, RECORD_BATCH_OVERHEAD + 3 * (1 + RECORD_OVERHEAD_BYTES_MAX))
    # The second piece is split again: pieces of pieces answer for their records too.
    third, fourth = accumulator.split(second, RECORD_BATCH_OVERHEAD + 2 * (1 + RECORD_OVERHEAD_BYTES_MAX))
    first.succeed(100, -1)
    assert not futures[0].done() and not called
    refused = RuntimeError("refused")
    fourth.fail(refused)
    third.succeed(500, -1)
    assert futures[0].done() and called == [futures[0]]
    assert [future.result(0).offset for future in futures[:5]] == [100, 101, 102, 500, 501]
    assert futures[5].exception(0) is refused and futures[4].exception(0) is None
    with pytest.raises(RuntimeError):
        futures[5].result(0)
    with pytest.raises(RuntimeError):
        DeliveryGroup([(batch.delivery, 0, 6)], 6).wait(0)
    DeliveryGroup([(batch.delivery, 0, 5)], 5).wait(0)  # its records all landed


def test_a_split_delivery_still_pending_times_out():
    delivery = BatchDelivery("t", 0, [1, 2])
    piece = BatchDelivery("t", 0, [1, 2])
    delivery.split_into([(0, piece)])
    with pytest.raises(TimeoutError):
        delivery.metadata(0, 0)


def test_the_window_sends_the_pieces_first_in_place_of_the_refused_batch_without_counting_them():
    window: SendWindow[str] = SendWindow()
    refused, later = window.sent("big"), window.sent("later")
    complete, again = window.split(refused, ["piece 1", "piece 2"])
    assert complete == [] and again == [] and window.holding and window.hold_is_free
    complete, again = window.answered(later, "out of order", failed=True, retry=True, free=True)
    assert [entry.item for entry in again] == ["piece 1", "piece 2", "later"]
    window.resending(again)
    assert [entry.attempt for entry in again] == [0, 0, 0] and not window.holding


def test_a_batch_failed_unwritten_holds_while_later_batches_are_owed():
    window: SendWindow[str] = SendWindow()
    failed, later = window.sent("alone too large"), window.sent("later")
    complete, again = window.failed_unwritten(failed, "too large")
    assert [entry.item for entry in complete] == ["alone too large"] and again == []
    assert window.hold_is_free and not window.can_send(5)
    complete, again = window.answered(later, "out of order", failed=True, retry=True, free=True)
    assert [entry.item for entry in again] == ["later"]


def test_a_batch_failed_unwritten_with_nothing_after_it_does_not_hold():
    window: SendWindow[str] = SendWindow()
    complete, again = window.failed_unwritten(window.sent("alone too large"), "too large")
    assert len(complete) == 1 and again == [] and not window.holding and window.is_empty()


def test_entries_held_back_from_a_resend_go_once_it_is_answered_and_nothing_new_before():
    window: SendWindow[str] = SendWindow()
    _, again = window.split(window.sent("big"), ["piece 1", "piece 2", "piece 3"])
    window.resending(again, held=2)  # a partition its producer id has not written to yet
    assert window.in_flight_count == 1 and not window.holding and not window.can_send(5)
    complete, again = window.answered(next(e for e in again if e.item == "piece 1"), 0, failed=False, retry=False)
    assert [entry.item for entry in complete] == ["piece 1"]
    assert [entry.item for entry in again] == ["piece 2", "piece 3"]
    window.resending(again)
    assert window.in_flight_count == 2 and not window.can_send(2) and window.can_send(3)


def test_a_free_hold_that_ends_with_nothing_to_resend_leaves_the_next_hold_counted():
    window: SendWindow[str] = SendWindow()
    failed, later = window.sent("alone too large"), window.sent("later")
    window.failed_unwritten(failed, "too large")
    _, again = window.answered(later, 1, failed=False, retry=False)  # without idempotence it landed
    assert again == [] and not window.holding
    retried = window.sent("unavailable")
    window.sent("follower")  # in flight behind it
    window.answered(retried, "unavailable", failed=True, retry=True)
    assert window.holding and not window.hold_is_free
