"""Producer state to and from disk: snapshots at roll and close, rebuild on load (kafka-storage.md
1.7, 5.4, 5.11 step 8; Kafka's UnifiedLog.rebuildProducerState).

- ``take_snapshot``: ``<log end offset>.snapshot`` with every producer, then only the newest
  ``SNAPSHOTS_RETAINED`` snapshots are kept (older ones can only help a truncation far back,
  which replays from the log start instead).
- ``load_producer_state``: snapshots above the log end offset (a truncated tail) or below the log
  start offset (deleted segments) are deleted; the newest one that passes every check is loaded
  and the batch headers from its offset to the log end are replayed. A damaged snapshot is
  deleted with a warning and the next older one tried; with none, the whole log is replayed.
  One shortcut, Kafka's too: after a clean shutdown a partition directory without a single
  snapshot was written before seglog kept producer state, so nothing is replayed.
- ``delete_snapshots_below``: with the segments retention deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..base.errors import CorruptProducerSnapshotError, CorruptRecordError
from ..format.file_records import HeaderField
from ..base.fs import FileSystem
from ..segment.log_segment import LogSegment
from .producer_snapshot import is_snapshot_file, read_snapshot, snapshot_path, sync_snapshot, write_snapshot
from .producer_state import NO_SEQUENCE, ProducerFields, ProducerStateManager, increment_sequence

__all__ = [
    "SNAPSHOTS_RETAINED",
    "delete_snapshots_below",
    "list_snapshot_offsets",
    "load_producer_state",
    "take_snapshot",
]

_LOG = logging.getLogger(__name__)

# The newest three: the last roll's and shutdown's, and one more to fall back on if the newest
# is torn by a crash while being written.
SNAPSHOTS_RETAINED = 3
_TRANSACTIONAL_BIT = 0x10


def list_snapshot_offsets(fs: FileSystem, directory: str) -> list[int]:
    return sorted(int(name[:20]) for name in fs.listdir(directory) if is_snapshot_file(name))


def _unlink(fs: FileSystem, directory: str, offset: int) -> None:
    try:
        fs.unlink(snapshot_path(directory, offset))
    except FileNotFoundError:
        pass


def take_snapshot(
    manager: ProducerStateManager, fs: FileSystem, directory: str, offset: int, *, sync: bool = False
) -> None:
    """Writes the state at ``offset`` (= the log end offset) and drops the oldest snapshots."""
    assert manager.map_end_offset <= offset, (manager.map_end_offset, offset)
    offsets = manager.snapshot_offsets
    if offset in offsets:
        # Kafka's rule: nothing was appended since that snapshot, so it holds this state (less
        # producers expired since, which a load leaves out anyway). Rewriting it is not only
        # useless but slow: truncating a file that has just been written makes ext4 flush it
        # (auto_da_alloc), about 5 ms per partition at every restart without traffic.
        if sync:
            sync_snapshot(fs, directory, offset)
        return
    write_snapshot(fs, directory, offset, manager.snapshot_entries(), sync=sync)
    offsets.append(offset)
    offsets.sort()  # (appended in order but for a roll back to an empty active segment)
    while len(offsets) > SNAPSHOTS_RETAINED:
        _unlink(fs, directory, offsets.pop(0))


def delete_snapshots_below(manager: ProducerStateManager, fs: FileSystem, directory: str, offset: int) -> None:
    offsets = manager.snapshot_offsets
    while offsets and offsets[0] < offset:
        _unlink(fs, directory, offsets.pop(0))


def load_producer_state(
    name: str,
    fs: FileSystem,
    directory: str,
    segments: Sequence[LogSegment],
    *,
    log_start_offset: int,
    log_end_offset: int,
    had_clean_shutdown: bool,
    now_ms: int,
    expiration_ms: int,
) -> ProducerStateManager:
    """The state at ``log_end_offset``: newest good snapshot + replay of the batches after it."""
    manager = ProducerStateManager(name)
    offsets = list_snapshot_offsets(fs, directory)
    usable = []
    for offset in offsets:
        if offset > log_end_offset or offset < log_start_offset:
            _unlink(fs, directory, offset)
        else:
            usable.append(offset)
    loaded = False
    for offset in reversed(list(usable)):
        try:
            entries = read_snapshot(fs, snapshot_path(directory, offset), offset)
        except CorruptProducerSnapshotError as exc:
            _LOG.warning("%s: %s; deleting it and trying an older one", name, exc)
            _unlink(fs, directory, offset)
            usable.remove(offset)
            continue
        manager.load(entries, offset, now_ms, expiration_ms)
        loaded = True
        break
    manager.snapshot_offsets = usable
    if not loaded:
        if had_clean_shutdown and not offsets:
            manager.reset(log_end_offset)
            return manager
        manager.reset(log_start_offset)
    replay(manager, segments, manager.map_end_offset, log_end_offset, now_ms)
    return manager


def replay(
    manager: ProducerStateManager, segments: Sequence[LogSegment], from_offset: int, to_offset: int, now_ms: int
) -> int:
    """Applies the headers of the stored batches in [from_offset, to_offset); returns how many."""
    if from_offset >= to_offset:
        return 0
    count = 0
    for slot, segment in enumerate(segments):
        following = segments[slot + 1].base_offset if slot + 1 < len(segments) else None
        if following is not None and following <= from_offset:
            continue
        if segment.base_offset >= to_offset:
            break
        held = segment.holds_handles
        try:
            count += _replay_segment(manager, segment, from_offset, to_offset, now_ms)
        except CorruptRecordError as exc:
            # Reads of these bytes fail the same way; the state keeps what came before them.
            _LOG.warning("%s: producer state replay stopped at damaged bytes: %s", segment, exc)
            break
        finally:
            if not held:
                segment.release_handles()
    return count


def _replay_segment(
    manager: ProducerStateManager, segment: LogSegment, from_offset: int, to_offset: int, now_ms: int
) -> int:
    count = 0
    for _, fields in segment.log.raw_headers(0):
        base_offset = fields[HeaderField.BASE_OFFSET]
        last_delta = fields[HeaderField.LAST_OFFSET_DELTA]
        if base_offset + last_delta < from_offset:
            continue
        if base_offset >= to_offset:
            break
        base_sequence = fields[HeaderField.BASE_SEQUENCE]
        last_sequence = increment_sequence(base_sequence, last_delta) if base_sequence >= 0 else NO_SEQUENCE
        manager.replay(
            ProducerFields(
                fields[HeaderField.PRODUCER_ID],
                fields[HeaderField.PRODUCER_EPOCH],
                base_sequence,
                last_sequence,
                bool(fields[HeaderField.ATTRIBUTES] & _TRANSACTIONAL_BIT),
                last_delta,
            ),
            base_offset,
            fields[HeaderField.MAX_TIMESTAMP],
            now_ms,
        )
        count += 1
    return count
