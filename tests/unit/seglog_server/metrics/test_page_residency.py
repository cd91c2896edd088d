"""mincore residency: an evicted file reads as not resident, a page read back as resident."""

from __future__ import annotations

import os

from seglog_server.metrics.page_residency import PAGE_BYTES, resident_pages, residency_counts


def test_evicted_pages_are_not_resident_and_a_read_page_is(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(os.urandom(64 * PAGE_BYTES))
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        assert residency_counts(str(path)) == (0, 64)
        os.pread(fd, 1, 10 * PAGE_BYTES)
        vector = resident_pages(str(path))
        assert vector[10] == 1 and len(vector) == 64
    finally:
        os.close(fd)


def test_missing_and_empty_files_have_no_pages(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    assert residency_counts(str(tmp_path / "empty")) == (0, 0)
    assert residency_counts(str(tmp_path / "missing")) == (0, 0)
