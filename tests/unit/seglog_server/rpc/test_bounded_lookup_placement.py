"""Where a small lookup by time runs, decided by the search itself (segment/lookup_budget.py): the
inline attempt answers only what its search does within the inline bound, without a build, a
decompression or a first-use check, and anything else goes to the pool. OffsetsForTimes and
Consume's start by timestamp alike. A real LogManager on tmp_path behind the LogServicer."""

from __future__ import annotations

import pytest
from tests.support.servicer_support import INLINE_IO_BYTES_MAX, Context, servicer_over

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog_server.storage.manager.log_manager import LogManager

FIRST_MS = 1_700_000_000_000


def _batch(first_ms: int, count: int, value_bytes: int, compression=codec.Compression.NONE) -> bytes:
    builder = codec.RecordBatchBuilder(compression=compression)
    for number in range(count):
        builder.append(b"v" * value_bytes, key=b"k%d" % number, timestamp_ms=first_ms + number)
    return builder.build()


def _request(*timestamps_ms: int) -> pb.OffsetsForTimesRequest:
    return pb.OffsetsForTimesRequest(partitions=[
        pb.PartitionTimestamp(topic="t", partition=0, timestamp_ms=timestamp_ms) for timestamp_ms in timestamps_ms
    ])


class _Started(BaseException):
    """Ends a Consume call once its start offset is sent (the boundary lets it through)."""


class ConsumeContext(Context):
    def __init__(self):
        self.start_offset = None

    async def send_initial_metadata(self, metadata):
        self.start_offset = int(dict(metadata)["seglog-start-offset"])
        raise _Started


async def _consume_from(servicer, timestamp_ms: int) -> int:
    context = ConsumeContext()
    with pytest.raises(_Started):
        await servicer.Consume(pb.ConsumeRequest(topic="t", partition=0, timestamp_ms=timestamp_ms), context)
    return context.start_offset


async def _placed(calls, call):
    """``call()``'s answer and where it ran: "inline", "pooled", or "refused" (an inline attempt,
    then the pool)."""
    before = calls.statistics()
    answer = await call()
    after = calls.statistics()
    moved = (after.inline_count - before.inline_count, after.pooled_count - before.pooled_count)
    return answer, {(1, 0): "inline", (0, 1): "pooled", (1, 1): "refused"}[moved]


def _manager_over(tmp_path, batches, restart: bool) -> LogManager:
    manager = LogManager([str(tmp_path)])
    manager.startup()
    manager.create_topic("t", 1)
    for data in batches:
        manager.get_log("t", 0).append(data)
    if restart:  # the tables are gone: a lookup walks the batches
        manager.shutdown()
        manager = LogManager([str(tmp_path)])
        manager.startup()
    return manager


@pytest.fixture
def servicer(tmp_path):
    made = []

    def make(batches, restart=True, subdirectory="log"):
        manager = _manager_over(tmp_path / subdirectory, batches, restart)
        servicer, calls = servicer_over(manager)
        made.append((manager, calls))
        return servicer, calls

    yield make
    for manager, calls in made:
        calls.shutdown()
        manager.shutdown()


# Fewer records than a record-time table needs (64), each batch a few hundred bytes of gzip whose
# records are 40 KiB: far past the inline bound once decompressed.
_GZIP_BATCHES = [_batch(FIRST_MS + 100 * n, 40, 1000, codec.Compression.GZIP) for n in range(3)]


@pytest.mark.parametrize("targets, batch_count", [((FIRST_MS + 110,), 3), ((FIRST_MS + 10, FIRST_MS + 30), 1)],
                         ids=["one_target_walks", "two_targets_build_a_table"])
async def test_a_lookup_walking_a_compressed_batch_whose_records_pass_the_bound_runs_on_the_pool(
    servicer, targets, batch_count
):
    """One target walks its batch; two build the segment's time-step table, reading less than the
    bound from the file (one batch) but decompressing 40 KiB: both on the pool."""
    assert all(len(data) < INLINE_IO_BYTES_MAX for data in _GZIP_BATCHES)
    service, calls = servicer(_GZIP_BATCHES[:batch_count])
    await service.OffsetsForTimes(_request(-3), Context())  # the first-use checks, on the pool
    response, place = await _placed(calls, lambda: service.OffsetsForTimes(_request(*targets), Context()))
    assert [result.offset for result in response.results] == [(t - FIRST_MS) // 100 * 40 + (t - FIRST_MS) % 100
                                                              for t in targets]
    assert place == "refused"


async def test_a_compressed_log_whose_table_the_appends_fed_answers_inline(servicer):
    service, calls = servicer(_GZIP_BATCHES, restart=False)
    await service.OffsetsForTimes(_request(-3), Context())
    response, place = await _placed(calls, lambda: service.OffsetsForTimes(_request(FIRST_MS + 110), Context()))
    assert [result.offset for result in response.results] == [50]
    assert place == "inline"


async def test_consume_from_a_timestamp_after_a_restart_checks_the_segments_on_the_pool(servicer):
    service, calls = servicer([_batch(FIRST_MS + 100 * n, 3, 10) for n in range(4)])
    offset, place = await _placed(calls, lambda: _consume_from(service, FIRST_MS + 201))
    assert (offset, place) == (7, "refused")
    offset, place = await _placed(calls, lambda: _consume_from(service, FIRST_MS + 301))
    assert (offset, place) == (10, "inline")  # checked: a small batch walked inline


async def test_consume_from_a_timestamp_in_a_compressed_batch_runs_on_the_pool(servicer):
    service, calls = servicer(_GZIP_BATCHES)
    await service.OffsetsForTimes(_request(-3), Context())  # the first-use checks
    offset, place = await _placed(calls, lambda: _consume_from(service, FIRST_MS + 110))
    assert (offset, place) == (50, "refused")


@pytest.mark.parametrize("appended, first_place", [(5, "inline"), (40, "refused")],
                         ids=["small_extension_inline", "large_extension_pooled"])
async def test_consume_from_a_timestamp_that_extends_a_batch_directory(servicer, monkeypatch, appended, first_place):
    """The single search extends a segment's batch directory when batched lookups built one: the
    extension's reads charged to the inline bound, so five small appends (0.5 KiB, within it) are
    entered inline and forty (4 KiB, past it) on the pool, as OffsetsForTimes's single lookup."""
    from seglog_server.storage.segment import segment_time_lookups
    from seglog_server.storage.segment.batch_directory import DirectoryBudget

    monkeypatch.setattr(segment_time_lookups, "TIME_STEPS", DirectoryBudget(0))  # no table: the directory answers
    service, calls = servicer([_batch(FIRST_MS + 10 * n, 1, 40) for n in range(100)])
    await service.OffsetsForTimes(_request(-3), Context())
    targets = [FIRST_MS + 10 * n for n in range(0, 100, 5)]
    await service.OffsetsForTimes(_request(*targets), Context())  # builds the directory (pooled)
    log = service.core.storage.get_log("t", 0)
    segment = log.segments_snapshot()[-1]
    assert segment._directory_ref() is not None
    for number in range(100, 100 + appended):  # the directory ends before the file now
        log.append(_batch(FIRST_MS + 10 * number, 1, 40))
    gap = segment.size_in_bytes - segment._directory_ref().end_position
    assert (gap <= INLINE_IO_BYTES_MAX) == (first_place == "inline")
    offset, place = await _placed(calls, lambda: _consume_from(service, FIRST_MS + 1035))
    assert (offset, place) == (104, first_place)
    assert segment._directory_ref().end_position == segment.size_in_bytes  # extended to the file's end
    offset, place = await _placed(calls, lambda: _consume_from(service, FIRST_MS + 1035))
    assert (offset, place) == (104, "inline")


async def test_a_lookup_whose_scan_reads_past_the_bound_runs_on_the_pool(servicer):
    """Without a table, a target's scan reads the batch headers from the time index's entry (a
    chunk of the index interval and 2 KiB): past the inline bound, on the pool; a scan of one
    small segment's bytes, inline."""
    service, calls = servicer([_batch(FIRST_MS + 10 * n, 1, 80) for n in range(100)])  # about 15 KiB
    await service.OffsetsForTimes(_request(-3), Context())  # the first-use checks
    response, place = await _placed(calls, lambda: service.OffsetsForTimes(_request(FIRST_MS + 905), Context()))
    assert ([result.offset for result in response.results], place) == ([91], "refused")
    offset, place = await _placed(calls, lambda: _consume_from(service, FIRST_MS + 905))
    assert (offset, place) == (91, "refused")


async def test_a_lookup_whose_scan_stays_within_the_bound_runs_inline(servicer):
    service, calls = servicer([_batch(FIRST_MS + 10 * n, 1, 80) for n in range(5)])  # about 0.8 KiB
    await service.OffsetsForTimes(_request(-3), Context())
    response, place = await _placed(calls, lambda: service.OffsetsForTimes(_request(FIRST_MS + 25), Context()))
    assert ([result.offset for result in response.results], place) == ([3], "inline")


async def test_max_timestamp_whose_header_walk_reads_past_the_bound_runs_on_the_pool(servicer):
    """MAX_TIMESTAMP walks the batch headers from the offset index's entry to its batch: a read
    past the inline bound on the pool, a small segment's inline."""
    service, calls = servicer([_batch(FIRST_MS + 10 * n, 1, 80) for n in range(100)])  # about 15 KiB
    await service.OffsetsForTimes(_request(-3), Context())  # the first-use checks
    response, place = await _placed(calls, lambda: service.OffsetsForTimes(_request(-3), Context()))
    assert ([result.offset for result in response.results], place) == ([99], "refused")
    service, calls = servicer([_batch(FIRST_MS + 10 * n, 1, 80) for n in range(5)], subdirectory="small")
    await service.OffsetsForTimes(_request(-3), Context())
    response, place = await _placed(calls, lambda: service.OffsetsForTimes(_request(-3), Context()))
    assert ([result.offset for result in response.results], place) == ([4], "inline")
