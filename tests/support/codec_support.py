"""What the client's codec can do in this environment, for tests that range over it."""

from __future__ import annotations

from seglog.records import Compression
from seglog.records.compression import compress
from seglog.records.errors import CodecError


def _available(compression: Compression) -> bool:
    try:
        compress(compression, b"probe")
    except CodecError:
        return False
    return True


# The compressions whose codec is installed here (an optional one missing is left out).
COMPRESSIONS = [compression for compression in Compression if _available(compression)]
