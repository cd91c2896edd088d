"""The service-wide budget of bytes that Consume streams hold in responses not yet sent.

A Consume stream reads a chunk, builds its response and writes it; the write returns once gRPC's
transport has taken the message, which waits for the client's HTTP/2 flow-control window. A
client that never reads leaves its stream's response parked in the transport: the serialized
response (Python bytes) and gRPC core's copy of it, until the stream ends. Measured before this
budget (500 such streams took the service to 4.5 GB; tests/integration/test_service_slow_consumers.py
measures 200): each parked 2 MiB response cost 4-9 MiB of RSS (the read's records, the response,
gRPC's copy; more with decode=true). One response per stream was already the rule (the next chunk
is read only after the previous write returned); what had no bound was the sum over streams.

So a stream reserves the bytes of its next response before reading it (``reserve``), resizes the
reservation to the response it built, and gives it back once the write returned. When the budget
is short the response is smaller, never the stream stopped: ``consume_response_bytes_min`` each
(still at least one whole batch, as every fetch), so a stream behind thousands of parked ones
still makes progress. Bytes held at once are at most ``consume_buffer_bytes_max`` plus that
minimum per open stream (``consume_streams_max`` bounds those); each held byte costs about two in
memory (the response and gRPC's copy).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConsumeBuffer", "ConsumeBufferStatistics", "Reservation"]


@dataclass(frozen=True)
class ConsumeBufferStatistics:
    held_bytes: int  # bytes of responses being read, built, or waiting for the transport
    held_bytes_high: int  # the most ever held at once
    bytes_max: int
    shrunk_count: int  # responses made smaller than asked because the budget was short


class Reservation:
    """The bytes one stream's next response holds; ``release`` once its write returned."""

    __slots__ = ("_buffer", "size_bytes")

    def __init__(self, buffer: ConsumeBuffer, size_bytes: int) -> None:
        self._buffer = buffer
        self.size_bytes = size_bytes

    def resize(self, size_bytes: int) -> None:
        """The response built is ``size_bytes`` (a batch above the grant, decoded records)."""
        assert size_bytes >= 0
        self._buffer._add(size_bytes - self.size_bytes)
        self.size_bytes = size_bytes

    def release(self) -> None:
        self._buffer._add(-self.size_bytes)
        self.size_bytes = 0


class ConsumeBuffer:
    """Grants each Consume response its bytes out of ``bytes_max`` (see the module docstring)."""

    def __init__(self, bytes_max: int, response_bytes_min: int) -> None:
        assert 0 < response_bytes_min <= bytes_max
        self._bytes_max = bytes_max
        self._response_bytes_min = response_bytes_min
        self._held_bytes = 0
        self._held_bytes_high = 0
        self._shrunk_count = 0

    def reserve(self, want_bytes: int) -> Reservation:
        """Reserves the next response's bytes: ``want_bytes``, or what is left of the budget
        when that is less, but never below ``response_bytes_min``."""
        assert want_bytes > 0
        free_bytes = self._bytes_max - self._held_bytes
        size_bytes = min(want_bytes, max(self._response_bytes_min, free_bytes))
        if size_bytes < want_bytes:
            self._shrunk_count += 1
        self._add(size_bytes)
        return Reservation(self, size_bytes)

    def _add(self, delta_bytes: int) -> None:
        self._held_bytes += delta_bytes
        assert self._held_bytes >= 0
        self._held_bytes_high = max(self._held_bytes_high, self._held_bytes)

    def statistics(self) -> ConsumeBufferStatistics:
        return ConsumeBufferStatistics(
            held_bytes=self._held_bytes, held_bytes_high=self._held_bytes_high,
            bytes_max=self._bytes_max, shrunk_count=self._shrunk_count,
        )
