"""The producer meeting an older service at the same address after its stream was reopened: a
real gRPC server on loopback that, from one open to the next, stops announcing several batches a
message and, like a build from before them, appends only a message's ``produce`` and answers no
``more``. What the producer had packed for the newer one must still land once each and in order:
the first batch gets its real answer; those the older service ignored (no slot in its answer, so
never appended) are sent again, one a message, and nothing is written twice (without
idempotence too)."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest

from seglog import AsyncProducer
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration

# A bound on waits that must end (a stream the service ended): never a speed assertion.
_WAIT_S = 20


class _SwitchingService(pb_grpc.LogServiceServicer):
    """ProduceStream only. ``newer``: announces 16 batches a message and answers each in its
    slot; otherwise an older build's stream (no announcement, ``more`` ignored). Each appended
    batch's bytes go to ``log``. ``end_after``: the stream ends once the message holding that
    value is answered (named, not "the next": the handler may not have looked at the flag yet
    when the client has the previous answer, and would end the stream a message early)."""

    def __init__(self) -> None:
        self.newer = True
        self.end_after: bytes | None = None
        self.log: list[bytes] = []

    async def ProduceStream(self, requests, context):
        newer = self.newer
        metadata = (("seglog-stream-in-flight-max", "64"),)
        if newer:
            metadata += (("seglog-stream-batches-max", "16"),)
        await context.send_initial_metadata(metadata)
        while True:
            message = await context.read()
            if message is grpc.aio.EOF:
                return
            batches = [message.produce, *message.more] if newer else [message.produce]
            answer = pb.ProduceStreamResponse(correlation_id=message.correlation_id)
            for index, batch in enumerate(batches):
                produced = pb.ProduceResponse(base_offset=len(self.log))
                self.log.append(batch.records)
                slot = answer.more.add() if index else answer
                slot.produce.CopyFrom(produced)
            await context.write(answer)
            if self.end_after is not None and any(self.end_after in batch.records for batch in batches):
                self.end_after = None
                return  # the stream ends (as when the service restarts)


def test_batches_packed_for_a_newer_service_land_once_each_at_an_older_one():
    service = _SwitchingService()
    values = [b"%03d" % i + b"x" * 197 for i in range(12)]

    async def run() -> list[int]:
        server = grpc.aio.server()
        pb_grpc.add_LogServiceServicer_to_server(service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with AsyncProducer(
                f"127.0.0.1:{port}", batch_size=250, linger_ms=60_000, enable_idempotence=False,
                retries=5, retry_backoff_ms=1,
            ) as producer:
                await producer.send_and_wait("t", b"warm-up", partition=0)  # several a message announced
                service.end_after = b"last-on-the-newer"
                await producer.send_and_wait("t", b"last-on-the-newer", partition=0)
                stream = producer._router.bootstrap.produce_stream()
                async with asyncio.timeout(_WAIT_S):
                    while stream._call is not None:  # the stream's end seen by the client
                        await asyncio.sleep(0.01)
                service.newer = False  # the same address now runs an older build
                futures = [await producer.send("t", value, partition=0) for value in values]
                await producer.flush(_WAIT_S * 1000)
                assert stream.batches_max == 1  # what the older one said at open: nothing
                assert producer._sender.stream_batches_max == 1  # later groups: one a message
                return [(await future).offset for future in futures]
        finally:
            await server.stop(None)

    offsets = asyncio.run(run())
    written = service.log[2:]
    order = [next(i for i, value in enumerate(values) if value in batch) for batch in written]
    assert order == list(range(len(values)))  # each once, in order
    assert offsets == list(range(2, 2 + len(values)))
