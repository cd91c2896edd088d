"""Zigzag varints (int32) and varlongs (int64), as in Kafka's ByteUtils and protobuf.

Encoding: zigzag maps signed to unsigned, z = (n << 1) ^ (n >> 63), so small magnitudes of
either sign stay small (0->0, -1->1, 1->2, -2->3 ...); then z is written 7 bits per byte,
least significant group first, with the high bit of each byte saying "more follows".
Decoding: n = (z >> 1) ^ -(z & 1).

Kafka rejects a varint that has not ended within 5 bytes (varlong: 10 bytes) and keeps only
the low 32 (64) bits of what it read; decode_* here do the same, so both accept and reject
the same bytes.

The hot loops of the record codec do not call these functions for the common case: they
index the precomputed tables below (ENCODED_VARINTS for encoding small non-negative values,
ZIGZAG_DECODE for one- and two-byte varints) and fall back to the functions otherwise.
"""

from __future__ import annotations

from .errors import CorruptRecordError

VARINT_BYTES_MAX = 5  # an int32 needs at most ceil(32 / 7) bytes
VARLONG_BYTES_MAX = 10  # an int64 needs at most ceil(64 / 7) bytes
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

_CONTINUATION = 0x80
_PAYLOAD_MASK = 0x7F
_PAYLOAD_BITS = 7
_UINT32_MASK = (1 << 32) - 1
_UINT64_MASK = (1 << 64) - 1


def zigzag(value: int) -> int:
    """The unsigned zigzag form of an int64 (or int32) value."""
    return (value << 1) ^ (value >> 63)


def unzigzag(unsigned: int) -> int:
    """The signed value of a zigzag-encoded unsigned integer."""
    return (unsigned >> 1) ^ -(unsigned & 1)


def _encode_unsigned(unsigned: int) -> bytes:
    out = bytearray()
    while unsigned > _PAYLOAD_MASK:
        out.append((unsigned & _PAYLOAD_MASK) | _CONTINUATION)
        unsigned >>= _PAYLOAD_BITS
    out.append(unsigned)
    return bytes(out)


# Encoded bytes of every non-negative value up to this bound: zigzag(8191) = 16382 still
# fits two bytes, and the bound covers key/value lengths up to 8 KiB, record lengths of
# ordinary records and offset deltas of batches up to 8192 records, which is where an
# encoder spends its time.  The three tables cost about 0.6 MiB.
ENCODED_VARINTS_SIZE = 8192
ENCODED_VARINTS: list[bytes] = [_encode_unsigned(zigzag(n)) for n in range(ENCODED_VARINTS_SIZE)]
# Encoded size of each value in ENCODED_VARINTS.
VARINT_SIZES: list[int] = [len(b) for b in ENCODED_VARINTS]
# Size of a length-prefixed field of n bytes: the varint n followed by n bytes.
PREFIXED_SIZES: list[int] = [n + VARINT_SIZES[n] for n in range(ENCODED_VARINTS_SIZE)]
ENCODED_NULL = _encode_unsigned(zigzag(-1))  # length -1: a null key, value or header value

# Signed value of a one- or two-byte varint, indexed by the first byte b0 when it has no
# continuation bit (b0 < 0x80), else by b0 + (b1 << 7) when the second byte b1 ends the
# varint (b1 < 0x80).  The two index ranges do not overlap: one-byte indexes are < 0x80,
# two-byte indexes are >= 0x80, and z = index - 0x80 there ((b0 & 0x7f) | (b1 << 7)).
ZIGZAG_DECODE: list[int] = [unzigzag(i) for i in range(_CONTINUATION)] + [
    unzigzag(i - _CONTINUATION) for i in range(_CONTINUATION, _CONTINUATION + (_CONTINUATION << 7))
]

assert ENCODED_VARINTS[1] == b"\x02" and ENCODED_NULL == b"\x01"
assert VARINT_SIZES[ENCODED_VARINTS_SIZE - 1] == 2


def encode_varint(value: int) -> bytes:
    """Zigzag varint bytes of an int32."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint value must be an int32, found {value}")
    if 0 <= value < ENCODED_VARINTS_SIZE:
        return ENCODED_VARINTS[value]
    return _encode_unsigned(zigzag(value))


def encode_varlong(value: int) -> bytes:
    """Zigzag varlong bytes of an int64."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong value must be an int64, found {value}")
    if 0 <= value < ENCODED_VARINTS_SIZE:
        return ENCODED_VARINTS[value]
    return _encode_unsigned(zigzag(value))


def size_of_varint(value: int) -> int:
    """Number of bytes encode_varint(value) / encode_varlong(value) produces."""
    unsigned = zigzag(value)
    size = 1
    while unsigned > _PAYLOAD_MASK:
        unsigned >>= _PAYLOAD_BITS
        size += 1
    return size


def _decode(buffer, position: int, bytes_max: int, mask: int, kind: str) -> tuple[int, int]:
    unsigned = 0
    shift = 0
    start = position
    end = min(len(buffer), start + bytes_max)
    while position < end:
        byte = buffer[position]
        position += 1
        unsigned |= (byte & _PAYLOAD_MASK) << shift
        if byte < _CONTINUATION:
            return unzigzag(unsigned & mask), position
        shift += _PAYLOAD_BITS
    if position - start == bytes_max:
        raise CorruptRecordError(
            f"Illegal {kind} at byte {start}: expected it to end within {bytes_max} bytes, "
            f"found {bytes(buffer[start:position]).hex()} still continuing"
        )
    raise CorruptRecordError(
        f"Truncated {kind} at byte {start}: expected a terminating byte, found the end of "
        f"the data after {position - start} bytes"
    )


def decode_varint(buffer, position: int = 0) -> tuple[int, int]:
    """(value, next position) of the int32 varint at `position` of a bytes-like buffer."""
    return _decode(buffer, position, VARINT_BYTES_MAX, _UINT32_MASK, "varint")


def decode_varlong(buffer, position: int = 0) -> tuple[int, int]:
    """(value, next position) of the int64 varlong at `position` of a bytes-like buffer."""
    return _decode(buffer, position, VARLONG_BYTES_MAX, _UINT64_MASK, "varlong")
