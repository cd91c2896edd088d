"""The two JSON documents of an offline cleaning (CLEANING-CONTRACT.md): the snapshot's
``manifest.json`` (written by the service) and the job's ``result.json`` (read back by it).

``manifest.json`` (format 1)::

    {"format": 1, "snapshot_id": "events-0-1764000000000-3f2a", "topic": "events", "partition": 0,
     "created_ms": ..., "cleaning_time_ms": ...,   # "now" for tombstone and lag decisions
     "log_start_offset": 0, "first_dirty_offset": 0, "first_uncleanable_offset": 5300,
     "segments": [{"base_offset": 0, "file": "00000000000000000000.log", "size_bytes": 65493,
                   "crc32c": "1a2b3c4d", "next_offset": 2650,
                   "largest_timestamp_ms": ..., "last_modified_ms": ...}],
     "configs": {"delete.retention.ms": 86400000, ...},
     "producers": [{"producer_id": 4000, "last_offset": 1}]}

``producers`` names, for each idempotent producer the service knows whose last batch lies in the
segments, that batch's last offset: the cleaning keeps that batch (empty of records if they are
all superseded), as Kafka's cleaner keeps an active producer's last batch, so that producer state
rebuilt from the cleaned log still knows the producer's last sequence and epoch. A manifest
without the field (an older service) keeps none.

``result.json`` (format 1) names the input segments (copied from the manifest), the base offsets
of the ``replaced_segments`` (a prefix of the manifest's), the ``output_segments`` in
``cleaned/`` with their checksums, ``cleaned_up_to_offset`` (the new cleaner checkpoint),
``dry_run`` and ``stats``.

Both are read back from disk (a result also from the object store), so both are untrusted: they go
through the bounded JSON reader (``base/json_document.py``: size, nesting depth and every number's
length checked before parsing), every field is type- and range-checked, and a failure names the
file and the field (``InvalidCleaningResultError``). CRC-32C values travel as 8 lowercase hex digits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base import file_names
from ..base.errors import InvalidCleaningResultError
from ..base.json_document import Fields, checked_int, read_json_document

__all__ = [
    "MANIFEST_BYTES_MAX",
    "MANIFEST_FORMAT",
    "RESULT_BYTES_MAX",
    "ProducerLastBatch",
    "CleaningResult",
    "OutputSegment",
    "SnapshotManifest",
    "SnapshotSegment",
    "format_crc",
    "manifest_configs",
    "parse_result",
]

MANIFEST_FORMAT = 1
# A manifest lists each segment in ~250 bytes: 4 MiB holds ~16,000 segments (16 TiB of 1 GiB
# segments), far beyond one partition, beside the ~50 bytes of each producer it names;
# anything larger is not ours.
MANIFEST_BYTES_MAX = 4 * 1024 * 1024
# A result lists inputs and outputs (~150 bytes each) plus stats: the same bound.
RESULT_BYTES_MAX = 4 * 1024 * 1024

_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1
_CRC = re.compile(r"[0-9a-f]{8}")

# The topic configs a cleaning needs, by Kafka's name (the contract's "configs").
_MANIFEST_CONFIGS = (
    "delete.retention.ms",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "min.cleanable.dirty.ratio",
    "segment.bytes",
    "segment.index.bytes",
    "index.interval.bytes",
    "max.message.bytes",
    "message.timestamp.type",
)


def format_crc(value: int) -> str:
    assert 0 <= value <= 0xFFFFFFFF, value
    return f"{value:08x}"


def manifest_configs(properties: Mapping[str, str]) -> dict[str, Any]:
    """The manifest's ``configs``: numbers as JSON numbers, the timestamp type as its name."""
    out: dict[str, Any] = {}
    for name in _MANIFEST_CONFIGS:
        text = properties[name]
        if name == "message.timestamp.type":
            out[name] = text
        elif name == "min.cleanable.dirty.ratio":
            out[name] = float(text)
        else:
            out[name] = int(text)
    return out


# -- the manifest ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProducerLastBatch:
    """An idempotent producer's last batch, named by its last offset (unique in a log)."""

    producer_id: int
    last_offset: int

    def to_json(self) -> dict[str, int]:
        return {"producer_id": self.producer_id, "last_offset": self.last_offset}


@dataclass(frozen=True)
class SnapshotSegment:
    base_offset: int
    file: str
    size_bytes: int
    crc32c: int
    next_offset: int
    largest_timestamp_ms: int
    last_modified_ms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "base_offset": self.base_offset,
            "file": self.file,
            "size_bytes": self.size_bytes,
            "crc32c": format_crc(self.crc32c),
            "next_offset": self.next_offset,
            "largest_timestamp_ms": self.largest_timestamp_ms,
            "last_modified_ms": self.last_modified_ms,
        }


@dataclass(frozen=True)
class SnapshotManifest:
    snapshot_id: str
    topic: str
    partition: int
    created_ms: int
    cleaning_time_ms: int
    log_start_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    segments: tuple[SnapshotSegment, ...]
    configs: Mapping[str, Any] = field(default_factory=dict)
    producers: tuple[ProducerLastBatch, ...] = ()

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.segments)

    def to_json_bytes(self) -> bytes:
        document = {
            "format": MANIFEST_FORMAT,
            "snapshot_id": self.snapshot_id,
            "topic": self.topic,
            "partition": self.partition,
            "created_ms": self.created_ms,
            "cleaning_time_ms": self.cleaning_time_ms,
            "log_start_offset": self.log_start_offset,
            "first_dirty_offset": self.first_dirty_offset,
            "first_uncleanable_offset": self.first_uncleanable_offset,
            "segments": [segment.to_json() for segment in self.segments],
            "configs": dict(self.configs),
            "producers": [producer.to_json() for producer in self.producers],
        }
        return (json.dumps(document, indent=1) + "\n").encode("utf-8")

    @classmethod
    def parse(cls, data: bytes, location: str) -> SnapshotManifest:
        doc = _Doc(_load(data, location, MANIFEST_BYTES_MAX), location)
        doc.format()
        segments = tuple(_snapshot_segment(_Doc(item, f"{location} segments[{slot}]"))
                         for slot, item in enumerate(doc.list("segments")))
        configs = doc.get("configs", dict)
        manifest = cls(
            snapshot_id=doc.get("snapshot_id", str),
            topic=doc.get("topic", str),
            partition=doc.int("partition", 0, _INT32_MAX),
            created_ms=doc.int("created_ms", 0, _INT64_MAX),
            cleaning_time_ms=doc.int("cleaning_time_ms", 0, _INT64_MAX),
            log_start_offset=doc.int("log_start_offset", 0, _INT64_MAX),
            first_dirty_offset=doc.int("first_dirty_offset", 0, _INT64_MAX),
            first_uncleanable_offset=doc.int("first_uncleanable_offset", 0, _INT64_MAX),
            segments=segments,
            configs=configs,
            producers=tuple(
                _producer(_Doc(item, f"{location} producers[{slot}]"))
                for slot, item in enumerate(doc.list("producers") if "producers" in doc.data else ())
            ),
        )
        _check_segment_chain(manifest, location)
        _check_producers(manifest, location)
        return manifest


def _named_segment(doc: _Doc) -> tuple[int, str]:
    """A segment entry's base offset and its ``file``, which must be Kafka's name for that base."""
    base = doc.int("base_offset", 0, _INT64_MAX)
    name = doc.get("file", str)
    if name != file_names.filename_prefix(base) + file_names.LOG_SUFFIX:
        doc.fail("file", f"expected the Kafka name of base offset {base}, found {name!r}")
    return base, name


def _snapshot_segment(doc: _Doc) -> SnapshotSegment:
    base, name = _named_segment(doc)
    return SnapshotSegment(
        base_offset=base,
        file=name,
        size_bytes=doc.int("size_bytes", 0, _INT32_MAX),
        crc32c=doc.crc("crc32c"),
        next_offset=doc.int("next_offset", base, _INT64_MAX),
        largest_timestamp_ms=doc.int("largest_timestamp_ms", -1, _INT64_MAX),
        last_modified_ms=doc.int("last_modified_ms", 0, _INT64_MAX),
    )


def _producer(doc: _Doc) -> ProducerLastBatch:
    return ProducerLastBatch(doc.int("producer_id", 0, _INT64_MAX), doc.int("last_offset", 0, _INT64_MAX))


def _check_producers(manifest: SnapshotManifest, location: str) -> None:
    """Each named batch ends inside the snapshot's segments, each offset named once."""
    start = manifest.segments[0].base_offset if manifest.segments else 0
    end = manifest.segments[-1].next_offset if manifest.segments else 0
    seen: set[int] = set()
    for producer in manifest.producers:
        if not start <= producer.last_offset < end or producer.last_offset in seen:
            raise InvalidCleaningResultError(
                f"{location}: producer {producer.producer_id}'s last offset {producer.last_offset} is "
                f"outside the segments [{start}, {end}) or named twice"
            )
        seen.add(producer.last_offset)


def _check_segment_chain(manifest: SnapshotManifest, location: str) -> None:
    previous_next = -1
    for segment in manifest.segments:
        if segment.base_offset < previous_next:
            raise InvalidCleaningResultError(
                f"{location}: segment {segment.base_offset} overlaps the one before it (next offset {previous_next})"
            )
        previous_next = segment.next_offset
    if manifest.segments and previous_next > manifest.first_uncleanable_offset:
        raise InvalidCleaningResultError(
            f"{location}: segments reach offset {previous_next}, past first_uncleanable_offset "
            f"{manifest.first_uncleanable_offset}"
        )


# -- the result --------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputSegment:
    base_offset: int
    file: str
    size_bytes: int
    crc32c: int
    index_crc32c: int | None
    timeindex_crc32c: int | None


@dataclass(frozen=True)
class CleaningResult:
    snapshot_id: str
    topic: str
    partition: int
    input_segments: tuple[tuple[int, int, int], ...]  # (base offset, size bytes, crc32c)
    replaced_segments: tuple[int, ...]
    output_segments: tuple[OutputSegment, ...]
    cleaned_up_to_offset: int
    dry_run: bool
    stats: Mapping[str, Any]

    def stat_int(self, name: str) -> int:
        value = self.stats.get(name, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    def stat_float(self, name: str) -> float:
        value = self.stats.get(name, 0.0)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value or value < 0:
            return 0.0
        return float(value)

    def stat_str(self, name: str) -> str:
        value = self.stats.get(name, "")
        return value[:200] if isinstance(value, str) else ""


def parse_result(data: bytes, location: str, manifest: SnapshotManifest) -> CleaningResult:
    """Parses ``result.json`` and checks it against its snapshot's manifest (not yet against
    the files or the live log)."""
    # stats are lenient (NaN, as json.dumps writes it, counts as 0): a number no field can take
    # reads as an UnreadableNumber, which every checked field below refuses.
    doc = _Doc(_load(data, location, RESULT_BYTES_MAX, numbers_marked=True), location)
    doc.format()
    result = CleaningResult(
        snapshot_id=doc.get("snapshot_id", str),
        topic=doc.get("topic", str),
        partition=doc.int("partition", 0, _INT32_MAX),
        input_segments=tuple(
            _input_segment(_Doc(item, f"{location} input_segments[{slot}]"))
            for slot, item in enumerate(doc.list("input_segments"))
        ),
        replaced_segments=tuple(
            _checked_int(item, f"{location} replaced_segments[{slot}]", 0, _INT64_MAX)
            for slot, item in enumerate(doc.list("replaced_segments"))
        ),
        output_segments=tuple(
            _output_segment(_Doc(item, f"{location} output_segments[{slot}]"))
            for slot, item in enumerate(doc.list("output_segments"))
        ),
        cleaned_up_to_offset=doc.int("cleaned_up_to_offset", 0, _INT64_MAX),
        dry_run=doc.get("dry_run", bool),
        stats=doc.get("stats", dict),
    )
    _check_against_manifest(result, manifest, location)
    return result


def _input_segment(doc: _Doc) -> tuple[int, int, int]:
    return doc.int("base_offset", 0, _INT64_MAX), doc.int("size_bytes", 0, _INT32_MAX), doc.crc("crc32c")


def _output_segment(doc: _Doc) -> OutputSegment:
    base, name = _named_segment(doc)
    return OutputSegment(
        base_offset=base,
        file=name,
        size_bytes=doc.int("size_bytes", 0, _INT32_MAX),
        crc32c=doc.crc("crc32c"),
        index_crc32c=doc.crc("index_crc32c") if "index_crc32c" in doc.data else None,
        timeindex_crc32c=doc.crc("timeindex_crc32c") if "timeindex_crc32c" in doc.data else None,
    )


def _check_against_manifest(result: CleaningResult, manifest: SnapshotManifest, location: str) -> None:
    def fail(message: str) -> None:
        raise InvalidCleaningResultError(f"{location}: {message}")

    if (result.snapshot_id, result.topic, result.partition) != (
        manifest.snapshot_id, manifest.topic, manifest.partition
    ):
        fail(
            f"it is for snapshot {result.snapshot_id!r} ({result.topic}-{result.partition}), not "
            f"{manifest.snapshot_id!r} ({manifest.topic}-{manifest.partition})"
        )
    expected_inputs = tuple((s.base_offset, s.size_bytes, s.crc32c) for s in manifest.segments)
    if result.input_segments != expected_inputs:
        fail("input_segments differ from the snapshot manifest's segments")
    bases = [segment.base_offset for segment in manifest.segments]
    replaced = list(result.replaced_segments)
    if not replaced or replaced != bases[: len(replaced)]:
        fail(f"replaced_segments {replaced[:8]} must be a non-empty prefix of the snapshot's segments {bases[:8]}")
    range_end = bases[len(replaced)] if len(replaced) < len(bases) else manifest.first_uncleanable_offset
    if not manifest.first_dirty_offset <= result.cleaned_up_to_offset <= range_end:
        fail(
            f"cleaned_up_to_offset {result.cleaned_up_to_offset} is outside [{manifest.first_dirty_offset}, "
            f"{range_end}] (first dirty offset, end of the replaced segments)"
        )
    if result.cleaned_up_to_offset != range_end:
        # A checkpoint short of the replaced segments: their records past it were cleaned with
        # an offset map the result does not own up to (Kafka cleans only below its map's end).
        fail(
            f"cleaned_up_to_offset {result.cleaned_up_to_offset} falls short of the end of the replaced "
            f"segments, {range_end}: the checkpoint must cover every segment the result replaces"
        )
    previous = -1
    for output in result.output_segments:
        if output.base_offset not in replaced:
            fail(f"output segment {output.base_offset} is not named after a replaced segment's base offset")
        if output.base_offset <= previous:
            fail(f"output segments are not in ascending base-offset order at {output.base_offset}")
        previous = output.base_offset


# -- JSON helpers ------------------------------------------------------------------------------


def _load(data: bytes, location: str, bytes_max: int, *, numbers_marked: bool = False) -> Any:
    """The document's JSON value through the bounded reader (size, depth, numbers checked)."""
    return read_json_document(data, location, InvalidCleaningResultError, bytes_max=bytes_max,
                              numbers_marked=numbers_marked)


def _checked_int(value: Any, where: str, low: int, high: int) -> int:
    return checked_int(value, where, low, high, InvalidCleaningResultError)


class _Doc(Fields):
    """One JSON object of a cleaning document, with typed, located field access."""

    def __init__(self, data: Any, location: str) -> None:
        super().__init__(data, location, InvalidCleaningResultError)

    def crc(self, name: str) -> int:
        text = self.get(name, str)
        if not _CRC.fullmatch(text):
            self.fail(name, f"expected 8 lowercase hex digits, found {text[:20]!r}")
        return int(text, 16)

    def format(self) -> None:
        found = self.get("format", int)
        if found != MANIFEST_FORMAT:
            self.fail("format", f"expected {MANIFEST_FORMAT}, found {found}")
