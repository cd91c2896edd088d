"""Compression codecs of the records area, as Kafka writes and reads them for magic 2.

| id | codec  | written as                                     | read                       |
| -- | ------ | ---------------------------------------------- | -------------------------- |
| 0  | none   | the records as they are                        |                            |
| 1  | gzip   | one gzip member, zlib level 6 (Java's default) | one or more gzip members   |
| 2  | snappy | xerial block framing (xerial.py)               | xerial-framed or raw       |
| 3  | lz4    | LZ4 frame: independent 64 KiB blocks, no block | any LZ4 frame              |
|    |        | or content checksum, no content size (Kafka's  |                            |
|    |        | Lz4BlockOutputStream; its reader refuses       |                            |
|    |        | linked blocks)                                 |                            |
| 4  | zstd   | one zstd frame, level 3 (Kafka's default)      | one or more complete frames|

Unknown codec ids raise UnsupportedCompressionError; input a codec cannot decompress raises
CorruptRecordError, with the library's own error chained as the cause.
"""

from __future__ import annotations

import zlib

import lz4.frame
import zstandard

from . import xerial
from .attributes import Compression
from .errors import CorruptRecordError, UnsupportedCompressionError

GZIP_LEVEL = 6  # java.util.zip.Deflater.DEFAULT_COMPRESSION, what Kafka's gzip uses by default
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # 16 + window bits: zlib writes a gzip header and trailer
ZSTD_LEVEL = 3  # Kafka's CompressionType.ZSTD default level (zstd's own default)


def _gzip_compress(data) -> bytes:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    return compressor.compress(data) + compressor.flush()


def _gzip_decompress(data) -> bytes:
    """One or more gzip members.  zlib directly: gzip.decompress parses headers in Python
    and takes three times as long on a 120 KiB batch."""
    parts = []
    remaining = data
    while True:
        decompressor = zlib.decompressobj(_GZIP_WBITS)
        parts.append(decompressor.decompress(remaining))
        if not decompressor.eof:
            raise ValueError("truncated gzip member: expected its end-of-stream marker and trailer, found the end of the data")
        remaining = decompressor.unused_data
        if not remaining:
            return b"".join(parts)


def _lz4_compress(data) -> bytes:
    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _zstd_compress(data) -> bytes:
    return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)


def _zstd_decompress(data) -> bytes:
    parts = []
    remaining = data
    while True:
        decompressor = zstandard.ZstdDecompressor().decompressobj()
        parts.append(decompressor.decompress(remaining))
        if not decompressor.eof:
            raise ValueError("truncated zstd frame: expected a complete frame, found the end of the data")
        remaining = decompressor.unused_data
        if not remaining:
            return b"".join(parts)


_COMPRESSORS = {
    Compression.GZIP: _gzip_compress,
    Compression.SNAPPY: xerial.frame,
    Compression.LZ4: _lz4_compress,
    Compression.ZSTD: _zstd_compress,
}
_DECOMPRESSORS = {
    Compression.GZIP: _gzip_decompress,
    Compression.SNAPPY: xerial.unframe,
    Compression.LZ4: lz4.frame.decompress,
    Compression.ZSTD: _zstd_decompress,
}
assert set(_COMPRESSORS) == set(_DECOMPRESSORS) == set(Compression) - {Compression.NONE}


def _unsupported(compression) -> UnsupportedCompressionError:
    known = ", ".join(f"{c.value} ({c.name.lower()})" for c in Compression)
    return UnsupportedCompressionError(f"Unsupported compression codec id: expected one of {known}, found {compression}")


def check_compression(compression) -> Compression:
    """The Compression for a codec id, or UnsupportedCompressionError."""
    try:
        return Compression(compression)
    except ValueError:
        raise _unsupported(compression) from None


def compress(compression: int, data) -> bytes:
    """The records area `data` compressed with `compression` (NONE: returned as bytes)."""
    if compression == Compression.NONE:
        return bytes(data)
    try:
        compressor = _COMPRESSORS[compression]
    except KeyError:
        raise _unsupported(compression) from None
    return compressor(data)


def decompress(compression: int, data) -> bytes:
    """The records area `data` (bytes-like) uncompressed."""
    if compression == Compression.NONE:
        return bytes(data)
    try:
        decompressor = _DECOMPRESSORS[compression]
    except KeyError:
        raise _unsupported(compression) from None
    try:
        return decompressor(data)
    except Exception as exc:  # each library raises its own types; translated once, here
        name = Compression(compression).name.lower()
        raise CorruptRecordError(f"Failed to decompress {name} records: expected a valid {name} stream, found {exc}") from exc
