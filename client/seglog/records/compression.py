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

Decompression is capped: a few KiB of zstd or gzip can expand to gigabytes (a decompression
bomb), so every codec decompresses as a stream and stops one byte past ``output_bytes_max``
(``DecompressionLimitError``) instead of allocating what the input claims.  Snappy's raw blocks
state their uncompressed length up front; it is checked before the block is decompressed.
"""

from __future__ import annotations

import io
import zlib

import lz4.frame
import zstandard

from . import xerial
from .attributes import Compression
from .errors import CorruptRecordError, DecompressionLimitError, UnsupportedCompressionError

GZIP_LEVEL = 6  # java.util.zip.Deflater.DEFAULT_COMPRESSION, what Kafka's gzip uses by default
_GZIP_WBITS = 16 + zlib.MAX_WBITS  # 16 + window bits: zlib writes a gzip header and trailer
ZSTD_LEVEL = 3  # Kafka's CompressionType.ZSTD default level (zstd's own default)
# The output cap when the caller names none: far above any batch a producer builds (Kafka's
# max.message.bytes default is 1 MiB of *compressed* bytes; producers compress 2-10x), far below
# what would hurt a process that decompresses a few batches at a time.
DECOMPRESSED_BYTES_MAX = 64 * 1024 * 1024
# Streaming decompressors hand out output in steps this large, so the cap is checked often.
_STEP_BYTES = 1024 * 1024


def _gzip_compress(data) -> bytes:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    return compressor.compress(data) + compressor.flush()


def _too_large(name: str, output_bytes_max: int) -> DecompressionLimitError:
    return DecompressionLimitError(
        f"{name} records decompress to more than {output_bytes_max} bytes (decompressed_bytes_max): "
        f"refused as a possible decompression bomb"
    )


def _gzip_decompress(data, output_bytes_max: int) -> bytes:
    """One or more gzip members, at most ``output_bytes_max`` bytes out.  zlib directly: gzip.decompress
    parses headers in Python and takes three times as long on a 120 KiB batch."""
    parts = []
    produced = 0
    remaining = bytes(data)
    while True:
        decompressor = zlib.decompressobj(_GZIP_WBITS)
        chunk = remaining
        while True:
            # max_length bounds each call's output; unconsumed_tail holds the input not yet used.
            out = decompressor.decompress(chunk, min(_STEP_BYTES, output_bytes_max - produced + 1))
            produced += len(out)
            if produced > output_bytes_max:
                raise _too_large("gzip", output_bytes_max)
            parts.append(out)
            chunk = decompressor.unconsumed_tail
            if decompressor.eof or not chunk and not out:
                break
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


def _zstd_decompress(data, output_bytes_max: int) -> bytes:
    """One or more complete zstd frames.  First a streaming read that never produces more than
    ``output_bytes_max`` + 1 bytes, whatever content size a frame header claims; then, with the
    size known to be within the cap, the frame-by-frame pass that refuses a truncated frame
    (python-zstandard's stream reader returns a truncated frame's output quietly)."""
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(data)), read_across_frames=True)
    produced = 0
    while True:
        out = reader.read(min(_STEP_BYTES, output_bytes_max - produced + 1))
        if not out:
            break
        produced += len(out)
        if produced > output_bytes_max:
            raise _too_large("zstd", output_bytes_max)
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


def _lz4_decompress(data, output_bytes_max: int) -> bytes:
    """One or more LZ4 frames, each through a streaming decompressor bounded by max_length."""
    parts = []
    produced = 0
    remaining = bytes(data)
    while remaining:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        chunk = remaining
        while True:
            out = decompressor.decompress(chunk, max_length=min(_STEP_BYTES, output_bytes_max - produced + 1))
            produced += len(out)
            if produced > output_bytes_max:
                raise _too_large("lz4", output_bytes_max)
            parts.append(out)
            chunk = b""
            if decompressor.eof or decompressor.needs_input:
                break
        if not decompressor.eof:
            raise ValueError("truncated lz4 frame: expected its end mark, found the end of the data")
        remaining = decompressor.unused_data
    return b"".join(parts)


def _snappy_decompress(data, output_bytes_max: int) -> bytes:
    return xerial.unframe(data, output_bytes_max, _too_large)


_COMPRESSORS = {
    Compression.GZIP: _gzip_compress,
    Compression.SNAPPY: xerial.frame,
    Compression.LZ4: _lz4_compress,
    Compression.ZSTD: _zstd_compress,
}
_DECOMPRESSORS = {
    Compression.GZIP: _gzip_decompress,
    Compression.SNAPPY: _snappy_decompress,
    Compression.LZ4: _lz4_decompress,
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


def decompress(compression: int, data, output_bytes_max: int = DECOMPRESSED_BYTES_MAX) -> bytes:
    """The records area `data` (bytes-like) uncompressed; DecompressionLimitError when it would
    be more than ``output_bytes_max`` bytes (nothing larger is ever allocated)."""
    if compression == Compression.NONE:
        return bytes(data)
    try:
        decompressor = _DECOMPRESSORS[compression]
    except KeyError:
        raise _unsupported(compression) from None
    try:
        return decompressor(data, output_bytes_max)
    except DecompressionLimitError:
        raise
    except Exception as exc:  # each library raises its own types; translated once, here
        name = Compression(compression).name.lower()
        raise CorruptRecordError(f"Failed to decompress {name} records: expected a valid {name} stream, found {exc}") from exc
