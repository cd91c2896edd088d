"""Topic configuration under Kafka's names, with Kafka's defaults.

A ``LogConfig`` is immutable; the log manager builds one per topic from the service defaults and
the ``configs`` map of CreateTopic (``from_properties``), and describes topics with
``to_properties``. One table below declares every known name: its field, type, default, bounds and
why. Unknown names and out-of-range values raise ``InvalidConfigError`` naming the key and value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from seglog.records import TimestampType

from .errors import InvalidConfigError

__all__ = ["LOCAL_RETENTION_AS_RETENTION", "LONG_MAX", "LogConfig"]

# Kafka's "no limit" for long settings (Long.MAX_VALUE).
LONG_MAX = 2**63 - 1
# A produced batch may decompress to at most this many times max.message.bytes (16 MiB at the
# default): producers' codecs reach 2-10x on real records; beyond 16x a batch is a bomb or a test.
DECOMPRESSION_RATIO_MAX = 16
# ... and at least this much, so a topic with a tiny max.message.bytes still takes normal batches.
DECOMPRESSED_BYTES_MIN = 1024 * 1024
# Segment files and positions are signed int32 in Kafka's format (FileRecords refuses larger files).
INT_MAX = 2**31 - 1

CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
_TIMESTAMP_TYPE_NAMES = {
    "CreateTime": TimestampType.CREATE_TIME,
    "LogAppendTime": TimestampType.LOG_APPEND_TIME,
}


@dataclass(frozen=True)
class _Spec:
    field: str
    kind: str  # "int", "float", "bool", "policy", "timestamp_type"
    minimum: float | None = None
    maximum: float | None = None


# name -> how it parses. Defaults are the dataclass field defaults below; bounds follow Kafka's
# LogConfig validators except where a comment says otherwise.
_SPECS: dict[str, _Spec] = {
    "segment.bytes": _Spec("segment_bytes", "int", 14, INT_MAX),
    "segment.ms": _Spec("segment_ms", "int", 1, LONG_MAX),
    "segment.jitter.ms": _Spec("segment_jitter_ms", "int", 0, LONG_MAX),
    # Kafka accepts 4, but an index smaller than one time-index entry (12 bytes) cannot be created;
    # we refuse it up front instead of failing at the first roll.
    "segment.index.bytes": _Spec("segment_index_bytes", "int", 12, INT_MAX),
    "index.interval.bytes": _Spec("index_interval_bytes", "int", 0, INT_MAX),
    "retention.ms": _Spec("retention_ms", "int", -1, LONG_MAX),
    "retention.bytes": _Spec("retention_bytes", "int", -1, LONG_MAX),
    "cleanup.policy": _Spec("cleanup_policy", "policy"),
    "min.cleanable.dirty.ratio": _Spec("min_cleanable_dirty_ratio", "float", 0.0, 1.0),
    "delete.retention.ms": _Spec("delete_retention_ms", "int", 0, LONG_MAX),
    "min.compaction.lag.ms": _Spec("min_compaction_lag_ms", "int", 0, LONG_MAX),
    "max.compaction.lag.ms": _Spec("max_compaction_lag_ms", "int", 1, LONG_MAX),
    "max.message.bytes": _Spec("max_message_bytes", "int", 0, INT_MAX),
    "message.timestamp.type": _Spec("message_timestamp_type", "timestamp_type"),
    "message.timestamp.before.max.ms": _Spec("message_timestamp_before_max_ms", "int", 0, LONG_MAX),
    "message.timestamp.after.max.ms": _Spec("message_timestamp_after_max_ms", "int", 0, LONG_MAX),
    "flush.messages": _Spec("flush_messages", "int", 1, LONG_MAX),
    "flush.ms": _Spec("flush_ms", "int", 0, LONG_MAX),
    "file.delete.delay.ms": _Spec("file_delete_delay_ms", "int", 0, LONG_MAX),
    "preallocate": _Spec("preallocate", "bool"),
    # A broker setting in Kafka; per topic here too, so a test or a busy topic can shorten it.
    "producer.id.expiration.ms": _Spec("producer_id_expiration_ms", "int", 1, LONG_MAX),
    # Tiered storage (KIP-405, docs/tiered-storage.md): -2 means "as retention.ms/bytes".
    "remote.storage.enable": _Spec("remote_storage_enable", "bool"),
    "local.retention.ms": _Spec("local_retention_ms", "int", -2, LONG_MAX),
    "local.retention.bytes": _Spec("local_retention_bytes", "int", -2, LONG_MAX),
}

# local.retention.*'s "the same as retention.*" (Kafka's default for both).
LOCAL_RETENTION_AS_RETENTION = -2


@dataclass(frozen=True)
class LogConfig:
    """One topic's settings. Field names are Kafka's keys in snake_case with their units."""

    # 1 GiB: few enough files for a busy partition, small enough that retention (which deletes
    # whole segments only) stays close to retention.ms / retention.bytes.
    segment_bytes: int = 1_073_741_824
    # 7 days: a quiet partition still rolls, so its old data becomes deletable.
    segment_ms: int = 604_800_000
    segment_jitter_ms: int = 0
    # 10 MiB per index: 1,310,720 offset entries cover a 1 GiB segment at the 4 KiB interval.
    segment_index_bytes: int = 10_485_760
    # 4 KiB of log per index entry: one index probe then at most ~4 KiB of batch headers to scan.
    index_interval_bytes: int = 4096
    retention_ms: int = 604_800_000
    retention_bytes: int = -1
    cleanup_policy: frozenset[str] = frozenset({CLEANUP_DELETE})
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    # 1 MiB + the 12-byte log overhead, Kafka's default largest batch.
    max_message_bytes: int = 1_048_588
    message_timestamp_type: TimestampType = TimestampType.CREATE_TIME
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    # Never fsync on a count or a timer by default: like Kafka, durability of acknowledged writes
    # is a per-request choice (acks after fsync) or this per-topic policy.
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    # 1 minute between renaming a segment to .deleted and unlinking it, so in-flight reads finish.
    file_delete_delay_ms: int = 60_000
    preallocate: bool = False
    # 1 day (Kafka's default): an idle idempotent producer's state on a partition is forgotten
    # after this long without a batch; its next batch may then start at any sequence.
    producer_id_expiration_ms: int = 86_400_000
    # Tiered storage: off by default (Kafka's default); closed segments are copied to the object
    # store and the local copy kept for local.retention.* (-2: as long as retention.*).
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2

    def __post_init__(self) -> None:
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"min.compaction.lag.ms ({self.min_compaction_lag_ms}) must not exceed "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})"
            )
        if not self.cleanup_policy or not self.cleanup_policy <= {CLEANUP_DELETE, CLEANUP_COMPACT}:
            raise InvalidConfigError(
                f"cleanup.policy must be delete, compact or both, found {sorted(self.cleanup_policy)}"
            )
        if self.remote_storage_enable and self.is_compacted:
            # Kafka refuses it too: the cleaner rewrites local segments, remote ones never change.
            raise InvalidConfigError(
                "remote.storage.enable=true is not supported on a compacted topic "
                f"(cleanup.policy={','.join(sorted(self.cleanup_policy))}): tiered storage needs "
                "cleanup.policy=delete"
            )
        # Kafka's rule: local retention may not exceed the whole log's (-1 is unlimited).
        for local, whole in (("ms", self.retention_ms), ("bytes", self.retention_bytes)):
            local_value = getattr(self, f"local_retention_{local}")
            if whole != -1 and local_value != LOCAL_RETENTION_AS_RETENTION and (
                    local_value == -1 or local_value > whole):
                raise InvalidConfigError(
                    f"local.retention.{local} ({local_value}) must not exceed retention.{local} "
                    f"({whole}): the local copy is part of the whole log"
                )

    # -- derived ----------------------------------------------------------------------------
    @property
    def decompressed_bytes_max(self) -> int:
        """The most a produced compressed batch may decompress to: ``max.message.bytes`` times
        DECOMPRESSION_RATIO_MAX, at least DECOMPRESSED_BYTES_MIN. Kafka has no such cap (a
        zstd batch of a few KiB can make its broker allocate gigabytes); seglog refuses the
        batch before allocating more."""
        return max(self.max_message_bytes * DECOMPRESSION_RATIO_MAX, DECOMPRESSED_BYTES_MIN)

    @property
    def is_compacted(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def is_delete(self) -> bool:
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def local_retention_ms_effective(self) -> int:
        """local.retention.ms, its -2 resolved to retention.ms."""
        if self.local_retention_ms == LOCAL_RETENTION_AS_RETENTION:
            return self.retention_ms
        return self.local_retention_ms

    @property
    def local_retention_bytes_effective(self) -> int:
        """local.retention.bytes, its -2 resolved to retention.bytes."""
        if self.local_retention_bytes == LOCAL_RETENTION_AS_RETENTION:
            return self.retention_bytes
        return self.local_retention_bytes

    @property
    def roll_ms(self) -> int:
        """segment.ms, capped by max.compaction.lag.ms on compacted topics so dirty data leaves
        the active segment in time to be cleaned."""
        if self.is_compacted:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    def replace(self, **changes: Any) -> LogConfig:
        return dataclasses.replace(self, **changes)

    # -- Kafka names ------------------------------------------------------------------------
    @classmethod
    def known_names(cls) -> list[str]:
        return sorted(_SPECS)

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str], defaults: LogConfig | None = None
    ) -> LogConfig:
        """Parses Kafka-named settings over ``defaults`` (or Kafka's defaults)."""
        base = defaults if defaults is not None else cls()
        changes: dict[str, Any] = {}
        for name, text in props.items():
            spec = _SPECS.get(name)
            if spec is None:
                raise InvalidConfigError(
                    f"unknown topic config {name!r}; known configs: {', '.join(sorted(_SPECS))}"
                )
            changes[spec.field] = _PARSERS[spec.kind](name, str(text), spec)
        return dataclasses.replace(base, **changes)

    def to_properties(self) -> dict[str, str]:
        return {name: _format(getattr(self, spec.field)) for name, spec in sorted(_SPECS.items())}


def _parse_int(name: str, text: str, spec: _Spec) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidConfigError(f"{name} must be an integer, found {text!r}") from None
    _check_bounds(name, value, spec)
    return value


def _parse_float(name: str, text: str, spec: _Spec) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise InvalidConfigError(f"{name} must be a number, found {text!r}") from None
    if value != value:  # NaN
        raise InvalidConfigError(f"{name} must be a number, found {text!r}")
    _check_bounds(name, value, spec)
    return value


def _parse_bool(name: str, text: str, spec: _Spec) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise InvalidConfigError(f"{name} must be true or false, found {text!r}")
    return lowered == "true"


def _parse_policy(name: str, text: str, spec: _Spec) -> frozenset[str]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    allowed = {CLEANUP_DELETE, CLEANUP_COMPACT}
    if not parts or any(part not in allowed for part in parts):
        raise InvalidConfigError(
            f"{name} must be a list of delete and/or compact, found {text!r}"
        )
    return frozenset(parts)


def _parse_timestamp_type(name: str, text: str, spec: _Spec) -> TimestampType:
    value = _TIMESTAMP_TYPE_NAMES.get(text.strip())
    if value is None:
        raise InvalidConfigError(f"{name} must be CreateTime or LogAppendTime, found {text!r}")
    return value


def _check_bounds(name: str, value: float, spec: _Spec) -> None:
    if spec.minimum is not None and value < spec.minimum:
        raise InvalidConfigError(f"{name} must be at least {spec.minimum}, found {value}")
    if spec.maximum is not None and value > spec.maximum:
        raise InvalidConfigError(f"{name} must be at most {spec.maximum}, found {value}")


_PARSERS: dict[str, Callable[[str, str, _Spec], Any]] = {
    "int": _parse_int,
    "float": _parse_float,
    "bool": _parse_bool,
    "policy": _parse_policy,
    "timestamp_type": _parse_timestamp_type,
}


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, TimestampType):
        return {v: k for k, v in _TIMESTAMP_TYPE_NAMES.items()}[value]
    if isinstance(value, frozenset):
        return ",".join(sorted(value))
    return str(value)
