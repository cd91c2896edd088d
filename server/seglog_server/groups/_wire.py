"""Kafka's primitive types for the offsets topic's keys and values, over a buffer.

Big-endian fixed-width integers; STRING is an int16 length then UTF-8 (-1: null, where the field
is nullable); BYTES an int32 length; an array an int32 count. Flexible versions (KIP-482) use
COMPACT forms instead (an unsigned varint of length + 1, 0 meaning null) and end every struct with
tagged fields (a varint count, then per field a varint tag, a varint size and the bytes).
"""

from __future__ import annotations

import struct

from .errors import CorruptGroupRecordError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
STRING_BYTES_MAX = 0x7FFF  # an int16 length: Kafka refuses longer strings on write
UVARINT_BYTES_MAX = 5  # an unsigned varint of at most 32 bits


class Reader:
    """Reads primitives from ``data`` in order; every read checks the bytes left first, so a
    truncated or lying input raises CorruptGroupRecordError, never IndexError or struct.error."""

    def __init__(self, data: bytes | memoryview, what: str) -> None:
        self._data = memoryview(data)
        self._position = 0
        self._what = what

    def _take(self, size: int, field: str) -> memoryview:
        left = len(self._data) - self._position
        if size < 0 or size > left:
            raise CorruptGroupRecordError(
                f"{self._what}: {field} needs {size} bytes at position {self._position}, {left} left"
            )
        start = self._position
        self._position += size
        return self._data[start : self._position]

    def int8(self, field: str) -> int:
        return INT8.unpack(self._take(1, field))[0]

    def uuid(self, field: str) -> bytes:
        return bytes(self._take(16, field))

    def int16(self, field: str) -> int:
        return INT16.unpack(self._take(2, field))[0]

    def int32(self, field: str) -> int:
        return INT32.unpack(self._take(4, field))[0]

    def int64(self, field: str) -> int:
        return INT64.unpack(self._take(8, field))[0]

    def uvarint(self, field: str) -> int:
        value = shift = 0
        for _ in range(UVARINT_BYTES_MAX):
            byte = self._take(1, field)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if value > 0xFFFFFFFF:
                    break
                return value
            shift += 7
        raise CorruptGroupRecordError(f"{self._what}: {field} is a varint longer than 32 bits")

    def _length(self, field: str, compact: bool, wide: bool) -> int:
        """-1 for null, else the length (compact: the varint minus one)."""
        if compact:
            return self.uvarint(field) - 1
        return self.int32(field) if wide else self.int16(field)

    def string(self, field: str, *, compact: bool, nullable: bool = False) -> str | None:
        length = self._length(field, compact, wide=False)
        if length == -1 and nullable:
            return None
        if length < 0:
            raise CorruptGroupRecordError(f"{self._what}: {field} has length {length}")
        raw = self._take(length, field)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptGroupRecordError(f"{self._what}: {field} is not UTF-8: {exc}") from exc

    def bytes_(self, field: str, *, compact: bool) -> bytes:
        length = self._length(field, compact, wide=True)
        if length < 0:
            raise CorruptGroupRecordError(f"{self._what}: {field} has length {length}")
        return bytes(self._take(length, field))

    def count(self, field: str, *, compact: bool, element_bytes_min: int) -> int:
        """An array's element count, checked against the bytes left (a lying count fails here)."""
        count = self._length(field, compact, wide=True)
        left = len(self._data) - self._position
        if count < 0 or count * element_bytes_min > left:
            raise CorruptGroupRecordError(f"{self._what}: {field} counts {count} elements, {left} bytes left")
        return count

    def skip_tagged_fields(self, field: str) -> None:
        for _ in range(self.uvarint(f"{field} tagged field count")):
            self.uvarint(f"{field} tag")
            self._take(self.uvarint(f"{field} tagged field size"), f"{field} tagged field")

    def finish(self) -> None:
        left = len(self._data) - self._position
        if left:
            raise CorruptGroupRecordError(f"{self._what}: {left} bytes after the last field")


def uvarint(value: int) -> bytes:
    assert 0 <= value <= 0xFFFFFFFF, value
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(value: str | None, *, compact: bool) -> bytes:
    if value is None:
        return uvarint(0) if compact else INT16.pack(-1)
    raw = value.encode("utf-8")
    if len(raw) > STRING_BYTES_MAX:
        raise ValueError(f"a string of {len(raw)} UTF-8 bytes is longer than Kafka's {STRING_BYTES_MAX}")
    return (uvarint(len(raw) + 1) if compact else INT16.pack(len(raw))) + raw


def bytes_(value: bytes, *, compact: bool) -> bytes:
    return (uvarint(len(value) + 1) if compact else INT32.pack(len(value))) + value


def count(value: int, *, compact: bool) -> bytes:
    return uvarint(value + 1) if compact else INT32.pack(value)


NO_TAGGED_FIELDS = uvarint(0)
