"""A segment's three files, as a small value: what the checks and the recovery scan work on.

``LogSegment`` owns its files (opening, sealing, the descriptor budget, roll and truncation);
the helpers beside it (``segment_check``, ``segment_recovery``) need only the files themselves and
the base offset they are named after. Taking this value instead of the whole ``LogSegment``
keeps the arrow one way: ``log_segment`` imports the helpers, the helpers import only formats.
"""

from __future__ import annotations

from typing import NamedTuple

from ..format.file_records import FileRecords
from ..format.offset_index import OffsetIndex
from ..format.time_index import TimeIndex

__all__ = ["SegmentFiles"]


class SegmentFiles(NamedTuple):
    """The ``.log`` (``log``), ``.index`` and ``.timeindex`` of the segment at ``base_offset``."""

    base_offset: int
    log: FileRecords
    offset_index: OffsetIndex
    time_index: TimeIndex
