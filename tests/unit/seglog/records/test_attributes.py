"""Batch attribute bits (kafka-storage.md 2.2)."""

import pytest

from seglog.records import Compression, TimestampType
from seglog.records.attributes import make_attributes


def test_codec_ids_are_kafkas():
    assert [(c.name, c.value) for c in Compression] == [("NONE", 0), ("GZIP", 1), ("SNAPPY", 2), ("LZ4", 3), ("ZSTD", 4)]


def test_timestamp_types_are_kafkas():
    assert (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME) == (0, 1)


@pytest.mark.parametrize(
    ("kwargs", "attributes"),
    [
        ({}, 0x00),
        ({"compression": Compression.ZSTD}, 0x04),
        ({"timestamp_type": TimestampType.LOG_APPEND_TIME}, 0x08),
        ({"is_transactional": True}, 0x10),
        ({"is_control": True}, 0x20),
        ({"has_delete_horizon": True}, 0x40),
        (
            {
                "compression": Compression.LZ4,
                "timestamp_type": TimestampType.LOG_APPEND_TIME,
                "is_transactional": True,
                "is_control": True,
                "has_delete_horizon": True,
            },
            0x7B,
        ),
    ],
)
def test_make_attributes_sets_one_bit_range_per_part(kwargs, attributes):
    compression = kwargs.pop("compression", Compression.NONE)
    timestamp_type = kwargs.pop("timestamp_type", TimestampType.CREATE_TIME)
    assert make_attributes(compression, timestamp_type, **kwargs) == attributes
