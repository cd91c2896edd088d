"""The Consume response budget (rpc/consume_buffer.py): a reservation is what was asked while the
budget lasts, then the minimum, never nothing; the bytes held are exactly the reservations not
yet released, and never above the budget plus the minimum per reservation."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seglog_server.rpc.consume_buffer import ConsumeBuffer

BYTES_MAX = 1000
MIN_BYTES = 64


def test_a_reservation_is_what_was_asked_while_the_budget_lasts():
    buffer = ConsumeBuffer(BYTES_MAX, MIN_BYTES)
    first = buffer.reserve(600)
    second = buffer.reserve(600)
    assert (first.size_bytes, second.size_bytes) == (600, 400)
    assert buffer.statistics().shrunk_count == 1


def test_a_spent_budget_gives_the_minimum_not_nothing():
    buffer = ConsumeBuffer(BYTES_MAX, MIN_BYTES)
    held = [buffer.reserve(BYTES_MAX)]
    held += [buffer.reserve(500) for _ in range(3)]
    assert [r.size_bytes for r in held] == [BYTES_MAX, MIN_BYTES, MIN_BYTES, MIN_BYTES]
    assert buffer.reserve(10).size_bytes == 10  # asking for less than the minimum: what was asked
    assert buffer.statistics().held_bytes == BYTES_MAX + 3 * MIN_BYTES + 10


def test_resize_and_release_give_the_bytes_back():
    buffer = ConsumeBuffer(BYTES_MAX, MIN_BYTES)
    reservation = buffer.reserve(500)
    reservation.resize(1200)  # a whole batch above the grant, or decoded records
    assert buffer.statistics().held_bytes == 1200
    assert buffer.reserve(500).size_bytes == MIN_BYTES
    reservation.release()
    stats = buffer.statistics()
    assert (stats.held_bytes, stats.held_bytes_high, stats.bytes_max) == (MIN_BYTES, 1264, BYTES_MAX)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 3 * BYTES_MAX)), max_size=60))
def test_held_bytes_are_the_outstanding_reservations_within_budget_plus_minimums(steps):
    buffer = ConsumeBuffer(BYTES_MAX, MIN_BYTES)
    outstanding = []
    for release, want in steps:
        if release and outstanding:
            outstanding.pop(want % len(outstanding)).release()
            continue
        reservation = buffer.reserve(want)
        assert min(want, MIN_BYTES) <= reservation.size_bytes <= want
        outstanding.append(reservation)
        held = buffer.statistics().held_bytes
        assert held == sum(r.size_bytes for r in outstanding)
        assert held <= BYTES_MAX + len(outstanding) * MIN_BYTES
    for reservation in outstanding:
        reservation.release()
    assert buffer.statistics().held_bytes == 0
