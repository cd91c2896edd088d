"""What a single lookup's round trip pays above the floor, per thread, in one run.

    .venv/bin/python -m bench.bench_lookup_gap [--records 50000] [--round-trips 3000] [--repeats 5]
        [--threads] [--only CASE,...] [--pin]

With ``PYTHONPATH=TREE/client:TREE/server`` every process runs that checkout's seglog (this
module from this one). Four server processes, all on uvloop and grpc.aio like the service:

    floor    ``bench/peers/floor.py``: raw bytes, an async-generator handler (the baseline)
    shapes   this module's ``--serve-shapes``: handlers of the floor's kind, each one step nearer
             the LookupStream: ``floor`` (the floor's handler again: this process costs nothing),
             ``awaited`` (initial metadata, ``context.read``/``await context.write``, raw bytes),
             ``ordered`` (the same reads, each answer written by the service's own
             ``OrderedReplies``: the write started in the handler's step, not awaited),
             ``ordered-cb`` (the write's rest driven by its futures' done callbacks, no task),
             ``ordered-pb`` (``ordered`` with a LookupStreamRequest parsed and a canned
             LookupStreamResponse of one found target serialized; also served as the service's
             LookupStream method, for ``AsyncAdmin``)
    seglog   the service (``python -m seglog_server``) on a log of ``--records`` records
    seglog-i the same, with timers in its loop thread (``_TIMED``: the message handler, its
             lookup, the same lookup again at once into an answer thrown away, the answer's
             write started), thread CPU and wall a message

and these round trips, alternately within each repeat, each case in a fresh client process
(asyncio's loop, as ``bench/peers`` runs the floor and the lookups; grpc.aio keeps one poller a
process and loses completions across loops):

    floor, shapes/*            raw grpc.aio client (``shapes/awaited+cw``: its writes started
                               unawaited, as ``RequestStream.ask`` starts them)
    seglog/raw, seglog-i/raw   a one-target LookupStreamRequest on the service's LookupStream
    seglog/ask                 the same through the client's ``RequestStream.ask`` (the
                               transport's LookupStream; no admin or router)
    pb/admin                   ``AsyncAdmin.offsets_for_times`` against shapes/ordered-pb
    seglog/admin               ``AsyncAdmin.offsets_for_times`` of one partition (the single lookup)

For each: the p50 and p99 and their ratios to the floor of the same repeat; each server
thread's CPU a round trip (``/proc/PID/task/*/stat`` utime+stime) and context switches
(``/proc/PID/task/*/status``: a wake-up each voluntary one); the client process's alike and its
loop's turns a round trip (a counting ``_run_once``); the service's timers. After each repeat
every server's threads are read again over the same wall time with no request (what background
threads wake for on their own). Medians over the repeats close the run; ``--threads`` prints
each thread's figures ("python #0" is the event loop's). ``--pin`` puts every server thread on
CPU 0 and each client on CPU 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHAPES = "bench.Shapes"
LOOKUP_STREAM = "/seglog.v1.LogService/LookupStream"
WARMUP = 200
# An hour ago: records older than the retention would be deleted under the run.
TIMESTAMP_MS = int(time.time() * 1000) - 3_600_000
TICK = os.sysconf("SC_CLK_TCK")


# -- the shapes server ----------------------------------------------------------------------------


def _identity(data: bytes) -> bytes:
    return data


def _shape_handlers() -> Any:
    import grpc

    from bench.peers import floor
    from seglog.v1 import log_service_pb2 as pb
    from seglog._streams import _started
    from seglog_server.rpc.streams import OrderedReplies

    def _ignore(error: Any) -> None:
        pass

    metadata = (("seglog-stream-in-flight-max", "64"),)

    async def awaited(requests: Any, context: Any) -> None:
        await context.send_initial_metadata(metadata)
        while True:
            request = await context.read()
            if request is grpc.aio.EOF:
                return
            await context.write(b"")

    async def ordered(requests: Any, context: Any) -> None:
        await context.send_initial_metadata(metadata)
        replies = OrderedReplies(context.write, 64, 1 << 20, len)
        while True:
            if not replies.has_room:
                await replies.wait_for_room()
            request = await context.read()
            if request is grpc.aio.EOF:
                break
            await replies.send(b"")
        await replies.finish()

    async def ordered_cb(requests: Any, context: Any) -> None:
        # As ``ordered``, each write's rest driven by its futures' done callbacks (the client's
        # ``_started``), no drainer task an answer.
        await context.send_initial_metadata(metadata)
        writing = None
        while True:
            request = await context.read()
            if request is grpc.aio.EOF:
                break
            if writing is not None and not writing.done():
                await writing  # one write at a time (OrderedReplies queues behind the head)
            writing = _started(context.write(b""), _ignore)

    canned = pb.LookupStreamResponse()
    found = canned.offsets_for_times.results.add()
    found.topic, found.partition, found.offset, found.timestamp_ms = "t", 0, 25_000, TIMESTAMP_MS + 25_000

    async def ordered_pb(requests: Any, context: Any) -> None:
        await context.send_initial_metadata(metadata)
        replies = OrderedReplies(context.write, 64, 1 << 20, len, pb.LookupStreamResponse.SerializeToString)
        while True:
            if not replies.has_room:
                await replies.wait_for_room()
            request = await context.read()
            if request is grpc.aio.EOF:
                break
            reply = pb.LookupStreamResponse()
            reply.CopyFrom(canned)
            reply.correlation_id = request.correlation_id
            await replies.send(reply)
        await replies.finish()

    def raw(handler: Any) -> Any:
        return grpc.stream_stream_rpc_method_handler(handler, request_deserializer=_identity,
                                                     response_serializer=_identity)

    return grpc.method_handlers_generic_handler(SHAPES, {
        "Floor": floor.floor_method_handler(),
        "Awaited": raw(awaited),
        "Ordered": raw(ordered),
        "OrderedCb": raw(ordered_cb),
        # The service's own name, so that AsyncAdmin can ask it (ordered-pb and pb/admin).
        "OrderedPb": grpc.stream_stream_rpc_method_handler(
            ordered_pb, request_deserializer=pb.LookupStreamRequest.FromString,
            response_serializer=_identity),
    }), grpc.method_handlers_generic_handler("seglog.v1.LogService", {
        "LookupStream": grpc.stream_stream_rpc_method_handler(
            ordered_pb, request_deserializer=pb.LookupStreamRequest.FromString, response_serializer=_identity),
    })


async def _serve_shapes(ready: pathlib.Path) -> None:
    import json
    import signal

    import grpc

    from seglog_server.rpc.streams import OrderedReplies

    OrderedReplies.send = _timed("send", OrderedReplies.send)  # type: ignore[method-assign]
    figures_path = ready.with_name("shapes-timers.json")

    def dump(*_: Any) -> None:
        figures_path.with_suffix(".tmp").write_text(json.dumps(_TIMED))
        figures_path.with_suffix(".tmp").rename(figures_path)

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump)  # wakes an idle loop

    server = grpc.aio.server()
    server.add_generic_rpc_handlers(_shape_handlers())
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    ready.write_text(f"127.0.0.1:{port}")
    await server.wait_for_termination()


# -- the instrumented service -----------------------------------------------------------------------

# What the instrumented service times in its loop thread, each message: the LookupStream's
# message handler (``StreamRpcs._lookup_message``: admission, the RPC layer, the storage search,
# metrics), the RPC layer and search within it (``LookupRpcs.offsets_for_times``), and the
# answer's write started (``OrderedReplies.send``). Wall (perf_counter) and thread CPU, in ns.
_TIMED = {"message": [0, 0, 0], "lookup": [0, 0, 0], "lookup-again": [0, 0, 0], "send": [0, 0, 0]}


def _timed(name: str, function: Any) -> Any:
    figures = _TIMED[name]
    wall, cpu = time.perf_counter_ns, time.thread_time_ns

    async def timed(*args: Any, **kwargs: Any) -> Any:
        wall0, cpu0 = wall(), cpu()
        try:
            return await function(*args, **kwargs)
        finally:
            figures[0] += 1
            figures[1] += wall() - wall0
            figures[2] += cpu() - cpu0

    return timed


def _serve_instrumented(argv: list[str], figures_path: pathlib.Path) -> int:
    """The service as ``python -m seglog_server`` runs it, with ``_TIMED``'s timers; SIGUSR1
    writes them to ``figures_path`` (JSON)."""
    import json
    import signal

    from seglog_server.__main__ import main
    from seglog_server.rpc.lookup_rpcs import LookupRpcs
    from seglog_server.rpc.streams import OrderedReplies, StreamRpcs

    StreamRpcs._lookup_message = _timed("message", StreamRpcs._lookup_message)  # type: ignore[method-assign]
    lookup = _timed("lookup", LookupRpcs.offsets_for_times)
    again = _timed("lookup-again", LookupRpcs.offsets_for_times)

    async def lookup_twice(self: Any, request: Any, response: Any = None) -> Any:
        # The same lookup again at once, into an answer thrown away: its time is the lookup's
        # with the caches the first one warmed, in the same message (cold against warm).
        answer = await lookup(self, request, response)
        await again(self, request, None)
        return answer

    LookupRpcs.offsets_for_times = lookup_twice  # type: ignore[method-assign]
    OrderedReplies.send = _timed("send", OrderedReplies.send)  # type: ignore[method-assign]

    def dump(*_: Any) -> None:
        figures_path.with_suffix(".tmp").write_text(json.dumps(_TIMED))
        figures_path.with_suffix(".tmp").rename(figures_path)

    signal.signal(signal.SIGUSR1, dump)
    return main(argv)


def _instrumented_figures(pid: int, path: pathlib.Path) -> dict[str, list[int]]:
    import json
    import signal

    path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit("the instrumented service wrote no figures")
        time.sleep(0.01)
    return json.loads(path.read_text())


# -- the servers' and this process's threads -------------------------------------------------------


def _threads(pid: int | str) -> dict[str, tuple[float, int, int]]:
    """Each thread of ``pid`` ("self" for this process): CPU s, voluntary and involuntary
    context switches, keyed by "comm #n" (the n-th thread of that name by id: the same key for
    the same thread in each client worker; "python #0" is the main thread, the event loop's)."""
    figures = {}
    seen: dict[str, int] = defaultdict(int)
    for task in sorted(pathlib.Path(f"/proc/{pid}/task").iterdir(), key=lambda task: int(task.name)):
        try:
            stat = (task / "stat").read_text()
            status = (task / "status").read_text()
        except FileNotFoundError:
            continue  # ended meanwhile
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rpartition(")")[2].split()
        switches = dict(line.split(":\t") for line in status.splitlines() if "ctxt_switches" in line)
        number = seen[comm]
        seen[comm] = number + 1
        figures[f"{comm} #{number}"] = (
            (int(fields[11]) + int(fields[12])) / TICK,
            int(switches["voluntary_ctxt_switches"]), int(switches["nonvoluntary_ctxt_switches"]),
        )
    return figures


def _deltas(before: dict, after: dict, count: int) -> dict[str, tuple[float, float, float]]:
    """Per thread: CPU us, voluntary and involuntary switches, each a round trip."""
    out = {}
    for name, (cpu, voluntary, involuntary) in after.items():
        cpu0, voluntary0, involuntary0 = before.get(name, (0.0, 0, 0))
        out[name] = ((cpu - cpu0) / count * 1e6, (voluntary - voluntary0) / count, (involuntary - involuntary0) / count)
    return out


def _total(deltas: dict[str, tuple[float, float, float]]) -> tuple[float, float, float]:
    return tuple(sum(row[i] for row in deltas.values()) for i in range(3))  # type: ignore[return-value]


class _CountingLoop(asyncio.SelectorEventLoop):
    turns = 0

    def _run_once(self) -> None:
        _CountingLoop.turns += 1
        super()._run_once()


# -- the round trips ---------------------------------------------------------------------------------


async def _raw_ms(address: str, method: str, count: int, message: Any, pb_answer: bool,
                  started_write: bool = False) -> list[float]:
    """Round trips of a raw grpc.aio client; ``started_write``: each write started as the
    client's ``RequestStream.ask`` starts it (``_started``: not awaited, its rest driven by
    callbacks) before the read is awaited."""
    import grpc

    from seglog._streams import _started

    from seglog.v1 import log_service_pb2 as pb

    async with grpc.aio.insecure_channel(address) as channel:
        if isinstance(message, bytes):
            call = channel.stream_stream(method, request_serializer=_identity, response_deserializer=_identity)()
        else:
            call = channel.stream_stream(method, request_serializer=pb.LookupStreamRequest.SerializeToString,
                                         response_deserializer=pb.LookupStreamResponse.FromString)()
        samples = []
        writing = None
        for index in range(WARMUP + count):
            if index == WARMUP:
                _Marks.start()
            started = time.perf_counter()
            if started_write:
                if writing is not None and not writing.done():
                    await writing  # one write at a time (the client's write lock)
                writing = _started(call.write(message), _no_error)
                await call.read()
            elif isinstance(message, bytes):
                await call.write(message)
                await call.read()
            else:
                message.correlation_id = index + 1
                await call.write(message)
                answer = await call.read()
                if pb_answer and (answer.correlation_id != index + 1 or answer.HasField("error")):
                    raise SystemExit(f"unexpected answer: {answer}")
            samples.append((time.perf_counter() - started) * 1000)
        _Marks.stop()
        await call.done_writing()
        return samples[WARMUP:]


async def _ask_ms(address: str, count: int, target_ms: int) -> list[float]:
    """``count`` one-target requests through the client's ``RequestStream.ask`` on the transport's
    LookupStream (the admin and router layers left out)."""
    from seglog.client import Transport

    transport = Transport(address)
    stream = transport.lookup_stream()
    request = _lookup_request(target_ms)
    timeout_s = transport.request_timeout_s  # as the admin asks
    samples = []
    for index in range(WARMUP + count):
        if index == WARMUP:
            _Marks.start()
        started = time.perf_counter()
        answer = await stream.ask(request, timeout_s)
        samples.append((time.perf_counter() - started) * 1000)
        if not answer.results or answer.results[0].offset < 0:
            raise SystemExit(f"unexpected answer: {answer}")
    _Marks.stop()
    await transport.close()
    return samples[WARMUP:]


def _no_error(error: Any) -> None:
    if error is not None:
        raise SystemExit(f"a write failed: {error!r}")


async def _admin_ms(address: str, count: int, target_ms: int) -> list[float]:
    from seglog import AsyncAdmin, TopicPartition

    partition = TopicPartition("t", 0)
    async with AsyncAdmin(address) as admin:
        samples = []
        for index in range(WARMUP + count):
            if index == WARMUP:
                _Marks.start()
            started = time.perf_counter()
            found = await admin.offsets_for_times({partition: target_ms})
            samples.append((time.perf_counter() - started) * 1000)
            if found[partition] is None:
                raise SystemExit(f"no answer for {target_ms}")
        _Marks.stop()
        return samples[WARMUP:]


class _Marks:
    """The measured round trips' window: both processes' threads and this loop's turns read at
    its two ends (the warm-up and the channel's set-up and close left out)."""

    server_pid = 0
    timers: tuple[pathlib.Path, dict, dict] | None = None  # the instrumented service's
    server: tuple[dict, dict] = ({}, {})
    client: tuple[dict, dict] = ({}, {})
    turns = (0, 0)
    wall = (0.0, 0.0)

    @classmethod
    def start(cls) -> None:
        cls.server = (_threads(cls.server_pid), {})
        if cls.timers is not None:
            cls.timers = (cls.timers[0], _instrumented_figures(cls.server_pid, cls.timers[0]), {})
        cls.client = (_threads("self"), {})
        cls.turns = (_CountingLoop.turns, 0)
        cls.wall = (time.monotonic(), 0.0)

    @classmethod
    def stop(cls) -> None:
        cls.server = (cls.server[0], _threads(cls.server_pid))
        if cls.timers is not None:
            cls.timers = (cls.timers[0], cls.timers[1], _instrumented_figures(cls.server_pid, cls.timers[0]))
        cls.client = (cls.client[0], _threads("self"))
        cls.turns = (cls.turns[0], _CountingLoop.turns)
        cls.wall = (cls.wall[0], time.monotonic())


CASES = ("floor", "shapes/floor", "shapes/awaited", "shapes/ordered", "shapes/ordered-cb", "shapes/awaited+cw",
         "shapes/ordered-pb", "seglog/raw", "seglog-i/raw", "seglog/ask", "pb/admin", "seglog/admin")


def _lookup_request(target_ms: int) -> Any:
    from seglog.v1 import log_service_pb2 as pb

    request = pb.LookupStreamRequest()
    request.offsets_for_times.partitions.add(topic="t", partition=0, timestamp_ms=target_ms)
    return request


def _worker(name: str, address: str, pid: str, timers: str, count_text: str, target_text: str) -> dict[str, Any]:
    """One case's round trips in this (fresh) process: grpc.aio keeps one poller a process, and a
    loop closed under it loses the next loop's completions."""
    from bench.peers import floor

    count, target_ms = int(count_text), int(target_text)
    measures = {
        "floor": lambda: _raw_ms(address, floor.METHOD, count, b"", False),
        "shapes/floor": lambda: _raw_ms(address, f"/{SHAPES}/Floor", count, b"", False),
        "shapes/awaited": lambda: _raw_ms(address, f"/{SHAPES}/Awaited", count, b"", False),
        "shapes/ordered": lambda: _raw_ms(address, f"/{SHAPES}/Ordered", count, b"", False),
        "shapes/ordered-cb": lambda: _raw_ms(address, f"/{SHAPES}/OrderedCb", count, b"", False),
        "shapes/awaited+cw": lambda: _raw_ms(address, f"/{SHAPES}/Awaited", count, b"", False, started_write=True),
        "shapes/ordered-pb": lambda: _raw_ms(address, f"/{SHAPES}/OrderedPb", count, _lookup_request(target_ms), True),
        "seglog/raw": lambda: _raw_ms(address, LOOKUP_STREAM, count, _lookup_request(target_ms), True),
        "seglog-i/raw": lambda: _raw_ms(address, LOOKUP_STREAM, count, _lookup_request(target_ms), True),
        "seglog/ask": lambda: _ask_ms(address, count, target_ms),
        "pb/admin": lambda: _admin_ms(address, count, target_ms),
        "seglog/admin": lambda: _admin_ms(address, count, target_ms),
    }
    _Marks.server_pid = int(pid)
    _Marks.timers = (pathlib.Path(timers), {}, {}) if timers else None
    with asyncio.Runner(loop_factory=_CountingLoop) as runner:
        samples = sorted(runner.run(measures[name]()))
    return {
        "p50": samples[count // 2], "p99": samples[int(count * 0.99)], "wall": _Marks.wall[1] - _Marks.wall[0],
        "server": _deltas(*_Marks.server, count), "client": _deltas(*_Marks.client, count),
        "turns": (_Marks.turns[1] - _Marks.turns[0]) / count,
        "timers": None if _Marks.timers is None else {
            key: [(after - before) / 1000 / count for before, after in zip(
                _Marks.timers[1][key][1:], _Marks.timers[2][key][1:])]
            for key in _TIMED},
    }


# -- the run -----------------------------------------------------------------------------------------


def _start(command: list[str], workdir: pathlib.Path, ready: pathlib.Path, environ: dict[str, str]) -> tuple[subprocess.Popen, str]:
    log = open(workdir / f"{ready.name}.log", "w")  # noqa: SIM115 - the server's for its lifetime
    process = subprocess.Popen(command, stdout=log, stderr=log, env=environ, cwd=ROOT)
    deadline = time.monotonic() + 60
    while not ready.exists() or not ready.read_text().strip():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"server failed to start: {(workdir / f'{ready.name}.log').read_text()}")
        time.sleep(0.05)
    return process, ready.read_text().strip()


def _fill(address: str, records: int) -> None:
    from seglog import AsyncAdmin, AsyncProducer

    async def fill() -> None:
        async with AsyncAdmin(address) as admin:
            await admin.create_topic("t", partitions=1)
        async with AsyncProducer(address, linger_ms=5) as producer:
            for start in range(0, records, 1000):
                futures = [await producer.send("t", b"v" * 100, partition=0, timestamp_ms=TIMESTAMP_MS + index)
                           for index in range(start, min(records, start + 1000))]
                await producer.flush()
                del futures
    asyncio.run(fill())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_lookup_gap", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--round-trips", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated cases (default: all)")
    parser.add_argument("--threads", action="store_true", help="each server thread's figures too")
    parser.add_argument("--pin", action="store_true",
                        help="every server thread on CPU 0, each client worker on CPU 1 (caches kept by side)")
    parser.add_argument("--serve-shapes", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--serve-instrumented", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("service_args", nargs="*", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.worker is not None:
        print(json.dumps(_worker(arguments.worker, *arguments.service_args)))
        return
    if arguments.serve_instrumented is not None:
        sys.exit(_serve_instrumented(arguments.service_args, arguments.serve_instrumented))
    if arguments.serve_shapes is not None:
        import uvloop

        uvloop.run(_serve_shapes(arguments.serve_shapes))
        return

    from bench.peers import floor
    from seglog_server.__main__ import MALLOC_TUNING

    count = arguments.round_trips
    target_ms = TIMESTAMP_MS + arguments.records // 2
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    environ.update(MALLOC_TUNING)  # set already: no re-exec, the pid stays the one measured
    with tempfile.TemporaryDirectory(prefix="seglog-lookup-gap-") as directory:
        workdir = pathlib.Path(directory)
        port = floor.free_port()
        floor_server = subprocess.Popen([sys.executable, "-m", "bench.peers.floor", "--port", str(port)], cwd=ROOT)
        processes = [floor_server]
        try:
            floor.wait_port(port, floor_server)
            shapes, shapes_address = _start(
                [sys.executable, "-m", "bench.bench_lookup_gap", "--serve-shapes", str(workdir / "shapes")],
                workdir, workdir / "shapes", environ)
            processes.append(shapes)
            service, address = _start(
                [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file",
                 str(workdir / "seglog"), "--data-dir", str(workdir / "data")],
                workdir, workdir / "seglog", environ)
            processes.append(service)
            _fill(address, arguments.records)
            instrumented, instrumented_address = _start(
                [sys.executable, "-m", "bench.bench_lookup_gap", "--serve-instrumented", str(workdir / "timers.json"),
                 "--", "--listen", "127.0.0.1:0", "--ready-file", str(workdir / "seglog-i"), "--data-dir",
                 str(workdir / "data-i")],
                workdir, workdir / "seglog-i", environ)
            processes.append(instrumented)
            _fill(instrumented_address, arguments.records)

            servers = {"floor": (floor_server, f"127.0.0.1:{port}", None),
                       "shapes": (shapes, shapes_address, workdir / "shapes-timers.json"),
                       "seglog": (service, address, None),
                       "seglog-i": (instrumented, instrumented_address, workdir / "timers.json")}
            if arguments.pin:
                for process in processes:
                    for task in pathlib.Path(f"/proc/{process.pid}/task").iterdir():
                        os.sched_setaffinity(int(task.name), {0})
            cases = [name for name in CASES if name == "floor" or not arguments.only or name in arguments.only.split(",")]
            rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
            idle: dict[str, list[dict]] = defaultdict(list)
            loads = []
            for repeat in range(arguments.repeats):
                walls = []
                for name in cases:
                    process, server_address, timers = servers[name.split("/")[0].replace("pb", "shapes")]
                    command = [*(["taskset", "-c", "1"] if arguments.pin else []),
                               sys.executable, "-m", "bench.bench_lookup_gap", "--worker", name, server_address,
                               str(process.pid), str(timers or ""), str(count), str(target_ms)]
                    try:
                        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
                    except subprocess.TimeoutExpired:
                        done = None
                    if done is None or done.returncode != 0:  # left out of this repeat, said so
                        print(f"  {name} failed in repeat {repeat + 1}: {done and done.stderr[-1000:]}", flush=True)
                        if name == "floor":
                            raise SystemExit("the floor failed: no baseline")
                        continue
                    row = json.loads(done.stdout.splitlines()[-1])
                    row["repeat"] = repeat
                    rows[name].append(row)
                    wall = row["wall"]
                    walls.append(wall)
                # Idle: each server's threads over a case's wall time with no request, per the
                # same count (a figure "a round trip" comparable with the busy ones).
                wall = statistics.median(walls)
                for label, process in (("floor", floor_server), ("shapes", shapes), ("seglog", service)):
                    before = _threads(process.pid)
                    time.sleep(wall)
                    idle[label].append(_deltas(before, _threads(process.pid), count))
                loads.append(os.getloadavg()[0])
                base = rows["floor"][-1]
                print(f"repeat {repeat + 1} (load {loads[-1]:.1f}, floor p50 {base['p50']:.3f} ms): " + ", ".join(
                    f"{name} {row[-1]['p50'] / base['p50']:.2f}x" for name, row in rows.items()
                    if row[-1]["repeat"] == repeat), flush=True)
        finally:
            for process in processes:
                floor.stop_process(process, 60)

    def median(values: Any) -> float:
        return statistics.median(list(values))

    print(f"medians over {arguments.repeats} repeats of {count} round trips, load {min(loads):.1f}-{max(loads):.1f}; "
          f"floor p50 {median(r['p50'] for r in rows['floor']):.3f} ms:")
    print(f"  {'case':18s} {'p50':>6s} {'p99':>6s} | server CPU us, wakes (vol/invol) | client CPU us, wakes, loop turns")
    for name, values in rows.items():
        floors = rows["floor"]
        p50 = median(mine["p50"] / floors[mine["repeat"]]["p50"] for mine in values)
        p99 = median(mine["p99"] / floors[mine["repeat"]]["p99"] for mine in values)
        server = [_total(v["server"]) for v in values]
        client = [_total(v["client"]) for v in values]
        print(f"  {name:18s} {p50:5.2f}x {p99:5.2f}x | {median(s[0] for s in server):6.1f} "
              f"{median(s[1] for s in server):5.2f}/{median(s[2] for s in server):4.2f} | "
              f"{median(c[0] for c in client):6.1f} {median(c[1] for c in client):5.2f}/{median(c[2] for c in client):4.2f} "
              f"{median(v['turns'] for v in values):5.2f}")
        if values[0]["timers"] is not None:
            print("      in the service's loop thread, us a message (wall / thread CPU): " + ", ".join(
                f"{key} {median(v['timers'][key][0] for v in values):.1f} / "
                f"{median(v['timers'][key][1] for v in values):.1f}" for key in _TIMED))
        if arguments.threads:
            for side in ("server", "client"):
                names = sorted({t for v in values for t in v[side]})
                for thread in names:
                    figures = [v[side].get(thread, (0.0, 0.0, 0.0)) for v in values]
                    cpu = median(f[0] for f in figures)
                    wakes = median(f[1] for f in figures)
                    if cpu >= 1 or wakes >= 0.05:
                        print(f"      {side} {thread:28s} CPU {cpu:6.1f} us, wakes {wakes:5.2f}/"
                              f"{median(f[2] for f in figures):4.2f}")
    for label, values in idle.items():
        totals = [_total(v) for v in values]
        print(f"  idle {label:13s} (the same wall time, no request; per round trip's share) CPU "
              f"{median(t[0] for t in totals):5.1f} us, wakes {median(t[1] for t in totals):5.2f}/"
              f"{median(t[2] for t in totals):4.2f}")
        if arguments.threads:
            for thread in sorted({t for v in values for t in v}):
                figures = [v.get(thread, (0.0, 0.0, 0.0)) for v in values]
                if median(f[0] for f in figures) >= 0.5 or median(f[1] for f in figures) >= 0.01:
                    print(f"      {thread:28s} CPU {median(f[0] for f in figures):6.1f} us, wakes "
                          f"{median(f[1] for f in figures):5.3f}")


if __name__ == "__main__":
    main()
