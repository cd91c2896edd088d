"""The producer's options: Kafka's defaults, their checks, and the parsing of acks and compression."""

from __future__ import annotations

import time
from dataclasses import dataclass

from seglog.records import Compression
from seglog.structs import Acks

__all__ = [
    "BATCH_SIZE_DEFAULT",
    "BUFFER_BYTES_DEFAULT",
    "LINGER_MS_DEFAULT",
    "MAX_BLOCK_MS_DEFAULT",
    "MAX_IN_FLIGHT_REQUESTS_DEFAULT",
    "MAX_REQUEST_BYTES_DEFAULT",
    "RETRIES_DEFAULT",
    "RETRY_BACKOFF_MS_DEFAULT",
    "ProducerConfig",
    "as_bytes",
    "parse_acks",
    "parse_compression",
    "wall_clock_ms",
]

# Kafka's producer defaults, so settings carry over: batch.size 16 KiB, linger.ms 5 (Kafka 4.0),
# buffer.memory 32 MiB, max.request.size 1 MiB (also Kafka's max.message.bytes default), 5
# requests in flight per connection, max.block.ms 60 s. A larger batch.size would raise a
# default producer's rate (256 KiB batches: about 2.7x, bench/bench_produce_defaults.py
# --batch-sizes; docs/performance.md). A topic whose max.message.bytes lies below it refuses a
# full batch; the producer splits it and sends the pieces (as Kafka's does, no record lost) and
# builds that topic's later batches within the limit the refusal named, so a 256 KiB producer
# into a 64 KiB topic ran 1.68x a 16 KiB one (--topic-config max.message.bytes=65536, load 5).
# The default stays Kafka's until a quiet run of bench/peers weighs the larger one.
BATCH_SIZE_DEFAULT = 16_384
LINGER_MS_DEFAULT = 5
BUFFER_BYTES_DEFAULT = 32 * 1024 * 1024
MAX_REQUEST_BYTES_DEFAULT = 1024 * 1024
MAX_IN_FLIGHT_REQUESTS_DEFAULT = 5
MAX_BLOCK_MS_DEFAULT = 60_000
RETRY_BACKOFF_MS_DEFAULT = 100
# Retriable failures (the service restarting, a timeout, a full limit) are sent again this many
# times. Safe by default because the producer is idempotent by default: a resent batch the
# service already wrote is answered with its first offsets, never written twice. Kafka retries
# without a count, bounded by delivery.timeout.ms; a count keeps a dead service's failure prompt.
RETRIES_DEFAULT = 5


@dataclass(frozen=True)
class ProducerConfig:
    acks: Acks
    compression: Compression
    batch_size: int
    linger_ms: float
    buffer_bytes: int
    max_request_bytes: int
    max_in_flight_requests: int
    max_in_flight_per_partition: int
    max_block_ms: int
    retries: int
    retry_backoff_ms: int
    request_timeout_ms: int

    def __post_init__(self) -> None:
        _require(self.batch_size > 0, "batch_size must be > 0", self.batch_size)
        _require(self.linger_ms >= 0, "linger_ms must be >= 0", self.linger_ms)
        _require(self.max_request_bytes > 0, "max_request_bytes must be > 0", self.max_request_bytes)
        _require(self.buffer_bytes >= self.batch_size, "buffer_bytes must be >= batch_size", self.buffer_bytes)
        _require(self.max_in_flight_requests >= 1, "max_in_flight_requests must be >= 1", self.max_in_flight_requests)
        _require(
            1 <= self.max_in_flight_per_partition <= self.max_in_flight_requests,
            "max_in_flight_per_partition must be in [1, max_in_flight_requests]",
            self.max_in_flight_per_partition,
        )
        _require(self.max_block_ms >= 0, "max_block_ms must be >= 0", self.max_block_ms)
        _require(self.retries >= 0, "retries must be >= 0", self.retries)
        _require(self.retry_backoff_ms >= 0, "retry_backoff_ms must be >= 0", self.retry_backoff_ms)


def _require(condition: bool, message: str, found: object) -> None:
    if not condition:
        raise ValueError(f"{message}, got {found!r}")


def parse_acks(acks: Acks | str) -> Acks:
    try:
        return acks if isinstance(acks, Acks) else Acks(acks.lower())
    except (ValueError, AttributeError):
        raise ValueError(f"acks must be one of {[a.value for a in Acks]}, got {acks!r}") from None


def parse_compression(compression: Compression | str | None) -> Compression:
    if compression is None:
        return Compression.NONE
    if isinstance(compression, Compression):
        return compression
    try:
        return Compression[str(compression).upper()]
    except KeyError:
        names = [c.name.lower() for c in Compression]
        raise ValueError(f"compression must be one of {names}, got {compression!r}") from None


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def as_bytes(name: str, data: bytes | bytearray | memoryview | str | None) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{name} must be bytes, str or None, got {type(data).__name__}")
