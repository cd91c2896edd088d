"""Snappy in xerial framing: the layout Kafka's Java producer writes, and raw snappy reads."""

import os
import struct

import cramjam
import pytest

from seglog.records import xerial


def test_frame_starts_with_the_xerial_magic_version_and_compatible_version():
    framed = xerial.frame(b"hello")
    assert framed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


def test_frame_writes_one_length_prefixed_raw_block():
    framed = xerial.frame(b"hello")
    (block_bytes,) = struct.unpack_from(">i", framed, 16)
    assert 16 + 4 + block_bytes == len(framed)
    assert bytes(cramjam.snappy.decompress_raw(framed[20:])) == b"hello"


def test_frame_cuts_input_into_32_kib_blocks_like_snappy_java():
    data = os.urandom(xerial.XERIAL_BLOCK_BYTES * 2 + 1)
    framed = xerial.frame(data)
    position, uncompressed_sizes = 16, []
    while position < len(framed):
        (block_bytes,) = struct.unpack_from(">i", framed, position)
        block = framed[position + 4 : position + 4 + block_bytes]
        uncompressed_sizes.append(len(bytes(cramjam.snappy.decompress_raw(block))))
        position += 4 + block_bytes
    assert uncompressed_sizes == [32768, 32768, 1]


@pytest.mark.parametrize("size", [0, 1, 1000, 32768, 100_000])
def test_unframe_reverses_frame(size):
    data = os.urandom(size // 2) * 2
    assert xerial.unframe(xerial.frame(data)) == data


def test_unframe_reads_a_raw_snappy_block():
    data = b"raw snappy as librdkafka and kafka-python write it" * 20
    assert xerial.unframe(bytes(cramjam.snappy.compress_raw(data))) == data


def test_is_framed_needs_the_whole_16_byte_header():
    assert xerial.is_framed(xerial.frame(b""))
    assert not xerial.is_framed(b"\x82SNAPPY\x00")


def test_unframe_rejects_a_block_length_past_the_end():
    framed = xerial.frame(b"hello")
    with pytest.raises(ValueError, match="bad xerial block length at byte 16: expected 0..6, found 7"):
        xerial.unframe(framed[:-1])


def test_unframe_rejects_a_cut_block_length():
    framed = xerial.frame(b"hello") + b"\x00\x00"
    with pytest.raises(ValueError, match="truncated xerial block length at byte 27: expected 4 bytes, found 2"):
        xerial.unframe(framed)
