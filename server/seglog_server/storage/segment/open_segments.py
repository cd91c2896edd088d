"""Which segments may hold descriptors: one least-recently-used budget for the whole process.

A segment in use holds its ``.log`` descriptor, a read mapping of a sealed ``.log`` and the
mappings of its two indexes, and CPython's mmap keeps a duplicate descriptor per mapping: up to
``DESCRIPTORS_PER_SEGMENT_MAX``. 10,000 partitions each appended to once would hold 30,000
descriptors. So every ``Log`` of a ``LogManager`` reports each use of a segment, active or not,
to one shared ``OpenSegments``; beyond ``max_count`` the least recently used segment gives its
handles back (``LogSegment.release_handles``: the ``.log`` closes, the index mappings are
released with their entry counts kept) and maps them again on its next use, tens of microseconds
later. A segment only *asked* something (its largest timestamp, its first-use check, an
explanation) is not used: the question leaves it holding what it held before
(``LogSegment.handles_as_found``), so no segment descriptor is open outside the budget. Kafka
has no such budget (a broker needs ``ulimit -n`` above its segment count times three); seglog
serves 10,000 partitions under ``ulimit -n 1024``.

``max_count`` comes from the process's RLIMIT_NOFILE (``open_segments_max_for``), keeping
headroom for what is not a segment: client sockets, the event loop's epoll and eventfds, the
directory locks, and the descriptors a flush or a checkpoint opens for a moment.

Thread safety: the budget has its own lock, held only for dictionary work. A segment belongs to
a ``Log`` whose lock guards every use of it, so releasing it must hold that lock too; the budget
only *tries* to take it (a log busy in another thread keeps its segment for now, which also
rules out lock-order deadlocks between two logs evicting each other's segments).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from .log_segment import LogSegment

__all__ = [
    "DEFAULT_OPEN_SEGMENTS_MAX",
    "DESCRIPTORS_PER_SEGMENT_MAX",
    "DESCRIPTOR_HEADROOM_MIN",
    "MAPPINGS_PER_SEGMENT_MAX",
    "OPEN_SEGMENTS_MIN",
    "OpenSegments",
    "OpenSegmentsStatistics",
    "SegmentOwner",
    "open_segments_max_for",
]

_log = logging.getLogger(__name__)

# A Log built on its own (tests, tools) gets a private budget of this many segments: ~256
# descriptors, while the segments a few consumers are reading stay open.
DEFAULT_OPEN_SEGMENTS_MAX = 64
# .log descriptor + the read mapping of a sealed .log + two index mappings (each mapping holds a
# duplicate descriptor in CPython < 3.13, which has no mmap(trackfd=False)).
DESCRIPTORS_PER_SEGMENT_MAX = 4
# Mappings per segment (the same three mappings); vm.max_map_count bounds them process-wide.
MAPPINGS_PER_SEGMENT_MAX = 3
# Descriptors kept for everything that is not a segment: a socket per client connection, the
# event loop's epoll and eventfds, gRPC's own pipes, directory locks, and the descriptors a flush,
# a checkpoint or a topic creation opens for a moment. A quarter of the limit, at least 256.
DESCRIPTOR_HEADROOM_MIN = 256
# Mappings kept for the interpreter, shared libraries, thread stacks and malloc arenas.
MAPPING_HEADROOM = 8192
# Below this the budget would thrash on a single consumer crossing segments.
OPEN_SEGMENTS_MIN = 16


def open_segments_max_for(descriptor_limit: int, mapping_limit: int | None = None) -> int:
    """The open-segment budget for a process allowed ``descriptor_limit`` descriptors
    (RLIMIT_NOFILE) and ``mapping_limit`` mappings (vm.max_map_count, when known)."""
    headroom = max(DESCRIPTOR_HEADROOM_MIN, descriptor_limit // 4)
    budget = (descriptor_limit - headroom) // DESCRIPTORS_PER_SEGMENT_MAX
    if mapping_limit is not None:
        budget = min(budget, (mapping_limit - MAPPING_HEADROOM) // MAPPINGS_PER_SEGMENT_MAX)
    return max(OPEN_SEGMENTS_MIN, budget)


class SegmentOwner(Protocol):
    """What the budget needs of a segment's ``Log``."""

    def try_release_handles(self, segment: LogSegment) -> bool:
        """Releases ``segment``'s handles if the owner's lock is free now; False if busy."""
        ...


@dataclass(frozen=True, slots=True)
class OpenSegmentsStatistics:
    segment_count: int  # segments tracked as (possibly) holding handles
    segment_count_max: int  # the budget
    descriptor_count_max: int  # segment_count_max * DESCRIPTORS_PER_SEGMENT_MAX
    released_count: int  # segments made to give back their handles, since start
    busy_skip_count: int  # evictions deferred because the owning log was busy


class OpenSegments:
    """The segments allowed to hold handles, least recently used first."""

    def __init__(self, max_count: int = DEFAULT_OPEN_SEGMENTS_MAX) -> None:
        assert max_count >= 1, f"the open-segment budget must be at least 1, got {max_count}"
        self._max_count = max_count
        self._lock = threading.Lock()
        self._owners: OrderedDict[LogSegment, SegmentOwner] = OrderedDict()
        self._released_count = 0
        self._busy_skip_count = 0

    @property
    def max_count(self) -> int:
        return self._max_count

    def __len__(self) -> int:
        return len(self._owners)

    def touch(self, segment: LogSegment, owner: SegmentOwner) -> None:
        """``segment`` (of ``owner``, whose lock the caller holds) was just used; the least
        recently used segments beyond the budget release their handles."""
        with self._lock:
            owners = self._owners
            if owners.get(segment) is owner:
                owners.move_to_end(segment)
                return
            owners[segment] = owner
            if len(owners) <= self._max_count:
                return
            victims = [owners.popitem(last=False) for _ in range(len(owners) - self._max_count)]
        self._release(victims)

    def forget(self, segment: LogSegment) -> None:
        """``segment`` no longer needs tracking (deleted, replaced, or its log closed)."""
        with self._lock:
            self._owners.pop(segment, None)

    def statistics(self) -> OpenSegmentsStatistics:
        return OpenSegmentsStatistics(
            segment_count=len(self._owners),
            segment_count_max=self._max_count,
            descriptor_count_max=self._max_count * DESCRIPTORS_PER_SEGMENT_MAX,
            released_count=self._released_count,
            busy_skip_count=self._busy_skip_count,
        )

    def _release(self, victims: list[tuple[LogSegment, SegmentOwner]]) -> None:
        # Outside the budget's lock: releasing unmaps and closes, and takes the owner's lock.
        busy = []
        for segment, owner in victims:
            try:
                released = owner.try_release_handles(segment)
            except Exception:  # noqa: BLE001 - never let another log's close fail this caller
                # The caller is a different log's append or read: an error closing someone else's
                # file must not become its error (nor take its directory offline).
                _log.warning("releasing the handles of %r failed", segment, exc_info=True)
                continue
            if released:
                self._released_count += 1
            else:
                busy.append((segment, owner))
        if busy:
            with self._lock:
                self._busy_skip_count += len(busy)
                for segment, owner in busy:  # in use right now: the most recently used
                    self._owners.setdefault(segment, owner)
