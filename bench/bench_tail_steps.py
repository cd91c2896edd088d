"""Where a record's produce -> consume time goes, step by step, from the append to poll's return.

    .venv/bin/python bench/bench_tail_steps.py [--records 6000] [--runs 3] [--rate 2000] [--tree DIR ...]

The goal-3 workload of bench/peers (``Producer(linger_ms=0).send`` per record at 2,000/s, a
``Consumer(mode="stream")`` polling in another thread), with ``time.monotonic_ns`` stamps
(CLOCK_MONOTONIC is shared by the processes) at each step of the consumer's half:

- ``append``: the storage announces the append (``UnifiedLog._announce_change``), service side;
- ``chunk``: the Consume stream has read it and starts building its response (``_send_chunk``);
- ``wstart`` / ``wend``: the stream's ``context.write`` starts / returns (the transport took it);
- ``recv``: the client's ``Transport.consume`` yields the response (on the loop thread);
- ``polled``: ``Consumer.poll`` returned the record in the reading thread.

and at each step of the producer's half, per batch sent in a message of its own (batches sent
several a message are not stamped):

- ``drained``: the sender starts the batch's request (``Sender._send_batch_request``), client;
- ``pwstart`` / ``pwend``: the ProduceStream's write of it starts / completes (grpc.aio), client;
- ``pread``: the service's ProduceStream read returns its message (``streams._next_request``);
- ``pappend`` / ``pappended``: the service's append of it starts (the message read and admitted)
  / returns (``ProduceRpcs.append``), service side;
- ``answered``: the record's future completes (its batch answered), client.

Each record is matched to the first stamp whose high watermark (or log end) is above its offset,
and to its batch's producer stamps by the batch's last offset; printed: the medians (and p90) of
each step's share per record (a step's share ends at its stamp; ``drained`` starts at the
record's creation; ``pread`` is negative when the service read the message before the client saw its
write complete), and of append -> polled, beside creation -> append (the producer's half) and
creation -> acknowledgement. ``--tree`` runs the
same workload against other checkouts' ``server`` and ``client`` directories (``git archive``
copies, say), interleaved run by run with this one: an A/B on a busy machine. The stamps are
patched in from here (the service runs under ``--serve``, which patches and then starts it):
nothing in seglog carries them. The machine's load is printed with each run.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import bisect
import contextvars
import json
import os
import pathlib
import runpy
import statistics
import subprocess
import sys
import tempfile
import threading
import time

_STEPS = ("append", "chunk", "wstart", "wend", "recv", "polled")
# The producer's half, from the record's creation: each step's share ends at the stamp named.
_PRODUCER_STEPS = ("drained", "pwstart", "pwend", "pread", "pappend", "pappended", "answered")


def serve(stamps_path: str, argv: list[str]) -> None:
    """The service with stamps on the consume path, written to ``stamps_path`` at exit."""
    from seglog_server.rpc import fetch_rpcs
    from seglog_server.storage.log import unified_log

    now = time.monotonic_ns
    stamps: dict[str, list[tuple[int, int]]] = {"append": [], "chunk": [], "wstart": [], "wend": []}
    announce = unified_log.UnifiedLog._announce_change

    def announce_change(self: object, *appended: object) -> None:  # an append's batch, in newer trees
        stamps["append"].append((now(), self.log_end_offset))  # type: ignore[attr-defined]
        announce(self, *appended)

    send_chunk = fetch_rpcs.FetchRpcs._send_chunk

    async def stamped_send_chunk(self, topic, partition, offset, chunk, decode, call, context):  # noqa: ANN001
        high_watermark = chunk[0].high_watermark
        stamps["chunk"].append((now(), high_watermark))

        class Stamped:
            async def write(self, response: bytes) -> None:
                stamps["wstart"].append((now(), high_watermark))
                await context.write(response)
                stamps["wend"].append((now(), high_watermark))

        return await send_chunk(self, topic, partition, offset, chunk, decode, call, Stamped())

    from seglog_server.rpc import produce_rpcs

    from seglog_server.rpc import streams

    stamps["pappend"] = []  # (append start, append end, the batch's last offset, its message's read)
    append = produce_rpcs.ProduceRpcs.append
    next_request = streams._next_request
    read_at: dict[object, int] = {}  # the stream's reading task -> when its last read returned

    async def stamped_next_request(session, context):  # noqa: ANN001
        request = await next_request(session, context)
        read_at[asyncio.current_task()] = now()
        return request

    async def stamped_append(self, request):  # noqa: ANN001
        started = now()
        appended = await append(self, request)
        stamps["pappend"].append((started, now(), appended[1].last_offset, read_at.get(asyncio.current_task(), 0)))
        return appended

    unified_log.UnifiedLog._announce_change = announce_change
    fetch_rpcs.FetchRpcs._send_chunk = stamped_send_chunk
    produce_rpcs.ProduceRpcs.append = stamped_append
    streams._next_request = stamped_next_request

    def dump() -> None:
        pathlib.Path(stamps_path).write_text(json.dumps(stamps))

    atexit.register(dump)
    sys.argv = ["seglog_server", *argv]
    runpy.run_module("seglog_server", run_name="__main__", alter_sys=True)


def run(records: int, rate: float | None = None) -> dict[str, list]:
    """One run in this process (the client) against a stamped service; all stamps. ``rate``:
    records a second (bench/peers' 2,000 when None)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # bench.peers
    from bench.peers import common
    from bench.peers.common import CREATED, paced
    if rate is not None:
        common.LATENCY_RATE_PER_S = rate
    from seglog import Admin, Consumer, Producer
    from seglog import client as client_module
    from seglog_server.__main__ import malloc_environment

    now = time.monotonic_ns
    stamps: dict[str, list] = {"recv": [], "ack": [], "polled": []}
    consume = client_module.Transport.consume

    async def stamped_consume(self, request):  # noqa: ANN001
        async for response in consume(self, request):
            stamps["recv"].append((now(), response.high_watermark))
            yield response

    client_module.Transport.consume = stamped_consume
    # The producer's batches: [first record's creation, drained, write start, write end], by the
    # creation stamp of each record in it (a record's value starts with its creation stamp).
    from seglog import _sender, _streams

    stamps["batches"] = []
    sending: contextvars.ContextVar[list | None] = contextvars.ContextVar("sending", default=None)
    send_batch_request = _sender.Sender._send_batch_request
    start_write = _streams.RequestStream._start_write

    # Arguments passed on as they come: the sender's own signature (its send turn, say) may grow.
    async def stamped_send_batch_request(self, tp, entry, *rest):  # noqa: ANN001
        batch = entry.item[0]
        row = [[CREATED.unpack_from(value)[0] for value in batch.values], now(), 0, 0]
        stamps["batches"].append(row)
        sending.set(row)  # this task's: its write below is this batch's
        await send_batch_request(self, tp, entry, *rest)

    async def stamped_start_write(self, *arguments):  # noqa: ANN001
        row = sending.get()
        if row is not None and not row[2]:
            row[2] = now()
        write = await start_write(self, *arguments)
        if row is not None and write is not None:
            write.add_done_callback(lambda _done: row.__setitem__(3, row[3] or now()))
        return write

    _sender.Sender._send_batch_request = stamped_send_batch_request
    _streams.RequestStream._start_write = stamped_start_write
    root = pathlib.Path(tempfile.mkdtemp(prefix="tail-steps-"))
    ready = root / "ready"
    environ = malloc_environment(os.environ) or dict(os.environ)  # no re-exec: the patches stay
    command = [sys.executable, __file__, "--serve", str(root / "stamps.json"), "--listen", "127.0.0.1:0",
               "--ready-file", str(ready), "--data-dir", str(root / "data"), "--topic-default", "flush.ms=1000"]
    service = subprocess.Popen(command, env=environ, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the service did not start")
            time.sleep(0.02)
        address = ready.read_text().strip()
        with Admin(address) as admin:
            admin.create_topic("tail", 1)
        subscribed = threading.Event()

        def read() -> None:
            with Consumer(address, "tail", partition=0, start="earliest", mode="stream") as consumer:
                subscribed.set()
                got, deadline = 0, time.monotonic() + records / 1000 + 60
                while got < records and time.monotonic() < deadline:
                    polled = consumer.poll(timeout_ms=1000)
                    at = now()
                    stamps["polled"] += [(at, r.offset, CREATED.unpack_from(r.value)[0]) for r in polled]
                    got += len(polled)

        reader = threading.Thread(target=read)
        reader.start()
        subscribed.wait(60)

        def send(payload: bytes) -> None:
            producer.send("tail", payload, partition=0).add_done_callback(
                lambda done: stamps["ack"].append((now(), done.result().offset)))

        with Producer(address, linger_ms=0) as producer:
            paced(records, send)
            producer.flush()
        reader.join()
    finally:
        service.terminate()
        service.wait(60)
    stamps.update(json.loads((root / "stamps.json").read_text()))
    return stamps


def _first_above(stamps: list) -> object:
    """offset -> time of the first stamp whose (running maximum) high watermark is above it."""
    highest, running = -1, []
    for _, high in stamps:
        highest = max(highest, high)
        running.append(highest)

    def at(offset: int) -> int | None:
        index = bisect.bisect_right(running, offset)
        return stamps[index][0] if index < len(stamps) else None

    return at


def _producer_steps(stamps: dict[str, list]) -> dict[int, object]:
    """creation stamp -> (offset -> [drained, write start, write end, read, append start, append end])
    of the batch the record went out in (sent alone: the service's append of it is the first
    whose last offset is at or above the record's)."""
    appends = sorted(stamps.get("pappend", []), key=lambda one: one[2])
    lasts = [one[2] for one in appends]
    found: dict[int, object] = {}
    for created_all, drained, write_start, write_end in stamps.get("batches", []):

        def at(offset: int, row=(drained, write_start, write_end)) -> list[int]:
            index = bisect.bisect_left(lasts, offset)
            started, ended, _, read = appends[index] if index < len(appends) else (0, 0, 0, 0)
            return [*row, read, started, ended]

        for created in created_all:
            found[created] = at
    return found


def steps(stamps: dict[str, list], warm_up: int = 200) -> dict[str, float]:
    """Medians and p90s (us) of each step per record, after the first ``warm_up`` records."""
    found = {name: _first_above(stamps[name]) for name in _STEPS[:-1]}
    acks = {offset: at for at, offset in stamps["ack"]}
    shares: dict[str, list[float]] = {
        name: [] for name in ("produce", "ack", "consume", *_STEPS[1:], *_PRODUCER_STEPS)
    }
    producer = _producer_steps(stamps)
    for polled_at, offset, created in stamps["polled"][warm_up:]:
        sent = producer.get(created)
        if sent is not None and offset in acks:
            times = [created, *sent(offset), acks[offset]]
            if all(times):
                for name, before, after in zip(_PRODUCER_STEPS, times, times[1:]):
                    shares[name].append((after - before) / 1e3)
        times = {name: found[name](offset) for name in _STEPS[:-1]}
        times["polled"] = polled_at
        if None in times.values():
            continue
        shares["produce"].append((times["append"] - created) / 1e3)
        if offset in acks:
            shares["ack"].append((acks[offset] - created) / 1e3)
        shares["consume"].append((polled_at - times["append"]) / 1e3)
        for before, after in zip(_STEPS, _STEPS[1:]):
            shares[after].append((times[after] - times[before]) / 1e3)
    figures = {}
    for name, values in shares.items():
        values.sort()
        figures[f"{name}_p50_us"] = statistics.median(values) if values else float("nan")
        figures[f"{name}_p90_us"] = values[int(len(values) * 0.9)] if values else float("nan")
    return figures


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", action="append", default=[],
                        help="another checkout's root (its server/ and client/ are used), run interleaved")
    parser.add_argument("--rate", type=float, default=None,
                        help="records a second (default: bench/peers' 2,000); a lower rate shows what is not queueing")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a single run, JSON out
    args = parser.parse_args()
    if args.one:
        print(json.dumps(steps(run(args.records, args.rate))))
        return
    trees = ["", *args.tree]
    results: dict[str, list[dict[str, float]]] = {tree or "this checkout": [] for tree in trees}
    for index in range(args.runs):
        for tree in trees:
            environ = dict(os.environ)
            if tree:
                environ["PYTHONPATH"] = os.pathsep.join([f"{tree}/server", f"{tree}/client"])
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, __file__, "--one", "--records", str(args.records),
                                  *(["--rate", str(args.rate)] if args.rate else [])], env=environ,
                                 capture_output=True, text=True, check=True, cwd=pathlib.Path(__file__).parent.parent)
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            figures["load_1min"] = load
            name = tree or "this checkout"
            results[name].append(figures)
            print(f"run {index + 1} {name}: load {load:.1f}, append -> polled p50 {figures['consume_p50_us']:.0f} us, "
                  + ", ".join(f"{step} {figures[f'{step}_p50_us']:.0f}" for step in _STEPS[1:])
                  + f"; creation -> ack p50 {figures['ack_p50_us']:.0f} us, "
                  + ", ".join(f"{step} {figures[f'{step}_p50_us']:.0f}" for step in _PRODUCER_STEPS), flush=True)
    for name, runs in results.items():
        print(f"\n{name}: medians over {len(runs)} runs (us; p50 of each run's per-record figures)")
        for key in ("produce", "ack", "consume", *_STEPS[1:], *_PRODUCER_STEPS):
            p50 = statistics.median(r[f"{key}_p50_us"] for r in runs)
            p90 = statistics.median(r[f"{key}_p90_us"] for r in runs)
            print(f"  {key:8s} p50 {p50:7.0f}  p90 {p90:7.0f}")


if __name__ == "__main__":
    main()
