"""An OffsetsForTimes answer larger than response_bytes_max is refused RESOURCE_EXHAUSTED naming
the limit (not failed inside gRPC with an ERROR traceback), and the service keeps serving."""

from __future__ import annotations

import grpc
import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.app import SeglogService
from seglog_server.config import ServiceConfig

pytestmark = pytest.mark.integration

KIB = 1024


async def test_an_offsets_answer_above_the_response_limit_is_refused_naming_it(tmp_path):
    config = ServiceConfig(
        data_dirs=(str(tmp_path / "data"),), listen="127.0.0.1:0", metrics_listen=None,
        request_bytes_max=256 * KIB, response_bytes_max=300 * KIB, fetch_bytes_max=64 * KIB,
        batch_records_max=100,
    )
    service = SeglogService(config)
    address = await service.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = pb_grpc.LogServiceStub(channel)
            # Each target fits in ~13 request bytes; its answer (an error with its message) in
            # several times that: the request fits its limit, the answer does not fit its own.
            targets = [pb.PartitionTimestamp(topic="gone", partition=p, timestamp_ms=0) for p in range(16_000)]
            request = pb.OffsetsForTimesRequest(partitions=targets)
            assert request.ByteSize() < config.request_bytes_max
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.OffsetsForTimes(request)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, info.value.details()
            assert "response_bytes_max (307200)" in info.value.details()
            # The packed form: a target is a byte or two of request, its error dozens of answer.
            packed = pb.OffsetsForTimesRequest(packed=[
                pb.PartitionTimestamps(topic="gone", partition=0, timestamps_ms=[0] * 50_000)])
            assert packed.ByteSize() < config.request_bytes_max
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub.OffsetsForTimes(packed)
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, info.value.details()
            assert "the answer to 50000 targets" in info.value.details()
            assert "response_bytes_max (307200)" in info.value.details()
            assert service.servicer.statistics().rpc.internal_error_count == 0
            await stub.ListTopics(pb.ListTopicsRequest())  # still serving
    finally:
        await service.stop()
