"""The producer's per-partition in-flight window (``seglog._send_window``) against a model of the
service, driven by Hypothesis: several batches in flight, answers in any order, injected
retriable failures before and after the append.

The service model is idempotent, as Kafka's (and seglog's with producer ids): it appends a batch
only when its sequence is the next one expected, answers a duplicate with the original offset,
and refuses a batch after a gap (an out-of-order sequence) with a retriable error. Under it, the
window's rules (hold on a retriable failure, wait for what is in flight, send again every failed
batch from the first one on, in order) must give: every batch in the log exactly once, in send
order, and every batch's completion in send order.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from seglog._send_window import SendWindow


class _Retriable(Exception):
    pass


class _IdempotentLog:
    def __init__(self) -> None:
        self.records: list[int] = []

    def produce(self, sequence: int, fault: str) -> tuple[bool, object]:
        """(failed, outcome) of one batch numbered ``sequence``; ``fault`` is injected."""
        if fault == "before":
            return True, _Retriable("refused before the append")
        if sequence < len(self.records):
            return False, sequence  # a duplicate: the original offset
        if sequence > len(self.records):
            return True, _Retriable("out-of-order sequence")
        self.records.append(sequence)
        if fault == "after":
            return True, _Retriable("appended, answer lost")
        return False, sequence


@settings(max_examples=300, deadline=None)
@given(
    batch_count=st.integers(1, 12),
    in_flight_max=st.integers(1, 5),
    faults=st.lists(st.sampled_from(["none", "none", "none", "before", "after"]), max_size=200),
    answer_order=st.lists(st.integers(0, 10), max_size=400),
    in_order_answers=st.booleans(),
)
def test_retries_keep_every_batch_once_and_in_order(
    batch_count, in_flight_max, faults, answer_order, in_order_answers
):
    log = _IdempotentLog()
    window: SendWindow[int] = SendWindow()
    in_flight = []  # (entry, sent in this order)
    completed: list[tuple[int, bool]] = []
    next_batch = 0
    fault_at = iter(faults)
    choices = iter(answer_order)
    retries_max = len(faults) + batch_count  # enough: every injected fault is retried
    pending_resend = []
    for _ in range(10_000):
        if pending_resend:
            window.resending(pending_resend)
            in_flight.extend(pending_resend)
            pending_resend = []
        while next_batch < batch_count and window.can_send(in_flight_max):
            in_flight.append(window.sent(next_batch))
            next_batch += 1
        if not in_flight:
            break
        # A stream answers in order; separate unary calls may answer in any order.
        index = 0 if in_order_answers else next(choices, 0) % len(in_flight)
        # The service sees requests in the order sent (one stream), so it works on the oldest.
        entry = in_flight.pop(0 if in_order_answers else index)
        failed, outcome = log.produce(entry.item, next(fault_at, "none"))
        retry = failed and entry.attempt < retries_max
        complete, again = window.answered(entry, outcome, failed=failed, retry=retry)
        completed += [(e.item, SendWindow.succeeded(e)) for e in complete]
        pending_resend = again
    assert window.is_empty()
    assert [item for item, _ in completed] == list(range(batch_count))  # completion in order
    if in_order_answers:
        assert all(ok for _, ok in completed)
        assert log.records == list(range(batch_count))  # once each, in order
    else:
        # Answers out of order model unary calls, whose service may also *append* them out of
        # order; the model still appends in sequence order, and nothing is appended twice.
        assert log.records == sorted(set(log.records))


def test_a_retriable_failure_holds_the_partition_until_what_is_in_flight_is_answered():
    window: SendWindow[str] = SendWindow()
    first, second, third = (window.sent(name) for name in "abc")
    assert not window.can_send(3)
    complete, again = window.answered(first, _Retriable(), failed=True, retry=True)
    assert (complete, again) == ([], [])
    assert not window.can_send(5)  # held: nothing new before the retry
    complete, again = window.answered(second, "b-ok", failed=False, retry=False)
    assert (complete, again) == ([], [])  # b waits for a: completion in send order
    complete, again = window.answered(third, _Retriable(), failed=True, retry=True)
    assert complete == [] and [e.item for e in again] == ["a", "c"]
    window.resending(again)
    assert window.can_send(5) and window.in_flight_count == 2
    complete, _ = window.answered(again[0], "a-ok", failed=False, retry=False)
    assert [e.item for e in complete] == ["a", "b"]
    complete, _ = window.answered(again[1], "c-ok", failed=False, retry=False)
    assert [e.item for e in complete] == ["c"] and window.is_empty()


def test_a_final_failure_completes_in_order_without_holding():
    window: SendWindow[str] = SendWindow()
    first, second = window.sent("a"), window.sent("b")
    complete, again = window.answered(second, ValueError("bad"), failed=True, retry=False)
    assert complete == [] and again == [] and window.can_send(2)
    complete, _ = window.answered(first, "a-ok", failed=False, retry=False)
    assert [(e.item, SendWindow.succeeded(e)) for e in complete] == [("a", True), ("b", False)]


@settings(max_examples=300, deadline=None)
@given(
    batch_count=st.integers(1, 14),
    in_flight_max=st.integers(1, 5),
    faults=st.lists(st.sampled_from(["none", "none", "none", "before", "after"]), max_size=200),
    bursts=st.lists(st.integers(1, 6), max_size=20),
    refill=st.booleans(),
)
def test_queued_and_paced_resends_keep_the_in_flight_limit(batch_count, in_flight_max, faults, bursts, refill):
    """Driven as the sender drives it: batches started in bursts (a batch split before it is
    sent starts as several), those beyond the limit ``queued``; what is due again resent no more
    at once than the limit (``resending(held=...)``), and (``refill``) the queued sent as each
    answer frees a slot. Never more in flight than the limit, and
    every batch in the log once, in order, its completion in order."""
    log = _IdempotentLog()
    window: SendWindow[int] = SendWindow()
    in_flight: list = []
    completed: list[int] = []
    next_batch = 0
    fault_at = iter(faults)
    burst_at = iter(bursts)
    retries_max = len(faults) + batch_count
    pending_resend: list = []
    for _ in range(10_000):
        if pending_resend:
            held = max(0, len(pending_resend) - in_flight_max)
            window.resending(pending_resend, held=held)
            in_flight.extend(pending_resend[:len(pending_resend) - held])
            pending_resend = []
        if next_batch < batch_count and window.room(in_flight_max) and not pending_resend:
            for _ in range(min(next(burst_at, 1), batch_count - next_batch)):
                if window.can_send(in_flight_max):
                    in_flight.append(window.sent(next_batch))
                else:
                    window.queued(next_batch)
                next_batch += 1
        assert window.in_flight_count == len(in_flight) <= in_flight_max
        if not in_flight:
            break
        entry = in_flight.pop(0)
        failed, outcome = log.produce(entry.item, next(fault_at, "none"))
        retry = failed and entry.attempt < retries_max
        complete, again = window.answered(entry, outcome, failed=failed, retry=retry)
        completed += [e.item for e in complete]
        pending_resend = again
        if not again and refill:
            in_flight.extend(window.refill(in_flight_max))
    assert window.is_empty() and next_batch == batch_count
    assert completed == list(range(batch_count)) and log.records == list(range(batch_count))


def test_a_final_failure_with_batches_owed_after_it_holds_and_resends_them_free():
    """``failed_holding``: the batches after a failure for good (refused out of order past its
    gap) are answered before anything new goes, then sent again in order without counting."""
    window: SendWindow[str] = SendWindow()
    first, second, third = (window.sent(name) for name in "abc")
    complete, again = window.failed_holding(first, ValueError("refused for good"))
    assert [e.item for e in complete] == ["a"] and again == []
    assert window.holding and window.hold_is_free and not window.can_send(5)
    window.answered(second, _Retriable("out of order"), failed=True, retry=True, free=window.hold_is_free)
    complete, again = window.answered(third, _Retriable("out of order"), failed=True, retry=True, free=window.hold_is_free)
    assert complete == [] and [e.item for e in again] == ["b", "c"]
    window.resending(again)
    assert [e.attempt for e in again] == [0, 0]  # not counted: the gap was not theirs


def test_a_final_failure_with_nothing_owed_after_it_does_not_hold():
    window: SendWindow[str] = SendWindow()
    first = window.sent("a")
    complete, again = window.failed_holding(first, ValueError("refused for good"))
    assert [e.item for e in complete] == ["a"] and again == [] and not window.holding and window.is_empty()


def test_what_the_window_owes_and_its_oldest():
    window: SendWindow[str] = SendWindow()
    first, second, third = (window.sent(name) for name in "abc")
    queued = window.queued("d")
    window.answered(second, "b-ok", failed=False, retry=False)
    assert window.owed() == [first, third, queued]
    assert window.first_owed(first) and not window.first_owed(third)
    window.answered(first, "a-ok", failed=False, retry=False)
    assert window.first_owed(third) and not window.first_owed(queued)


def test_what_the_window_knows_unwritten():
    """A batch is unwritten until the sender hands it to a send, and the pieces of a split batch
    are unwritten only where nothing of it was ever appended: refused as too large on its first
    send (the refusal proves only that its own send appended nothing)."""
    window: SendWindow[str] = SendWindow()
    entry, queued = window.sent("a"), window.queued("q")
    assert entry.unwritten and queued.unwritten
    window.handed_to_send(entry)
    assert not entry.unwritten
    window.split(entry, ["a1", "a2"])
    assert [(e.item, e.unwritten, e.unresolvable) for e in window.owed()] == [
        ("a1", True, False), ("a2", True, False), ("q", True, False),
    ]
    assert window.gap_producer_id is None


def test_a_batch_that_may_have_been_appended_splits_into_unresolvable_pieces():
    """A batch sent twice (the first send's answer lost, so it may have been appended) is refused
    as too large on the second and split: its pieces are not unwritten, and no answer resolves
    them (their numbers are not the batch's); nor the batches sent behind it, nor one handed to a
    send while such a piece is ahead of it. A batch never sent behind them stays unwritten."""
    window: SendWindow[str] = SendWindow()
    first, behind = window.sent("a"), window.sent("b")
    window.handed_to_send(first)
    window.handed_to_send(behind)
    window.hold()
    window.answered(first, "lost", failed=True, retry=True)
    _, again = window.answered(behind, "lost", failed=True, retry=True)
    window.resending(again)
    window.handed_to_send(first)  # sent again: refused as too large
    queued = window.queued("q")
    window.split(first, ["a1", "a2"])
    assert [(e.item, e.unwritten, e.unresolvable) for e in window.owed()] == [
        ("a1", False, True), ("a2", False, True), ("b", False, True), ("q", True, False),
    ]
    window.handed_to_send(queued)
    assert queued.unresolvable
