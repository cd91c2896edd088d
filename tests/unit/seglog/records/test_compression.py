"""Records-area codecs: round trips, Kafka's stream formats, unknown ids and corrupt input."""

import gzip
import os
import zlib

import lz4.frame
import pytest
import zstandard

from seglog.records import Compression, CorruptRecordError, UnsupportedCompressionError
from seglog.records.compression import check_compression, compress, decompress

DATA = b"".join(os.urandom(16) + b"a fairly compressible value " * 3 for _ in range(500))


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("data", [b"", b"x", DATA], ids=["empty", "one-byte", "records"])
def test_every_codec_round_trips(compression, data):
    compressed = compress(compression, data)
    assert decompress(compression, compressed) == data
    assert decompress(compression, memoryview(b"..." + compressed)[3:]) == data


def test_none_passes_bytes_through():
    assert compress(Compression.NONE, bytearray(b"abc")) == b"abc"


def test_gzip_writes_one_gzip_member_any_gzip_reader_reads():
    compressed = compress(Compression.GZIP, DATA)
    assert compressed[:2] == b"\x1f\x8b"
    assert gzip.decompress(compressed) == DATA


def test_gzip_reads_several_members():
    assert decompress(Compression.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_lz4_writes_kafkas_frame_descriptor():
    compressed = compress(Compression.LZ4, DATA)
    assert compressed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, little-endian 0x184D2204
    # FLG 0x60: version 01, independent blocks, no block/content checksum, no content size;
    # BD 0x40: 64 KiB maximum block size (Kafka's Lz4BlockOutputStream.BLOCKSIZE_64KB).
    assert compressed[4:6] == b"\x60\x40"
    assert lz4.frame.decompress(compressed) == DATA


def test_lz4_reads_a_frame_with_linked_blocks_and_checksums():
    compressed = lz4.frame.compress(DATA, block_linked=True, content_checksum=True, store_size=True)
    assert decompress(Compression.LZ4, compressed) == DATA


def test_zstd_reads_a_streamed_frame_without_content_size():
    # zstd-jni's output stream (Kafka's producer) does not know the size in advance.
    compressor = zstandard.ZstdCompressor(level=3, write_content_size=False)
    compressed = compressor.compress(DATA)
    assert zstandard.frame_content_size(compressed) == -1
    assert decompress(Compression.ZSTD, compressed) == DATA


def test_zstd_reads_consecutive_frames():
    compressed = compress(Compression.ZSTD, b"ab") + compress(Compression.ZSTD, b"cd")
    assert decompress(Compression.ZSTD, compressed) == b"abcd"


@pytest.mark.parametrize("compression", [c for c in Compression if c != Compression.NONE])
def test_truncated_stream_raises_corrupt_record_error_naming_the_codec(compression):
    compressed = compress(compression, DATA)
    name = compression.name.lower()
    with pytest.raises(CorruptRecordError, match=f"Failed to decompress {name} records: expected a valid {name} stream, found") as caught:
        decompress(compression, compressed[: len(compressed) // 2])
    assert caught.value.__cause__ is not None


@pytest.mark.parametrize("compression", [c for c in Compression if c != Compression.NONE])
def test_garbage_raises_corrupt_record_error(compression):
    with pytest.raises(CorruptRecordError, match="Failed to decompress"):
        decompress(compression, b"\x00\x01garbage" * 5)


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_id_raises_unsupported_compression_error(codec_id):
    message = f"expected one of 0 \\(none\\), 1 \\(gzip\\), 2 \\(snappy\\), 3 \\(lz4\\), 4 \\(zstd\\), found {codec_id}"
    for call in (check_compression, lambda c: compress(c, b"x"), lambda c: decompress(c, b"x")):
        with pytest.raises(UnsupportedCompressionError, match=message):
            call(codec_id)


def test_check_compression_returns_the_enum_member():
    assert check_compression(3) is Compression.LZ4


def test_gzip_level_is_javas_default():
    raw = zlib.compressobj(6, zlib.DEFLATED, 31)
    assert compress(Compression.GZIP, DATA) == raw.compress(DATA) + raw.flush()
