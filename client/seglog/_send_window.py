"""The producer's in-flight window of one partition: batches sent and not yet completed.

No I/O and no clock: the sender tells the window what it sent and what came back, and the
window says which batches complete now (in the order they were first sent) and which to send
again. The rules, Kafka's producer's with ``max.in.flight.requests.per.connection`` > 1:

- at most ``in_flight_max`` batches of a partition are in flight at once;
- a batch completes only after every batch sent before it completed (ordered completion: the
  futures of one partition resolve in send order, whatever order answers come in);
- a retriable failure (with retries left) *holds* the partition: nothing new is sent, the
  batches in flight are waited for, and then every batch from the failed one on that did not
  succeed is sent again, in its original order, before anything new. With idempotence the
  service refuses a batch sent after one it never appended (an out-of-order sequence,
  retriable), so "did not succeed" is "the failed batch and every later one" and sequences
  stay in order. Without idempotence a later batch that did succeed is not sent again (no
  duplicate), and then lands before the retried one: as in Kafka, keep ``max_in_flight = 1``
  where order under retries matters and idempotence is off.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["SendWindow", "WindowEntry"]

_Item = TypeVar("_Item")


class _State(enum.Enum):
    IN_FLIGHT = "in flight"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # final
    RETRY = "retry"  # failed, will be sent again


@dataclass(eq=False)
class WindowEntry(Generic[_Item]):
    item: _Item
    attempt: int = 0  # 0 on the first send
    state: _State = _State.IN_FLIGHT
    outcome: Any = field(default=None, repr=False)  # the answer, or the exception


class SendWindow(Generic[_Item]):
    def __init__(self) -> None:
        self._entries: deque[WindowEntry[_Item]] = deque()  # oldest first
        self._in_flight_count = 0
        self._holding = False  # a retry is due: nothing new may be sent

    def can_send(self, in_flight_max: int) -> bool:
        return not self._holding and self._in_flight_count < in_flight_max

    def room(self, in_flight_max: int) -> int:
        """How many more batches may be sent now (0 while holding)."""
        return 0 if self._holding else max(0, in_flight_max - self._in_flight_count)

    @property
    def in_flight_count(self) -> int:
        return self._in_flight_count

    def is_empty(self) -> bool:
        return not self._entries

    def sent(self, item: _Item) -> WindowEntry[_Item]:
        assert not self._holding
        entry = WindowEntry(item)
        self._entries.append(entry)
        self._in_flight_count += 1
        return entry

    def answered(
        self, entry: WindowEntry[_Item], outcome: Any, *, failed: bool, retry: bool
    ) -> tuple[list[WindowEntry[_Item]], list[WindowEntry[_Item]]]:
        """Records ``entry``'s answer (``failed``: an exception; ``retry``: send it again).
        Returns (entries complete now, oldest first; entries to send again now, oldest first).
        The caller must call ``resending`` before it sends those."""
        assert entry.state is _State.IN_FLIGHT, entry.state
        self._in_flight_count -= 1
        entry.outcome = outcome
        if not failed:
            entry.state = _State.SUCCEEDED
        elif retry:
            entry.state = _State.RETRY
            self._holding = True
        else:
            entry.state = _State.FAILED
        complete = self._pop_complete()
        again: list[WindowEntry[_Item]] = []
        if self._holding and self._in_flight_count == 0:
            again = [e for e in self._entries if e.state is _State.RETRY]
            self._holding = bool(again)  # a hold with nothing to retry (``hold``) just ends
        return complete, again

    @property
    def holding(self) -> bool:
        return self._holding

    def hold(self) -> None:
        """Send nothing new until what is in flight is answered (the connection broke: the
        answers of everything in flight are failing, but have not arrived yet)."""
        if self._in_flight_count:
            self._holding = True

    def sent_while_holding(self, entry: WindowEntry[_Item], outcome: Any) -> tuple[
        list[WindowEntry[_Item]], list[WindowEntry[_Item]]
    ]:
        """``entry`` was about to be sent when the hold began: it was not sent, and is sent
        again with the retries, in its place."""
        assert self._holding
        return self.answered(entry, outcome, failed=True, retry=True)

    def resending(self, entries: list[WindowEntry[_Item]]) -> None:
        """The entries ``answered`` returned are sent again now (the hold ends)."""
        assert self._holding and self._in_flight_count == 0
        for entry in entries:
            assert entry.state is _State.RETRY
            entry.state = _State.IN_FLIGHT
            entry.attempt += 1
            entry.outcome = None
        self._in_flight_count += len(entries)
        self._holding = False

    def abandon(self) -> list[WindowEntry[_Item]]:
        """Everything not complete (the producer closes): taken out, oldest first."""
        entries = list(self._entries)
        self._entries.clear()
        self._in_flight_count = 0
        self._holding = False
        return entries

    def _pop_complete(self) -> list[WindowEntry[_Item]]:
        complete = []
        while self._entries and self._entries[0].state in (_State.SUCCEEDED, _State.FAILED):
            complete.append(self._entries.popleft())
        return complete

    @staticmethod
    def succeeded(entry: WindowEntry[Any]) -> bool:
        return entry.state is _State.SUCCEEDED
