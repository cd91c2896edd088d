"""Where a single lookup's gap above the floor lies: process, messages or lookup, interleaved.

    .venv/bin/python -m bench.bench_lookup_floor_split [--records 1000] [--round-trips 2000] [--repeats 7]

The floor (``bench/peers/floor.py``) is an empty-message ping-pong against a server process of
its own. This benchmark registers the same echo handlers inside seglog service processes (the
same grpc.aio server, options, uvloop, allocator settings, threads and metrics as a real one) and
measures, alternately in each repeat, each in a fresh channel:

    floor           the floor's server (the baseline of every ratio)
    echo            the floor's handler (empty bytes each way) inside the service
    echo-pb         a LookupStreamRequest in, a LookupStreamResponse with its correlation id out
                    (context.read/write after initial metadata, as the LookupStream does)
    lookup-stubbed  the service's LookupStream, in a second service whose
                    ``LookupRpcs.offsets_for_times`` answers nothing (the stream's layers only)
    lookup          the service's LookupStream, one target of a log of ``--records`` records
    admin           the same lookup through the client (``AsyncAdmin.offsets_for_times`` of one
                    partition, on the connection's LookupStream): the client's layers above a bare
                    stream are its difference to "lookup"

Each line is a p50 ratio to the floor of the same repeat and the serving process's CPU per round
trip; the medians over the repeats close. "echo" near 1.0 says the process (its event loop,
allocator, threads, socket and server options) costs nothing; the steps after it price the
protobuf messages, the stream's layers and the lookup. The wire is the same for all (one
sendmsg an answer: ``perf trace -s -e sendmsg -p <service pid>`` gives its time per call).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
SERVICE = "bench.FloorInService"
WARMUP = 200
# An hour ago: records older than the retention were deleted under the run (the lookups then
# found nothing: an empty log, not the one measured).
TIMESTAMP_MS = int(time.time() * 1000) - 3_600_000


def _echo_handlers() -> Any:
    import grpc

    from bench.peers import floor
    from seglog.v1 import log_service_pb2 as pb

    async def echo_pb(requests: Any, context: Any) -> None:
        await context.send_initial_metadata((("seglog-stream-in-flight-max", "64"),))
        while True:
            request = await context.read()
            if request is grpc.aio.EOF:
                return
            await context.write(pb.LookupStreamResponse(correlation_id=request.correlation_id))

    return grpc.method_handlers_generic_handler(SERVICE, {
        "Echo": floor.floor_method_handler(),  # the floor's handler
        "EchoPb": grpc.stream_stream_rpc_method_handler(
            echo_pb, request_deserializer=pb.LookupStreamRequest.FromString,
            response_serializer=pb.LookupStreamResponse.SerializeToString),
    })


def _serve(argv: list[str], stub_lookup: bool) -> int:
    """The service as ``python -m seglog_server`` runs it, with the echo handlers added to its
    server (and, when ``stub_lookup``, lookups that answer nothing)."""
    import grpc

    from seglog_server.__main__ import main

    handlers = _echo_handlers()
    make_server = grpc.aio.server

    def server_with_echo(*args: Any, **kwargs: Any) -> Any:
        server = make_server(*args, **kwargs)
        server.add_generic_rpc_handlers((handlers,))
        return server

    grpc.aio.server = server_with_echo
    if stub_lookup:
        from seglog_server.rpc.lookup_rpcs import LookupRpcs

        async def answer_nothing(self: Any, request: Any, response: Any = None) -> Any:
            return response

        LookupRpcs.offsets_for_times = answer_nothing  # type: ignore[method-assign]
    return main(argv)


def _start_service(workdir: pathlib.Path, stub_lookup: bool, records: int) -> tuple[subprocess.Popen, str]:
    from seglog import AsyncAdmin, AsyncProducer
    from seglog_server.__main__ import MALLOC_TUNING

    workdir.mkdir(parents=True)
    ready = workdir / "ready"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    environ.update(MALLOC_TUNING)  # set already: no re-exec, the pid stays the one measured
    command = [sys.executable, "-m", "bench.bench_lookup_floor_split", "--serve",
               *(["--stub-lookup"] if stub_lookup else []), "--",
               "--listen", "127.0.0.1:0", "--ready-file", str(ready), "--data-dir", str(workdir / "data"),
               "--metrics-listen", "127.0.0.1:0"]
    log = open(workdir / "service.log", "w")  # noqa: SIM115 - the service's for its lifetime
    process = subprocess.Popen(command, stdout=log, stderr=log, env=environ, cwd=ROOT)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"service failed to start: {(workdir / 'service.log').read_text()}")
        time.sleep(0.05)
    address = ready.read_text().strip()
    async def fill() -> None:
        async with AsyncAdmin(address) as admin:
            await admin.create_topic("t", partitions=1)
        async with AsyncProducer(address, linger_ms=0) as producer:
            for index in range(records):
                await producer.send("t", b"v", partition=0, timestamp_ms=TIMESTAMP_MS + index)
            await producer.flush()

    asyncio.run(fill())
    return process, address


async def _lookups_ms(address: str, method: str, count: int, target_ms: int) -> list[float]:
    """``count`` round trips (ms) of a one-target LookupStreamRequest on one open stream."""
    import grpc

    from seglog.v1 import log_service_pb2 as pb

    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(
            method, request_serializer=pb.LookupStreamRequest.SerializeToString,
            response_deserializer=pb.LookupStreamResponse.FromString)()
        samples = []
        for index in range(WARMUP + count):
            request = pb.LookupStreamRequest(correlation_id=index + 1)
            request.offsets_for_times.partitions.add(topic="t", partition=0, timestamp_ms=target_ms)
            started = time.perf_counter()
            await call.write(request)
            answer = await call.read()
            if index >= WARMUP:
                samples.append((time.perf_counter() - started) * 1000)
            if answer.correlation_id != index + 1 or answer.HasField("error"):
                raise SystemExit(f"unexpected answer: {answer}")
        await call.done_writing()
        return samples


async def _admin_ms(address: str, count: int, target_ms: int) -> list[float]:
    """``count`` single lookups (ms) through ``AsyncAdmin.offsets_for_times``, one at a time."""
    from seglog import AsyncAdmin, TopicPartition

    partition = TopicPartition("t", 0)
    async with AsyncAdmin(address) as admin:
        samples = []
        for index in range(WARMUP + count):
            started = time.perf_counter()
            found = await admin.offsets_for_times({partition: target_ms})
            if index >= WARMUP:
                samples.append((time.perf_counter() - started) * 1000)
            if found[partition] is None:
                raise SystemExit(f"no answer for {target_ms}")
        return samples


def _cpu_s(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_lookup_floor_split", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--round-trips", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stub-lookup", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("service_args", nargs="*", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.serve:
        sys.exit(_serve(arguments.service_args, arguments.stub_lookup))

    from bench.peers import floor

    count = arguments.round_trips
    target_ms = TIMESTAMP_MS + arguments.records // 2
    port = floor.free_port()
    floor_server = subprocess.Popen([sys.executable, "-m", "bench.peers.floor", "--port", str(port)], cwd=ROOT)
    processes = [floor_server]
    with tempfile.TemporaryDirectory(prefix="seglog-floor-split-") as directory:
        try:
            floor.wait_port(port, floor_server)
            service, address = _start_service(pathlib.Path(directory) / "service", False, arguments.records)
            processes.append(service)
            stubbed, stubbed_address = _start_service(pathlib.Path(directory) / "stubbed", True, arguments.records)
            processes.append(stubbed)
            cases = {
                "floor": (floor_server, lambda: floor.ping_pong_ms(f"127.0.0.1:{port}", count)),
                "echo": (service, lambda: floor.ping_pong_ms(address, count, f"/{SERVICE}/Echo")),
                "echo-pb": (service, lambda: _lookups_ms(address, f"/{SERVICE}/EchoPb", count, target_ms)),
                "lookup-stubbed": (stubbed, lambda: _lookups_ms(
                    stubbed_address, "/seglog.v1.LogService/LookupStream", count, target_ms)),
                "lookup": (service, lambda: _lookups_ms(
                    address, "/seglog.v1.LogService/LookupStream", count, target_ms)),
                "admin": (service, lambda: _admin_ms(address, count, target_ms)),
            }
            rows: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
            loads = []
            for repeat in range(arguments.repeats):
                for name, (process, measure) in cases.items():
                    before = _cpu_s(process.pid)
                    samples = sorted(asyncio.run(measure()))
                    rows[name].append((samples[count // 2], (_cpu_s(process.pid) - before) / count * 1e6))
                loads.append(os.getloadavg()[0])
                print(f"repeat {repeat}: " + ", ".join(
                    f"{name} {rows[name][-1][0] / rows['floor'][-1][0]:.2f}x" for name in cases
                ) + f" (floor p50 {rows['floor'][-1][0]:.3f} ms, load {loads[-1]:.1f})", flush=True)
        finally:
            for process in processes:
                floor.stop_process(process)
    print(f"medians over {arguments.repeats} repeats of {count} round trips, load {min(loads):.1f}-{max(loads):.1f}:")
    for name, values in rows.items():
        ratio = statistics.median(mine[0] / base[0] for mine, base in zip(values, rows["floor"]))
        cpu = statistics.median(value[1] for value in values)
        print(f"  {name:15s} p50 {ratio:.2f}x the floor, serving process CPU {cpu:.0f} us a round trip")


if __name__ == "__main__":
    main()
