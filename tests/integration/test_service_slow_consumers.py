"""Consume streams whose clients never read cannot exhaust the service's memory
(rpc/consume_buffer.py), against a real service process.

Each stream's client is a raw gRPC channel of its own (its own connection) that opens a Consume
stream from the start of a topic of a few MB and never reads. Without BDP probing the client's
HTTP/2 window stays at 64 KiB, so every stream's response stays parked in the service's
transport. Before the budget, each parked 2 MiB response cost the service 4-5 MiB of RSS (the
read's records, the response, gRPC's copy): 200 streams about 1 GB. With it, the bytes held are
at most ``consume_buffer_bytes_max`` plus ``consume_response_bytes_min`` per stream, and the RSS
stays under a bound derived from those caps and a baseline measured here; a reading client is
served meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import urllib.request

import grpc
import psutil
import pytest
from tests.support.integration_helpers import make_batch
from prometheus_client.parser import text_string_to_metric_families

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

MIB = 1 << 20
STREAMS = 200
BUFFER_BYTES_MAX = 16 * MIB
RESPONSE_BYTES_MIN = 64 * 1024
BATCH_COUNT = 128  # of 32 KiB: a 4 MiB topic, each batch below the minimum response
BATCH_RECORDS = 32
RECORD_BYTES = 1024
# Memory per held byte: the response and gRPC core's copy of it.
COPIES = 2
# A connection, its HTTP/2 transport and one stream cost the service about 100-250 KiB here
# (measured at the tail, nothing held); 512 KiB leaves room for the allocator.
CONNECTION_BYTES = 512 * 1024
SLACK_BYTES = 64 * MIB
SETTLE_SAMPLES = 3  # equal scrapes in a row: every stream is parked


def _rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


def _scrape(address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text)
            for sample in family.samples if not sample.labels}


def _never_reading_channel(address: str, index: int) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=[
        ("grpc.use_local_subchannel_pool", 1),  # a connection of its own, as separate clients
        ("grpc.http2.bdp_probe", 0),  # the window stays at HTTP/2's 64 KiB: responses park
        ("seglog.test.client", index),
    ])


@pytest.mark.slow
async def test_never_reading_consume_streams_hold_memory_within_the_buffer_budget(start_service):
    service = start_service([
        "--consume-buffer-bytes-max", str(BUFFER_BYTES_MAX),
        "--consume-response-bytes-min", str(RESPONSE_BYTES_MIN),
        "--consume-streams-max", str(STREAMS + 10), "--consume-streams-per-client-max", str(STREAMS + 10),
    ])
    pid = service.process.pid
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="big", partitions=1))
    for _ in range(BATCH_COUNT):
        batch = make_batch([os.urandom(RECORD_BYTES) for _ in range(BATCH_RECORDS)])
        service.stub.Produce(pb.ProduceRequest(topic="big", records=batch))
    baseline = _rss(pid)

    channels = [_never_reading_channel(service.address, i) for i in range(STREAMS)]
    calls = [pb_grpc.LogServiceStub(channel).Consume(
        pb.ConsumeRequest(topic="big", position=pb.START_POSITION_EARLIEST)) for channel in channels]
    try:
        for call in calls:
            await call.initial_metadata()
        held, peak = await _settled(service.metrics_address, pid)

        # A client that reads is served meanwhile: produce, fetch, and a stream of its own.
        response = service.stub.Produce(pb.ProduceRequest(topic="big", records=make_batch([b"late"])))
        assert response.base_offset == BATCH_COUNT * BATCH_RECORDS
        fetched = service.stub.Fetch(pb.FetchRequest(topic="big", offset=response.base_offset))
        assert fetched.next_offset == response.base_offset + 1
        async with grpc.aio.insecure_channel(service.address) as channel:
            stream = pb_grpc.LogServiceStub(channel).Consume(
                pb.ConsumeRequest(topic="big", position=pb.START_POSITION_EARLIEST))
            next_offset = 0
            async for chunk in stream:
                next_offset = chunk.next_offset
                if next_offset > response.base_offset:
                    break
            stream.cancel()
        assert next_offset == response.base_offset + 1
        samples = _scrape(service.metrics_address)
    finally:
        for call in calls:
            call.cancel()
        await asyncio.gather(*(channel.close() for channel in channels))

    held_max = BUFFER_BYTES_MAX + STREAMS * RESPONSE_BYTES_MIN
    bound = baseline + COPIES * held_max + STREAMS * CONNECTION_BYTES + SLACK_BYTES
    print(f"\nservice RSS: {baseline / MIB:.0f} MiB before the streams, {peak / MIB:.0f} MiB peak with "
          f"{STREAMS} never-reading streams ({(peak - baseline) / STREAMS / 1024:.0f} KiB each); "
          f"{held / MIB:.1f} MiB held; bound {bound / MIB:.0f} MiB")
    assert held <= held_max
    assert samples["seglog_consume_responses_shrunk_total"] > 0
    assert samples["seglog_consume_buffer_bytes_max"] == BUFFER_BYTES_MAX
    assert peak <= bound, f"RSS {peak / MIB:.0f} MiB over {bound / MIB:.0f} MiB"


async def _settled(metrics_address: str, pid: int) -> tuple[float, int]:
    """Scrapes until the bytes held stop changing (every stream parked); returns them and the
    peak RSS seen meanwhile."""
    peak, last, same = _rss(pid), None, 0
    for _ in range(200):
        await asyncio.sleep(0.1)
        held = _scrape(metrics_address)["seglog_consume_buffered_bytes"]
        peak = max(peak, _rss(pid))
        same = same + 1 if held == last else 0
        if same >= SETTLE_SAMPLES and held > 0:
            return held, peak
        last = held
    raise AssertionError(f"the streams never settled (last {last} bytes held)")
