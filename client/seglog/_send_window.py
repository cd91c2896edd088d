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

A batch the service refused as too large is split (``split``): its pieces take its place, to be
sent first when the partition's hold ends, as a retry would be, but without counting as one; so
do the resends of the batches refused only because they followed it. What is sent again goes out
no more at once than the partition's in-flight limit (``resending(held=...)``), the rest as those
are answered; a batch beyond that limit when it is started waits in the window the same way
(``queued``). A batch that fails for good (``failed_holding``; ``failed_unwritten``: without
having been written) holds the partition in the same way when batches after it are owed: with
idempotence they are refused as out of order past the gap it left, and the sender numbers them
afresh before they go out again after it.

Each entry says whether the service is known to hold none of it (``WindowEntry.unwritten``):
never handed to a send since it joined the window, or its last answer proves it was not
appended. Only such a batch may be numbered afresh on a new producer id: one that may have been
appended is sent again with its own numbers, so the service answers it as the duplicate it is.
A refusal as too large proves only that its own send appended nothing (the service checks the
size before duplicates): the pieces of a batch an earlier send of which may have been appended
inherit that, and no answer resolves it (``WindowEntry.unresolvable``: their numbers are not
the batch's, so the service cannot answer them as its duplicate); nor for the entries sent while
such a piece is ahead of them.
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
    # The next send is not counted as an attempt: a piece of a split batch, or a batch refused
    # only because one before it was split (``split``, ``answered(free=True)``).
    free: bool = False
    # The service holds none of it: never handed to a send since it joined the window (queued,
    # a split piece, or started but not sent yet), or its last answer proves it was not appended
    # (refused out of order). The sender clears it as it hands the item to a send, and may number
    # such an item afresh on a new producer id; any other is sent again as it is.
    unwritten: bool = True
    # ``unwritten`` as it was when the item was last handed to a send (``handed_to_send``): what
    # is known of it where that send's answer proves only the send appended nothing.
    unwritten_before_send: bool = True
    # The service may hold records of it that no answer can tell (a piece of a split batch that
    # may have been appended, or sent behind one): never numbered afresh, and an out-of-order
    # refusal of it proves nothing (the sender fails it as out of sequence).
    unresolvable: bool = False


class SendWindow(Generic[_Item]):
    def __init__(self) -> None:
        self._entries: deque[WindowEntry[_Item]] = deque()  # oldest first
        self._in_flight_count = 0
        self._holding = False  # a retry is due: nothing new may be sent
        # The hold began with a split or a batch failed unwritten (``split``,
        # ``failed_unwritten``): what is refused for following it is resent without counting.
        self._hold_is_free = False
        # Entries left to send again once what was resent is answered (``resending(held=...)``):
        # nothing new is sent meanwhile.
        self._paced = False
        # Set by the sender: the retired producer id past whose gap in this partition (a batch of
        # it failed here for good, or was refused out of order) its unwritten entries are
        # numbered afresh before they are sent. None once they were, or where there is none.
        self.gap_producer_id: int | None = None
        # Set by the sender while the partition follows a move (its batches refused naming
        # another owner, sent again in order without counting): until when, and the wait before
        # the next resend. None / 0 once a batch is answered.
        self.move_deadline: float | None = None
        self.move_delay_s = 0.0
        # The ownership epoch of the last move followed (a refusal's hint): a refusal naming a
        # newer one is another move, followed afresh (its own deadline), whatever the last one.
        self.move_epoch: int | None = None
        # The route's ownership epoch (-1: none known) when the partition's owner last refused
        # as fenced for a move's final catch-up: a fence at another epoch is another move,
        # followed afresh. None before any.
        self.move_fenced_epoch: int | None = None

    def can_send(self, in_flight_max: int) -> bool:
        return not self._holding and not self._paced and self._in_flight_count < in_flight_max

    def room(self, in_flight_max: int) -> int:
        """How many more batches may be sent now (0 while holding)."""
        return 0 if self._holding or self._paced else max(0, in_flight_max - self._in_flight_count)

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
        self, entry: WindowEntry[_Item], outcome: Any, *, failed: bool, retry: bool, free: bool = False
    ) -> tuple[list[WindowEntry[_Item]], list[WindowEntry[_Item]]]:
        """Records ``entry``'s answer (``failed``: an exception; ``retry``: send it again;
        ``free``: and do not count that as an attempt). Returns (entries complete now, oldest
        first; entries to send again now, oldest first). The caller must call ``resending``
        before it sends those."""
        assert entry.state is _State.IN_FLIGHT, entry.state
        self._in_flight_count -= 1
        entry.outcome = outcome
        if not failed:
            entry.state = _State.SUCCEEDED
        elif retry:
            entry.state = _State.RETRY
            entry.free = free
            self._holding = True
        else:
            entry.state = _State.FAILED
        return self._pop_complete(), self._due_again()

    def moved(self, entry: WindowEntry[_Item], outcome: Any) -> tuple[
        list[WindowEntry[_Item]], list[WindowEntry[_Item]]
    ]:
        """``entry`` was refused for a move: another owner named, or the old owner fenced for the
        move's final catch-up (``PartitionMovingError``, which may refuse a batch already appended
        before the fence: its log may hold it). Sent again when the hold ends, without counting,
        as are the entries refused for following it (out of order, with idempotence). With
        idempotence the resend keeps its producer id and sequence, so the owner drops a batch it
        already holds; without, it may be written twice, as any retry may. Returns what
        ``answered`` returns."""
        complete, again = self.answered(entry, outcome, failed=True, retry=True, free=True)
        self._hold_is_free = self._holding
        return complete, again

    @property
    def hold_is_free(self) -> bool:
        """The hold began with a split or an unwritten failure (see the module's doc)."""
        return self._holding and self._hold_is_free

    def split(self, entry: WindowEntry[_Item], items: list[_Item]) -> tuple[
        list[WindowEntry[_Item]], list[WindowEntry[_Item]]
    ]:
        """``entry`` was refused as too large and is replaced by ``items`` (its pieces, in
        order), each to be sent when the hold ends, as a retry is, without counting as one.
        Returns what ``answered`` returns."""
        assert entry.state is _State.IN_FLIGHT and items, entry.state
        self._in_flight_count -= 1
        place = self._entries.index(entry)
        # The refusal says nothing of an earlier send of it: where one may have been appended,
        # so may the pieces' records, under numbers that are not theirs.
        unresolvable = entry.unresolvable or not entry.unwritten_before_send
        pieces = [
            WindowEntry(
                item, attempt=entry.attempt, state=_State.RETRY, free=True, unwritten=not unresolvable,
                unwritten_before_send=not unresolvable, unresolvable=unresolvable,
            )
            for item in items
        ]
        if unresolvable:
            self.may_hold_unresolvably(entry)
        self._entries.remove(entry)
        for offset, piece in enumerate(pieces):
            self._entries.insert(place + offset, piece)
        self._holding = self._hold_is_free = True
        return self._pop_complete(), self._due_again()

    def queued(self, item: _Item) -> WindowEntry[_Item]:
        """``item`` joins the window unsent, behind what it holds (its partition's in-flight limit
        is reached, or the window holds or paces): it goes out as a resend does, once what is in
        flight is answered and at the pace ``resending`` keeps, before anything new."""
        entry = WindowEntry(item, state=_State.RETRY, free=True)
        self._entries.append(entry)
        self._paced = True
        return entry

    def refill(self, in_flight_max: int) -> list[WindowEntry[_Item]]:
        """While the window paces (nothing held), the entries due again next that are free of a
        backoff (split pieces, queued batches), as many as ``in_flight_max`` leaves room for:
        marked in flight, to be sent now. A slot frees as each answer comes, not once the whole
        window before them is answered."""
        if self._holding or not self._paced:
            return []
        out: list[WindowEntry[_Item]] = []
        for entry in self._entries:
            if self._in_flight_count >= in_flight_max:
                break
            if entry.state is not _State.RETRY:
                continue
            if not entry.free:
                break  # it waits its backoff: sent again once what is in flight is answered
            entry.state, entry.free, entry.outcome = _State.IN_FLIGHT, False, None
            self._in_flight_count += 1
            out.append(entry)
        self._paced = any(entry.state is _State.RETRY for entry in self._entries)
        return out

    def failed_unwritten(self, entry: WindowEntry[_Item], outcome: Any) -> tuple[
        list[WindowEntry[_Item]], list[WindowEntry[_Item]]
    ]:
        """``entry`` failed for good and the service wrote none of it: the partition holds while
        entries after it are owed (their answers, or their sends again), which are resent after
        it without counting. Returns what ``answered`` returns."""
        return self.failed_holding(entry, outcome)

    def failed_holding(self, entry: WindowEntry[_Item], outcome: Any) -> tuple[
        list[WindowEntry[_Item]], list[WindowEntry[_Item]]
    ]:
        """``entry`` failed for good: as ``failed_unwritten``, the partition holds while entries
        after it are owed, and those refused for following it are resent without counting (with
        idempotence, the service refuses them as out of order past the gap it left). Returns
        what ``answered`` returns."""
        later = self.after(entry)
        complete, again = self.answered(entry, outcome, failed=True, retry=False)
        if not again and any(e.state is not _State.SUCCEEDED for e in later):
            self._holding = self._hold_is_free = True
            again = self._due_again()
        return complete, again

    def handed_to_send(self, entry: WindowEntry[_Item]) -> None:
        """The sender hands ``entry`` to a send: the service may hold it from now on, and where an
        unresolvable entry is ahead of it in the window, what it answers cannot be told apart
        from what that one may hold (``WindowEntry.unresolvable``)."""
        entry.unwritten_before_send, entry.unwritten = entry.unwritten, False
        if not entry.unresolvable:
            for other in self._entries:
                if other is entry:
                    break
                if other.unresolvable:
                    entry.unresolvable = True
                    break

    def may_hold_unresolvably(self, entry: WindowEntry[_Item]) -> None:
        """``entry`` failed for good after an earlier send of it may have been appended (refused
        as too large, which proves only that its own send appended nothing): the entries sent
        behind it are judged against what it may hold, as behind a split one (``split``)."""
        seen = False
        for other in self._entries:
            if seen and not other.unwritten:
                other.unresolvable = True
            seen = seen or other is entry

    def owed(self) -> list[WindowEntry[_Item]]:
        """The entries neither succeeded nor failed (in flight, or to be sent again), oldest
        first."""
        return [entry for entry in self._entries if entry.state in (_State.IN_FLIGHT, _State.RETRY)]

    def first_owed(self, entry: WindowEntry[_Item]) -> bool:
        """Whether every entry before ``entry`` succeeded (it is the oldest owed)."""
        for other in self._entries:
            if other is entry:
                return True
            if other.state is not _State.SUCCEEDED:
                return False
        return False

    def after(self, entry: WindowEntry[_Item]) -> list[WindowEntry[_Item]]:
        """The entries sent after ``entry`` and not complete, oldest first."""
        entries = list(self._entries)
        return entries[entries.index(entry) + 1:] if entry in entries else []

    def _due_again(self) -> list[WindowEntry[_Item]]:
        again: list[WindowEntry[_Item]] = []
        if (self._holding or self._paced) and self._in_flight_count == 0:
            again = [e for e in self._entries if e.state is _State.RETRY]
            self._holding = bool(again)  # a hold with nothing to retry (``hold``) just ends
            self._hold_is_free = self._hold_is_free and self._holding
            self._paced = False
        return again

    @property
    def holding(self) -> bool:
        return self._holding

    def hold(self) -> None:
        """Send nothing new until what is in flight is answered (the connection broke: the
        answers of everything in flight are failing, but have not arrived yet)."""
        if self._in_flight_count:
            self._holding = True

    def hold_for_move(self) -> None:
        """A batch in flight was refused for a move (another owner named, or the old owner's
        fence: ``PartitionMovingError``, maybe after the batch was appended): send nothing new
        until what is in flight is answered, and resend without counting what is refused for
        following it (``moved``), whichever answer comes first. With idempotence a resend keeps
        its sequence, so the owner drops a duplicate (see ``moved``)."""
        if self._in_flight_count:
            self._holding = self._hold_is_free = True

    def sent_while_holding(self, entry: WindowEntry[_Item], outcome: Any) -> tuple[
        list[WindowEntry[_Item]], list[WindowEntry[_Item]]
    ]:
        """``entry`` was about to be sent when the hold began: it was not sent, and is sent
        again with the retries, in its place."""
        assert self._holding
        return self.answered(entry, outcome, failed=True, retry=True, free=self._hold_is_free)

    def resending(self, entries: list[WindowEntry[_Item]], *, held: int = 0) -> None:
        """The entries ``answered`` returned are sent again now (the hold ends), but for the
        last ``held`` of them, which stay to be sent again once the others are answered
        (nothing new is sent before them)."""
        assert self._holding and self._in_flight_count == 0 and 0 <= held < len(entries)
        entries = entries[:len(entries) - held]
        for entry in entries:
            assert entry.state is _State.RETRY
            entry.state = _State.IN_FLIGHT
            if entry.free:
                entry.free = False
            else:
                entry.attempt += 1
            entry.outcome = None
        self._in_flight_count += len(entries)
        self._holding = False
        # Entries queued meanwhile (``queued``) wait with the held ones.
        self._paced = any(entry.state is _State.RETRY for entry in self._entries)
        self._hold_is_free = self._hold_is_free and self._paced

    def holds(self, entry: WindowEntry[_Item]) -> bool:
        """``entry`` is in the window (not complete)."""
        return entry in self._entries

    def fail_all(self, outcome: Any) -> list[WindowEntry[_Item]]:
        """Everything not complete taken out, oldest first, all but what succeeded failed with
        ``outcome`` (a request step failed on an unexpected error)."""
        entries = self.abandon()
        for entry in entries:
            if entry.state is not _State.SUCCEEDED:
                entry.state, entry.outcome = _State.FAILED, outcome
        return entries

    def abandon(self) -> list[WindowEntry[_Item]]:
        """Everything not complete (the producer closes): taken out, oldest first."""
        entries = list(self._entries)
        self._entries.clear()
        self._in_flight_count = 0
        self._holding = self._hold_is_free = self._paced = False
        return entries

    def _pop_complete(self) -> list[WindowEntry[_Item]]:
        complete = []
        while self._entries and self._entries[0].state in (_State.SUCCEEDED, _State.FAILED):
            complete.append(self._entries.popleft())
        return complete

    @staticmethod
    def succeeded(entry: WindowEntry[Any]) -> bool:
        return entry.state is _State.SUCCEEDED
