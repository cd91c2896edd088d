"""The acknowledgement at 2,000 records/s: seglog's Producer(linger_ms=0) against a bare
ProduceStream on grpc's synchronous API, against one service, run alternately.

    .venv/bin/python bench/bench_sync_produce_stream.py [--records 4000] [--runs 3]

The question it answers: would the producer's half of the goal-3 tail lose its hop through the
client's event loop (a ProduceStream write is done only once grpc's poller thread and the loop
have run) by writing on grpc's synchronous stream instead? The bare stream is what a producer on
that API would do at the least: a record's batch is built in the sending thread and queued; grpc's
request-iterator thread takes it, with whatever queued meanwhile as the message's ``more``
batches (as the producer's open batch takes what comes during a write, at most 16 a message);
a thread of ours reads the answers. Printed per run: the acknowledgement's p50 and p99 (ms,
after the first 200 records) and the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import grpc

from seglog import Admin, Producer
from seglog.records.builder import RecordBatchBuilder
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

RATE_PER_S = 2000
WARM_UP = 200
VALUE = b"x" * 100
MORE_MAX = 15  # besides the message's first batch: the service's seglog-stream-batches-max is 16


def _paced(count: int, send: Callable[[int], None]) -> None:
    started = time.monotonic()
    for index in range(count):
        due = started + index / RATE_PER_S
        while (wait := due - time.monotonic()) > 0:
            time.sleep(min(wait, 0.0005))
        send(index)


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def with_producer(address: str, topic: str, count: int) -> list[float]:
    acks: list[float] = []
    with Producer(address, linger_ms=0) as producer:

        def send(_index: int) -> None:
            started = time.perf_counter()
            future = producer.send(topic, VALUE, partition=0)
            future.add_done_callback(lambda _done: acks.append((time.perf_counter() - started) * 1000))

        _paced(count, send)
        producer.flush()
    return acks


def with_sync_stream(address: str, topic: str, count: int) -> list[float]:
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.LogServiceStub(channel)  # type: ignore[no-untyped-call]
    queued: queue.Queue[pb.ProduceStreamRequest | None] = queue.Queue()
    sent_at: dict[int, float] = {}
    in_message: dict[int, list[int]] = {}
    acks: list[float] = []

    def messages() -> Iterator[pb.ProduceStreamRequest]:
        while (message := queued.get()) is not None:
            while len(message.more) < MORE_MAX:
                try:
                    joining = queued.get_nowait()
                except queue.Empty:
                    break
                if joining is None:
                    queued.put(None)
                    break
                message.more.append(joining.produce)
                in_message[message.correlation_id].append(joining.correlation_id)
            yield message

    call = stub.ProduceStream(messages())

    def read() -> None:
        with contextlib.suppress(grpc.RpcError):  # cancelled at the end
            for answer in call:
                now = time.perf_counter()
                acks.extend((now - sent_at.pop(index)) * 1000 for index in in_message.pop(answer.correlation_id))

    reader = threading.Thread(target=read)
    reader.start()

    def send(index: int) -> None:
        started = time.perf_counter()
        builder = RecordBatchBuilder()
        builder.append(VALUE)
        sent_at[index], in_message[index] = started, [index]
        queued.put(pb.ProduceStreamRequest(correlation_id=index, produce=pb.ProduceRequest(
            topic=topic, partition=0, records=builder.build(), acks=pb.ACKS_WRITTEN)))

    _paced(count, send)
    deadline = time.monotonic() + 60
    while len(acks) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    queued.put(None)
    call.cancel()
    reader.join()
    channel.close()
    return acks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    root = pathlib.Path(tempfile.mkdtemp(prefix="sync-produce-"))
    ready = root / "ready"
    service = subprocess.Popen(
        [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
         "--data-dir", str(root / "data"), "--topic-default", "flush.ms=1000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if service.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the service did not start")
            time.sleep(0.05)
        address = ready.read_text().strip()
        with Admin(address) as admin:
            for run in range(args.runs):
                for name, way in (("Producer", with_producer), ("sync stream", with_sync_stream)):
                    topic = f"acks-{run}-{name.replace(' ', '-')}"
                    admin.create_topic(topic, 1)
                    load = os.getloadavg()[0]
                    acks = way(address, topic, args.records)[WARM_UP:]
                    print(f"run {run + 1} {name:11s} load {load:5.1f}: acknowledgement p50 "
                          f"{statistics.median(acks):.2f} ms, p99 {_percentile(acks, 0.99):.2f} ms "
                          f"({len(acks)} records)", flush=True)
    finally:
        service.terminate()
        service.wait(60)


if __name__ == "__main__":
    main()
