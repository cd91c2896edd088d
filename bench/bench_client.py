"""The client library against the service: records/s and the client's own CPU per record.

    .venv/bin/python bench/bench_client.py [--runs 3] [--records 500000] [--sections produce,consume,client-only]

Starts its own service (``bench_service.Service``, loopback, temporary data dir); 100-byte values
with 16-byte keys, one partition. Every section runs its rows interleaved (A, B, C, A, B, C, ...)
``--runs`` times and reports medians.

produce (end to end), divided by the first row:

- bare stubs: batches built with seglog.records and sent with the generated stub, several
  requests in flight (``bench_service.produce_throughput``): the service's own pace;
- ``Producer.send`` per record (the synchronous client, linger 5 ms, 512 KiB batches);
- ``Producer.send_many`` in slices of 10,000 records (the bulk path);
- ``AsyncProducer.send`` per record (``await producer.send(...)``);
- ``Producer.send`` and ``send_many`` again with ``max_in_flight_per_partition=4`` (the bare
  stubs' four requests in flight; the default 1 waits for each acknowledgement).

consume (end to end, reading a partition the produce section wrote), divided by the first row:

- bare stubs: sequential Fetch requests (2 MiB) with the generated stub, every record decoded
  with ``RecordBatch.records()``;
- ``Consumer.poll`` (ConsumerRecord objects), ``Consumer.poll_batches`` (one RecordBatchView of
  columns per batch, every value touched), ``Consumer.poll_raw`` (whole batches as bytes).

client-only (no network, no service: the client's own cost, the figure the speed goals are about,
since the in-process service shares the machine's two cores):

- ``send`` path: ``AsyncProducer._append_nowait`` per record (what ``Producer.send`` runs, minus
  one call) into an unstarted producer, then every batch drained and built;
- ``send_many`` path: the same with ``send_many``'s planning and appends, slices of 10,000;
- both again with the client's default 16 KiB batches (about 120 of these records a batch: the
  per-batch costs, a batch's build and its delivery, weigh more);
- consumer decode: fetched bytes (whole batches, CRC checked) taken as ConsumerRecords, as
  RecordBatchViews (every value touched), and as raw batches, in polls of 500 records.

Reported: records/s and the client process's CPU seconds per million records (user + system,
from getrusage: it tells the client's cost apart from the service's). Client-only rows are CPU
bound: their records/s is 1 / CPU per record. Rows whose API the imported client lacks are
skipped (run it with PYTHONPATH pointing at an older tree to compare before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import bench_service  # noqa: E402  (the service runner and the baseline live there)

from seglog import Admin, AsyncProducer, Consumer, Producer  # noqa: E402
from seglog.records import RecordBatch, iter_batches  # noqa: E402

try:  # absent from older trees
    from seglog._fetch_state import RecordBuffer, fetched_batches
except ImportError:
    RecordBuffer = fetched_batches = None  # type: ignore[assignment,misc]

SLICE = 10_000
POLL_RECORDS = 500


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measure(run: Callable[[], int], cpu_bound: bool = False) -> tuple[float, float]:
    """(records/s, client CPU us per record) of one run; records/s per CPU second when
    ``cpu_bound`` (a shared machine stretches the wall time of CPU-bound work, not its CPU time)."""
    cpu, wall = _cpu_s(), time.perf_counter()
    count = run()
    wall, cpu = time.perf_counter() - wall, _cpu_s() - cpu
    return count / (cpu if cpu_bound else wall), cpu / count * 1e6


def _workload(count: int) -> tuple[list[bytes], list[bytes]]:
    keys, values = bench_service._keys_and_values()
    return [keys[i % len(keys)] for i in range(count)], [values[i % len(values)] for i in range(count)]


def producer_send(address: str, topic: str, keys: list[bytes], values: list[bytes], in_flight: int = 1) -> int:
    with Producer(address, linger_ms=5, batch_size=512 * 1024, max_in_flight_per_partition=in_flight) as producer:
        send = producer.send
        for key, value in zip(keys, values):
            send(topic, value, key, 0)
        producer.flush()
    return len(values)


def producer_send_many(address: str, topic: str, keys: list[bytes], values: list[bytes], in_flight: int = 1) -> int:
    with Producer(address, linger_ms=5, batch_size=512 * 1024, max_in_flight_per_partition=in_flight) as producer:
        for start in range(0, len(values), SLICE):
            producer.send_many(topic, values[start : start + SLICE], keys[start : start + SLICE], partition=0)
        producer.flush()
    return len(values)


def async_producer_send(address: str, topic: str, keys: list[bytes], values: list[bytes]) -> int:
    async def run() -> int:
        async with AsyncProducer(address, linger_ms=5, batch_size=512 * 1024) as producer:
            send = producer.send
            for key, value in zip(keys, values):
                await send(topic, value, key, 0)
            await producer.flush()
        return len(values)

    return asyncio.run(run())


def consumer_poll(address: str, topic: str, end_offset: int) -> int:
    count = 0
    with Consumer(address, topic, partition=0, start="earliest", fetch_max_bytes=2 * 1024 * 1024,
                  max_poll_records=100_000) as consumer:
        while count < end_offset:
            count += len(consumer.poll(timeout_ms=1000))
    return count


def consumer_poll_batches(address: str, topic: str, end_offset: int) -> int:
    count = 0
    with Consumer(address, topic, partition=0, start="earliest", fetch_max_bytes=2 * 1024 * 1024,
                  max_poll_records=100_000) as consumer:
        while count < end_offset:
            for view in consumer.poll_batches(timeout_ms=1000):
                for _ in view.values:
                    count += 1
    return count


def consumer_poll_raw(address: str, topic: str, end_offset: int) -> int:
    count = 0
    with Consumer(address, topic, partition=0, start="earliest", fetch_max_bytes=2 * 1024 * 1024,
                  max_poll_records=100_000) as consumer:
        while count < end_offset:
            for batch in consumer.poll_raw(timeout_ms=1000):
                count += batch.last_offset + 1 - batch.position
    return count


def stubs_fetch_decoded(stub, topic: str, end_offset: int) -> int:
    count = 0
    offset = 0
    while offset < end_offset:
        response = stub.Fetch(bench_service.pb.FetchRequest(topic=topic, offset=offset, max_bytes=2 * 1024 * 1024))
        for batch in iter_batches(response.records):
            batch.ensure_valid()
            count += len(batch.records())
        offset = response.next_offset
    return count


# -- client-only: no network ---------------------------------------------------------------------


def _unstarted_producer(batch_size: int = 512 * 1024) -> AsyncProducer:
    # Never started: appends and builds run, nothing connects (linger 5 ms, 512 KiB batches as
    # above, or the client's default 16 KiB).
    return AsyncProducer("127.0.0.1:9", linger_ms=5, batch_size=batch_size, buffer_bytes=1 << 31,
                         max_request_bytes=1 << 30)


DEFAULT_BATCH = 16 * 1024


def _drain_and_build(producer: AsyncProducer) -> list[bytes]:
    accumulator = producer._accumulator
    accumulator.begin_flush()
    built = []
    while True:
        batches, _ = accumulator.drain(float("inf"), lambda _: True, 1 << 20)
        if not batches:
            return built
        for batch in batches:
            built.append(batch.build())
            batch.succeed(0, -1)
            accumulator.complete(batch)


def client_only_send(keys: list[bytes], values: list[bytes], batch_size: int = 512 * 1024) -> int:
    producer = _unstarted_producer(batch_size)
    append = producer._append_nowait
    for key, value in zip(keys, values):
        append("t", value, key, 0, None, None)
    _drain_and_build(producer)
    return len(values)


def client_only_send_many(keys: list[bytes], values: list[bytes], batch_size: int = 512 * 1024) -> int:
    producer = _unstarted_producer(batch_size)
    for start in range(0, len(values), SLICE):
        plan = producer._plan_many("t", values[start : start + SLICE], keys[start : start + SLICE], 0)
        spans: list = []
        for topic_partition, part_keys, part_values, _ in plan.groups:
            totals = producer._accumulator.record_totals(topic_partition, part_keys, part_values)
            producer._append_many_step(topic_partition, part_keys, part_values, 0, None, spans, totals)
    _drain_and_build(producer)
    return len(values)


def _fetched_bytes(keys: list[bytes], values: list[bytes]) -> bytes:
    producer = _unstarted_producer()
    for key, value in zip(keys, values):
        producer._append_nowait("t", value, key, 0, None, None)
    built = _drain_and_build(producer)
    # Offsets as the service assigns them, so that the bytes read like a Fetch response.
    fetched, offset = [], 0
    for batch in built:
        data = bytearray(batch)
        data[0:8] = offset.to_bytes(8, "big")
        fetched.append(bytes(data))
        offset += RecordBatch(batch).records_count
    return b"".join(fetched)


def client_only_consume(fetched: bytes, take: str) -> int:
    buffer = RecordBuffer("t", 0)
    batches, _, _ = fetched_batches(fetched, 0, check_crcs=True)
    for batch in batches:
        buffer.add(batch, 0)
    # Polls of Kafka's default max.poll.records (500), each dropped before the next, as an
    # application loop does: how many records stay alive changes the garbage collector's share.
    taken = 0
    while buffer:
        if take == "records":
            taken += len(buffer.take(POLL_RECORDS))
        elif take == "views":
            for view in buffer.take_views(POLL_RECORDS):
                for _ in view.values:
                    taken += 1
        else:
            taken += sum(batch.last_offset + 1 - batch.position for batch in buffer.take_raw(POLL_RECORDS))
    return taken


def _report(title: str, rows: dict[str, list[tuple[float, float]]], records: int, runs: int, ratio: bool) -> None:
    print(f"\n{title}: {records:,} records of 100-byte values and 16-byte keys, medians of {runs} interleaved runs")
    baseline = statistics.median(rate for rate, _ in next(iter(rows.values())))
    header = f"{'path':<40} {'records/s':>12}"
    if ratio:
        header += f" {'x first row':>12}"
    print(header + f" {'client CPU s per M records':>28}")
    for name, samples in rows.items():
        rate = statistics.median(r for r, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        line = f"{name:<40} {rate:>12,.0f}"
        if ratio:
            line += f" {rate / baseline:>12.2f}"
        print(line + f" {cpu:>28.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--sections", default="produce,consume,client-only")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    keys, values = _workload(args.records)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if "client-only" in sections:
        fetched = _fetched_bytes(keys, values)
        rows: dict[str, list[tuple[float, float]]] = {}
        for _ in range(args.runs):
            measures = {
                "send path (append + build)": lambda: client_only_send(keys, values),
                "send_many path (append + build)": lambda: client_only_send_many(keys, values),
                "send path, 16 KiB batches (the default)": lambda: client_only_send(keys, values, DEFAULT_BATCH),
                "send_many path, 16 KiB batches (the default)": lambda: client_only_send_many(
                    keys, values, DEFAULT_BATCH),
            }
            if RecordBuffer is not None:
                measures.update({
                    "consume: ConsumerRecords": lambda: client_only_consume(fetched, "records"),
                    "consume: RecordBatchViews": lambda: client_only_consume(fetched, "views"),
                    "consume: raw batches": lambda: client_only_consume(fetched, "raw"),
                })
            for name, measure in measures.items():
                rows.setdefault(name, []).append(_measure(measure, cpu_bound=True))
        _report("client-only (no network; records per CPU second)", rows, args.records, args.runs, ratio=False)
    if not sections & {"produce", "consume"}:
        return
    produce_rows: dict[str, list[tuple[float, float]]] = {}
    consume_rows: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="seglog-bench-client-") as root:
        service = bench_service.Service(pathlib.Path(root), "service", [])
        try:
            with Admin(service.address) as admin:
                for run in range(args.runs):
                    for name in ("stubs", "send", "send_many", "async_send", "send4", "send_many4"):
                        admin.create_topic(f"{name}-{run}", 1)
                    measures: dict[str, Callable[[], int]] = {
                        "bare stubs (baseline)": lambda: (
                            bench_service.produce_throughput(service.stub, f"stubs-{run}", args.records), args.records
                        )[1],
                        "Producer.send": lambda: producer_send(service.address, f"send-{run}", keys, values),
                        "AsyncProducer.send": lambda: async_producer_send(service.address, f"async_send-{run}", keys, values),
                    }
                    if hasattr(Producer, "send_many"):
                        measures["Producer.send_many"] = lambda: producer_send_many(
                            service.address, f"send_many-{run}", keys, values
                        )
                    # Four requests in flight per partition, as the bare stubs have: what the
                    # wait for each acknowledgement costs the rows above.
                    measures["Producer.send, 4 in flight"] = lambda: producer_send(
                        service.address, f"send4-{run}", keys, values, in_flight=4
                    )
                    if hasattr(Producer, "send_many"):
                        measures["Producer.send_many, 4 in flight"] = lambda: producer_send_many(
                            service.address, f"send_many4-{run}", keys, values, in_flight=4
                        )
                    for name, measure in measures.items():
                        produce_rows.setdefault(name, []).append(_measure(measure))
                    if "consume" not in sections:
                        continue
                    topic = f"send-{run}"
                    reads: dict[str, Callable[[], int]] = {
                        "bare stubs Fetch + records() (baseline)": lambda: stubs_fetch_decoded(service.stub, topic, args.records),
                        "Consumer.poll (ConsumerRecords)": lambda: consumer_poll(service.address, topic, args.records),
                    }
                    if hasattr(Consumer, "poll_batches"):
                        reads["Consumer.poll_batches (views)"] = lambda: consumer_poll_batches(service.address, topic, args.records)
                        reads["Consumer.poll_raw (bytes)"] = lambda: consumer_poll_raw(service.address, topic, args.records)
                    for name, read in reads.items():
                        consume_rows.setdefault(name, []).append(_measure(read))
        finally:
            service.stop()
    if "produce" in sections:
        _report("produce (end to end)", produce_rows, args.records, args.runs, ratio=True)
    if consume_rows:
        _report("consume (end to end)", consume_rows, args.records, args.runs, ratio=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
