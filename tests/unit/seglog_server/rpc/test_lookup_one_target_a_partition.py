"""A lookup call of one target a partition (a group seeking its partitions to a time; the client
asks so in the old form, a PartitionTimestamp a target): each partition's target takes the single
lookup's path (``LookupRpcs._search_one`` -> ``UnifiedLog.lookup_timestamp_inline``), not the
shared search, and is answered byte for byte as the general path answers it (the target asked
twice in its partition), with the same storage calls counted, for every kind of target: special,
refused, past the log, before it, in the active segment or an older one. A real LogManager on a
temporary directory behind the LogServicer."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.manager.log_manager import LogManager
from tests.support.servicer_support import Context, servicer_over

FIRST_MS = 1_700_000_000_000
PARTITIONS = 3
BATCHES = 20
RECORDS = 50  # a batch of partition p: FIRST_MS + 1000 * batch + p + record, offset 50 * batch + record
ROLL_AFTER = 14  # the batches after it in a second segment
REFUSED = -7  # no special target: INVALID_ARGUMENT for that target alone, before any search

TARGETS = st.one_of(
    st.integers(FIRST_MS - 10, FIRST_MS + BATCHES * 1000 + 10),
    st.sampled_from([-1, -2, -3, REFUSED, 0, FIRST_MS + BATCHES * 1000]),
    st.integers(FIRST_MS + ROLL_AFTER * 1000 + 100, FIRST_MS + BATCHES * 1000 - 1),  # the active segment's
)


def _batch(timestamp_ms: int) -> bytes:
    builder = codec.RecordBatchBuilder()
    for number in range(RECORDS):
        builder.append(b"v" * 40, timestamp_ms=timestamp_ms + number)
    return builder.build()


@pytest.fixture(scope="module")
def partitions():
    """Topic m of PARTITIONS partitions of two segments each, whose time-step tables the appends
    fed and whose segments were checked (as a pooled lookup checks them), behind a servicer."""
    with tempfile.TemporaryDirectory() as directory:
        manager = LogManager([directory])
        manager.startup()
        manager.create_topic("m", PARTITIONS)
        for partition in range(PARTITIONS):
            log = manager.get_log("m", partition)
            for number in range(BATCHES):
                log.append(_batch(FIRST_MS + number * 1000 + partition))
                if number == ROLL_AFTER:
                    log.roll()
            log.lookup_timestamps([FIRST_MS])  # the segments' first-use checks
        service, calls = servicer_over(manager)
        yield service, manager, calls
        calls.shutdown()
        manager.shutdown()


async def _asked(service, calls, request) -> tuple[pb.OffsetsForTimesResponse, tuple[int, int, int]]:
    """The answer to ``request`` and the (inline, pooled, busy fallback) storage calls it counted."""
    before = calls.statistics()
    response = await service.OffsetsForTimes(request, Context())
    after = calls.statistics()
    return response, (after.inline_count - before.inline_count, after.pooled_count - before.pooled_count,
                      after.busy_fallback_count - before.busy_fallback_count)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(targets=st.lists(TARGETS, min_size=PARTITIONS, max_size=PARTITIONS))
async def test_a_partitions_one_target_takes_the_single_lookups_path_and_answers_as_two(partitions, monkeypatch, targets):
    service, manager, calls = partitions
    entered = []
    for partition in range(PARTITIONS):
        log = manager.get_log("m", partition)
        monkeypatch.setattr(log, "lookup_timestamp_inline",
                            lambda *args, real=log.lookup_timestamp_inline: entered.append(args[0]) or real(*args))
    once = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="m", partition=p, timestamp_ms=t) for p, t in enumerate(targets)])
    twice = pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="m", partition=p, timestamp_ms=t) for p, t in enumerate(targets) for _ in range(2)])
    one, one_counts = await _asked(service, calls, once)
    assert entered == [t for t in targets if t != REFUSED]  # each searched target on the single path
    general, general_counts = await _asked(service, calls, twice)
    assert [r.SerializeToString(deterministic=True) for r in one.results] == [
        r.SerializeToString(deterministic=True) for r in general.results[::2]]
    assert one_counts == general_counts


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
