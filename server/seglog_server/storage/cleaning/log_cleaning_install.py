"""Installing an offline cleaning's result into the live log (CommitCleaned).

The job's output is checked against the snapshot, the files and the live log, then swapped in
with Kafka's crash-safe protocol (kafka-storage.md 6.6, ``Log.swap_segments``):

1. ``result.json``: parsed and checked against the manifest (``cleaning_manifest.parse_result``);
   a dry run is refused; every output file matches its CRC-32C in the result.
2. The live log, as one acquisition of its lock saw it (``Log.segments_in_range``): the log
   start offset has not moved (DeleteRecords, retention), and the segments between the first replaced base offset and the end of the replaced range are
   exactly the replaced ones, closed, with the manifest's sizes (and, for a snapshot taken by this
   process, the very same segment objects: no other cleaning was installed meanwhile).
3. Off the lock: each replaced live segment's bytes still have the manifest's CRC-32C.
4. Each output ``.log`` is hard-linked into the partition as ``<base>.log.cleaned`` and recovered:
   every batch's CRC and offsets are checked and both indexes are rebuilt with the topic's
   ``index.interval.bytes`` (indexes are caches: the job's are not trusted). Offsets must lie in
   the replaced range, ascending across outputs, and the last output must end where the replaced
   segments end (Kafka keeps the last batch of a cleaned range; without it a crash after the
   renames could leave an old segment beside new ones). When the first output starts above the
   first replaced base offset (the job dropped an empty group), an empty segment takes that base
   offset, as Kafka's cleaner would have written one, so the loader's roll-forward covers every
   replaced file. mtime = the group's last input's mtime (Kafka's rule). fsync, directory fsync.
5. Under the lock again: step 2's checks, then ``.cleaned`` -> ``.swap`` (highest base first),
   old -> ``.deleted``, ``.swap`` -> final names, directory fsync.

A refusal or failure before step 5's first rename removes the ``.cleaned`` files it made and
changes nothing else (a full disk there is retriable). A failure after it, whatever it is (an
OSError of any errno or any other exception), takes the log offline and deletes no file (``Log.swap_segments``): the next start completes or rolls back the swap.
On success the caller advances the cleaner checkpoint and removes the snapshot.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..base import file_names
from .cleaning_manifest import RESULT_BYTES_MAX, CleaningResult, SnapshotManifest, SnapshotSegment, parse_result
from ..base.errors import InvalidCleaningResultError, StaleCleaningResultError
from ..base.fs import FileSystem
from ..log.segment_views import SegmentRange
from ..log.unified_log import Log
from ..segment.log_segment import LogSegment
from .log_snapshot import CLEANED_DIR_NAME, RESULT_FILE_NAME, file_crc32c, read_capped

__all__ = ["InstallOutcome", "install_cleaned", "read_result"]


@dataclass(frozen=True)
class InstallOutcome:
    result: CleaningResult
    replaced_segment_count: int
    installed_segment_count: int
    bytes_before: int
    bytes_after: int


def read_result(snapshot_dir: str, manifest: SnapshotManifest, fs: FileSystem) -> CleaningResult:
    location = os.path.join(snapshot_dir, RESULT_FILE_NAME)
    try:
        data = read_capped(location, RESULT_BYTES_MAX, fs)
    except FileNotFoundError:
        raise InvalidCleaningResultError(
            f"snapshot {manifest.snapshot_id} has no {RESULT_FILE_NAME}: the cleaning job has not finished"
        ) from None
    return parse_result(data, location, manifest)


def install_cleaned(
    log: Log,
    snapshot_dir: str,
    manifest: SnapshotManifest,
    *,
    expected_segments: Sequence[LogSegment] | None,
    fs: FileSystem,
) -> InstallOutcome:
    """Checks the snapshot's result and swaps it into ``log``; raises StaleCleaningResultError
    or InvalidCleaningResultError (nothing changed) or LogDirOfflineError (the disk failed)."""
    result = read_result(snapshot_dir, manifest, fs)
    if result.dry_run:
        raise InvalidCleaningResultError(f"snapshot {manifest.snapshot_id} holds a dry-run result: nothing to install")
    _check_output_files(snapshot_dir, result, fs)
    replaced = manifest.segments[: len(result.replaced_segments)]
    range_end = _replaced_range_end(manifest, len(replaced))
    expected = None if expected_segments is None else list(expected_segments[: len(replaced)])
    live = _check_live(log, log.segments_in_range(replaced[0].base_offset, range_end), manifest, replaced, range_end, expected)
    _check_live_checksums(live, replaced, fs)
    cleaned = _build_cleaned_segments(log, snapshot_dir, result, replaced, range_end, fs)
    try:
        log.swap_segments(live, cleaned, log_start_offset=manifest.log_start_offset)
    except BaseException:
        _abandon(cleaned)
        raise
    return InstallOutcome(
        result=result,
        replaced_segment_count=len(replaced),
        installed_segment_count=len(cleaned),
        bytes_before=sum(segment.size_bytes for segment in replaced),
        bytes_after=sum(segment.size_in_bytes for segment in cleaned),
    )


def _replaced_range_end(manifest: SnapshotManifest, replaced_count: int) -> int:
    if replaced_count < len(manifest.segments):
        return manifest.segments[replaced_count].base_offset
    return manifest.first_uncleanable_offset


# -- step 1: the job's files -------------------------------------------------------------------


def _check_output_files(snapshot_dir: str, result: CleaningResult, fs: FileSystem) -> None:
    cleaned_dir = os.path.join(snapshot_dir, CLEANED_DIR_NAME)
    if result.output_segments:
        _check_plain_directory(cleaned_dir, snapshot_dir)
    for output in result.output_segments:
        _check_regular_file(os.path.join(cleaned_dir, output.file), snapshot_dir)
        expected = [(output.file, output.crc32c, output.size_bytes)]
        if output.index_crc32c is not None:
            expected.append((file_names.filename_prefix(output.base_offset) + file_names.INDEX_SUFFIX, output.index_crc32c, None))
        if output.timeindex_crc32c is not None:
            expected.append(
                (file_names.filename_prefix(output.base_offset) + file_names.TIME_INDEX_SUFFIX, output.timeindex_crc32c, None)
            )
        for name, crc, size in expected:
            path = os.path.join(cleaned_dir, name)
            try:
                if size is None:
                    size = _size_of(path, fs)
                found = file_crc32c(path, size, fs)
            except FileNotFoundError:
                raise InvalidCleaningResultError(f"output file {path} named in {RESULT_FILE_NAME} is missing") from None
            if found != crc:
                raise InvalidCleaningResultError(
                    f"output file {path} is damaged: crc32c {found:08x}, {RESULT_FILE_NAME} says {crc:08x}"
                )


def _check_plain_directory(path: str, snapshot_dir: str) -> None:
    if os.path.islink(path) or not os.path.isdir(path):
        raise InvalidCleaningResultError(f"{path} must be a directory inside the snapshot, not a link")


def _check_regular_file(path: str, snapshot_dir: str) -> None:
    """Outputs are hard-linked into the partition: they must be plain files on the snapshot's
    filesystem (a symlink would install a pointer to some other file; another filesystem would
    fail the link as if the disk had)."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        raise InvalidCleaningResultError(f"output file {path} named in {RESULT_FILE_NAME} is missing") from None
    if not stat.S_ISREG(found.st_mode):
        raise InvalidCleaningResultError(f"output file {path} is not a regular file")
    if found.st_dev != os.lstat(snapshot_dir).st_dev:
        raise InvalidCleaningResultError(f"output file {path} is not on the snapshot's filesystem")


def _size_of(path: str, fs: FileSystem) -> int:
    fd = fs.open(path, os.O_RDONLY)
    try:
        return fs.fsize(fd)
    finally:
        fs.close(fd)


# -- steps 2 and 3: the live log ---------------------------------------------------------------


def _check_live(
    log: Log,
    now: SegmentRange,
    manifest: SnapshotManifest,
    replaced: Sequence[SnapshotSegment],
    range_end: int,
    expected: Sequence[LogSegment] | None,
) -> list[LogSegment]:
    """The replaced segments as the log held them in ``now`` (one acquisition of its lock,
    ``segments_in_range``), or StaleCleaningResultError."""
    name = f"{log.topic}-{log.partition}"

    def stale(what: str) -> StaleCleaningResultError:
        return StaleCleaningResultError(f"snapshot {manifest.snapshot_id} of {name} is stale: {what}")

    if now.log_start_offset != manifest.log_start_offset:
        raise stale(
            f"the log start offset moved from {manifest.log_start_offset} to {now.log_start_offset} "
            f"since the snapshot (DeleteRecords or retention)"
        )
    by_base = {segment.base_offset: segment for segment in now.segments}
    live = []
    for slot, entry in enumerate(replaced):
        segment = by_base.get(entry.base_offset)
        if segment is None:
            raise stale(f"segment {entry.base_offset} is gone (deleted by retention or replaced by another cleaning)")
        if segment is now.active:
            raise stale(f"segment {entry.base_offset} is the active segment now (the log was truncated)")
        if segment.size_in_bytes != entry.size_bytes:
            raise stale(f"segment {entry.base_offset} is {segment.size_in_bytes} bytes now, {entry.size_bytes} in the snapshot")
        if expected is not None and segment is not expected[slot]:
            raise stale(f"segment {entry.base_offset} was replaced since the snapshot (another cleaning was installed)")
        live.append(segment)
    in_range = [segment.base_offset for segment in now.segments]
    if in_range != [entry.base_offset for entry in replaced]:
        raise stale(f"the segments in [{replaced[0].base_offset}, {range_end}) are {in_range[:8]} now, not the snapshot's")
    return live


def _check_live_checksums(live: Sequence[LogSegment], replaced: Sequence[SnapshotSegment], fs: FileSystem) -> None:
    for segment, entry in zip(live, replaced):
        try:
            found = file_crc32c(segment.log.path, entry.size_bytes, fs)
        except (FileNotFoundError, InvalidCleaningResultError):
            raise StaleCleaningResultError(
                f"snapshot segment {entry.base_offset} was removed or resized while being checked"
            ) from None
        if found != entry.crc32c:
            raise StaleCleaningResultError(
                f"segment {entry.base_offset}'s bytes changed since the snapshot: crc32c {found:08x}, "
                f"{entry.crc32c:08x} in the manifest"
            )


# -- step 4: the new segments ------------------------------------------------------------------


def _build_cleaned_segments(
    log: Log,
    snapshot_dir: str,
    result: CleaningResult,
    replaced: Sequence[SnapshotSegment],
    range_end: int,
    fs: FileSystem,
) -> list[LogSegment]:
    cleaned: list[LogSegment] = []
    try:
        outputs = result.output_segments
        if not outputs or outputs[0].base_offset != replaced[0].base_offset:
            cleaned.append(_empty_segment(log, replaced[0].base_offset, replaced, fs))
        next_offset = replaced[0].base_offset
        for output in outputs:
            segment = _link_output(log, os.path.join(snapshot_dir, CLEANED_DIR_NAME, output.file), output.base_offset, fs)
            cleaned.append(segment)
            next_offset = _check_offsets(segment, next_offset, range_end)
            _seal(segment, _group_mtime_ms(replaced, outputs, output.base_offset))
        last_input_next = replaced[-1].next_offset
        if next_offset != last_input_next:
            raise InvalidCleaningResultError(
                f"the outputs end at offset {next_offset}, the replaced segments at {last_input_next}: "
                f"the last batch of the cleaned range must be kept (Kafka's rule), or a crash during "
                f"the install could leave old and new segments side by side"
            )
        fs.fsync_dir(log.dir)
    except BaseException:
        _discard(cleaned)
        raise
    return cleaned


def _empty_segment(log: Log, base_offset: int, replaced: Sequence[SnapshotSegment], fs: FileSystem) -> LogSegment:
    return _built(log, base_offset, fs, lambda: _sealed_empty(log, base_offset, replaced))


def _sealed_empty(log: Log, base_offset: int, replaced: Sequence[SnapshotSegment]) -> LogSegment:
    segment = log.open_cleaned_segment(base_offset, create=True)
    try:
        _seal(segment, replaced[0].last_modified_ms)
    except BaseException:
        segment.close_handlers()
        raise
    return segment


def _link_output(log: Log, source: str, base_offset: int, fs: FileSystem) -> LogSegment:
    _remove_cleaned_files(log, base_offset, fs)
    return _built(log, base_offset, fs, lambda: _linked(log, source, base_offset, fs))


def _linked(log: Log, source: str, base_offset: int, fs: FileSystem) -> LogSegment:
    fs.link(source, file_names.log_path(log.dir, base_offset, file_names.CLEANED_SUFFIX))
    segment = log.open_cleaned_segment(base_offset)
    try:
        truncated = segment.recover()
        if truncated:
            size = segment.size_in_bytes + truncated
            raise InvalidCleaningResultError(
                f"output segment {base_offset}: the last {truncated} of its {size} bytes are not valid batches "
                f"(torn, bad CRC, offsets not increasing or beyond the segment's relative-offset range)"
            )
    except BaseException:
        segment.close_handlers()  # (its descriptors and mappings: the caller never sees it)
        raise
    return segment


def _built(log: Log, base_offset: int, fs: FileSystem, build: Callable[[], LogSegment]) -> LogSegment:
    """``build()`` of one ``.cleaned`` segment; on any failure its files go too (a link, an index
    created before a later step failed): on a full disk they would hold blocks nobody frees."""
    try:
        return build()
    except BaseException:
        try:
            _remove_cleaned_files(log, base_offset, fs)
        except OSError:
            pass  # the disk failed: the loader deletes .cleaned files at start
        raise


def _remove_cleaned_files(log: Log, base_offset: int, fs: FileSystem) -> None:
    for path in (
        file_names.log_path(log.dir, base_offset, file_names.CLEANED_SUFFIX),
        file_names.offset_index_path(log.dir, base_offset, file_names.CLEANED_SUFFIX),
        file_names.time_index_path(log.dir, base_offset, file_names.CLEANED_SUFFIX),
    ):
        try:
            fs.unlink(path)
        except FileNotFoundError:
            pass


def _check_offsets(segment: LogSegment, lowest: int, range_end: int) -> int:
    """Checks that the segment's batches lie in [lowest, range_end); returns its next offset."""
    base = segment.base_offset
    first = next(iter(segment.log.batch_headers(0)), None)
    if first is None:
        return lowest
    if first.base_offset < max(base, lowest):
        raise InvalidCleaningResultError(
            f"output segment {base} starts at offset {first.base_offset}, below {max(base, lowest)} "
            f"(its base offset or the end of the previous output)"
        )
    next_offset = segment.read_next_offset()
    if next_offset > range_end:
        raise InvalidCleaningResultError(
            f"output segment {base} reaches offset {next_offset - 1}, beyond the replaced range's end {range_end}"
        )
    return next_offset


def _group_mtime_ms(replaced: Sequence[SnapshotSegment], outputs: Sequence, base_offset: int) -> int:
    """The mtime of the last input of the output's group (the inputs below the next output)."""
    later = [o.base_offset for o in outputs if o.base_offset > base_offset]
    limit = later[0] if later else None
    group = [s for s in replaced if s.base_offset >= base_offset and (limit is None or s.base_offset < limit)]
    return group[-1].last_modified_ms


def _seal(segment: LogSegment, mtime_ms: int) -> None:
    segment.on_become_inactive_segment()
    segment.flush()
    segment.set_last_modified_ms(mtime_ms)


def _close_quietly(segments: Sequence[LogSegment]) -> None:
    for segment in segments:
        try:
            segment.close_handlers()
        except OSError:
            pass


def _abandon(cleaned: Sequence[LogSegment]) -> None:
    """After a refused or failed swap, decided by the files themselves, not by the log's state:
    while every built segment still carries ``.cleaned`` nothing was swapped and they are
    deleted; once one was renamed the swap began, and every file stays (under ``.swap`` or its
    live name) for the next start to complete or roll back (kafka-storage.md 6.6), the
    descriptors closed."""
    if all(segment.has_suffix(file_names.CLEANED_SUFFIX) for segment in cleaned):
        _discard(cleaned)
    else:
        _close_quietly(cleaned)


def _discard(segments: Sequence[LogSegment]) -> None:
    for segment in segments:
        try:
            segment.close_handlers()
            segment.delete_if_exists()
        except OSError:
            pass  # the disk failed: the loader deletes .cleaned files at start
