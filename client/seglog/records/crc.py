"""CRC-32C (Castagnoli), the checksum of v2 record batches.

`crc32c(data, value=0) -> int` is the `crc32c` package's C function, re-exported as is: it
uses the CPU's CRC32 instruction where there is one (a pure-Python CRC is orders of
magnitude too slow for recovery scans), takes any bytes-like object (bytes, bytearray,
memoryview, mmap), and continues from `value`, the CRC of the bytes before `data`.
Check values: crc32c(b"123456789") == 0xE3069283; Kafka's crc32c(b"Some String") == 608512271.
"""

from __future__ import annotations

from crc32c import crc32c

__all__ = ["crc32c"]
