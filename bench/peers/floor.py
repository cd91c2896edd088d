"""The floor under a seglog lookup or delivery: the round trip of one message on an open gRPC bidi
stream whose handler does nothing but answer it.

A single lookup (``AsyncAdmin.offsets_for_times``) is one message on the connection's open
LookupStream and one answer; a record on a Consume stream is one message pushed after the
producer's one round trip. Neither can come back faster than an empty message does on such a
stream, between these two processes, with grpcio's Python bindings on both sides. So the floor is
measured exactly so: a server process (``python -m bench.peers.floor --port P``, grpc.aio on
uvloop like seglog's server) whose PingPong handler answers every message with an empty one, and a
grpc.aio client in this process writing one message and reading its answer, one at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

from bench.peers.common import free_port, stop_process, wait_port

METHOD = "/bench.Floor/PingPong"
WARMUP = 200


def _identity(data: bytes) -> bytes:
    return data


async def empty_answers(requests, context):
    """The floor's handler: one empty answer a message (raw bytes: no (de)serializer work)."""
    async for _ in requests:
        yield b""


def floor_method_handler():
    """``empty_answers`` as a bidi-stream method of raw bytes, for a generic handler."""
    import grpc

    return grpc.stream_stream_rpc_method_handler(
        empty_answers, request_deserializer=_identity, response_serializer=_identity)


async def _serve(port: int) -> None:
    import grpc

    handler = grpc.method_handlers_generic_handler("bench.Floor", {"PingPong": floor_method_handler()})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


async def ping_pong_ms(address: str, count: int, method: str = METHOD) -> list[float]:
    """``count`` round trips (ms) of an empty message on one open stream of ``method`` (the
    floor's, or ``floor_method_handler`` served elsewhere), after a warm-up."""
    import grpc

    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(method, request_serializer=_identity, response_deserializer=_identity)()
        samples = []
        for index in range(WARMUP + count):
            started = time.perf_counter()
            await call.write(b"")
            await call.read()
            if index >= WARMUP:
                samples.append((time.perf_counter() - started) * 1000)
        await call.done_writing()
        return samples


def measure(count: int) -> list[float]:
    """Starts the floor's server, measures ``count`` round trips, stops it."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "bench.peers.floor", "--port", str(port)])
    try:
        wait_port(port, process)
        return asyncio.run(ping_pong_ms(f"127.0.0.1:{port}", count))
    finally:
        stop_process(process)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.floor", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    arguments = parser.parse_args(argv)
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(arguments.port))
    else:
        uvloop.run(_serve(arguments.port))


if __name__ == "__main__":
    main()
