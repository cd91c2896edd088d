"""A partition window following a move (``SendWindow.hold_for_move`` and ``moved``): nothing new
is sent from the first refusal naming another owner, whichever answer comes first; the batch
refused, and those refused out of order for following it, go again in their order without
counting as attempts. Driven by Hypothesis over the order the answers come in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seglog._send_window import SendWindow


class _Moved(Exception):
    pass


class _OutOfOrder(Exception):
    pass


@given(st.integers(1, 6), st.data())
def test_a_window_follows_a_move_in_its_order_counting_no_attempt(in_flight, data):
    window: SendWindow[int] = SendWindow()
    entries = [window.sent(n) for n in range(in_flight)]
    # The first batch's refusal names another owner: the window holds at once, before any answer.
    window.hold_for_move()
    assert window.holding and window.hold_is_free and window.room(in_flight + 1) == 0
    # The answers come in any order: the first refused by the move, the others out of order
    # behind it (the new owner never had the first), each resent free while the hold is.
    order = data.draw(st.permutations(range(in_flight)))
    again: list = []
    for n in order:
        if n == 0:
            complete, due = window.moved(entries[0], _Moved())
        else:
            complete, due = window.answered(entries[n], _OutOfOrder(), failed=True, retry=True,
                                            free=window.hold_is_free)
        assert complete == []
        again += due
    assert [entry.item for entry in again] == list(range(in_flight))  # in send order
    window.resending(again)
    assert [entry.attempt for entry in entries] == [0] * in_flight  # no retry spent
    assert not window.holding


def test_nothing_in_flight_holds_nothing():
    window: SendWindow[int] = SendWindow()
    window.hold_for_move()
    assert not window.holding and window.room(1) == 1
