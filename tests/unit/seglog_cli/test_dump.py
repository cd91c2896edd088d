"""``seglog dump``: printing and verifying segment files built here with seglog.records and
hand-written index entries, healthy and corrupted."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import pytest

from seglog.records import BASE_OFFSET_OFFSET, CRC_OFFSET, Compression, RecordBatchBuilder
from seglog_cli import _segment_files as files, main

SEGMENT_BASE = 100
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


@dataclass(frozen=True)
class Written:
    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int


def build_batch(base_offset: int, timestamps: list[int], compression: Compression = Compression.NONE) -> bytes:
    builder = RecordBatchBuilder(compression=compression)
    for i, ts in enumerate(timestamps):
        builder.append(f"value-{base_offset + i}".encode(), key=f"key-{i}".encode(), timestamp_ms=ts,
                       headers=[("h", b"1")])
    data = bytearray(builder.build())
    data[BASE_OFFSET_OFFSET : BASE_OFFSET_OFFSET + 8] = base_offset.to_bytes(8, "big")
    return bytes(data)


def write_segment(directory: Path, batch_timestamps: list[list[int]], *, free_slots: int = 4) -> tuple[Path, list[Written]]:
    """A .log of batches with consecutive offsets from SEGMENT_BASE; indexes are written by the tests."""
    log = bytearray()
    written = []
    offset = SEGMENT_BASE
    for timestamps in batch_timestamps:
        data = build_batch(offset, timestamps, Compression.GZIP if offset % 2 else Compression.NONE)
        written.append(Written(len(log), offset, offset + len(timestamps) - 1, max(timestamps)))
        log += data
        offset += len(timestamps)
    path = directory / f"{SEGMENT_BASE:020d}.log"
    path.write_bytes(bytes(log))
    return path, written


def write_offset_index(log_path: Path, entries: list[tuple[int, int]], free_slots: int = 4) -> Path:
    path = log_path.with_suffix(".index")
    data = b"".join(OFFSET_ENTRY.pack(offset - SEGMENT_BASE, position) for offset, position in entries)
    path.write_bytes(data + bytes(OFFSET_ENTRY.size * free_slots))
    return path


def write_time_index(log_path: Path, entries: list[tuple[int, int]], free_slots: int = 4) -> Path:
    path = log_path.with_suffix(".timeindex")
    data = b"".join(TIME_ENTRY.pack(ts, offset - SEGMENT_BASE) for ts, offset in entries)
    path.write_bytes(data + bytes(TIME_ENTRY.size * free_slots))
    return path


@pytest.fixture
def segment(tmp_path):
    """A healthy segment: 4 batches, indexes on batches 2 and 3 as Kafka would write them."""
    log_path, written = write_segment(tmp_path, [[1000, 1001], [1002], [1005, 1003, 1004], [1006]])
    write_offset_index(log_path, [(w.last_offset, w.position) for w in written[1:3]])
    write_time_index(log_path, [(w.max_timestamp, w.last_offset) for w in written[1:3]])
    return log_path, written


def verify(capsys, *paths: Path) -> tuple[int, str]:
    code = main(["dump", *map(str, paths), "--verify", "--deep"])
    return code, capsys.readouterr().out


def test_verify_passes_a_healthy_segment_with_its_indexes(segment, capsys):
    log_path, _ = segment
    code, out = verify(capsys, log_path)
    assert code == 0, out
    assert "4 batches, 7 records" in out
    assert "2 entries, 4 free slots: OK" in out
    assert out.strip().endswith("all 3 files OK")


def test_verify_of_a_directory_checks_every_segment_file(segment, capsys):
    log_path, _ = segment
    code, out = verify(capsys, log_path.parent)
    assert code == 0 and "all 3 files OK" in out


def test_verify_reports_a_batch_whose_crc_does_not_match(segment, capsys):
    log_path, written = segment
    data = bytearray(log_path.read_bytes())
    data[written[2].position + CRC_OFFSET + 8] ^= 0x01  # a byte inside the CRC-covered area
    log_path.write_bytes(bytes(data))
    code, out = verify(capsys, log_path)
    assert code == 1
    assert f"position {written[2].position}: CRC mismatch in the batch at offset {written[2].base_offset}" in out


def test_verify_reports_bytes_after_the_last_whole_batch(segment, capsys):
    log_path, _ = segment
    size = log_path.stat().st_size
    log_path.write_bytes(log_path.read_bytes() + build_batch(200, [1])[:30])
    code, out = verify(capsys, log_path)
    assert code == 1 and f"position {size}: 30 bytes after the last whole batch" in out


def test_zero_bytes_after_the_last_batch_are_preallocated_space_not_a_problem(segment, capsys):
    log_path, _ = segment
    log_path.write_bytes(log_path.read_bytes() + bytes(4096))
    code, out = verify(capsys, log_path)
    assert code == 0, out


def test_verify_reports_batches_whose_offsets_do_not_increase(tmp_path, capsys):
    log_path = tmp_path / f"{SEGMENT_BASE:020d}.log"
    log_path.write_bytes(build_batch(100, [1, 2]) + build_batch(101, [3]))
    code, out = verify(capsys, log_path)
    assert code == 1 and "base offset 101 is not above the previous last offset 101" in out


def test_verify_reports_an_index_entry_that_points_inside_a_batch(segment, capsys):
    log_path, written = segment
    write_offset_index(log_path, [(written[1].last_offset, written[1].position + 5)])
    code, out = verify(capsys, log_path)
    assert code == 1
    assert f"slot 0: offset {written[1].last_offset} points at position {written[1].position + 5}, which is not the start of a batch" in out


def test_verify_reports_an_index_entry_whose_offset_is_not_its_batchs_last(segment, capsys):
    log_path, written = segment
    write_offset_index(log_path, [(written[2].base_offset, written[2].position)])
    code, out = verify(capsys, log_path)
    assert code == 1
    assert f"where the batch's last offset is {written[2].last_offset}" in out


def test_verify_reports_an_index_entry_past_the_end_of_the_log(segment, capsys):
    log_path, written = segment
    write_offset_index(log_path, [(written[3].last_offset + 5, 1_000_000)])
    code, out = verify(capsys, log_path)
    assert code == 1 and "past the end of" in out


def test_verify_reports_offset_index_entries_that_do_not_increase(segment, capsys):
    log_path, written = segment
    write_offset_index(log_path, [(written[2].last_offset, written[2].position), (written[1].last_offset, written[1].position)])
    code, out = verify(capsys, log_path)
    assert code == 1 and "slot 1: offset" in out and "does not increase" in out


def test_verify_reports_an_index_whose_size_is_not_a_multiple_of_the_entry_size(segment, capsys):
    log_path, _ = segment
    index = log_path.with_suffix(".index")
    index.write_bytes(index.read_bytes() + b"\x01\x02\x03")
    code, out = verify(capsys, log_path)
    assert code == 1 and "is not a multiple of the 8-byte entry size" in out


def test_verify_reports_a_time_entry_whose_timestamp_is_not_its_batchs_max(segment, capsys):
    log_path, written = segment
    write_time_index(log_path, [(written[2].max_timestamp + 1, written[2].last_offset)])
    code, out = verify(capsys, log_path)
    assert code == 1 and f"has max timestamp {written[2].max_timestamp}" in out


def test_verify_reports_a_time_entry_below_an_earlier_batchs_timestamp(tmp_path, capsys):
    log_path, written = write_segment(tmp_path, [[5000], [1000], [2000]])
    write_time_index(log_path, [(1000, written[1].last_offset)])
    code, out = verify(capsys, log_path)
    assert code == 1 and "a batch at or before it has the larger timestamp 5000" in out


def test_verify_reports_time_entries_that_do_not_increase(segment, capsys):
    log_path, written = segment
    write_time_index(log_path, [(w.max_timestamp, w.last_offset) for w in (written[2], written[1])])
    code, out = verify(capsys, log_path)
    assert code == 1 and "does not increase" in out and "decreases" in out


def test_verify_reports_a_time_entry_offset_that_ends_no_batch(segment, capsys):
    log_path, written = segment
    write_time_index(log_path, [(written[2].max_timestamp, written[2].base_offset)])
    code, out = verify(capsys, log_path)
    assert code == 1 and f"offset {written[2].base_offset} is not the last offset of any batch" in out


def test_verify_of_an_index_alone_checks_it_against_the_log_next_to_it(segment, capsys):
    log_path, written = segment
    write_offset_index(log_path, [(written[1].last_offset, written[0].position)])
    code, out = verify(capsys, log_path.with_suffix(".index"))
    assert code == 1 and "where the batch's last offset is" in out
    assert ".timeindex" not in out  # only what was asked for, plus the log it needs


def test_verify_reports_an_index_without_its_log(tmp_path, capsys):
    index = tmp_path / f"{SEGMENT_BASE:020d}.index"
    index.write_bytes(bytes(16))
    code, out = verify(capsys, index)
    assert code == 1 and "no " in out and "next to it" in out


def test_dump_prints_batch_headers_with_positions_offsets_and_crcs(segment, capsys):
    log_path, written = segment
    assert main(["dump", str(log_path)]) == 0
    out = capsys.readouterr().out
    assert f"Log starting offset: {SEGMENT_BASE}" in out
    for w in written:
        assert f"baseOffset: {w.base_offset} lastOffset: {w.last_offset}" in out
        assert f"position: {w.position} CreateTime: {w.max_timestamp}" in out
    assert "compresscodec: gzip" in out and "isvalid: true" in out and "crc: " in out
    assert "| offset:" not in out


def test_dump_print_records_shows_each_record(segment, capsys):
    log_path, _ = segment
    assert main(["dump", str(log_path), "--print-records"]) == 0
    out = capsys.readouterr().out
    assert "| offset: 103 CreateTime: 1005 keySize: 5 valueSize: 9 headerKeys: [h] key: key-0 payload: value-103" in out


def test_dump_prints_index_entries(segment, capsys):
    log_path, written = segment
    assert main(["dump", str(log_path.with_suffix(".index")), str(log_path.with_suffix(".timeindex"))]) == 0
    out = capsys.readouterr().out
    assert f"offset: {written[1].last_offset} position: {written[1].position}" in out
    assert f"timestamp: {written[2].max_timestamp} offset: {written[2].last_offset}" in out


def test_dump_of_an_empty_index_says_so(tmp_path, capsys):
    index = tmp_path / f"{0:020d}.timeindex"
    index.write_bytes(bytes(120))
    assert main(["dump", str(index)]) == 0
    assert "is empty (10 free slots)" in capsys.readouterr().out


def test_dump_of_a_missing_file_is_a_one_line_error(tmp_path, capsys):
    assert main(["dump", str(tmp_path / "nope.log")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("seglog: error:") and "no such file" in err and "Traceback" not in err


def test_dump_refuses_files_that_are_not_segment_files(tmp_path, capsys):
    other = tmp_path / "notes.txt"
    other.write_text("x")
    assert main(["dump", str(other)]) == 1
    assert "not a segment file" in capsys.readouterr().err


def test_base_offset_comes_from_the_twenty_digit_file_name():
    assert files.base_offset_from_name("/d/00000000000000000045.index") == 45
    with pytest.raises(ValueError):
        files.base_offset_from_name("/d/45.index")


def test_index_reader_treats_trailing_zero_slots_as_free_space():
    data = OFFSET_ENTRY.pack(3, 4096) + OFFSET_ENTRY.pack(7, 0) + bytes(24)
    read = files.read_offset_index("x.index", data, 10)
    assert [(e.slot, e.key, e.value) for e in read.entries] == [(0, 13, 4096), (1, 17, 0)]
    assert read.free_slots == 3 and read.problems == []
