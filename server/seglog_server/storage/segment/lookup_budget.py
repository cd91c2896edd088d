"""What a lookup by time may do when it runs on the event loop, under the log's lock.

The service answers a small lookup inline when its search is cheap and on the storage pool when
it is not. Whether it is cheap is decided by the search itself, not guessed ahead of it: the
search runs with a ``LookupBudget`` and each costly step asks it first, so the inline attempt
does what the budget allows or nothing more:

- a build or an extension of a segment's time-step table, a build of its batch directory or of
  a large batch's record-time table is refused (it reads and walks up to MiBs of the ``.log``);
- an extension of a batch directory is charged the bytes it reads (what was appended since it
  was last extended: the appends feed the table, not the directory), refused past what is left;
- a compressed batch walked for its records is refused (a few KiB may expand to MiBs, as a
  Fetch of a compressed batch goes to the pool);
- each chunk a scan reads to find a target's batch (its batch headers), and an uncompressed
  batch read for the walk of its records, is charged its bytes, refused when they pass what is
  left (a batch already in the scan's chunk is not charged again);
- a segment's deferred first-use check (three reads, a recovery when they disagree) is refused.

A refused step raises ``LookupRefused`` before it is taken; the search counters it moved on
the way (how many targets asked a segment for a table or a directory) are put back
(``roll_back``), so the unbounded search the caller then runs on the pool decides as if the
inline attempt had never been made. Its stopwatches' laps and fault counts are held
(``stopwatch``: observer.HeldStopwatch) and counted only when it answers (``release_figures``):
a refused attempt counts nothing, the pool's search counts the lookup once. So are its index
searches (``held_searches``, passed to the indexes' lookups: ``AbstractIndex._search_locked``),
their zone counts and the observer's index lookups and pages counted at release. What a bounded
search answers is what the unbounded one answers (a Hypothesis differential holds the two
together).
"""

from __future__ import annotations

from ..base.observer import PhaseTimer, held_stopwatch, release_held

__all__ = ["LookupBudget", "LookupRefused"]


class LookupRefused(Exception):
    """A bounded search stopped before a step past its budget: the unbounded search answers."""


class LookupBudget:
    """The bytes a bounded search may still read (``bytes_left``: scans' chunks, batches walked);
    builds, decompression and first-use checks refused (see the module docstring)."""

    __slots__ = ("_held", "_undo", "bytes_left", "held_searches")

    def __init__(self, bytes_max: int) -> None:
        self.bytes_left = bytes_max
        self._undo: list[tuple[object, str, object]] = []
        self._held: list[tuple] = []
        # The index searches made, (index, zone, pages): counted at release (AbstractIndex.count_held).
        self.held_searches: list[tuple] = []

    def stopwatch(self, operation: str, mark_faults: bool = False) -> PhaseTimer:
        """A stopwatch of the bounded search, its laps and faults held until ``release_figures``."""
        return held_stopwatch(operation, self._held, mark_faults)

    def release_figures(self) -> None:
        """Counts the laps, faults and index searches the search held (it answered), once."""
        if self._held:
            release_held(self._held)
        searches = self.held_searches
        if searches:
            for index, zone, pages in searches:
                index.count_held(zone, pages)
            searches.clear()

    def charge(self, size: int, what: str) -> None:
        """Takes ``size`` bytes for ``what``; LookupRefused (nothing taken) past what is left."""
        if size > self.bytes_left:
            raise LookupRefused(f"{what}: {size} bytes, {self.bytes_left} left")
        self.bytes_left -= size

    def charge_scan(self, size: int) -> None:
        """``charge`` for a scan's chunk of batch headers."""
        self.charge(size, "a scan's chunk of batch headers")

    def keep(self, owner: object, name: str) -> None:
        """Notes ``owner.name`` as it is now, to be put back if the search is refused."""
        self._undo.append((owner, name, getattr(owner, name)))

    def roll_back(self) -> None:
        """Puts back every value ``keep`` noted, latest first, and forgets the held figures and
        index searches."""
        for owner, name, value in reversed(self._undo):
            setattr(owner, name, value)
        self._undo.clear()
        self._held.clear()
        self.held_searches.clear()
