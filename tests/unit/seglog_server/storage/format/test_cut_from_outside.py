"""A segment's files cut short from outside the process while it reads them.

A load through a mapping past the mapped file's end is SIGBUS, which Python cannot catch: one
partition's damaged file would kill the whole service. A sealed ``.log`` is therefore read with
preads (a short read is ``CorruptRecordError``), and an index checks its file's length (one fstat
of the mapping's descriptor) before each use of its mapping (``CorruptIndexError``).

Each case runs in a child process, so that a SIGBUS shows as its exit status instead of killing
the test run. The service-level test is tests/integration/test_service_cut_segment.py.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest

SIGBUS_EXIT = -7  # subprocess's returncode for a child killed by SIGBUS

_CHILD = textwrap.dedent("""
    import os, sys
    sys.path[:0] = {paths!r}
    from tests.support.log_test_support import batch
    from seglog_server.storage.base.errors import CorruptIndexError, CorruptRecordError
    from seglog_server.storage.format.file_records import FileRecords
    from seglog_server.storage.format.offset_index import OffsetIndex
    from seglog_server.storage.format.time_index import TimeIndex

    directory, case = sys.argv[1], sys.argv[2]
    if case == "log":  # a sealed log searched once (mapped, before), cut to 100 bytes, searched again
        path = os.path.join(directory, "00000000000000000000.log")
        records = FileRecords.create(path)
        for number in range(200):
            records.append([batch(b"v" * 200, base_offset=number)])
        records.flush()
        records.seal()
        start = records.search_for_offset_with_size(100, 0).position  # pages past the cut
        assert records.search_for_offset_with_size(150, start).base_offset == 150
        os.truncate(path, 100)
        for search in (lambda: records.search_for_offset_with_size(150, start),
                       lambda: records.search_for_timestamp(0, start, 150)):
            try:
                search()
            except CorruptRecordError as exc:
                print("refused:", exc)
    else:  # an index looked up once (mapped), cut to nothing, then used again
        kind = OffsetIndex if case == "index" else TimeIndex
        path = os.path.join(directory, "00000000000000000000." + case)
        index = kind(path, 0, 1024 * 1024)
        for number in range(1000):
            if kind is OffsetIndex:
                index.append(number, number * 100)
            else:
                index.maybe_append(1_000 + number, number)
        index.trim_to_valid_size()
        index.lookup(500)
        os.truncate(path, 0)
        uses = [lambda: index.lookup(999), lambda: index.entry(900)]
        uses.append((lambda: index.append(1000, 100_000)) if kind is OffsetIndex
                    else (lambda: index.maybe_append(2_000, 1000)))
        for use in uses:
            try:
                use()
            except CorruptIndexError as exc:
                print("refused:", exc)
""")


def _child(directory: pathlib.Path, case: str) -> subprocess.CompletedProcess:
    root = pathlib.Path(__file__).resolve().parents[5]  # the repository: tests.support
    script = _CHILD.format(paths=[str(root)])
    return subprocess.run([sys.executable, "-c", script, str(directory), case],
                          capture_output=True, text=True, timeout=120)


def test_a_sealed_log_cut_under_a_search_is_a_corrupt_record_error_not_sigbus(tmp_path):
    ran = _child(tmp_path, "log")
    assert ran.returncode != SIGBUS_EXIT, "killed by SIGBUS searching the cut log"
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert len(lines) == 2, ran.stdout
    for line in lines:
        assert line.startswith("refused:") and "00000000000000000000.log: the file ends at " in line, line


@pytest.mark.parametrize("case", ["index", "timeindex"])
def test_an_index_cut_under_its_mapping_is_a_corrupt_index_error_not_sigbus(tmp_path, case):
    ran = _child(tmp_path, case)
    assert ran.returncode != SIGBUS_EXIT, f"killed by SIGBUS using the cut {case}"
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert len(lines) == 3, ran.stdout  # the lookup, the entry read and the append: each refused
    for line in lines:
        assert line.startswith("refused:") and f"00000000000000000000.{case} is 0 bytes long" in line, line
        assert "cut from outside seglog" in line, line


_ACTIVE_CHILD = textwrap.dedent("""
    import os, sys
    sys.path[:0] = {paths!r}
    from seglog_server.storage.base.errors import CorruptIndexError
    from seglog_server.storage.format.offset_index import OffsetIndex
    from seglog_server.storage.format.time_index import TimeIndex

    directory, case = sys.argv[1], sys.argv[2]
    kind = OffsetIndex if case == "index" else TimeIndex
    path = os.path.join(directory, "00000000000000000000." + case)
    index = kind(path, 0, 1024 * 1024)
    for number in range(10):  # an active segment's index: preallocated, slots reserved ahead
        if kind is OffsetIndex:
            index.append(number, number * 100)
        else:
            index.maybe_append(1_000 + number, number)
    os.truncate(path, 0)
    # Answered from the counts, which touch no mapped page: no fstat, nothing refused.
    print("counts:", index.is_full(), index.entry_count, index.file_bytes)
    # The segment reserves before it writes the batch an entry is due for: refused there, even
    # with the slot reserved already, so no batch is written that its index cannot take.
    for step in (index.reserve_next_entry,
                 (lambda: index.append(10, 1_000)) if kind is OffsetIndex else (lambda: index.maybe_append(2_000, 10))):
        try:
            step()
        except CorruptIndexError as exc:
            print("refused:", exc)
""")


@pytest.mark.parametrize("case", ["index", "timeindex"])
def test_an_active_index_cut_answers_its_counts_and_refuses_the_next_append(tmp_path, case):
    """The roll check's ``is_full`` uses no mapped page, so it skips the length check (an fstat
    on every indexed append); the reservation made before the batch is written, and the append
    that stores through the mapping, still check, and are refused instead of a SIGBUS."""
    root = pathlib.Path(__file__).resolve().parents[5]
    ran = subprocess.run([sys.executable, "-c", _ACTIVE_CHILD.format(paths=[str(root)]), str(tmp_path), case],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode != SIGBUS_EXIT, f"killed by SIGBUS appending to the cut {case}"
    assert ran.returncode == 0, ran.stderr
    counts, *refusals = ran.stdout.splitlines()
    assert counts == f"counts: False 10 {1024 * 1024 // 8 * 8 if case == 'index' else 1024 * 1024 // 12 * 12}"
    assert len(refusals) == 2, ran.stdout  # the reservation, then the append
    for refused in refusals:
        assert refused.startswith("refused:") and f"00000000000000000000.{case} is 0 bytes long" in refused, refused
