"""Request checks the storage engine cannot make: fields a request must set and their ranges.

Each raises InvalidRequestError (INVALID_ARGUMENT) naming the field and the value found. Topic
names are checked here only for emptiness; their full rules (Kafka's) belong to the storage.
Offsets are not checked here: an offset outside the log is the storage's OUT_OF_RANGE.
"""

from __future__ import annotations

from seglog.v1 import log_service_pb2 as pb

from .errors import InvalidRequestError

__all__ = [
    "LATEST_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "HIGH_WATERMARK_OFFSET",
    "check_acks",
    "check_non_negative",
    "check_partition_ref",
    "check_start_position",
    "check_target_timestamp",
]

# OffsetsForTimes special targets (Kafka's ListOffsets values).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
# DeleteRecords: "up to the high watermark", i.e. delete everything.
HIGH_WATERMARK_OFFSET = -1


def check_partition_ref(topic: str, partition: int) -> tuple[str, int]:
    if not topic:
        raise InvalidRequestError("topic is empty")
    if partition < 0:
        raise InvalidRequestError(f"partition must be >= 0, found {partition}")
    return topic, partition


def check_non_negative(field: str, value: int) -> int:
    if value < 0:
        raise InvalidRequestError(f"{field} must be >= 0, found {value}")
    return value


def check_acks(value: int) -> int:
    if value not in (pb.ACKS_UNSPECIFIED, pb.ACKS_WRITTEN, pb.ACKS_FSYNCED):
        raise InvalidRequestError(f"unknown acks {value}")
    return value


def check_start_position(value: int) -> int:
    known = (pb.START_POSITION_UNSPECIFIED, pb.START_POSITION_EARLIEST, pb.START_POSITION_LATEST)
    if value not in known:
        raise InvalidRequestError(f"unknown start position {value}")
    return value


def check_target_timestamp(value: int) -> int:
    if value < MAX_TIMESTAMP:
        raise InvalidRequestError(
            f"timestamp_ms must be >= 0 or one of -1 (latest), -2 (earliest), -3 (max "
            f"timestamp), found {value}"
        )
    return value
