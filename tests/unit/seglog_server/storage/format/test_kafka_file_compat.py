"""Files seglog writes are Kafka's files, checked with parsers that are not ours.

seglog writes through LogManager/Log with small segments and a small index interval, so there are
many segments and many index entries. Then every ``.log`` is read with kafka-python's pure-Python
``DefaultRecordBatch`` (an independent implementation of the v2 format: CRC-32C, varints,
compression), and every ``.index`` / ``.timeindex`` entry is parsed here with plain ``struct``
(big-endian ``>ii`` and ``>qi``) and checked against the batch it points to.
"""

from __future__ import annotations

import os
import random
import re
import struct
from dataclasses import dataclass

import pytest
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch

from seglog.records import Compression, RecordBatchBuilder
from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.manager.log_manager import LogManager, MaintenanceIntervals

# Kafka's on-disk layouts, spelled out independently of seglog's modules.
BATCH_PREFIX = struct.Struct(">qi")  # baseOffset int64, batchLength int32 (bytes after this prefix)
OFFSET_INDEX_ENTRY = struct.Struct(">ii")  # relativeOffset int32, position int32
TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp int64, relativeOffset int32
SEGMENT_FILE = re.compile(r"(\d{20})\.(log|index|timeindex)")
# Kafka's producer-state snapshots (ProducerSnapshot v1), one per roll and one at shutdown.
SNAPSHOT_FILE = re.compile(r"\d{20}\.snapshot")

SEGMENT_BYTES = 4096  # several batches per segment, dozens of segments
INDEX_INTERVAL_BYTES = 256  # an index entry every couple of batches
BATCH_COUNT = 300

# kafka-python can only decode the codecs whose libraries are installed.
CODECS = [Compression.NONE, Compression.GZIP]
if kafka_codec.has_lz4():
    CODECS.append(Compression.LZ4)
if kafka_codec.has_zstd():
    CODECS.append(Compression.ZSTD)
if kafka_codec.has_snappy():
    CODECS.append(Compression.SNAPPY)


@dataclass(frozen=True)
class Expected:
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple


@dataclass(frozen=True)
class FileBatch:
    position: int
    batch: DefaultRecordBatch
    size_bytes: int


def build_batch(rng: random.Random, clock: FakeClock, compression: Compression):
    builder = RecordBatchBuilder(compression=compression)
    records = []
    for _ in range(rng.randint(1, 12)):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 20))
        value = None if rng.random() < 0.05 else rng.randbytes(rng.randint(0, 200))
        headers = tuple(
            (f"h{i}", None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 8)))
            for i in range(rng.randint(0, 2))
        )
        # Out-of-order timestamps inside and across batches exercise "max timestamp so far".
        timestamp_ms = clock.time_ms() + rng.randint(-5_000, 5_000)
        builder.append(value, key=key, timestamp_ms=timestamp_ms, headers=headers)
        records.append((timestamp_ms, key, value, headers))
    return builder.build(), records


def produce(manager, clock, topic, partition, batch_count, seed):
    rng = random.Random(seed)
    log = manager.get_log(topic, partition)
    expected = []
    for i in range(batch_count):
        data, records = build_batch(rng, clock, CODECS[i % len(CODECS)])
        info = log.append(data)
        assert info.last_offset - info.base_offset + 1 == len(records)
        for delta, (timestamp_ms, key, value, headers) in enumerate(records):
            if info.log_append_time_ms != -1:
                timestamp_ms = info.log_append_time_ms
            expected.append(Expected(info.base_offset + delta, timestamp_ms, key, value, headers))
        clock.advance(rng.randint(0, 50))
    return expected


def read_log_file(path: str) -> list[FileBatch]:
    with open(path, "rb") as f:
        data = f.read()
    batches = []
    position = 0
    while position < len(data):
        assert len(data) - position >= BATCH_PREFIX.size, f"torn batch prefix in {path}"
        _, length = BATCH_PREFIX.unpack_from(data, position)
        size_bytes = BATCH_PREFIX.size + length
        assert position + size_bytes <= len(data), f"torn batch at {position} in {path}"
        view = memoryview(data)[position : position + size_bytes]
        batches.append(FileBatch(position, DefaultRecordBatch(view), size_bytes))
        position += size_bytes
    return batches


def read_entries(path: str, entry: struct.Struct) -> list[tuple]:
    if not os.path.exists(path):
        return []  # lazily created indexes may never have been materialised
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) % entry.size == 0, f"{path} is {len(data)} bytes, not whole entries"
    return [entry.unpack_from(data, slot * entry.size) for slot in range(len(data) // entry.size)]


def segment_bases(partition_dir: str) -> list[int]:
    bases = set()
    for name in os.listdir(partition_dir):
        match = SEGMENT_FILE.fullmatch(name)
        if match:
            bases.add(int(match.group(1)))
        elif not SNAPSHOT_FILE.fullmatch(name):
            assert name == "topic.properties" or not name.startswith("0"), name
    return sorted(bases)


def check_segment(partition_dir: str, base: int) -> list:
    """Parses one segment's three files; returns the records of its .log (kafka-python)."""
    prefix = os.path.join(partition_dir, f"{base:020d}")
    file_batches = read_log_file(prefix + ".log")
    records = []
    for file_batch in file_batches:
        batch = file_batch.batch
        assert batch.magic == 2
        assert batch.validate_crc(), f"CRC mismatch at {file_batch.position} in {prefix}.log"
        assert batch.base_offset >= base
        batch_records = list(batch)
        assert len(batch_records) == batch.records_count == batch.last_offset_delta + 1
        assert max(r.timestamp for r in batch_records) == batch.max_timestamp
        records.extend(batch_records)
    if file_batches:
        assert file_batches[0].batch.base_offset == base, "a segment is named by its first offset"
    check_offset_index(prefix + ".index", base, file_batches)
    check_time_index(prefix + ".timeindex", base, file_batches)
    return records


def check_offset_index(path: str, base: int, file_batches: list[FileBatch]) -> None:
    by_position = {fb.position: fb.batch for fb in file_batches}
    previous_offset = -1
    for relative_offset, position in read_entries(path, OFFSET_INDEX_ENTRY):
        offset = base + relative_offset
        assert offset > previous_offset, f"{path}: offsets not increasing at {offset}"
        previous_offset = offset
        assert position in by_position, f"{path}: position {position} is not a batch start"
        # Kafka's per-batch rule: an entry maps a batch's last offset to its start position.
        assert by_position[position].last_offset == offset, f"{path}: entry {offset}@{position}"
    if file_batches:
        assert len(read_entries(path, OFFSET_INDEX_ENTRY)) <= len(file_batches) - 1


def check_time_index(path: str, base: int, file_batches: list[FileBatch]) -> None:
    max_so_far = {}  # batch last offset -> max batch timestamp up to and including it
    running = -1
    for file_batch in file_batches:
        running = max(running, file_batch.batch.max_timestamp)
        max_so_far[file_batch.batch.last_offset] = running
    batch_max = {fb.batch.last_offset: fb.batch.max_timestamp for fb in file_batches}
    entries = read_entries(path, TIME_INDEX_ENTRY)
    previous = -1
    for timestamp_ms, relative_offset in entries:
        offset = base + relative_offset
        assert timestamp_ms > previous, f"{path}: timestamps not increasing at {offset}"
        previous = timestamp_ms
        assert offset in batch_max, f"{path}: {offset} is not the last offset of a batch"
        assert batch_max[offset] == timestamp_ms, f"{path}: batch {offset} lacks {timestamp_ms}"
        assert max_so_far[offset] == timestamp_ms, f"{path}: {timestamp_ms} is not the max so far"
    if file_batches and entries:
        # Closing a segment appends its final maximum (LogSegment.close / onBecomeInactiveSegment).
        assert entries[-1][0] == running, f"{path}: last entry is not the segment maximum"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Written once for the module: the tests below only read the files."""
    tmp_path = tmp_path_factory.mktemp("compat")
    clock = FakeClock()
    manager = LogManager([str(tmp_path)], clock=clock, intervals=MaintenanceIntervals())
    manager.startup()
    configs = {
        "segment.bytes": str(SEGMENT_BYTES),
        "index.interval.bytes": str(INDEX_INTERVAL_BYTES),
        "retention.ms": "-1",
    }
    manager.create_topic("compat", 2, configs)
    manager.create_topic("appendtime", 1, {**configs, "message.timestamp.type": "LogAppendTime"})
    expected = {
        ("compat", 0): produce(manager, clock, "compat", 0, BATCH_COUNT, seed=1),
        ("compat", 1): produce(manager, clock, "compat", 1, BATCH_COUNT // 3, seed=2),
        ("appendtime", 0): produce(manager, clock, "appendtime", 0, BATCH_COUNT // 3, seed=3),
    }
    manager.shutdown()
    return tmp_path, expected


def test_every_segment_parses_with_kafka_python_and_matches_what_was_written(written):
    root, expected = written
    for (topic, partition), records_written in expected.items():
        partition_dir = os.path.join(root, f"{topic}-{partition}")
        bases = segment_bases(partition_dir)
        assert len(bases) > 3 or topic != "compat" or partition != 0, bases
        records = []
        for base in bases:
            records.extend(check_segment(partition_dir, base))
        read = [
            Expected(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in records
        ]
        assert read == [
            Expected(e.offset, e.timestamp_ms, e.key, e.value, tuple(e.headers))
            for e in records_written
        ]


def test_segments_are_contiguous_and_named_by_20_digit_base_offsets(written):
    root, expected = written
    partition_dir = os.path.join(root, "compat-0")
    names = sorted(n for n in os.listdir(partition_dir) if n.endswith(".log"))
    assert all(re.fullmatch(r"\d{20}\.log", n) for n in names)
    bases = segment_bases(partition_dir)
    assert bases[0] == 0
    next_offset = 0
    for base in bases:
        # Each segment starts where the previous one ended (no compaction here).
        assert base == next_offset, f"segment {base} does not follow offset {next_offset - 1}"
        batches = read_log_file(os.path.join(partition_dir, f"{base:020d}.log"))
        if batches:
            next_offset = batches[-1].batch.last_offset + 1
    assert next_offset == expected[("compat", 0)][-1].offset + 1


def test_many_index_entries_were_written(written):
    root, _ = written
    partition_dir = os.path.join(root, "compat-0")
    entries = sum(
        len(read_entries(os.path.join(partition_dir, f"{base:020d}.index"), OFFSET_INDEX_ENTRY))
        for base in segment_bases(partition_dir)
    )
    time_entries = sum(
        len(read_entries(os.path.join(partition_dir, f"{b:020d}.timeindex"), TIME_INDEX_ENTRY))
        for b in segment_bases(partition_dir)
    )
    assert entries >= 50 and time_entries >= 50, (entries, time_entries)
