"""A request of one target (a single lookup) takes its own path through OffsetsForTimes (no
per-target lists or grouping): its answer must be the one the general path gives the same
target, byte for byte, whatever the target (valid, special, refused, unknown partition, a log
directory offline). The general path is driven by a request of the target twice. A real
LogManager on a temporary directory behind the LogServicer."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog_server.rpc.log_service import LogServicer
from seglog_server.storage.manager.log_manager import LogManager
from tests.support.servicer_support import Context, servicer_over

FIRST_MS = 1_700_000_000_000
BATCHES = 20


def _batch(timestamp_ms: int) -> bytes:
    builder = codec.RecordBatchBuilder()
    for delta in (0, 300, 100):  # out of order inside a batch: the running maximum counts
        builder.append(b"v" * 40, timestamp_ms=timestamp_ms + delta)
    return builder.build()


@pytest.fixture(scope="module")
def servicer():
    with tempfile.TemporaryDirectory() as directory:
        manager = LogManager([directory])
        manager.startup()
        manager.create_topic("t", 2, {"segment.bytes": str(4 * len(_batch(FIRST_MS)))})
        for number in range(BATCHES):
            manager.get_log("t", 0).append(_batch(FIRST_MS + number * 1000))
        service, calls = servicer_over(manager)
        yield service, manager, directory
        calls.shutdown()
        manager.shutdown()


async def _one_and_general(servicer: LogServicer, topic: str, partition: int, timestamp_ms: int) -> tuple[bytes, bytes]:
    target = pb.PartitionTimestamp(topic=topic, partition=partition, timestamp_ms=timestamp_ms)
    one = await servicer.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target]), Context())
    both = await servicer.OffsetsForTimes(pb.OffsetsForTimesRequest(partitions=[target, target]), Context())
    assert len(one.results) == 1 and len(both.results) == 2
    return one.results[0].SerializeToString(deterministic=True), both.results[0].SerializeToString(deterministic=True)


TIMESTAMPS = st.one_of(
    st.sampled_from([-1, -2, -3, -4, -5, -(2**63), 0, FIRST_MS, FIRST_MS + BATCHES * 1000 + 300, 2**63 - 1]),
    st.integers(FIRST_MS - 2000, FIRST_MS + BATCHES * 1000 + 2000),
    st.integers(-(2**63), 2**63 - 1),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(topic=st.sampled_from(["t", "", "missing"]), partition=st.integers(-3, 3), timestamp_ms=TIMESTAMPS)
async def test_a_single_target_is_answered_as_the_general_path_answers_it(servicer, topic, partition, timestamp_ms):
    service, _, _ = servicer
    one, general = await _one_and_general(service, topic, partition, timestamp_ms)
    assert one == general


async def test_a_single_target_of_an_offline_log_directory_carries_the_general_error():
    with tempfile.TemporaryDirectory() as directory:
        manager = LogManager([directory])
        manager.startup()
        manager.create_topic("t", 1)
        manager.get_log("t", 0).append(_batch(FIRST_MS))
        service, calls = servicer_over(manager)
        try:
            manager.handle_log_dir_failure(directory, "disk gone")
            for timestamp_ms in (FIRST_MS, -1, -3):
                one, general = await _one_and_general(service, "t", 0, timestamp_ms)
                assert one == general
                answer = pb.PartitionOffset.FromString(one)
                assert answer.offset == -1 and answer.error.code != 0 and answer.error.message
        finally:
            calls.shutdown()
            manager.shutdown()
