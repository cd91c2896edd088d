"""The open-segment budget holds after a reload: a segment that was only *asked* something (its
largest timestamp for the first level of a lookup by time or for retention, its deferred
first-use check, an explanation) keeps no descriptor; only the segments a log used and reported
to the budget may, and there are at most ``max_count`` of those.

After a clean shutdown every inactive segment is loaded unchecked and checked on first use
(segment_check.py). The first lookup by time asks every segment its largest timestamp, which
runs those checks; each check read the ``.log`` through the segment's own descriptor and left it
open, outside the budget: 30 partitions of 12 segments under ``ulimit -n 256`` then ran out of
descriptors (tests/integration/test_service_restart_descriptors.py is that run).
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.log_test_support import NOW_MS, batch, config, offsets_of, open_log, run_now

from seglog_server.storage.base.clock import FakeClock
from seglog_server.storage.base.errors import OffsetOutOfRangeError, ResourceExhaustedError
from seglog_server.storage.base.fs import REAL_FS, FileSystem
from seglog_server.storage.log.unified_log import Log
from seglog_server.storage.segment.open_segments import DESCRIPTORS_PER_SEGMENT_MAX, OpenSegments

SEGMENT_COUNT = 24
BUDGET = 2
MAX_TIMESTAMP = -3


def _lay_out(directory: str, clock: FakeClock) -> None:
    """A log of SEGMENT_COUNT segments of one batch each, timestamps 1 s apart, closed cleanly."""
    one = batch(b"x" * 40)
    log = open_log(directory, clock, config(segment_bytes=len(one), retention_ms=-1))
    for number in range(SEGMENT_COUNT):
        log.append(batch(b"x" * 40, timestamps=NOW_MS + number * 1000))
    log.flush()
    log.close()


def _reload(directory: str, clock: FakeClock, budget: OpenSegments, fs: FileSystem = REAL_FS) -> Log:
    return Log.load(
        directory, "topic", 0, config(segment_bytes=1024, retention_ms=-1), clock=clock, fs=fs,
        had_clean_shutdown=True, recovery_point=SEGMENT_COUNT, rng=random.Random(7),
        flush_scheduler=run_now, open_segments=budget,
    )


def _holding(log: Log) -> list[int]:
    return [segment.base_offset for segment in log.segments_snapshot() if segment.holds_handles]


def _descriptor_count() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW_MS)


@pytest.fixture
def laid_out(tmp_path, clock) -> str:
    directory = str(tmp_path / "topic-0")
    _lay_out(directory, clock)
    return directory


_OPERATIONS = {
    "one_lookup_by_time": lambda log: log.offset_for_timestamp(NOW_MS + 20_500),
    "many_lookups_by_time": lambda log: log.offsets_for_timestamps([NOW_MS + 2000, NOW_MS + 9000, NOW_MS + 21_000]),
    "max_timestamp": lambda log: log.offset_for_timestamp(MAX_TIMESTAMP),
    "max_timestamp_among_others": lambda log: log.offsets_for_timestamps([MAX_TIMESTAMP, NOW_MS + 23_000]),
    "retention_pass": lambda log: log.delete_old_segments(),
    "explain_timestamp": lambda log: log.explain_timestamp(NOW_MS + 22_000),
    "explain_offset": lambda log: log.explain_offset(3),
}


@pytest.mark.parametrize("operation", sorted(_OPERATIONS))
def test_a_first_question_after_a_reload_leaves_descriptors_within_the_budget(laid_out, clock, operation):
    budget = OpenSegments(BUDGET)
    before = _descriptor_count()
    log = _reload(laid_out, clock, budget)
    try:
        _OPERATIONS[operation](log)
        holding = _holding(log)
        # The active segment may hold its own (loaded checked, then appended to): one more.
        assert len(holding) <= BUDGET + 1, f"{len(holding)} segments hold descriptors: {holding}"
        assert _descriptor_count() - before <= (BUDGET + 1) * DESCRIPTORS_PER_SEGMENT_MAX
    finally:
        log.close()


def test_the_first_lookup_by_time_checks_every_segment_and_says_the_log_is_loaded(laid_out, clock):
    log = _reload(laid_out, clock, OpenSegments(BUDGET))
    try:
        assert not log.timestamps_loaded  # the rpc layer runs this first lookup on its pool
        assert log.offset_for_timestamp(NOW_MS + 5000).offset == 5
        assert log.timestamps_loaded
        assert log.offset_for_timestamp(NOW_MS + 6000).offset == 6
        assert log.timestamps_loaded
    finally:
        log.close()


def test_max_timestamp_loads_the_timestamps_too(laid_out, clock):
    log = _reload(laid_out, clock, OpenSegments(BUDGET))
    try:
        assert log.offset_for_timestamp(MAX_TIMESTAMP).offset == SEGMENT_COUNT - 1
        assert log.timestamps_loaded
        assert len(_holding(log)) <= BUDGET + 1
    finally:
        log.close()


class _TooManyOpenFiles(FileSystem):
    """Refuses every open with EMFILE while ``armed``."""

    armed = False

    def open(self, path, flags, mode=0o644):
        if self.armed:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), path)
        return super().open(path, flags, mode)


def test_a_first_use_check_that_runs_out_of_descriptors_is_checked_again_on_the_next_use(laid_out, clock):
    fs = _TooManyOpenFiles()
    log = _reload(laid_out, clock, OpenSegments(BUDGET), fs)
    try:
        fs.armed = True
        with pytest.raises(ResourceExhaustedError, match="Too many open files"):
            log.offset_for_timestamp(NOW_MS + 5000)
        fs.armed = False
        # The first segment's check failed; cut its .log behind the log's back: the check, still
        # pending, must see it (a check dropped on EMFILE would trust the torn file for good).
        segment = log.segments_snapshot()[0]
        with open(segment.log.path, "r+b") as file:
            file.truncate(segment.size_in_bytes - 1)
        assert log.offset_for_timestamp(NOW_MS).offset == 1  # the first segment's only batch was cut
        assert segment.repaired_on_first_use
        assert len(_holding(log)) <= BUDGET + 1
    finally:
        log.close()


_QUESTIONS = st.one_of(
    st.tuples(st.just("read"), st.integers(0, SEGMENT_COUNT - 1)),
    st.tuples(st.just("time"), st.integers(NOW_MS - 1000, NOW_MS + SEGMENT_COUNT * 1000)),
    st.tuples(st.just("times"), st.lists(st.integers(NOW_MS, NOW_MS + SEGMENT_COUNT * 1000), min_size=2, max_size=5)),
    st.tuples(st.just("max"), st.none()),
    st.tuples(st.just("retention"), st.none()),
    st.tuples(st.just("explain_time"), st.integers(NOW_MS, NOW_MS + SEGMENT_COUNT * 1000)),
    st.tuples(st.just("explain_offset"), st.integers(0, SEGMENT_COUNT - 1)),
)


def _ask(log: Log, question: tuple) -> None:
    kind, argument = question
    if kind == "read":
        log.read(argument, 1)
    elif kind == "time":
        log.offset_for_timestamp(argument)
    elif kind == "times":
        log.offsets_for_timestamps(argument)
    elif kind == "max":
        log.offset_for_timestamp(MAX_TIMESTAMP)
    elif kind == "retention":
        log.delete_old_segments()
    elif kind == "explain_time":
        log.explain_timestamp(argument)
    else:
        log.explain_offset(argument)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(questions=st.lists(_QUESTIONS, min_size=1, max_size=8), budget_count=st.integers(1, 4))
def test_any_mix_of_uses_and_questions_after_a_reload_stays_within_the_budget(
    tmp_path_factory, questions, budget_count
):
    clock = FakeClock(NOW_MS)
    template = tmp_path_factory.getbasetemp() / "open-segments-template"
    if not template.exists():
        _lay_out(str(template), clock)
    directory = tmp_path_factory.mktemp("log") / "topic-0"
    shutil.copytree(template, directory)
    log = _reload(str(directory), clock, OpenSegments(budget_count))
    try:
        for question in questions:
            _ask(log, question)
            holding = _holding(log)
            assert len(holding) <= budget_count + 1, (question, holding)
    finally:
        log.close()


# -- segments scheduled for deletion ------------------------------------------------------------
def _open_deleted_files(directory: str) -> list[str]:
    """Paths of this process's open descriptors that name a ``.deleted`` file in ``directory``
    (other tests' logs in this process are none of this test's business)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # closed since the listing
        if target.startswith(directory + os.sep) and ".deleted" in target:
            found.append(target)
    return found


def _delayed_delete_log(directory: str, clock: FakeClock) -> Log:
    log = _reload(directory, clock, OpenSegments(SEGMENT_COUNT * 2))  # room for every segment
    log.update_config(config(segment_bytes=1024, retention_ms=-1, file_delete_delay_ms=60_000))
    return log


def test_segments_renamed_deleted_close_their_descriptors_at_once(laid_out, clock):
    log = _delayed_delete_log(laid_out, clock)
    try:
        for offset in range(SEGMENT_COUNT):  # a read sweep: every segment holds its descriptors
            log.read(offset, 1)
        assert len(_holding(log)) == SEGMENT_COUNT
        log.delete_records(SEGMENT_COUNT - 1)
        assert log.delete_old_segments() == SEGMENT_COUNT - 1  # renamed .deleted, unlinked in 60 s
        assert sorted(name for name in os.listdir(laid_out) if name.endswith(".log.deleted"))
        assert _open_deleted_files(laid_out) == []
        assert _holding(log) == [SEGMENT_COUNT - 1]
    finally:
        log.close()


def test_a_holder_of_a_deleted_segment_reads_it_from_its_renamed_file(laid_out, clock):
    log = _delayed_delete_log(laid_out, clock)
    try:
        first = log.segments_snapshot()[0]
        expected = log.read(0, 1).records
        log.delete_records(1)
        assert log.delete_old_segments() == 1
        assert not first.holds_handles and first.log.path.endswith(".log.deleted")
        with first.handles_as_found():  # as a cleaning snapshot describing it does
            assert first.log.read(0, first.size_in_bytes) == expected
            assert first.read_next_offset() == 1
        assert not first.holds_handles
    finally:
        log.close()


def test_reads_racing_retention_get_the_records_or_an_out_of_range_answer(laid_out, clock):
    """A reader thread against a thread deleting every segment below the last: each read either
    finds its record or is told the offset is below the log start (OUT_OF_RANGE, after which a
    consumer seeks to the start); never an error from a closed descriptor."""
    log = _delayed_delete_log(laid_out, clock)
    outcomes: list[str] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        rng = random.Random(3)
        while not stop.is_set() and len(outcomes) < 5000:
            offset = rng.randrange(SEGMENT_COUNT)
            try:
                found = offsets_of(log.read(offset, 1).records)
            except OffsetOutOfRangeError:
                outcomes.append("out_of_range")
                continue
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                errors.append(exc)
                return
            outcomes.append("read" if found == [offset] else f"read {found} at {offset}")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for start in range(1, SEGMENT_COUNT):
            log.delete_records(start)
            log.delete_old_segments()
    finally:
        stop.set()
        thread.join(30)
    try:
        assert not thread.is_alive()
        assert errors == []
        assert set(outcomes) <= {"read", "out_of_range"} and "read" in outcomes
        assert log.read(SEGMENT_COUNT - 1, 1).records
        assert _open_deleted_files(laid_out) == []
    finally:
        log.close()
