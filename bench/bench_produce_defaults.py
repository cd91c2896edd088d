"""Client produce with every client default (16 KiB batches, linger 5 ms) beside Redis Streams'
pipelined XADD, interleaved repeat by repeat: goal 4's 'every client default' row of
``bench/peers`` alone, without the rest of its workloads.

    .venv/bin/python bench/bench_produce_defaults.py [--records 300000] [--repeats 3] [--read]
        [--batch-sizes default,16384,65536] [--latency 200] [--topic-config max.message.bytes=65536]

Each repeat produces the benchmark's records (``bench.peers.common.workload``) into a fresh
topic through ``Producer(address)`` with ``send_many`` in 10,000-record slices and a flush (as
``bench/peers``' seglog system does), then into Redis; ``--read`` also reads the topic back with
a default ``Consumer.poll_batches`` and Redis with XRANGE pages. Prints each repeat, then the
medians: records/s, the ratio to Redis in the same repeat, client and service CPU per record,
and the 1-minute load average sampled during the run. For an A/B of two checkouts, run it with
``PYTHONPATH=<other>/client:<other>/server`` (the service is started from the same paths).
``--batch-sizes`` A/Bs the producer's ``batch_size`` in the same run: each repeat produces once
per size (``default`` configures nothing), in an order rotated by one each repeat, beside one Redis run, and each size's figures
are printed with its name as a prefix. ``--latency N`` also times N single sends a size, each
``send(...).result()`` before the next (a low rate: every batch leaves at linger_ms), and prints
each size's median and 99th percentile in ms. ``--topic-config KEY=VALUE`` (repeatable) creates
the topics with that setting: a max.message.bytes below a batch_size measures the producer's
split of the batches the service refuses as too large (each produce must deliver every record).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from bench import bench_service  # noqa: E402
from bench.peers.common import workload  # noqa: E402
from bench.peers.proc import LoadSampler, Measured  # noqa: E402
from bench.peers.redis_system import RedisSystem  # noqa: E402
from seglog import Admin, Consumer, Producer  # noqa: E402

SEND_SLICE = 10_000
POLL_TIMEOUT_MS = 2000


def _seglog_produce(address: str, topic: str, keys: list[bytes], values: list[bytes],
                    batch_size: int | None = None) -> None:
    options = {} if batch_size is None else {"batch_size": batch_size}
    with Producer(address, **options) as producer:
        for start in range(0, len(values), SEND_SLICE):
            end = start + SEND_SLICE
            producer.send_many(topic, values[start:end], keys[start:end], partition=0)
        producer.flush()
        failed = producer.statistics().records_failed
    assert failed == 0, f"{failed} records failed (batch_size {batch_size})"


def _single_send_ms(address: str, topic: str, count: int, batch_size: int | None) -> list[float]:
    options = {} if batch_size is None else {"batch_size": batch_size}
    spent: list[float] = []
    with Producer(address, **options) as producer:
        producer.send(topic, b"warm-up", partition=0).result()
        for _ in range(count):
            started = time.perf_counter()
            producer.send(topic, b"x" * 100, b"key", partition=0).result()
            spent.append((time.perf_counter() - started) * 1000)
    return spent


def _seglog_read(address: str, topic: str, count: int) -> int:
    read = 0
    with Consumer(address, topic, partition=0, start="earliest") as consumer:
        while read < count:
            views = consumer.poll_batches(timeout_ms=POLL_TIMEOUT_MS)
            if not views:
                break
            read += sum(len(view) for view in views)
    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--read", action="store_true", help="read each topic back too")
    parser.add_argument("--latency", type=int, default=0, help="time this many single sends a size")
    parser.add_argument("--batch-sizes", default="default",
                        help="comma-separated batch_size values to A/B ('default': configure nothing)")
    parser.add_argument("--topic-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a config of every topic produced to (repeatable)")
    args = parser.parse_args()
    topic_configs = dict(item.split("=", 1) for item in args.topic_config)
    sizes = [None if size == "default" else int(size) for size in args.batch_sizes.split(",")]
    keys, values = workload(args.records)
    rows: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-produce-defaults-") as tmp, LoadSampler() as load:
        root = pathlib.Path(tmp)
        service = bench_service.Service(root, "seglog", ["--topic-default", "flush.ms=1000"])
        redis = RedisSystem(root)
        admin = Admin(service.address)
        try:
            for repeat in range(args.repeats):
                row: dict[str, float] = {}
                # Each repeat starts one size later, so no size always runs first (or after the same one).
                for size in sizes[repeat % len(sizes):] + sizes[:repeat % len(sizes)]:
                    name = "" if size is None else f"{size // 1024}k_"
                    topic = f"defaults-{repeat}-{size or 0}"
                    admin.create_topic(topic, 1, topic_configs)
                    with Measured(service.process.pid) as seglog_run:
                        _seglog_produce(service.address, topic, keys, values, size)
                    row[f"{name}seglog_per_s"] = args.records / seglog_run.wall_s
                    row[f"{name}client_us"] = seglog_run.client_cpu_s / args.records * 1e6
                    row[f"{name}service_us"] = seglog_run.server_cpu_s / args.records * 1e6
                redis.client.delete("peers")
                with Measured(redis.pid) as redis_run:
                    redis.produce(keys, values)
                row["redis_per_s"] = args.records / redis_run.wall_s
                for size in sizes:
                    name = "" if size is None else f"{size // 1024}k_"
                    row[f"{name}ratio"] = row[f"{name}seglog_per_s"] / row["redis_per_s"]
                if args.read:
                    with Measured(redis.pid) as redis_read:
                        assert redis.read_all(args.records) == args.records
                    row["redis_read_per_s"] = args.records / redis_read.wall_s
                    for size in sizes:
                        name = "" if size is None else f"{size // 1024}k_"
                        with Measured(service.process.pid) as read_run:
                            assert _seglog_read(service.address, f"defaults-{repeat}-{size or 0}",
                                                args.records) == args.records
                        row[f"{name}read_per_s"] = args.records / read_run.wall_s
                        row[f"{name}read_client_us"] = read_run.client_cpu_s / args.records * 1e6
                        row[f"{name}read_ratio"] = row[f"{name}read_per_s"] / row["redis_read_per_s"]
                if args.latency:
                    for size in sizes:
                        name = "" if size is None else f"{size // 1024}k_"
                        spent = sorted(_single_send_ms(service.address, f"defaults-{repeat}-{size or 0}",
                                                       args.latency, size))
                        row[f"{name}send_p50_ms"] = statistics.median(spent)
                        row[f"{name}send_p99_ms"] = spent[min(len(spent) - 1, len(spent) * 99 // 100)]
                rows.append(row)
                print(f"repeat {repeat + 1}: " + ", ".join(f"{name} {value:,.2f}" for name, value in row.items()),
                      flush=True)
        finally:
            admin.close()
            redis.stop()
            service.stop()
    print("medians: " + ", ".join(
        f"{name} {statistics.median(row[name] for row in rows):,.2f}" for name in rows[0]
    ))
    print(f"load (1-minute average) during the run: {load.summary()}")


if __name__ == "__main__":
    main()
