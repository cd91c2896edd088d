"""Producer snapshot files: Kafka's ProducerSnapshot v1 layout byte for byte, CRC-32C, and the
checks a file read back from disk must pass (ports of ProducerStateManagerTest's snapshot cases)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog_server.storage.base.errors import CorruptProducerSnapshotError
from seglog_server.storage.base.fs import REAL_FS
from seglog_server.storage.producers.producer_snapshot import (
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    is_snapshot_file,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)


def _crc32c_reference(data: bytes) -> int:
    """Bitwise CRC-32C (Castagnoli, reflected 0x82F63B78): an oracle independent of the codec."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_reference_crc32c_matches_the_standard_check_value():
    assert _crc32c_reference(b"123456789") == 0xE3069283


def test_snapshot_bytes_are_kafkas_producer_snapshot_v1():
    entry = SnapshotEntry(producer_id=1000, epoch=0, last_sequence=9, last_offset=41, offset_delta=4, timestamp_ms=1_700_000_000_000)
    data = encode_snapshot([entry])
    # Written out field by field from ProducerSnapshot.json (version-prefixed, not flexible).
    body = (
        struct.pack(">i", 1)  # entry count (int32 array length)
        + struct.pack(">q", 1000)  # ProducerId
        + struct.pack(">h", 0)  # Epoch
        + struct.pack(">i", 9)  # LastSequence
        + struct.pack(">q", 41)  # LastOffset
        + struct.pack(">i", 4)  # OffsetDelta
        + struct.pack(">q", 1_700_000_000_000)  # Timestamp
        + struct.pack(">i", -1)  # CoordinatorEpoch
        + struct.pack(">q", -1)  # CurrentTxnFirstOffset
    )
    assert data == struct.pack(">hI", 1, _crc32c_reference(body)) + body
    assert len(data) == 10 + 46


def test_an_empty_state_is_a_ten_byte_file():
    data = encode_snapshot([])
    assert data == struct.pack(">hIi", 1, _crc32c_reference(struct.pack(">i", 0)), 0)


entries_strategy = st.lists(
    st.builds(
        SnapshotEntry,
        producer_id=st.integers(0, 2**63 - 1),
        epoch=st.integers(0, 2**15 - 1),
        last_sequence=st.integers(-1, 2**31 - 1),
        last_offset=st.integers(-1, 999),
        offset_delta=st.integers(0, 2**31 - 1),
        timestamp_ms=st.integers(-1, 2**62),
    ),
    max_size=20,
)


@given(entries_strategy)
def test_round_trip_keeps_every_entry(entries):
    assert decode_snapshot(encode_snapshot(entries), 1000) == entries


@given(entries_strategy.filter(bool), st.data())
def test_any_flipped_byte_or_cut_is_refused(entries, data):
    raw = bytearray(encode_snapshot(entries))
    if data.draw(st.booleans()):
        position = data.draw(st.integers(0, len(raw) - 1))
        raw[position] ^= data.draw(st.integers(1, 255))
    else:
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    with pytest.raises(CorruptProducerSnapshotError):
        decode_snapshot(bytes(raw), 1000)


def test_an_entry_at_or_above_the_snapshot_offset_is_refused():
    data = encode_snapshot([SnapshotEntry(1, 0, 0, 50, 0, 5)])
    assert decode_snapshot(data, 51)
    with pytest.raises(CorruptProducerSnapshotError, match="below the snapshot offset 50"):
        decode_snapshot(data, 50)


def test_a_count_that_disagrees_with_the_size_is_refused_before_the_crc():
    data = bytearray(encode_snapshot([SnapshotEntry(1, 0, 0, 5, 0, 5)]))
    struct.pack_into(">i", data, 6, 2**31 - 1)
    with pytest.raises(CorruptProducerSnapshotError, match="entries need"):
        decode_snapshot(bytes(data), 10)


def test_an_unknown_version_is_refused():
    data = bytearray(encode_snapshot([]))
    struct.pack_into(">h", data, 0, 2)
    with pytest.raises(CorruptProducerSnapshotError, match="unknown version 2"):
        decode_snapshot(bytes(data), 10)


def test_write_then_read_through_the_file_system(tmp_path):
    entries = [SnapshotEntry(7, 1, 3, 9, 3, 123)]
    path = write_snapshot(REAL_FS, str(tmp_path), 10, entries, sync=True)
    assert path == snapshot_path(str(tmp_path), 10)
    assert path.endswith("00000000000000000010.snapshot")
    assert read_snapshot(REAL_FS, path, 10) == entries


def test_snapshot_file_names_are_twenty_digits_and_the_suffix():
    assert is_snapshot_file("00000000000000000010.snapshot")
    assert not is_snapshot_file("10.snapshot")
    assert not is_snapshot_file("00000000000000000010.snapshot.deleted")
    assert not is_snapshot_file("00000000000000000010.log")
