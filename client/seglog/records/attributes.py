"""The batch `attributes` field: compression codec, timestamp type and flag bits.

Bits of the int16 (only the low byte is used)::

    0-2  compression codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd
    3    timestamp type: 0 CreateTime, 1 LogAppendTime
    4    transactional
    5    control (transaction markers and other broker-written records)
    6    delete horizon set: baseTimestamp holds the delete horizon (KIP-534)
    7-15 unused, 0
"""

from __future__ import annotations

import enum

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40
TIMESTAMP_TYPE_SHIFT = 3

assert TIMESTAMP_TYPE_MASK == 1 << TIMESTAMP_TYPE_SHIFT
assert COMPRESSION_MASK & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK) == 0


class Compression(enum.IntEnum):
    """Compression codec ids, as stored in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    """Attribute bit 3: who set the timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


assert max(Compression) <= COMPRESSION_MASK


def make_attributes(
    compression: int,
    timestamp_type: int,
    *,
    is_transactional: bool = False,
    is_control: bool = False,
    has_delete_horizon: bool = False,
) -> int:
    """Compose the attributes int16 from its parts."""
    assert 0 <= compression <= COMPRESSION_MASK
    assert timestamp_type in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)
    attributes = compression | (timestamp_type << TIMESTAMP_TYPE_SHIFT)
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    return attributes
