"""Record-batch codec speed: seglog.records against kafka-python's pure-Python classes.

    .venv/bin/python bench/bench_codec.py [--repeats 7] [--records-per-batch 1000]
                                          [--compression none] [--clock cpu] [--no-gc]

Workload: batches of --records-per-batch records with 16-byte random keys and 100-byte random
values, timestamps advancing 1 ms every 100 records (a producer batch filled over ~10 ms).
Rows, each measured --repeats times in the same process (seglog and its baseline alternate in
every repeat, so both see the same machine):

- encode: RecordBatchBuilder.append for every record + build(), against kafka-python's
  DefaultRecordBatchBuilder.append + build() on the same records; goal >= 2,000,000 records/s;
- decode: RecordBatch(batch).records() (every Record materialised), against iterating
  kafka-python's DefaultRecordBatch over the same bytes; goal >= 1,000,000 records/s;
- header walk: iter_batches over a buffer of 20,000 one-record batches, reading each batch's
  last_offset, against kafka-python's MemoryRecords walk; goal >= 1,000,000 batches/s;
- CRC validation: RecordBatch.ensure_valid() over ready batch views, against the raw
  crc32c.crc32c over the same byte ranges; goal: seglog within 2x of raw.  Two batch sizes:
  the encode batches, and 16 KiB batches (Kafka's default producer batch.size).

Each cell is the median rate over the repeats, with [min-max]; ratios divide medians.  The
machine is shared and noisy (other work on its 2 cores moves single runs by 30-50 %): compare
rows of the same run.  Random values barely compress: compressed runs show codec overheads,
not realistic ratios (kafka-python's snappy runs on a cramjam stand-in for python-snappy,
which is not installed).  Time is this process's CPU time by default (--clock cpu), which does
not count the time other processes hold the cores; --clock wall measures elapsed time.  The
garbage collector stays on, as in a real process (--no-gc to see its share).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass

import cramjam
from crc32c import crc32c as raw_crc32c
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from seglog.records import (
    ATTRIBUTES_OFFSET,
    Compression,
    RecordBatch,
    RecordBatchBuilder,
    iter_batches,
)

KEY_BYTES = 16
VALUE_BYTES = 100
TIMESTAMP_MS = 1_700_000_000_000
RECORDS_PER_MS = 100  # timestamps advance 1 ms every 100 records
WALK_BATCH_COUNT = 20_000  # one-record batches in the header-walk buffer (~1.4 MB)
KAFKA_BATCH_BYTES = 16 * 1024  # Kafka producer's default batch.size
CRC_REGION_BYTES_MIN = 4 * 1024 * 1024  # bytes of batches per CRC measurement, so one run is not a few µs
RUN_SECONDS_MIN = 0.15  # each measurement repeats its operation for at least this long

GOAL_ENCODE_RECORDS_PER_S = 2_000_000
GOAL_DECODE_RECORDS_PER_S = 1_000_000
GOAL_WALK_BATCHES_PER_S = 1_000_000
GOAL_CRC_SLOWDOWN_MAX = 2.0


@dataclass(frozen=True)
class Rates:
    """Rates (units per second) of the repeats of one measurement."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def cell(self, scale: float = 1.0, digits: int = 0) -> str:
        low, high = min(self.values) / scale, max(self.values) / scale
        return f"{self.median / scale:,.{digits}f} [{low:,.{digits}f}-{high:,.{digits}f}]"


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def time_rate(operation: Callable[[], object], units_per_call: float, clock: Callable[[], float]) -> float:
    """Units per second of `operation`, called until RUN_SECONDS_MIN has passed on `clock`."""
    calls = 0
    start = clock()
    elapsed = 0.0
    while elapsed < RUN_SECONDS_MIN:
        operation()
        calls += 1
        elapsed = clock() - start
    return calls * units_per_call / elapsed


def measure_pair(
    repeats: int, ours: Callable, ours_units: float, baseline: Callable, baseline_units: float, clock: Callable[[], float]
) -> tuple[Rates, Rates]:
    our_rates, baseline_rates = [], []
    for _ in range(repeats):
        our_rates.append(time_rate(ours, ours_units, clock))
        baseline_rates.append(time_rate(baseline, baseline_units, clock))
    return Rates(tuple(our_rates)), Rates(tuple(baseline_rates))


# -- workloads --------------------------------------------------------------------------------


def give_kafka_python_snappy() -> None:
    """kafka-python needs python-snappy for snappy, which seglog does not install: hand
    kafka.codec a stand-in backed by cramjam's raw snappy (its xerial framing stays its own)."""
    if not kafka_codec.has_snappy():
        kafka_codec.snappy = types.SimpleNamespace(
            compress=lambda data: bytes(cramjam.snappy.compress_raw(data)),
            decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
        )


def make_records(count: int, seed: int = 2024) -> list[tuple[bytes, bytes, int]]:
    rng = random.Random(seed)
    return [(rng.randbytes(KEY_BYTES), rng.randbytes(VALUE_BYTES), TIMESTAMP_MS + i // RECORDS_PER_MS) for i in range(count)]


def encode_ours(records, compression: Compression) -> bytes:
    builder = RecordBatchBuilder(compression=compression)
    append = builder.append
    for key, value, timestamp in records:
        append(value, key, timestamp)
    return builder.build()


def encode_kafka_python(records, compression: Compression) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    append = builder.append
    no_headers: list = []
    for offset, (key, value, timestamp) in enumerate(records):
        append(offset, timestamp, key, value, no_headers)
    return bytes(builder.build())


def decode_ours(data: bytes) -> int:
    return len(RecordBatch(data).records())


def decode_kafka_python(data: bytes) -> int:
    count = 0
    for _ in DefaultRecordBatch(data):
        count += 1
    return count


def walk_ours(buffer: bytes) -> int:
    last = -1
    for batch in iter_batches(buffer):
        last = batch.last_offset
    return last


def walk_kafka_python(buffer: bytes) -> int:
    last = -1
    for batch in MemoryRecords(buffer):
        last = batch.last_offset
    return last


def batches_of_size(records, batch_bytes: int) -> list[bytes]:
    """Uncompressed batches of about `batch_bytes`, built from `records` round-robin."""
    out, builder, index = [], RecordBatchBuilder(), 0
    while len(out) * batch_bytes < CRC_REGION_BYTES_MIN:
        key, value, timestamp = records[index % len(records)]
        builder.append(value, key, timestamp)
        index += 1
        if builder.estimated_size_in_bytes >= batch_bytes:
            out.append(builder.build())
            builder = RecordBatchBuilder()
    return out


def crc_pair(batches: list[bytes], repeats: int, clock: Callable[[], float]) -> tuple[Rates, Rates, float]:
    """(ensure_valid rates, raw crc32c rates) in MB/s over the CRC-covered bytes, and the
    average batch size."""
    buffer = b"".join(batches)
    views = list(iter_batches(buffer))
    regions = [memoryview(buffer)[v.position + ATTRIBUTES_OFFSET : v.position + v.size_in_bytes] for v in views]
    covered_bytes = sum(len(r) for r in regions)

    def ours() -> None:
        for view in views:
            view.ensure_valid()

    def raw() -> None:
        for region in regions:
            raw_crc32c(region)

    our_rates, raw_rates = measure_pair(repeats, ours, covered_bytes / 1e6, raw, covered_bytes / 1e6, clock)
    return our_rates, raw_rates, len(buffer) / len(views)


# -- report -----------------------------------------------------------------------------------


def verdict(met: bool, applies: bool = True) -> str:
    if not applies:
        return "n/a (set for uncompressed batches)"
    return "met" if met else "NOT MET"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs per measurement (median reported)")
    parser.add_argument("--records-per-batch", type=int, default=1000)
    parser.add_argument("--compression", choices=[c.name.lower() for c in Compression], default="none")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu", help="cpu: process CPU time; wall: elapsed time")
    parser.add_argument("--no-gc", action="store_true", help="disable the garbage collector while measuring")
    args = parser.parse_args(argv)
    compression = Compression[args.compression.upper()]
    clock = CLOCKS[args.clock]
    uncompressed_run = compression is Compression.NONE
    if args.no_gc:
        gc.disable()
    give_kafka_python_snappy()

    records = make_records(args.records_per_batch)
    count = len(records)
    ours_batch = encode_ours(records, compression)
    kp_batch = encode_kafka_python(records, compression)
    assert decode_ours(ours_batch) == decode_kafka_python(ours_batch) == count
    assert decode_ours(kp_batch) == decode_kafka_python(kp_batch) == count

    walk_builder = RecordBatchBuilder()
    walk_builder.append(b"v" * 10, b"k", TIMESTAMP_MS)
    walk_buffer = walk_builder.build() * WALK_BATCH_COUNT
    assert walk_ours(walk_buffer) == walk_kafka_python(walk_buffer) == 0

    print(
        f"seglog.records codec benchmark: {count} records/batch, {KEY_BYTES}-byte keys, {VALUE_BYTES}-byte "
        f"values, compression {compression.name.lower()}, {args.repeats} repeats, {args.clock} clock, "
        f"gc {'off' if args.no_gc else 'on'}, "
        f"Python {sys.version.split()[0]}"
    )
    print("cells: median [min-max] over the repeats; ratio = seglog median / baseline median\n")
    rows = []

    enc_ours, enc_kp = measure_pair(
        args.repeats, lambda: encode_ours(records, compression), count, lambda: encode_kafka_python(records, compression), count, clock
    )
    rows.append(("encode (records/s)", enc_ours.cell(), "kafka-python", enc_kp.cell(), enc_ours.median / enc_kp.median,
                 f">= {GOAL_ENCODE_RECORDS_PER_S:,}: {verdict(enc_ours.median >= GOAL_ENCODE_RECORDS_PER_S, uncompressed_run)}"))

    dec_ours, dec_kp = measure_pair(args.repeats, lambda: decode_ours(ours_batch), count, lambda: decode_kafka_python(ours_batch), count, clock)
    rows.append(("decode (records/s)", dec_ours.cell(), "kafka-python", dec_kp.cell(), dec_ours.median / dec_kp.median,
                 f">= {GOAL_DECODE_RECORDS_PER_S:,}: {verdict(dec_ours.median >= GOAL_DECODE_RECORDS_PER_S, uncompressed_run)}"))

    walk_o, walk_kp = measure_pair(
        args.repeats, lambda: walk_ours(walk_buffer), WALK_BATCH_COUNT, lambda: walk_kafka_python(walk_buffer), WALK_BATCH_COUNT, clock
    )
    rows.append(("header walk (batches/s)", walk_o.cell(), "kafka-python", walk_kp.cell(), walk_o.median / walk_kp.median,
                 f">= {GOAL_WALK_BATCHES_PER_S:,}: {verdict(walk_o.median >= GOAL_WALK_BATCHES_PER_S)}"))

    uncompressed = [encode_ours(records, Compression.NONE)] * max(1, CRC_REGION_BYTES_MIN // len(encode_ours(records, Compression.NONE)))
    for label, batches in (("encode-size", uncompressed), ("16 KiB", batches_of_size(records, KAFKA_BATCH_BYTES))):
        crc_ours, crc_raw, batch_bytes = crc_pair(batches, args.repeats, clock)
        slowdown = crc_raw.median / crc_ours.median
        rows.append((f"ensure_valid, {label} batches of {batch_bytes / 1024:,.1f} KiB (MB/s)", crc_ours.cell(), "raw crc32c", crc_raw.cell(),
                     crc_ours.median / crc_raw.median, f"raw/seglog {slowdown:.2f}x <= {GOAL_CRC_SLOWDOWN_MAX}x: {verdict(slowdown <= GOAL_CRC_SLOWDOWN_MAX)}"))

    headers = ("measurement", "seglog", "baseline", "baseline rate", "ratio", "goal")
    table = [headers] + [(name, ours, base, base_cell, f"{ratio:.2f}x", goal) for name, ours, base, base_cell, ratio, goal in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    for index, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if index == 0:
            print("  ".join("-" * width for width in widths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
