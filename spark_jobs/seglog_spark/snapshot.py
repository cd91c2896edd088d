"""The snapshot a cleaning reads (CLEANING-CONTRACT.md): ``manifest.json`` plus hard links of
the segments' ``.log`` files, and the files a cleaning writes back: ``cleaned/`` and
``result.json`` (written atomically, last: its presence means the output is complete).

The manifest comes from outside this process, so every field is checked for type and range
before it is used, and every segment file against its recorded size and CRC-32C.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from seglog.records import crc32c as _crc32c_function

from .errors import SnapshotError

__all__ = [
    "CLEANED_DIR",
    "MANIFEST_FILE",
    "RESULT_FILE",
    "Segment",
    "Snapshot",
    "TopicSettings",
    "file_crc32c",
    "read_snapshot",
    "segment_file_name",
    "write_json_atomically",
]

MANIFEST_FILE = "manifest.json"
RESULT_FILE = "result.json"
CLEANED_DIR = "cleaned"
MANIFEST_FORMAT = 1
OFFSET_DIGITS = 20  # Kafka's file names: the base offset zero-padded to 20 digits
MANIFEST_BYTES_MAX = 64 * 1024 * 1024  # a manifest lists segments; 64 MiB is millions of them
_CRC_CHUNK_BYTES = 8 * 1024 * 1024  # file CRCs read this much at a time
INT64_MAX = (1 << 63) - 1
INT32_MAX = (1 << 31) - 1

# Kafka's defaults for the settings cleaning uses, when a manifest leaves one out.
_DEFAULT_CONFIGS = {
    "delete.retention.ms": 86_400_000,
    "segment.bytes": 1_073_741_824,
    "segment.index.bytes": 10_485_760,
    "index.interval.bytes": 4096,
}


def segment_file_name(base_offset: int, suffix: str = ".log") -> str:
    return f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


@dataclass(frozen=True)
class Segment:
    base_offset: int
    file: str
    size_bytes: int
    crc32c: str
    next_offset: int


@dataclass(frozen=True)
class TopicSettings:
    delete_retention_ms: int
    segment_bytes: int
    segment_index_bytes: int
    index_interval_bytes: int


@dataclass(frozen=True)
class Snapshot:
    path: str
    snapshot_id: str
    topic: str
    partition: int
    cleaning_time_ms: int
    log_start_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    segments: tuple[Segment, ...]
    settings: TopicSettings
    # last offset -> producer id: each idempotent producer's last batch, which the cleaning
    # keeps (empty of records if need be) so producer state can be rebuilt from the log.
    producer_last_batches: dict[int, int] = field(default_factory=dict)

    def segment_path(self, segment: Segment) -> str:
        return os.path.join(self.path, segment.file)

    @property
    def cleaned_dir(self) -> str:
        return os.path.join(self.path, CLEANED_DIR)

    def end_of(self, index: int) -> int:
        """Where segment `index` ends in offsets: the next segment's base, or the first
        uncleanable offset after the last one (Kafka's estimate of a segment's range)."""
        if index + 1 < len(self.segments):
            return self.segments[index + 1].base_offset
        return self.first_uncleanable_offset


def _int(document: dict, name: str, low: int = 0, high: int = INT64_MAX) -> int:
    value = document.get(name)
    if type(value) is not int or not low <= value <= high:
        raise SnapshotError(f"manifest field {name!r}: expected an integer in [{low}, {high}], found {value!r}")
    return value


def _str(document: dict, name: str) -> str:
    value = document.get(name)
    if not isinstance(value, str) or not value:
        raise SnapshotError(f"manifest field {name!r}: expected a non-empty string, found {value!r}")
    return value


def _settings(configs) -> TopicSettings:
    if not isinstance(configs, dict):
        raise SnapshotError(f"manifest field 'configs': expected an object, found {configs!r}")
    merged = {**_DEFAULT_CONFIGS, **{k: v for k, v in configs.items() if k in _DEFAULT_CONFIGS}}
    return TopicSettings(
        delete_retention_ms=_int(merged, "delete.retention.ms"),
        segment_bytes=_int(merged, "segment.bytes", 14, INT32_MAX),
        segment_index_bytes=_int(merged, "segment.index.bytes", 8, INT32_MAX),
        index_interval_bytes=_int(merged, "index.interval.bytes", 0, INT32_MAX),
    )


def _segment(entry) -> Segment:
    if not isinstance(entry, dict):
        raise SnapshotError(f"manifest segment: expected an object, found {entry!r}")
    base = _int(entry, "base_offset")
    file = _str(entry, "file")
    if file != segment_file_name(base):
        raise SnapshotError(f"manifest segment {base}: expected file {segment_file_name(base)!r}, found {file!r}")
    crc = _str(entry, "crc32c")
    if len(crc) != 8 or crc.strip("0123456789abcdef"):
        raise SnapshotError(f"manifest segment {base}: expected crc32c as 8 lowercase hex digits, found {crc!r}")
    next_offset = _int(entry, "next_offset", base)
    return Segment(base, file, _int(entry, "size_bytes", 0, INT32_MAX), crc, next_offset)


def _producer_last_batches(entries, segments: tuple[Segment, ...]) -> dict[int, int]:
    """The manifest's ``producers`` (absent from an older service's: none) as last offset ->
    producer id; each must end inside the segments, each offset named once."""
    if not isinstance(entries, list):
        raise SnapshotError(f"manifest field 'producers': expected a list, found {entries!r}")
    start = segments[0].base_offset if segments else 0
    end = segments[-1].next_offset if segments else 0
    out: dict[int, int] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise SnapshotError(f"manifest producer: expected an object, found {entry!r}")
        producer_id, last_offset = _int(entry, "producer_id"), _int(entry, "last_offset")
        if not start <= last_offset < end or last_offset in out:
            raise SnapshotError(
                f"manifest producer {producer_id}: last_offset {last_offset} is outside the segments "
                f"[{start}, {end}) or named twice"
            )
        out[last_offset] = producer_id
    return out


def read_snapshot(path: str) -> Snapshot:
    """The snapshot at `path`, its manifest checked field by field (SnapshotError names the
    first bad one).  Segment files are checked by verify_segments()."""
    manifest_path = os.path.join(path, MANIFEST_FILE)
    try:
        with open(manifest_path, "rb") as f:
            raw = f.read(MANIFEST_BYTES_MAX + 1)
    except OSError as exc:
        raise SnapshotError(f"cannot read {manifest_path}: {exc.strerror}") from exc
    if len(raw) > MANIFEST_BYTES_MAX:
        raise SnapshotError(f"{manifest_path}: expected at most {MANIFEST_BYTES_MAX} bytes, found more")
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        # ValueError: not JSON, or an integer of more than 4,300 digits; RecursionError: about a
        # thousand nested brackets (the parser recurses per level). Every field is then checked
        # by type (type(value) is int: 1e400 and NaN, floats, never pass as numbers).
        raise SnapshotError(f"{manifest_path} is not JSON we read: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not isinstance(document, dict) or document.get("format") != MANIFEST_FORMAT:
        raise SnapshotError(f"{manifest_path}: expected an object with format {MANIFEST_FORMAT}")
    raw_segments = document.get("segments")
    if not isinstance(raw_segments, list):
        raise SnapshotError("manifest field 'segments': expected a list")
    segments = tuple(_segment(entry) for entry in raw_segments)
    snapshot = Snapshot(
        path=os.path.abspath(path),
        snapshot_id=_str(document, "snapshot_id"),
        topic=_str(document, "topic"),
        partition=_int(document, "partition", 0, INT32_MAX),
        cleaning_time_ms=_int(document, "cleaning_time_ms"),
        log_start_offset=_int(document, "log_start_offset"),
        first_dirty_offset=_int(document, "first_dirty_offset"),
        first_uncleanable_offset=_int(document, "first_uncleanable_offset"),
        segments=segments,
        settings=_settings(document.get("configs", {})),
        producer_last_batches=_producer_last_batches(document.get("producers", []), segments),
    )
    _check_ranges(snapshot)
    return snapshot


def _check_ranges(snapshot: Snapshot) -> None:
    if snapshot.first_dirty_offset > snapshot.first_uncleanable_offset:
        raise SnapshotError(
            f"manifest: first_dirty_offset {snapshot.first_dirty_offset} is above "
            f"first_uncleanable_offset {snapshot.first_uncleanable_offset}"
        )
    previous_end = None
    for segment in snapshot.segments:
        if previous_end is not None and segment.base_offset < previous_end:
            raise SnapshotError(
                f"manifest segment {segment.base_offset}: expected ascending segments, the previous one ends at {previous_end}"
            )
        if segment.next_offset > snapshot.first_uncleanable_offset:
            raise SnapshotError(
                f"manifest segment {segment.base_offset}: next_offset {segment.next_offset} is past "
                f"first_uncleanable_offset {snapshot.first_uncleanable_offset}"
            )
        previous_end = segment.next_offset


def file_crc32c(path: str) -> str:
    """CRC-32C of a whole file as 8 lowercase hex digits (the manifest's form)."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CRC_CHUNK_BYTES):
            crc = _crc32c_function(chunk, crc)
    return f"{crc:08x}"


def verify_segments(snapshot: Snapshot) -> None:
    """Each linked segment has the size and CRC-32C its manifest entry records."""
    for segment in snapshot.segments:
        path = snapshot.segment_path(segment)
        try:
            size = os.stat(path).st_size
        except OSError as exc:
            raise SnapshotError(f"snapshot segment {path}: {exc.strerror}") from exc
        if size != segment.size_bytes:
            raise SnapshotError(f"snapshot segment {path}: expected {segment.size_bytes} bytes, found {size}")
        found = file_crc32c(path)
        if found != segment.crc32c:
            raise SnapshotError(f"snapshot segment {path}: expected CRC-32C {segment.crc32c}, found {found}")


def write_json_atomically(path: str, document: dict) -> None:
    """tmp + fsync + rename + directory fsync: a reader sees the whole file or none."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(document, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
