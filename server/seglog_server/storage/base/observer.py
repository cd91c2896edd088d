"""What the storage tells an observer about its hot paths: index lookups, phase timings, faults.

The storage keeps no Prometheus code (import-linter checks it). Figures that are running totals of
one object live in that object's ``statistics()``; figures that describe single operations (how
many index pages one lookup touched, how long one index search took, how many page faults one
read caused) are handed, as plain numbers, to the one process-wide ``StorageObserver`` installed
with ``install_observer``. ``metrics.py`` implements it; by default a ``StorageObserver`` that
ignores everything is installed and ``enabled`` is False, so the hot paths skip even the clock
reads and ``getrusage`` calls (a benchmark of the bare storage pays nothing).

Why one process-wide observer rather than one handed down through LogManager -> Log ->
LogSegment -> index: the observer is a sink with no state the storage depends on, the indexes are
constructed in a dozen places (load, roll, recovery, cleaning), and every hot path reads it once
per operation (``OBSERVER.current``), which costs one attribute read.

Labels used by the storage (fixed sets, so every series is bounded):

    index       "offset" | "time"
    zone        index_search.Zone values: "warm" | "cold" | "none" (no section searched)
    operation   "produce" | "fetch" | "offsets_for_times" | "flush"
    phase       "segment_lookup" | "index_search" | "log_scan" | "log_read" | "validation"
                | "append" | "fsync"
    path        (page faults) "index_lookup" | "log_read" | "append"
    log_dir     (offset index rebuilds) a log directory's path, as LogDir.path spells it
"""

from __future__ import annotations

import bisect
import resource
import time
from collections.abc import Mapping, Sequence

__all__ = [
    "OBSERVER",
    "BucketCounts",
    "HeldStopwatch",
    "PhaseTimer",
    "Stopwatch",
    "StorageObserver",
    "count_laps",
    "held_stopwatch",
    "install_observer",
    "page_faults",
    "page_of",
    "release_held",
    "stopwatch",
]

PAGE_BYTES = resource.getpagesize()


class BucketCounts:
    """One histogram's buckets as plain numbers: ``counts[i]`` values <= ``bounds[i]`` (and above
    the bound before), the last count above every bound, and their ``total``. No lock: under the
    GIL two threads adding to one bucket at the same instant can, very rarely, lose one count."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[_bisect_left(self.bounds, value)] += 1
        self.total += value


class StorageObserver:
    """Receives single-operation figures. This base ignores them; subclasses count them.

    ``enabled`` False tells the storage not to measure at all. Methods are called on the storage
    threads (the event loop for inline calls, pool threads otherwise), so implementations must be
    cheap and thread-safe for the counters they touch.

    ``phase_histograms``: an observer that keeps one histogram per (operation, phase) offers them
    here as ``{operation: {phase: BucketCounts}}`` (mappings that create a missing entry on
    lookup); a ``Stopwatch`` then adds each lap to its bucket itself, with no call per lap. None
    (the default): every lap goes through ``phase``.
    """

    enabled: bool = False
    phase_histograms: Mapping[str, Mapping[str, BucketCounts]] | None = None

    def index_lookup(self, index: str, zone: str, pages: int) -> None:
        """One search of an index: its kind, the zone it ran in, distinct pages it probed."""

    def phase(self, operation: str, phase: str, seconds: float) -> None:
        """Time one phase of a storage operation took."""

    def page_faults(self, path: str, minor: int, major: int) -> None:
        """Page faults this thread took on ``path`` (may be 0, 0)."""

    def read_age(self, offsets: int, bytes_behind: int) -> None:
        """How far behind the log end a read started, in offsets and bytes."""

    def offset_index_rebuilt(self, log_dir: str) -> None:
        """A read found a segment's offset index disagreeing with its log and rebuilt it (or
        tried) in ``log_dir``. Told here rather than kept in a statistics() total: the count must
        outlive the segment (retention deletes it, compaction swaps it) and its partition (a
        deleted topic), or the per-directory total would fall, which Prometheus reads as a reset."""

    def log_flushed(self) -> None:
        """A log's flush (one fsync pass) ended. Told here rather than summed from the logs'
        statistics() for the same reason as ``offset_index_rebuilt``: a deleted topic's flushes
        would leave the sum, and the process-wide total would fall (a reset to Prometheus)."""


class _Current:
    """Holder of the installed observer, so hot paths read ``OBSERVER.current``."""

    __slots__ = ("current",)

    def __init__(self) -> None:
        self.current: StorageObserver = StorageObserver()


OBSERVER = _Current()


def install_observer(observer: StorageObserver | None) -> StorageObserver:
    """Installs ``observer`` (None: the ignoring default); returns the previous one."""
    previous = OBSERVER.current
    OBSERVER.current = observer if observer is not None else StorageObserver()
    return previous


class Stopwatch:
    """Times the phases of one storage operation and counts its page faults, for the observer.

    ``lap(phase)`` reports the time since the previous lap (or the start, or ``restart``) as
    ``phase``: one clock read per phase boundary, shared by the phases either side of it.
    ``mark_faults()`` (or ``restart(mark_faults=True)``) then ``faults(path)`` report the faults
    taken in between, and a further ``faults(other_path)`` those since; ``lap_faults(phase,
    path)`` is ``lap`` then ``faults`` in one call. getrusage costs about 0.3 us of CPU here (a
    system call and a 16-field result): one call per boundary, never skipped, so the fault counts
    stay exact. With the observer's ``phase_histograms`` a lap is counted inline (no call).
    """

    __slots__ = ("_histograms", "_last", "_major", "_minor", "_observer", "_operation")

    observing = True

    def __init__(self, observer: StorageObserver, operation: str, mark_faults: bool = False) -> None:
        self._observer = observer
        self._operation = operation
        tables = observer.phase_histograms
        self._histograms = None if tables is None else tables[operation]
        self._minor = self._major = 0
        if mark_faults:
            usage = _getrusage(_RUSAGE_THREAD)
            self._minor, self._major = usage.ru_minflt, usage.ru_majflt
        self._last = _perf_counter()

    def restart(self, mark_faults: bool = False) -> None:
        """The next lap starts now (what ran since the last lap is left out of every phase)."""
        if mark_faults:
            usage = _getrusage(_RUSAGE_THREAD)
            self._minor, self._major = usage.ru_minflt, usage.ru_majflt
        self._last = _perf_counter()

    def lap(self, phase: str) -> None:
        now = _perf_counter()
        seconds = now - self._last
        self._last = now
        histograms = self._histograms
        if histograms is None:
            self._observer.phase(self._operation, phase, seconds)
            return
        histogram = histograms[phase]
        histogram.counts[_bisect_left(histogram.bounds, seconds)] += 1
        histogram.total += seconds

    def lap_each(self, phase: str, count: int) -> None:
        """``lap(phase)`` for a phase done for ``count`` operations at once (OffsetsForTimes's
        targets, searched together): ``count`` observations of the mean, so the histogram's
        count and sum are those of ``count`` laps (none when ``count`` is 0)."""
        now = _perf_counter()
        seconds = (now - self._last) / count if count else 0.0
        self._last = now
        histograms = self._histograms
        if histograms is None:
            for _ in range(count):
                self._observer.phase(self._operation, phase, seconds)
            return
        if count:
            histogram = histograms[phase]
            histogram.counts[_bisect_left(histogram.bounds, seconds)] += count
            histogram.total += seconds * count

    def mark_faults(self) -> None:
        usage = _getrusage(_RUSAGE_THREAD)
        self._minor, self._major = usage.ru_minflt, usage.ru_majflt

    def faults(self, path: str) -> None:
        """Reports the faults since ``mark_faults`` (or the previous ``faults``) as ``path``;
        nothing when there were none (most operations: the observer call is saved)."""
        usage = _getrusage(_RUSAGE_THREAD)
        minor, major = usage.ru_minflt, usage.ru_majflt
        if minor != self._minor or major != self._major:
            self._observer.page_faults(path, minor - self._minor, major - self._major)
            self._minor, self._major = minor, major

    def lap_faults(self, phase: str, path: str) -> None:
        """``lap(phase)`` then ``faults(path)``, in one call (the clock is read first)."""
        now = _perf_counter()
        usage = _getrusage(_RUSAGE_THREAD)
        seconds = now - self._last
        self._last = now
        histograms = self._histograms
        if histograms is None:
            self._observer.phase(self._operation, phase, seconds)
        else:
            histogram = histograms[phase]
            histogram.counts[_bisect_left(histogram.bounds, seconds)] += 1
            histogram.total += seconds
        minor, major = usage.ru_minflt, usage.ru_majflt
        if minor != self._minor or major != self._major:
            self._observer.page_faults(path, minor - self._minor, major - self._major)
            self._minor, self._major = minor, major


class _IdleStopwatch:
    """What ``stopwatch`` returns while no observer listens: every call does nothing."""

    __slots__ = ()

    observing = False

    def restart(self, mark_faults: bool = False) -> None:
        pass

    def lap(self, phase: str) -> None:
        pass

    def lap_each(self, phase: str, count: int) -> None:
        pass

    def mark_faults(self) -> None:
        pass

    def faults(self, path: str) -> None:
        pass

    def lap_faults(self, phase: str, path: str) -> None:
        pass


_IDLE = _IdleStopwatch()

PhaseTimer = Stopwatch | _IdleStopwatch  # what ``stopwatch`` returns


def stopwatch(operation: str, mark_faults: bool = False) -> Stopwatch | _IdleStopwatch:
    """A Stopwatch for ``operation`` reporting to the installed observer (an idle one if none);
    ``mark_faults``: its fault count starts now too.

    ``Stopwatch.__init__``, inline: a class call enters its Python ``__init__`` from C, which
    costs more than the rest of a stopwatch's work on a small request."""
    observer = OBSERVER.current
    if not observer.enabled:
        return _IDLE
    watch = _new_object(Stopwatch)
    watch._observer = observer
    watch._operation = operation
    tables = observer.phase_histograms
    watch._histograms = None if tables is None else tables[operation]
    if mark_faults:
        usage = _getrusage(_RUSAGE_THREAD)
        watch._minor, watch._major = usage.ru_minflt, usage.ru_majflt
    else:
        watch._minor = watch._major = 0
    watch._last = _perf_counter()
    return watch


class HeldStopwatch(Stopwatch):
    """A Stopwatch of an attempt that may be called off (the bounded lookup by time's inline
    attempt, segment/lookup_budget.py): its laps and fault counts are appended to a list of the
    attempt's (``held_stopwatch``) instead of counted, and ``release_held`` counts them once it
    answers; a list dropped counts nothing, so an attempt refused, then searched again on the
    pool, counts once. A lap held is a tuple (operation, phase, seconds, count), faults one
    (path, minor, major)."""

    __slots__ = ("_held",)

    def lap(self, phase: str) -> None:
        now = _perf_counter()
        self._held.append((self._operation, phase, now - self._last, 1))
        self._last = now

    def lap_each(self, phase: str, count: int) -> None:
        now = _perf_counter()
        if count:
            self._held.append((self._operation, phase, (now - self._last) / count, count))
        self._last = now

    def faults(self, path: str) -> None:
        usage = _getrusage(_RUSAGE_THREAD)
        minor, major = usage.ru_minflt, usage.ru_majflt
        if minor != self._minor or major != self._major:
            self._held.append((path, minor - self._minor, major - self._major))
            self._minor, self._major = minor, major

    def lap_faults(self, phase: str, path: str) -> None:
        self.lap(phase)
        self.faults(path)


def held_stopwatch(operation: str, held: list[tuple], mark_faults: bool = False) -> HeldStopwatch | _IdleStopwatch:
    """``stopwatch(operation, mark_faults)`` whose laps and faults go to ``held`` (HeldStopwatch)."""
    if not OBSERVER.current.enabled:
        return _IDLE
    watch = _new_object(HeldStopwatch)
    watch._held = held
    watch._operation = operation
    watch._minor = watch._major = 0
    watch.restart(mark_faults)  # the fault marks and the clock, as ``stopwatch`` sets them inline
    return watch


def release_held(held: list[tuple]) -> None:
    """Counts what HeldStopwatches appended to ``held``, in order, with the installed observer,
    and empties it (so it counts once)."""
    observer = OBSERVER.current
    tables = observer.phase_histograms
    for figure in held:
        if len(figure) == 3:
            observer.page_faults(*figure)
            continue
        operation, phase, seconds, count = figure
        if tables is None:
            for _ in range(count):
                observer.phase(operation, phase, seconds)
        else:
            histogram = tables[operation][phase]
            histogram.counts[_bisect_left(histogram.bounds, seconds)] += count
            histogram.total += seconds * count
    held.clear()


def count_laps(operation: str, first_phase: str, first_seconds: float, second_phase: str, second_seconds: float) -> None:
    """Two laps of ``operation`` counted with the installed observer, as two ``Stopwatch.lap``
    calls count them (nothing while none listens): for a search that read the clock itself and
    counts its laps once it answered (the single lookup by time answered from memory,
    log/timestamp_lookups.py ``lookup_one_in_memory``), with no stopwatch and nothing held."""
    observer = OBSERVER.current
    if not observer.enabled:
        return
    tables = observer.phase_histograms
    if tables is None:
        observer.phase(operation, first_phase, first_seconds)
        observer.phase(operation, second_phase, second_seconds)
        return
    row = tables[operation]
    histogram = row[first_phase]
    histogram.counts[_bisect_left(histogram.bounds, first_seconds)] += 1
    histogram.total += first_seconds
    histogram = row[second_phase]
    histogram.counts[_bisect_left(histogram.bounds, second_seconds)] += 1
    histogram.total += second_seconds


def page_faults() -> tuple[int, int]:
    """(minor, major) page faults of the calling thread so far (Linux RUSAGE_THREAD)."""
    usage = resource.getrusage(_RUSAGE_THREAD)
    return usage.ru_minflt, usage.ru_majflt


def page_of(byte_position: int) -> int:
    return byte_position // PAGE_BYTES


# RUSAGE_THREAD is Linux's; elsewhere the process figures stand in (they include other threads).
_RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
_getrusage = resource.getrusage
_perf_counter = time.perf_counter
_bisect_left = bisect.bisect_left
_new_object = object.__new__
