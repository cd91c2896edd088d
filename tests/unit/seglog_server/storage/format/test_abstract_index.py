"""No mapped access faults on a file whose pages the file system cannot provide.

An index file is preallocated sparse (``ftruncate``) and trimmed on roll and close; after a kill -9
it stays preallocated, and on reopening every slot of it is an entry. On tmpfs even a *read*
through a mapping of a hole allocates a page, so on a full tmpfs the restart's recovery (which
read the last slot of the old index when mapping it) died of SIGBUS. Now recovery empties an
index before mapping it, a mapped existing file has its holes backed first (posix_fallocate: an
OSError naming the file on a full disk), and a sealed ``.log`` with a hole is read with preads.

The tmpfs tests mount a 1 MiB tmpfs (root only: CI runs as root) and run the storage in a child
process, so that a SIGBUS is seen as the child's exit status instead of killing the test run.
"""

from __future__ import annotations

import errno
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from tests.support.log_test_support import batch

from seglog_server.storage.base.errors import CorruptIndexError
from seglog_server.storage.format.file_records import FileRecords
from seglog_server.storage.base.fs import FileSystem
from seglog_server.storage.format.offset_index import OffsetIndex

TMPFS_BYTES = 1024 * 1024
INDEX_BYTES = 10 * 1024 * 1024  # segment.index.bytes' default: ten times the tmpfs
SIGBUS_EXIT = -7  # subprocess's returncode for a child killed by SIGBUS


@pytest.fixture
def tmpfs(tmp_path):
    """A 1 MiB tmpfs mounted for the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    mount_point = tmp_path / "tmpfs"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(directory) -> None:
    """Writes a ballast file until the file system refuses another byte."""
    with open(os.path.join(directory, "ballast"), "wb", buffering=0) as ballast:
        for chunk_bytes in (64 * 1024, 4096, 1):
            try:
                while True:
                    ballast.write(b"\0" * chunk_bytes)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc


_CHILD = textwrap.dedent("""
    import os, random, sys
    sys.path[:0] = {paths!r}
    from tests.support.log_test_support import NOW_MS, batch, config
    from seglog_server.storage.base.clock import FakeClock
    from seglog_server.storage.log.unified_log import Log
    from seglog_server.storage.format.offset_index import OffsetIndex

    directory, stage = sys.argv[1], sys.argv[2]
    log_config = config(segment_bytes=64 * 1024)
    if stage == "write":  # appends, then dies as kill -9 would: nothing closed or trimmed
        log = Log.load(directory, "topic", 0, log_config, clock=FakeClock(NOW_MS), had_clean_shutdown=False,
                       recovery_point=0, rng=random.Random(7), flush_scheduler=lambda task: task())
        for number in range(50):
            log.append(batch(b"x" * 100, timestamps=NOW_MS + number))
        log.flush()
        os._exit(0)
    if stage == "recover":
        log = Log.load(directory, "topic", 0, log_config, clock=FakeClock(NOW_MS), had_clean_shutdown=False,
                       recovery_point=0, rng=random.Random(7), flush_scheduler=lambda task: task())
        print("recovered", log.log_end_offset, log.offset_for_timestamp(NOW_MS + 10).offset)
    if stage == "lookup":  # an existing, untrimmed index mapped for a lookup
        index = OffsetIndex(os.path.join(directory, "00000000000000000000.index"), 0, {index_bytes})
        try:
            index.lookup(5)
        except OSError as exc:
            print("refused:", exc)
""")


def _child(directory, stage: str) -> subprocess.CompletedProcess:
    root = pathlib.Path(__file__).resolve().parents[5]  # the repository: tests.support
    script = _CHILD.format(paths=[str(root)], index_bytes=INDEX_BYTES)
    return subprocess.run([sys.executable, "-c", script, str(directory), stage],
                          capture_output=True, text=True, timeout=120)


def test_recovery_after_a_kill_on_a_full_tmpfs_rebuilds_the_indexes_without_sigbus(tmpfs):
    directory = tmpfs / "topic-0"
    written = _child(directory, "write")
    assert written.returncode == 0, written.stderr
    assert os.path.getsize(directory / "00000000000000000000.timeindex") > TMPFS_BYTES  # sparse, untrimmed
    _fill(tmpfs)
    recovered = _child(directory, "recover")
    assert recovered.returncode != SIGBUS_EXIT, "killed by SIGBUS in recovery"
    assert recovered.returncode == 0, recovered.stderr
    assert recovered.stdout.split() == ["recovered", "50", "10"]


def test_mapping_an_untrimmed_index_on_a_full_tmpfs_is_an_error_naming_the_file(tmpfs):
    path = tmpfs / "00000000000000000000.index"
    index = OffsetIndex(str(path), 0, INDEX_BYTES)
    for number in range(10):  # a few real entries, then ten sparse megabytes (never trimmed)
        index.append(number, number * 100)
    index.close_handler()
    _fill(tmpfs)
    looked_up = _child(tmpfs, "lookup")
    assert looked_up.returncode != SIGBUS_EXIT, "killed by SIGBUS mapping the index"
    assert looked_up.returncode == 0, looked_up.stderr
    assert looked_up.stdout.startswith("refused: [Errno 28]"), looked_up.stdout
    assert str(path) in looked_up.stdout


class _FullDisk(FileSystem):
    """posix_fallocate fails with ENOSPC (a disk with no room for the holes)."""

    def __init__(self) -> None:
        self.fallocated: list[tuple[int, int]] = []

    def fallocate(self, fd, position, size):
        self.fallocated.append((position, size))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _untrimmed_index(path, entry_count: int = 4) -> None:
    index = OffsetIndex(str(path), 0, 1024 * 1024)
    for number in range(entry_count):
        index.append(number, number * 100)
    index.close_handler()  # as a crash leaves it: preallocated, sparse past the entries


def test_an_index_whose_holes_cannot_be_backed_is_not_mapped_and_the_error_names_it(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    _untrimmed_index(path)
    fs = _FullDisk()
    index = OffsetIndex(str(path), 0, 1024 * 1024, fs=fs)
    with pytest.raises(OSError, match="No space left on device") as raised:
        index.lookup(2)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    assert fs.fallocated and not index.is_materialized
    assert os.path.getsize(path) == 1024 * 1024  # nothing changed on disk


def test_an_index_with_holes_gets_blocks_before_it_is_mapped(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    _untrimmed_index(path)
    index = OffsetIndex(str(path), 0, 1024 * 1024)
    index.lookup(2)  # (the answer is garbage: every slot of an untrimmed file is an entry)
    assert index.entry_count == 1024 * 1024 // 8
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.lseek(fd, 0, os.SEEK_HOLE) == os.path.getsize(path)  # no hole left
    finally:
        os.close(fd)
    index.close_handler()


def test_a_read_only_index_with_holes_is_refused_as_corrupt(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    _untrimmed_index(path)
    with pytest.raises(CorruptIndexError, match="hole"):
        OffsetIndex(str(path), 0, 1024 * 1024, writable=False).lookup(2)


def test_reset_empties_an_untrimmed_index_without_mapping_its_old_slots(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    _untrimmed_index(path)
    fs = _FullDisk()
    index = OffsetIndex(str(path), 0, 1024 * 1024, fs=fs)
    index.reset()  # recovery's first step: no fallocate (the old slots are never mapped)
    assert fs.fallocated == [] and index.entry_count == 0
    index.append(7, 700)
    assert index.lookup(7).position == 700
    index.close()


class _CountingMaps(FileSystem):
    def __init__(self) -> None:
        self.maps = 0

    def mmap(self, fd, length, writable):
        self.maps += 1
        return super().mmap(fd, length, writable)


def test_a_sealed_log_with_a_hole_is_scanned_with_preads_not_mapped(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    first = batch(b"a", base_offset=0)
    with open(path, "wb") as file:
        file.write(first)
        file.truncate(len(first) + 64 * 1024)  # a hole after the batch (as a preallocated file)
    fs = _CountingMaps()
    records = FileRecords(str(path), fs=fs)
    records.seal()
    header = records.search_for_offset_with_size(0, 0)
    assert header is not None and header.position == 0
    assert fs.maps == 0  # a sealed log is never mapped (test_cut_from_outside.py)
    records.close_handler()
