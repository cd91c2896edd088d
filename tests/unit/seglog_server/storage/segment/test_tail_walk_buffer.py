"""The trusted tail walk's buffer (segment_check._walk_tail) grows only for a batch whose header
is valid and whose bytes the file holds past the chunk: garbage whose length field happens to
reach the file's end (a bad magic, offsets going back) is rejected at the chunk's size, never
read whole. Real files through a LogManager; the walk's reads counted by wrapping
FileRecords.read_into (recovery, which then reads the segment, is not counted)."""

from __future__ import annotations

import struct

import pytest

from seglog_server.storage.format.file_records import FileRecords
from seglog_server.storage.segment import segment_check
from tests.support.load_fault_support import produce, read_values, segment_files, start

CHUNK_BYTES = 4096
FILE_BYTES = 64 * CHUNK_BYTES
# base offset, length, partition leader epoch, magic: what the walk reads of a batch header first.
HEADER = struct.Struct(">qiib")


def garbage_header(base_offset: int, magic: int) -> bytes:
    """A header whose length reaches the end of a FILE_BYTES file, the rest zeros."""
    return HEADER.pack(base_offset, FILE_BYTES - 12, 0, magic)


@pytest.mark.parametrize("damage", ["bad magic", "offsets going back"])
def test_garbage_with_a_long_length_is_rejected_at_the_chunk_size(tmp_path, monkeypatch, damage):
    monkeypatch.setattr(segment_check, "TAIL_CHUNK_BYTES", CHUNK_BYTES)
    path = str(tmp_path / "d0")
    manager = start([path])
    manager.create_topic("t", 1, {})
    written = produce(manager.get_log("t", 0), 0, 3)
    log_dir = manager.get_log("t", 0).dir
    manager.shutdown()
    active = segment_files(log_dir, ".log")[-1]
    with open(active, "r+b") as f:  # the garbage after the batches, as a torn copy leaves it
        f.seek(0, 2)
        tail_at = f.tell()
        f.write(garbage_header(100 if damage == "bad magic" else 0, 7 if damage == "bad magic" else 2))
        f.truncate(tail_at + FILE_BYTES)
    buffers: list[int] = []  # the buffer of each read the tail walk makes
    walking: list[bool] = []
    read_into, walk_tail = FileRecords.read_into, segment_check._walk_tail

    def counted(self, buffer, position):
        if walking:
            buffers.append(len(buffer))
        return read_into(self, buffer, position)

    def walked(*args):
        walking.append(True)
        try:
            return walk_tail(*args)
        finally:
            walking.pop()

    monkeypatch.setattr(FileRecords, "read_into", counted)
    monkeypatch.setattr(segment_check, "_walk_tail", walked)
    manager = start([path])
    try:
        log = manager.get_log("t", 0)
        assert manager.statistics().recovery.segments_recovered == 1  # the garbage cut
        assert [offset for offset, _ in read_values(log)] == written
        assert buffers and max(buffers) <= CHUNK_BYTES
    finally:
        manager.shutdown()
