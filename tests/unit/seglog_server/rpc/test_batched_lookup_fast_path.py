"""The batched lookup's fast path (``LookupRpcs._search`` -> ``UnifiedLog.lookup_timestamps_in_memory``
-> one segment's time-step table): a call of several targets that one table answers with records
is answered in one call of the log, without the general path's storage call
(``lookup_timestamps_without_builds`` through ``StorageCalls.sized``); every call, whatever its
targets (special, refused, past the log, reaching two segments), is answered byte for byte as the
general path answers it, in either form (packed and a PartitionTimestamp per target), and the
storage calls' counts move as ``sized`` moves them. A real LogManager on a temporary directory
behind the LogServicer."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.manager.log_manager import LogManager
from tests.support.servicer_support import Context, servicer_over

FIRST_MS = 1_700_000_000_000
BATCHES = 20
RECORDS = 50  # a batch: FIRST_MS + 1000 * batch + record, offset 50 * batch + record
ROLL_AFTER = 14  # the batches after it in a second segment


def _batch(timestamp_ms: int) -> bytes:
    builder = codec.RecordBatchBuilder()
    for number in range(RECORDS):
        builder.append(b"v" * 40, timestamp_ms=timestamp_ms + number)
    return builder.build()


@pytest.fixture(scope="module")
def fed():
    """A log of two segments whose time-step tables the appends fed, its segments checked (as a
    pooled lookup checks them), behind a servicer."""
    with tempfile.TemporaryDirectory() as directory:
        manager = LogManager([directory])
        manager.startup()
        manager.create_topic("t", 1)
        log = manager.get_log("t", 0)
        for number in range(BATCHES):
            log.append(_batch(FIRST_MS + number * 1000))
            if number == ROLL_AFTER:
                log.roll()
        log.lookup_timestamps([FIRST_MS])  # the segments' first-use checks
        service, calls = servicer_over(manager)
        yield service, log, calls
        calls.shutdown()
        manager.shutdown()


def _request(targets: list[int], packed: bool) -> pb.OffsetsForTimesRequest:
    if packed:
        return pb.OffsetsForTimesRequest(packed=[pb.PartitionTimestamps(topic="t", partition=0, timestamps_ms=targets)])
    return pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=target) for target in targets])


async def _asked(service, calls, request) -> tuple[bytes, tuple[int, int, int]]:
    before = calls.statistics()
    response = await service.OffsetsForTimes(request, Context())
    after = calls.statistics()
    return response.SerializeToString(deterministic=True), (
        after.inline_count - before.inline_count, after.pooled_count - before.pooled_count,
        after.busy_fallback_count - before.busy_fallback_count)


async def _fast_and_general(service, log, calls, monkeypatch, request):
    """The answer and counts of ``request`` with the fast path, then with it answering nothing."""
    fast = await _asked(service, calls, request)
    with monkeypatch.context() as patched:
        patched.setattr(log, "lookup_timestamps_in_memory", lambda timestamps_ms: None)
        general = await _asked(service, calls, request)
    return fast, general


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "per_target"])
async def test_targets_one_table_answers_take_one_call_of_the_log_and_no_storage_call(fed, monkeypatch, packed):
    service, log, calls = fed
    targets = [FIRST_MS + 3003, FIRST_MS + 1000, FIRST_MS + 3003, FIRST_MS + 9049]

    def not_taken(*args):
        raise AssertionError("the general path's storage call was taken")

    with monkeypatch.context() as patched:
        patched.setattr(log, "lookup_timestamps_without_builds", not_taken)
        fast, counts = await _asked(service, calls, _request(targets, packed))
    assert counts == (1, 0, 0)  # one inline call, as ``sized`` counts the general path's
    general = (await _fast_and_general(service, log, calls, monkeypatch, _request(targets, packed)))[1]
    assert (fast, counts) == general
    response = pb.OffsetsForTimesResponse.FromString(fast)
    found = list(response.packed[0].offsets) if packed else [result.offset for result in response.results]
    assert found == [153, 50, 153, 499]


TARGETS = st.one_of(
    st.integers(FIRST_MS - 10, FIRST_MS + BATCHES * 1000 + 10),
    st.sampled_from([-1, -2, -3, -7, 0, FIRST_MS + BATCHES * 1000]),
    st.integers(FIRST_MS + ROLL_AFTER * 1000 + 100, FIRST_MS + BATCHES * 1000 - 1),  # the active segment's
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(targets=st.lists(TARGETS, min_size=2, max_size=12), packed=st.booleans())
async def test_every_call_is_answered_and_counted_as_the_general_path(fed, monkeypatch, targets, packed):
    """Special targets, refused ones (-7: INVALID_ARGUMENT for that target alone), targets past
    the log, before it, reaching one segment or two: the same bytes and the same counts with
    the fast path as without it."""
    service, log, calls = fed
    (fast, fast_counts), general = await _fast_and_general(service, log, calls, monkeypatch, _request(targets, packed))
    event("in memory" if fast_counts == (1, 0, 0) and log.lookup_timestamps_in_memory(
        [t for t in targets if t != -7]) is not None else "general")
    assert (fast, fast_counts) == general

