"""The single lookup's fast path (``LookupRpcs._search_one`` -> ``UnifiedLog.lookup_timestamp_inline``
-> the segment's time-step table): where it answers inline and where it hands the target to the
pool, a single target is answered byte for byte as the general path (a request of the target
twice) answers it: a log start inside the table's segment, a damaged table, a lock another
thread holds, a log whose segments were not checked since a restart; and the storage calls'
counts move as ``StorageCalls.sized`` moved them. A table's answer from memory is timed as the
index search without the two getrusage calls of a fault count; a search that reads the files
still counts its faults. A real LogManager on a temporary directory behind the LogServicer."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import tempfile
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc.log_service import LogServicer
from seglog_server.storage.base import observer as observer_module
from seglog_server.storage.base.observer import StorageObserver, install_observer
from seglog_server.storage.manager.log_manager import LogManager
from tests.support.fault_fs import FaultFs
from tests.support.servicer_support import Context, servicer_over

FIRST_MS = 1_700_000_000_000
BATCHES = 20
RECORDS = 50  # a batch: FIRST_MS + 1000 * batch + record, offset 50 * batch + record


def _batch(timestamp_ms: int) -> bytes:
    builder = codec.RecordBatchBuilder()
    for number in range(RECORDS):
        builder.append(b"v" * 40, timestamp_ms=timestamp_ms + number)
    return builder.build()


def _manager(directory: str, fs: FaultFs | None = None) -> LogManager:
    manager = LogManager([directory]) if fs is None else LogManager([directory], fs=fs)
    manager.startup()
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    for number in range(BATCHES):
        log.append(_batch(FIRST_MS + number * 1000))
    return manager


def _loaded_manager(directory: str, fs: FaultFs | None = None) -> LogManager:
    """``_manager`` whose segments' first-use checks ran (a pooled lookup's): a target is tried inline."""
    manager = _manager(directory, fs)
    manager.get_log("t", 0).lookup_timestamps([FIRST_MS])
    return manager


def _segment(manager: LogManager):
    return manager.get_log("t", 0)._local.segments.at(0)  # noqa: SLF001 - the table under test


async def _one_and_general(servicer: LogServicer, timestamp_ms: int) -> tuple[pb.PartitionOffset, pb.PartitionOffset]:
    target = pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=timestamp_ms)
    one = await servicer.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target]), Context())
    both = await servicer.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target, target]), Context())
    assert one.results[0].SerializeToString(deterministic=True) == both.results[0].SerializeToString(deterministic=True)
    return one.results[0], both.results[0]


@pytest.fixture
def fed():
    """A one-segment log whose time-step table the appends fed, behind a servicer."""
    with tempfile.TemporaryDirectory() as directory:
        manager = _manager(directory)
        service, calls = servicer_over(manager)
        assert _segment(manager)._steps_ref() is not None  # noqa: SLF001
        manager.get_log("t", 0).lookup_timestamps([FIRST_MS])  # the segments' first-use checks, as a pooled lookup runs them
        yield service, manager, calls
        calls.shutdown()
        manager.shutdown()


TARGETS = st.one_of(st.sampled_from([-1, -2, -3, 0, FIRST_MS + BATCHES * 1000]),
                    st.integers(FIRST_MS - 10, FIRST_MS + BATCHES * 1000 + 10))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.integers(0, BATCHES * RECORDS), targets=st.lists(TARGETS, min_size=1, max_size=8))
async def test_a_log_start_inside_the_tables_segment_answers_as_the_general_path(fed, start, targets):
    service, manager, calls = fed
    log = manager.get_log("t", 0)
    if start > log.log_start_offset:
        log.delete_records(start)
    assert log.timestamps_loaded  # (the fixture's first lookup)
    for timestamp_ms in targets:
        before = calls.statistics()
        one, _ = await _one_and_general(service, timestamp_ms)
        assert one.error.code == 0
        if timestamp_ms >= 0 and one.offset >= 0:  # at or above the log start, at or after the target
            assert one.offset >= log.log_start_offset and one.timestamp_ms >= timestamp_ms
        # both tried inline, and both went on to the pool or neither (a step below the start
        # leaves the target to the bounded search, which may refuse a read past its bound)
        after = calls.statistics()
        assert after.inline_count == before.inline_count + 2
        assert after.pooled_count - before.pooled_count in (0, 2)


async def test_a_damaged_table_answers_before_its_damage_and_leaves_the_rest_to_the_search():
    """The last batch's last record rots on disk after the appends; the table, rebuilt by
    batched lookups, ends before that batch (``damaged``): targets before it are answered
    from the table, those in it by the search that meets the damage, as the general path."""
    with tempfile.TemporaryDirectory() as directory:
        manager = _manager(directory)
        service, calls = servicer_over(manager)
        try:
            segment = _segment(manager)
            segment.drop_time_steps()
            path = os.path.join(directory, "t-0", "00000000000000000000.log")
            size = os.path.getsize(path)
            with open(path, "r+b") as file:  # the last record's header count now claims a header
                file.seek(size - 1)
                assert file.read(1) == b"\x00"
                file.seek(size - 1)
                file.write(b"\x02")
            many = [pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=FIRST_MS + k * 1000 + 5)
                    for k in range(BATCHES - 1)]
            for _ in range(4):  # enough targets asked to build the table
                await service.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=many), Context())
            steps = segment._steps_ref()  # noqa: SLF001
            assert steps is not None and steps.damaged
            codes = set()
            for timestamp_ms in [FIRST_MS + 5005, FIRST_MS + 18_049, *range(FIRST_MS + 19_000, FIRST_MS + 19_051)]:
                one, _ = await _one_and_general(service, timestamp_ms)
                codes.add(one.error.code)
            assert len(codes) == 2  # answered, and a corrupt segment's error for the targets past the damage
        finally:
            calls.shutdown()
            manager.shutdown()


async def _asked_while_held(service, calls, request: pb.OffsetsForTimesRequest, lock) -> pb.OffsetsForTimesResponse:
    """``request``'s answer, ``lock`` held by another thread until the request reached the pool."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait()
    try:
        pooled_before = calls.statistics().pooled_count
        asked = asyncio.ensure_future(service.OffsetsForTimes(request, Context()))
        while calls.statistics().pooled_count == pooled_before:
            await asyncio.sleep(0.001)
    finally:
        release.set()
    answer = await asked
    holder.join()
    return answer


async def test_a_single_lookup_whose_lock_another_thread_holds_goes_to_the_pool(fed):
    service, manager, calls = fed
    lock = manager.inline_lock(manager.get_log("t", 0))
    before = calls.statistics()
    target = pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=FIRST_MS + 7003)
    answer = (await _asked_while_held(service, calls, pb.OffsetsForTimesRequest(partitions=[target]), lock)).results[0]
    after = calls.statistics()
    assert (answer.offset, answer.timestamp_ms) == (353, FIRST_MS + 7003)
    assert after.busy_fallback_count == before.busy_fallback_count + 1
    assert after.inline_count == before.inline_count


async def test_a_first_lookup_after_a_restart_goes_to_the_pool_without_an_inline_attempt():
    with tempfile.TemporaryDirectory() as directory:
        _manager(directory).shutdown()
        manager = LogManager([directory])
        manager.startup()
        service, calls = servicer_over(manager)
        try:
            before = calls.statistics()
            target = pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=FIRST_MS + 12_010)
            answer = (await service.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target]), Context())).results[0]
            after = calls.statistics()
            assert (answer.offset, answer.error.code) == (610, 0)
            assert (after.pooled_count, after.inline_count) == (before.pooled_count + 1, before.inline_count)
            one, _ = await _one_and_general(service, FIRST_MS + 3_020)  # loaded now: inline
            assert one.offset == 170
            assert calls.statistics().inline_count == after.inline_count + 2
        finally:
            calls.shutdown()
            manager.shutdown()


class _Recording(StorageObserver):
    enabled = True

    def __init__(self) -> None:
        self.phases: list[tuple[str, str]] = []

    def phase(self, operation: str, phase: str, seconds: float) -> None:
        self.phases.append((operation, phase))


@pytest.fixture
def rusage_calls(monkeypatch):
    """The getrusage calls the storage's stopwatches make (the real call, counted)."""
    counted = []
    real = observer_module._getrusage

    def counting(who: int):
        counted.append(who)
        return real(who)

    monkeypatch.setattr(observer_module, "_getrusage", counting)
    return counted


async def test_a_tables_answer_is_timed_without_a_fault_count_and_a_file_search_is_counted(fed, rusage_calls):
    service, manager, _ = fed
    recording = _Recording()
    previous = install_observer(recording)
    try:
        target = pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=FIRST_MS + 4010)
        answer = (await service.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target]), Context())).results[0]
        assert answer.offset == 210
        assert ("offsets_for_times", "index_search") in recording.phases
        assert rusage_calls == []  # the table answered from memory: no fault count
        _segment(manager).drop_time_steps()  # the index and a scan of the file answer now
        recording.phases.clear()
        answer = (await service.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target]), Context())).results[0]
        assert answer.offset == 210
        assert ("offsets_for_times", "log_scan") in recording.phases
        assert rusage_calls  # its faults counted (marked before the index search, taken after each step)
    finally:
        install_observer(previous)


async def test_a_log_taken_offline_after_get_log_answers_unavailable_from_the_inline_attempt(monkeypatch):
    """A flush of the log (a storage user other than the service) fails on the disk after
    ``get_log`` handed the log over and before the inline attempt takes its lock (the fault
    fires as ``lookup_timestamp_inline`` is entered): that attempt's usability check meets the
    offline log and raises LogDirOfflineError for the whole call, which the fast path answers
    UNAVAILABLE with the log's message after telling the storage (``handle_log_failure``, as
    ``log_call`` does): the directory is offline once it is answered."""
    with tempfile.TemporaryDirectory() as directory:
        fs = FaultFs()
        manager = _manager(directory, fs)
        service, calls = servicer_over(manager)
        try:
            log = manager.get_log("t", 0)
            log.lookup_timestamps([FIRST_MS])  # the first-use checks: the target is tried inline
            log.append(_batch(FIRST_MS + BATCHES * 1000))
            inline_calls, failures = [], []
            real_inline, real_failure = log.lookup_timestamp_inline, manager.handle_log_failure

            def flush_fails_then_inline(timestamp_ms, read_bytes_max):
                fs.fail("fdatasync", errno.EIO, path=".log")
                with pytest.raises(Exception, match="(?i)offline|i/o|EIO|Input/output"):
                    log.flush()
                fs.heal()
                assert all(d.online for d in manager._dirs)  # noqa: SLF001 - the manager not told yet
                inline_calls.append(timestamp_ms)
                return real_inline(timestamp_ms, read_bytes_max)

            def recording_failure(failed_log, cause):
                failures.append((failed_log, type(cause).__name__))
                return real_failure(failed_log, cause)

            monkeypatch.setattr(log, "lookup_timestamp_inline", flush_fails_then_inline)
            monkeypatch.setattr(manager, "handle_log_failure", recording_failure)
            target = pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=FIRST_MS + 3003)
            answer = (await service.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target]), Context())).results[0]
            assert inline_calls == [FIRST_MS + 3003]  # the fast path's inline attempt ran
            assert failures == [(log, "LogDirOfflineError")]  # and told the storage
            assert (answer.offset, answer.error.code) == (-1, 14)  # UNAVAILABLE
            assert "offline" in answer.error.message and answer.error.error_class == "LogDirOfflineError"
            assert not any(d.online for d in manager._dirs)  # noqa: SLF001
        finally:
            calls.shutdown()
            manager.shutdown()


def _offline_as_called(monkeypatch, fs: FaultFs, log, name: str) -> None:
    """``log.<name>`` (the inline attempt of a path: the fast path's ``lookup_timestamp_inline``,
    the general path's ``lookup_timestamps_without_builds``) entered after a flush failed on the
    disk: the log offline after ``get_log`` handed it over, before the attempt takes its lock."""
    real = getattr(log, name)

    def offline_then_real(*args):
        fs.fail("fdatasync", errno.EIO, path=".log")
        with pytest.raises(Exception, match="(?i)offline|i/o|EIO|Input/output"):
            log.flush()
        fs.heal()
        return real(*args)

    monkeypatch.setattr(log, name, offline_then_real)


async def _ask_counted(service, calls, targets: int, lock=None) -> tuple[bytes, tuple[int, int, int]]:
    """One request of the target ``targets`` times (1: the fast path; 2: the general path), with
    ``lock`` held by another thread until the request reached the pool: its first answer's bytes
    and the (inline, pooled, busy fallback) counts it moved."""
    target = pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=FIRST_MS + 7003)
    request = pb.OffsetsForTimesRequest(partitions=[target] * targets)
    before = calls.statistics()
    if lock is None:
        answer = await service.OffsetsForTimes(request, Context())
    else:
        answer = await _asked_while_held(service, calls, request, lock)
    after = calls.statistics()
    return answer.results[0].SerializeToString(deterministic=True), (
        after.inline_count - before.inline_count, after.pooled_count - before.pooled_count,
        after.busy_fallback_count - before.busy_fallback_count)


@pytest.mark.parametrize(("case", "expected"), [
    ("inline", (1, 0, 0)),  # answered inline
    ("busy", (0, 1, 1)),  # the lock held by another thread: the pool, a busy fallback
    ("closed", (1, 0, 0)),  # the inline attempt raised (the log closed): counted inline
    ("offline", (1, 1, 0)),  # it raised LogDirOfflineError: inline, and the report on the pool
])
async def test_the_fast_path_counts_its_storage_calls_as_the_general_path(monkeypatch, case, expected):
    """The single lookup's fast path moves the storage calls' counts as ``StorageCalls.sized``
    moves them for the general path (a request of the target twice: one storage call), on a
    fresh log each: a target answered inline, a busy lock, a log whose inline attempt raised
    (closed; offline after ``get_log`` handed it over). Before, an attempt that raised counted
    nothing on the fast path."""
    outcomes = {}
    with tempfile.TemporaryDirectory() as parent:
        directory = os.path.join(parent, "data")  # one name for both paths: their messages name it
        for targets, attempt in ((1, "lookup_timestamp_inline"), (2, "lookup_timestamps_without_builds")):
            os.mkdir(directory)
            fs = FaultFs()
            manager = _loaded_manager(directory, fs)
            service, calls = servicer_over(manager)
            try:
                log = manager.get_log("t", 0)
                lock = manager.inline_lock(log) if case == "busy" else None
                if case == "closed":
                    log.close()
                elif case == "offline":
                    _offline_as_called(monkeypatch, fs, log, attempt)
                outcomes[targets] = await _ask_counted(service, calls, targets, lock)
            finally:
                calls.shutdown()
                manager.shutdown()
            shutil.rmtree(directory)
    assert outcomes[1] == outcomes[2]
    assert outcomes[1][1] == expected
