"""The client library against the service: records/s and the client's own CPU per record.

    .venv/bin/python bench/bench_client.py [--runs 3] [--records 500000]

Starts its own service (``bench_service.Service``, loopback, temporary data dir) and produces
100-byte values with 16-byte keys to one partition, in this order, each ``--runs`` times:

- bare stubs: batches built with seglog.records and sent with the generated stub, several
  requests in flight (``bench_service.produce_throughput``): the service's own pace, the baseline
  every other row is divided by;
- ``Producer.send`` per record (the synchronous client, linger 5 ms, 512 KiB batches);
- ``Producer.send_many`` in slices of 10,000 records (the bulk path);
- ``AsyncProducer.send`` per record (``await producer.send(...)``);
- ``Consumer.poll`` reading everything back decoded (fetch mode, 2 MiB fetches).

Reported: medians of records/s, the ratio to the bare-stub baseline of the same run, and the
client process's CPU seconds per million records (user + system, from getrusage: the figure that
tells client cost apart from the service's, since both share this machine's two cores). Rows whose
API the imported client lacks are skipped (run it with PYTHONPATH pointing at an older tree to
compare before and after).
"""

from __future__ import annotations

import argparse
import asyncio
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

SLICE = 10_000


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measure(run: Callable[[], int]) -> tuple[float, float]:
    """(records/s, client CPU us per record) of one run."""
    cpu, wall = _cpu_s(), time.perf_counter()
    count = run()
    wall, cpu = time.perf_counter() - wall, _cpu_s() - cpu
    return count / wall, cpu / count * 1e6


def _workload(count: int) -> tuple[list[bytes], list[bytes]]:
    keys, values = bench_service._keys_and_values()
    return [keys[i % len(keys)] for i in range(count)], [values[i % len(values)] for i in range(count)]


def producer_send(address: str, topic: str, keys: list[bytes], values: list[bytes]) -> int:
    with Producer(address, linger_ms=5, batch_size=512 * 1024) as producer:
        send = producer.send
        for key, value in zip(keys, values):
            send(topic, value, key, 0)
        producer.flush()
    return len(values)


def producer_send_many(address: str, topic: str, keys: list[bytes], values: list[bytes]) -> int:
    with Producer(address, linger_ms=5, batch_size=512 * 1024) as producer:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=500_000)
    args = parser.parse_args()
    keys, values = _workload(args.records)
    rows: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="seglog-bench-client-") as root:
        service = bench_service.Service(pathlib.Path(root), "service", [])
        try:
            with Admin(service.address) as admin:
                for run in range(args.runs):
                    for name in ("stubs", "send", "send_many", "async_send"):
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
                    for name, measure in measures.items():
                        rows.setdefault(name, []).append(_measure(measure))
                    rows.setdefault("Consumer.poll (decoded)", []).append(
                        _measure(lambda: consumer_poll(service.address, f"send-{run}", args.records))
                    )
        finally:
            service.stop()
    baseline = statistics.median(rate for rate, _ in rows["bare stubs (baseline)"])
    print(f"{args.records:,} records of 100-byte values and 16-byte keys, medians of {args.runs} runs")
    print(f"{'path':<28} {'records/s':>12} {'x baseline':>11} {'client CPU s per M records':>28}")
    for name, samples in rows.items():
        rate = statistics.median(r for r, _ in samples)
        cpu = statistics.median(c for _, c in samples)
        print(f"{name:<28} {rate:>12,.0f} {rate / baseline:>11.2f} {cpu:>28.2f}")


if __name__ == "__main__":
    main()
