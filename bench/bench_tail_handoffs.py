"""What the synchronous client's two thread hand-offs cost on the goal-3 path, against bare ones.

    .venv/bin/python bench/bench_tail_handoffs.py [--rate 500] [--records 2000] [--runs 3] [--async]

bench/peers' latency workload (``SeglogSystem.latency``: a sync ``Producer(linger_ms=0)`` sending
from the main thread, a sync ``Consumer(mode="stream")`` polling in a second thread, one process)
with ``time.perf_counter_ns`` stamps patched in around the two hand-offs between threads:

- the producer's, for the records that open a batch (so wake the sender): ``Producer.send``
  entered, the sender woken from the caller's thread (``Sender.wake``, a ``call_soon_threadsafe``),
  the loop running that wake-up (``Sender._wake_on_loop``), the batch's request task starting
  (``Sender._send_batch_request``);
- the consumer's: the Consume stream's response yielded on the loop (``Transport.consume``), the
  stream task's ``_notify`` (it absorbed the response and sets the polling thread's event), the
  polling thread's ``Event.wait`` returning, ``Consumer.poll`` returning the records.

Printed per run (medians, us): each step, how often the producer's acknowledgement was handled on
the loop between the push's ``_notify`` and the polling thread's wake-up and the wake-up with and
without it, and then the same two hand-offs bare in this process at the same rate (a uvloop
thread's ``call_soon_threadsafe`` callback; a ``threading.Event`` set from a uvloop task, waited
in a thread), so a hand-off's cost reads against the machine's at that moment. ``--async`` adds,
per run and in alternating order, the same workload on the asyncio client (``AsyncProducer`` and
``AsyncConsumer(mode="stream")`` on one uvloop loop, paced by ``steady_ticks``) beside the sync
one and the ping-pong floor, as ratios to the floor. The machine's load is printed with each run.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))  # bench.peers

import uvloop  # noqa: E402

from bench.peers import common, floor  # noqa: E402
from bench.peers.common import latency_ms, percentile, stamped_payload, steady_ticks  # noqa: E402
from bench.peers.seglog_system import SeglogSystem  # noqa: E402
from seglog import AsyncConsumer, AsyncProducer  # noqa: E402
from seglog import _sender, client, consumer, producer  # noqa: E402

_now = time.perf_counter_ns
_STAMPS = ("send", "wake", "woken", "drained", "recv", "notify", "waited", "polled", "answer", "answered")
stamps: dict[str, list[int]] = {name: [] for name in _STAMPS}


def _patch() -> None:
    """Stamps around the hand-offs (see the module's docstring); nothing in seglog carries them."""
    send, wake, woken = producer.Producer.send, _sender.Sender.wake, _sender.Sender._wake_on_loop
    send_batch_request, answer = _sender.Sender._send_batch_request, _sender.Sender._answer
    consume, notify, poll = client.Transport.consume, consumer.AsyncConsumer._notify, consumer.Consumer.poll
    init = consumer.AsyncConsumer.__init__

    def stamped_send(self, *arguments, **options):  # noqa: ANN001, ANN002, ANN003, ANN202
        sent, woken_before = _now(), len(stamps["wake"])
        future = send(self, *arguments, **options)
        if len(stamps["wake"]) > woken_before:  # this record opened a batch and woke the sender
            stamps["send"].append(sent)
        return future

    def stamped_wake(self) -> None:  # noqa: ANN001
        if threading.get_ident() != self._loop_thread_id:  # the caller's hand-off only
            stamps["wake"].append(_now())
        wake(self)

    def stamped_woken(self) -> None:  # noqa: ANN001
        stamps["woken"].append(_now())
        woken(self)

    async def stamped_send_batch_request(self, *arguments) -> None:  # noqa: ANN001, ANN002
        stamps["drained"].append(_now())
        await send_batch_request(self, *arguments)

    def stamped_answer(self, *arguments) -> None:  # noqa: ANN001, ANN002
        stamps["answer"].append(_now())
        answer(self, *arguments)
        stamps["answered"].append(_now())

    async def stamped_consume(self, request):  # noqa: ANN001, ANN202
        async for response in consume(self, request):
            stamps["recv"].append(_now())
            yield response

    def stamped_notify(self) -> None:  # noqa: ANN001
        stamps["notify"].append(_now())
        notify(self)

    def stamped_poll(self, *arguments, **options):  # noqa: ANN001, ANN002, ANN003, ANN202
        records = poll(self, *arguments, **options)
        if records:
            stamps["polled"].append(_now())
        return records

    class StampedEvent(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            woken = super().wait(timeout)
            stamps["waited"].append(_now())
            return woken

    def stamped_init(self, *arguments, **options) -> None:  # noqa: ANN001, ANN002, ANN003
        init(self, *arguments, **options)
        self._thread_ready = StampedEvent()

    producer.Producer.send = stamped_send
    _sender.Sender.wake, _sender.Sender._wake_on_loop = stamped_wake, stamped_woken
    _sender.Sender._send_batch_request, _sender.Sender._answer = stamped_send_batch_request, stamped_answer
    client.Transport.consume, consumer.AsyncConsumer._notify = stamped_consume, stamped_notify
    consumer.Consumer.poll, consumer.AsyncConsumer.__init__ = stamped_poll, stamped_init


def _gaps(before: list[int], after: list[int], within_ns: int = 5_000_000) -> list[float]:
    """For each stamp of ``before``, us to the first of ``after`` following it (within 5 ms)."""
    gaps = []
    for at in before:
        index = bisect.bisect_right(after, at)
        if index < len(after) and after[index] - at < within_ns:
            gaps.append((after[index] - at) / 1e3)
    return gaps


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _steps() -> str:
    pairs = (("send", "wake"), ("wake", "woken"), ("woken", "drained"), ("send", "drained"),
             ("recv", "notify"), ("notify", "waited"), ("waited", "polled"))
    text = ", ".join(f"{a} -> {b} {_median(_gaps(stamps[a], stamps[b])):.0f}" for a, b in pairs)
    between, after_answer, alone = 0, [], []
    for notified in stamps["notify"]:
        index = bisect.bisect_right(stamps["waited"], notified)
        if index == len(stamps["waited"]):
            continue
        waited = stamps["waited"][index]
        answered = bisect.bisect_right(stamps["answer"], notified)
        if answered < len(stamps["answer"]) and stamps["answer"][answered] < waited:
            between += 1
            after_answer.append((waited - notified) / 1e3)
        else:
            alone.append((waited - notified) / 1e3)
    return (f"{text}; an acknowledgement handled on the loop between the push's notify and the polling "
            f"thread's wake-up for {between} of {len(stamps['notify'])} pushes: notify -> waited "
            f"{_median(after_answer):.0f} with it, {_median(alone):.0f} without")


def _bare_handoffs(count: int, rate: float) -> tuple[float, float]:
    """Medians (us) of a bare call_soon_threadsafe to an idle uvloop thread and of a
    threading.Event set from a uvloop task to a waiting thread, ``count`` each at ``rate``."""
    loop = uvloop.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    to_loop: list[float] = []
    for _ in range(count):
        time.sleep(1 / rate)
        loop.call_soon_threadsafe(lambda sent: to_loop.append((_now() - sent) / 1e3), _now())
    time.sleep(0.05)
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    event, set_at, woke_at = threading.Event(), [], []

    def wait() -> None:
        for _ in range(count):
            event.wait()
            woke_at.append(_now())
            event.clear()

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()

    async def set_each() -> None:
        for _ in range(count):
            await asyncio.sleep(1 / rate)
            while len(woke_at) < len(set_at):  # the last one seen: a set never lands on a set event
                await asyncio.sleep(0)
            set_at.append(_now())
            event.set()

    loop.run_until_complete(set_each())
    waiter.join(5)
    loop.close()
    return _median(to_loop), _median([(woke - sent) / 1e3 for sent, woke in zip(set_at, woke_at)])


async def _async_latency(address: str, topic: str, count: int) -> list[float]:
    """The workload on the asyncio client, one loop: produce -> consume latencies (ms)."""
    latencies: list[float] = []
    async with AsyncConsumer(address, topic, partition=0, start="earliest", mode="stream") as reader:
        await reader.poll(timeout_ms=0)  # the stream opened before the first record

        async def consume() -> None:
            deadline = time.monotonic() + count / 1000 + 60
            while len(latencies) < count and time.monotonic() < deadline:
                latencies.extend(latency_ms(record.value) for record in await reader.poll(timeout_ms=500))

        reading = asyncio.create_task(consume())
        async with AsyncProducer(address, linger_ms=0) as writer:
            async for _ in steady_ticks(count, common.LATENCY_RATE_PER_S):
                await writer.send(topic, stamped_payload(), partition=0)
            await writer.flush()
        await reading
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=500.0, help="records a second")
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--async", dest="compare_async", action="store_true",
                        help="also the asyncio client's workload, alternately, beside the floor")
    parser.add_argument("--floor-calls", type=int, default=2000)
    args = parser.parse_args()
    common.LATENCY_RATE_PER_S = args.rate
    _patch()
    system = SeglogSystem(pathlib.Path(tempfile.mkdtemp(prefix="tail-handoffs-")))
    loop = uvloop.new_event_loop()
    ratios: dict[str, list[float]] = {"sync": [], "async": []}
    try:
        for run in range(args.runs):
            floor_p50 = percentile(floor.measure(args.floor_calls), 50) if args.compare_async else None
            kinds = ["sync", "async"] if args.compare_async else ["sync"]
            for kind in kinds if run % 2 == 0 else kinds[::-1]:
                load = os.getloadavg()[0]
                if kind == "sync":
                    for listed in stamps.values():
                        listed.clear()
                    latencies = system.latency(args.records)[0]
                else:
                    topic = f"latency-async-{time.monotonic_ns()}"
                    system._admin.create_topic(topic, 1)
                    latencies = loop.run_until_complete(_async_latency(system.address, topic, args.records))
                p50 = percentile(latencies, 50)
                line = f"run {run + 1} {kind}: produce -> consume p50 {p50:.3f} ms p99 {percentile(latencies, 99):.3f}"
                if floor_p50 is not None:
                    ratios[kind].append(p50 / floor_p50)
                    line += f", {p50 / floor_p50:.2f}x the floor ({floor_p50:.3f} ms)"
                print(f"{line}, load {load:.1f}", flush=True)
                if kind == "sync":
                    print(f"  steps (us): {_steps()}", flush=True)
            to_loop, to_thread = _bare_handoffs(1000, args.rate)
            print(f"  bare hand-offs (us): call_soon_threadsafe to a uvloop thread {to_loop:.0f}, "
                  f"a threading.Event from a uvloop task {to_thread:.0f}; load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        system.stop()  # the loop is left open: grpc.aio keeps every loop it used (see seglog._sync)
    if args.compare_async:
        print(f"medians of the runs' ratios to the floor: sync {_median(ratios['sync']):.2f}x, "
              f"async {_median(ratios['async']):.2f}x; async lower in "
              f"{sum(a < s for a, s in zip(ratios['async'], ratios['sync']))} of {args.runs} runs")


if __name__ == "__main__":
    main()
