"""The batch header layout: kafka-storage.md 2.1, offsets derived from HEADER."""

import struct

import pytest

from seglog import records
from seglog.records import header


def test_header_is_61_big_endian_bytes_in_kafkas_field_order():
    assert records.HEADER.format == ">qiibIhiqqqhii"
    assert records.HEADER.size == records.RECORD_BATCH_OVERHEAD == 61


@pytest.mark.parametrize(
    ("name", "offset"),
    [
        ("BASE_OFFSET_OFFSET", 0),
        ("LENGTH_OFFSET", 8),
        ("PARTITION_LEADER_EPOCH_OFFSET", 12),
        ("MAGIC_OFFSET", 16),
        ("CRC_OFFSET", 17),
        ("ATTRIBUTES_OFFSET", 21),
        ("LAST_OFFSET_DELTA_OFFSET", 23),
        ("BASE_TIMESTAMP_OFFSET", 27),
        ("MAX_TIMESTAMP_OFFSET", 35),
        ("PRODUCER_ID_OFFSET", 43),
        ("PRODUCER_EPOCH_OFFSET", 51),
        ("BASE_SEQUENCE_OFFSET", 53),
        ("RECORDS_COUNT_OFFSET", 57),
        ("RECORDS_OFFSET", 61),
    ],
)
def test_field_offsets_match_the_spec_table(name, offset):
    assert getattr(records, name) == offset


def test_log_overhead_is_base_offset_plus_length():
    assert records.LOG_OVERHEAD == 12


def test_sentinels_are_kafkas():
    assert records.MAGIC == 2
    assert (records.NO_TIMESTAMP, records.NO_PRODUCER_ID, records.NO_PRODUCER_EPOCH) == (-1, -1, -1)
    assert (records.NO_SEQUENCE, records.NO_PARTITION_LEADER_EPOCH) == (-1, -1)


def test_file_iterator_limits_are_kafkas_file_log_input_stream_constants():
    assert header.HEADER_BYTES_UP_TO_MAGIC == 17
    assert header.BATCH_LENGTH_MIN == 14
    assert header.V2_BATCH_LENGTH_MIN == 49


def test_field_struct_patches_exactly_one_field():
    packed = bytearray(records.HEADER.pack(*range(13)))
    header.field_struct(header.MAX_TIMESTAMP_FIELD).pack_into(packed, records.MAX_TIMESTAMP_OFFSET, -7)
    fields = list(range(13))
    fields[header.MAX_TIMESTAMP_FIELD] = -7
    assert records.HEADER.unpack(packed) == tuple(fields)
    assert header.field_struct(header.CRC_FIELD).size == struct.calcsize(">I")
