"""A lookup call of one target a partition (a group seeking its partitions to a time; the client
asks so in the old form, a PartitionTimestamp a target): each partition's target takes the single
lookup's path (``LookupRpcs._search_one`` -> ``UnifiedLog.lookup_timestamp_inline``), not the
shared search, and is answered byte for byte as the general path answers it (the target asked
twice in its partition), for every kind of target (special, refused, past the log, before it, in
the active segment or an older one) and partition (one with records, an empty one, an unknown
one). Where the inline attempt answers or the log is not loaded yet the same storage calls are
counted as there; behind a lock held by another thread the single path makes one busy fallback
and one pooled call a target, where the general path's pool may make two (its bounded search
refused, then the full one). A real LogManager on a temporary directory behind the LogServicer."""

from __future__ import annotations

import tempfile
import threading
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.manager.log_manager import LogManager
from tests.support.servicer_support import Context, servicer_over

FIRST_MS = 1_700_000_000_000
PARTITIONS = 3  # with records; partition 3 is empty and partition 4 unknown
ASKED = range(PARTITIONS + 2)
EMPTY = PARTITIONS
BATCHES = 20
RECORDS = 50  # a batch of partition p: FIRST_MS + 1000 * batch + p + record, offset 50 * batch + record
ROLL_AFTER = 14  # the batches after it in a second segment
REFUSED = -7  # no special target: INVALID_ARGUMENT for that target alone, before any search

TARGETS = st.one_of(
    st.integers(FIRST_MS - 10, FIRST_MS + BATCHES * 1000 + 10),
    st.sampled_from([-1, -2, -3, REFUSED, 0, FIRST_MS + BATCHES * 1000]),
    st.integers(FIRST_MS + ROLL_AFTER * 1000 + 100, FIRST_MS + BATCHES * 1000 - 1),  # the active segment's
)
TARGET_LISTS = st.lists(TARGETS, min_size=len(ASKED), max_size=len(ASKED))
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _batch(timestamp_ms: int) -> bytes:
    builder = codec.RecordBatchBuilder()
    for number in range(RECORDS):
        builder.append(b"v" * 40, timestamp_ms=timestamp_ms + number)
    return builder.build()


@contextmanager
def _opened(directory: str, *, load: bool):
    """A manager started on ``directory`` (nothing queued on its flush pool: no roll since its
    start) and a servicer over it; ``load``: every log's segments checked first (as a pooled
    lookup checks them), else the logs are as a restart leaves them."""
    manager = LogManager([directory])
    manager.startup()
    if load:
        for partition in range(PARTITIONS + 1):
            manager.get_log("m", partition).lookup_timestamps([FIRST_MS])
    service, calls = servicer_over(manager)
    try:
        yield service, manager, calls
    finally:
        calls.shutdown()
        manager.shutdown()


def _write(directory: str) -> None:
    """Topic m in ``directory``: PARTITIONS partitions of two segments each, and an empty one.
    Written by a manager shut down before any test asks: the rolls' background flushes (on its
    pool, each taking the log's lock) are over by then, or one could hold a lock while one path's
    inline attempt takes it and the other's does not, and the two count different storage calls."""
    manager = LogManager([directory])
    manager.startup()
    manager.create_topic("m", PARTITIONS + 1)
    for partition in range(PARTITIONS):
        log = manager.get_log("m", partition)
        for number in range(BATCHES):
            log.append(_batch(FIRST_MS + number * 1000 + partition))
            if number == ROLL_AFTER:
                log.roll()
    manager.shutdown()  # waits for the rolls' flushes


@pytest.fixture(scope="module")
def directory():
    """The topic written, for tests that open and close managers on it."""
    with tempfile.TemporaryDirectory() as directory:
        _write(directory)
        yield directory


@pytest.fixture(scope="module")
def partitions():
    """The topic loaded behind a servicer (its own directory: a manager locks the one it opens)."""
    with tempfile.TemporaryDirectory() as directory:
        _write(directory)
        with _opened(directory, load=True) as opened:
            yield opened


async def _asked(service, calls, request) -> tuple[pb.OffsetsForTimesResponse, tuple[int, int, int]]:
    """The answer to ``request`` and the (inline, pooled, busy fallback) storage calls it counted."""
    before = calls.statistics()
    response = await service.OffsetsForTimes(request, Context())
    after = calls.statistics()
    return response, (after.inline_count - before.inline_count, after.pooled_count - before.pooled_count,
                      after.busy_fallback_count - before.busy_fallback_count)


def _requests(targets: list[int]) -> tuple[pb.OffsetsForTimesRequest, pb.OffsetsForTimesRequest]:
    """Each partition's target once (the single path), and twice (the general path)."""
    once = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="m", partition=p, timestamp_ms=t) for p, t in zip(ASKED, targets)])
    twice = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="m", partition=p, timestamp_ms=t) for p, t in zip(ASKED, targets) for _ in range(2)])
    return once, twice


@contextmanager
def _single_path_entered(manager):
    """The targets each known log's ``lookup_timestamp_inline`` is entered with, in order (patched
    for one example: a Hypothesis example does not undo the test's monkeypatch)."""
    entered: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        for partition in range(PARTITIONS + 1):
            log = manager.get_log("m", partition)
            patch.setattr(log, "lookup_timestamp_inline",
                          lambda *args, real=log.lookup_timestamp_inline: entered.append(args[0]) or real(*args))
        yield entered


def _searched(targets: list[int]) -> list[int]:
    """The targets a search is entered for: a known partition's, not refused by the checks."""
    return [t for p, t in zip(ASKED, targets) if p <= EMPTY and t != REFUSED]


def _serialized(results) -> list[bytes]:
    return [r.SerializeToString(deterministic=True) for r in results]


@SETTINGS
@given(targets=TARGET_LISTS)
async def test_a_partitions_one_target_takes_the_single_lookups_path_and_answers_as_two(partitions, targets):
    service, manager, calls = partitions
    once, twice = _requests(targets)
    with _single_path_entered(manager) as entered:
        one, one_counts = await _asked(service, calls, once)
    assert entered == _searched(targets)  # each searched target on the single path
    general, general_counts = await _asked(service, calls, twice)
    assert _serialized(one.results) == _serialized(general.results[::2])
    assert one_counts == general_counts


@settings(SETTINGS, max_examples=15)
@given(targets=TARGET_LISTS)
async def test_after_a_restart_a_partitions_one_target_answers_and_counts_as_two(directory, targets):
    """Not loaded since the restart: a target that needs the segments' first-use checks goes to
    the pool on both paths. Each path asks a manager just restarted (the first pooled lookup
    loads the log)."""
    once, twice = _requests(targets)
    with _opened(directory, load=False) as (service, _, calls):
        one, one_counts = await _asked(service, calls, once)
    with _opened(directory, load=False) as (service, _, calls):
        general, general_counts = await _asked(service, calls, twice)
    assert _serialized(one.results) == _serialized(general.results[::2])
    assert one_counts == general_counts


@contextmanager
def _held_until_pooled(manager, calls, log):
    """``log``'s lock held by another thread until a pool call of one of ``log``'s methods starts
    (so the event loop's inline attempt finds it busy, and the pool's call then takes it)."""
    held, release = threading.Event(), threading.Event()
    lock = manager.inline_lock(log)

    def hold() -> None:
        with lock:
            held.set()
            release.wait()

    def blocking(fn, *args, real=calls.blocking):
        if getattr(fn, "__self__", None) is log:
            release.set()
        return real(fn, *args)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(calls, "blocking", blocking)
            yield
    finally:
        release.set()
        holder.join()


@SETTINGS
@given(targets=TARGET_LISTS, busy=st.sampled_from(range(PARTITIONS)))
async def test_behind_a_busy_lock_a_partitions_one_target_answers_as_two_in_one_pool_call(
        partitions, targets, busy):
    """Held by another thread, the busy partition's target is one busy fallback and one pooled
    call on the single path (its answer as the general path's); the other partitions' targets
    count as the general path counts them."""
    service, manager, calls = partitions
    log = manager.get_log("m", busy)
    with _held_until_pooled(manager, calls, log):
        one, one_counts = await _asked(service, calls, _requests(targets)[0])
    with _held_until_pooled(manager, calls, log):
        general, _ = await _asked(service, calls, _requests(targets)[1])
    assert _serialized(one.results) == _serialized(general.results[::2])
    rest = [t if p != busy else REFUSED for p, t in zip(ASKED, targets)]  # the others' alone
    _, rest_counts = await _asked(service, calls, _requests(rest)[1])
    held_count = int(targets[busy] != REFUSED)
    assert one_counts == (rest_counts[0], rest_counts[1] + held_count, rest_counts[2] + held_count)


async def test_a_partitions_one_target_of_a_packed_call_takes_the_single_lookups_path(partitions, monkeypatch):
    """The packed form's entry of one target too (a client packs when most partitions hold
    several targets)."""
    service, manager, calls = partitions
    entered = []
    log = manager.get_log("m", 1)
    monkeypatch.setattr(log, "lookup_timestamp_inline",
                        lambda *args, real=log.lookup_timestamp_inline: entered.append(args[0]) or real(*args))
    request = pb.OffsetsForTimesRequest(packed=[pb.PartitionTimestamps(topic="m", partition=1, timestamps_ms=[FIRST_MS + 3004])])
    response, counts = await _asked(service, calls, request)
    assert entered == [FIRST_MS + 3004]
    assert (list(response.packed[0].offsets), list(response.packed[0].timestamps_ms), counts) == (
        [153], [FIRST_MS + 3004], (1, 0, 0))
