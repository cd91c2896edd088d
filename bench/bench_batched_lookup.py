"""Batched time lookups through the public client, on large and small batches, optionally profiled.

    .venv/bin/python bench/bench_batched_lookup.py [--records 200000] [--lookups 20000]
        [--per-request 1000] [--runs 3] [--profile lookups.txt]
    .venv/bin/python bench/bench_batched_lookup.py --storage

``--storage`` measures the storage alone, in this process (thread CPU per lookup, the least of
three runs, on a log of 50 batches of 4,000 records and one of 2,000 batches of 100): single
lookups and batched ones, each with the record-time tables, without them (one walk of a batch
for the targets landing in it), and with one walk per target (the walk before either).

Starts a service (``python -m seglog_server``, fresh data directory), produces ``--records``
records twice (100-byte values, 16-byte keys): once with ``Producer.send_many`` and a 512 KiB
batch size (about 4,000 records a batch, the issue's large batches) and once in 100-record
batches, then asks ``Admin.offsets_for_times_many`` for ``--lookups`` random times in requests of
``--per-request``, and prints lookups/s per log (the median of ``--runs``). With ``--profile``
py-spy samples the service (every thread, 1,000 Hz) while it answers the
lookups and writes the collapsed stacks to that file, suffixed by the log's name (sampling
slows the service a little: the rates printed then are not figures). cProfile would see only
the event loop's thread, not the storage pool's threads where the searches run.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from seglog import Admin, Producer, TopicPartition
from seglog_server.__main__ import MALLOC_TUNING

VALUE_BYTES = 100
KEY_BYTES = 16
LARGE_BATCH_BYTES = 512 * 1024
SMALL_BATCH_RECORDS = 100
SEND_SLICE = 10_000


def _start(workdir: pathlib.Path) -> tuple[subprocess.Popen, str]:
    ready = workdir / "ready"
    command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
               "--data-dir", str(workdir / "data")]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
    environ.update(MALLOC_TUNING)  # set already: the service does not re-exec (its pid stays the one sampled)
    log = open(workdir / "service.log", "wb")
    process = subprocess.Popen(command, stdout=log, stderr=log, env=environ)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"service failed to start: {(workdir / 'service.log').read_text()}")
        time.sleep(0.02)
    return process, ready.read_text().strip()


def _produce(address: str, topic: str, count: int, small: bool) -> tuple[int, int]:
    rng = random.Random(7)
    keys = [rng.randbytes(KEY_BYTES) for _ in range(1024)]
    values = [rng.randbytes(VALUE_BYTES) for _ in range(1024)]
    first_ms = int(time.time() * 1000)
    with Admin(address) as admin:
        admin.create_topic(topic, 1)
    with Producer(address, linger_ms=5, batch_size=LARGE_BATCH_BYTES) as producer:
        slice_records = SMALL_BATCH_RECORDS if small else SEND_SLICE
        for start in range(0, count, slice_records):
            chunk = range(start, min(count, start + slice_records))
            producer.send_many(topic, [values[i % 1024] for i in chunk], [keys[i % 1024] for i in chunk], partition=0)
            if small:
                producer.flush()  # one batch per slice
        producer.flush()
    with Admin(address) as admin:
        last_ms = admin.max_timestamp_offsets(topic)[0].timestamp_ms
    return first_ms, last_ms


def _lookups(address: str, topic: str, times: list[int], per_request: int) -> float:
    partition = TopicPartition(topic, 0)
    with Admin(address) as admin:
        admin.offsets_for_times_many([(partition, times[0])])  # connects
        started = time.perf_counter()
        for start in range(0, len(times), per_request):
            found = admin.offsets_for_times_many([(partition, t) for t in times[start : start + per_request]])
            assert all(f is not None for f in found)
        return len(times) / (time.perf_counter() - started)


def storage_costs() -> None:
    import tempfile

    from seglog.records import seek_record
    from seglog_server.storage.base.clock import FakeClock
    from seglog_server.storage.format import record_timestamps
    from seglog_server.storage.segment import log_segment
    from tests.support.log_test_support import NOW_MS, batch, config, open_log

    walk_all = record_timestamps.seek_records

    def walk_each(data, position, end, count, deltas, offset_min):
        return [seek_record(data, position, end, count, delta, offset_min) for delta in deltas]

    modes = {
        "tables": (record_timestamps.RecordTimesCache(), walk_all),
        "no tables, one walk a batch": (record_timestamps.RecordTimesCache(records_min=1 << 62), walk_all),
        "no tables, one walk a target": (record_timestamps.RecordTimesCache(records_min=1 << 62), walk_each),
    }
    rng = random.Random(7)
    values = [rng.randbytes(VALUE_BYTES) for _ in range(64)]
    keys = [rng.randbytes(KEY_BYTES) for _ in range(64)]
    for per_batch, batches in ((4000, 50), (100, 2000)):
        with tempfile.TemporaryDirectory() as directory:
            log = open_log(pathlib.Path(directory), FakeClock(NOW_MS), config(segment_bytes=1 << 30))
            span = 0
            for _ in range(batches):
                log.append(batch(*[values[i % 64] for i in range(per_batch)], keys=[keys[i % 64] for i in range(per_batch)],
                                 timestamps=[NOW_MS + span + i // 4 for i in range(per_batch)]))
                span += per_batch // 4
            targets = [NOW_MS + rng.randrange(span) for _ in range(20_000)]
            for mode, (cache, walk) in modes.items():
                log_segment.RECORD_TIMES, record_timestamps.seek_records = cache, walk
                costs = {}
                for shape, call in (("single", lambda: [log.offset_for_timestamp(t) for t in targets[:3000]]),
                                    ("batched, 1,000 a call", lambda: [log.offsets_for_timestamps(targets[s : s + 1000])
                                                                       for s in range(0, len(targets), 1000)])):
                    count = 3000 if shape == "single" else len(targets)
                    runs = []
                    for _ in range(3):
                        started = time.thread_time()
                        call()
                        runs.append((time.thread_time() - started) / count * 1e6)
                    costs[shape] = min(runs)
                print(f"{per_batch}-record batches, {mode}: " + ", ".join(f"{shape} {cost:.1f} us" for shape, cost in costs.items())
                      + " of CPU a lookup", flush=True)
            log.close()
    log_segment.RECORD_TIMES, record_timestamps.seek_records = record_timestamps.RECORD_TIMES, walk_all


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--lookups", type=int, default=20_000)
    parser.add_argument("--per-request", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", type=pathlib.Path, default=None)
    parser.add_argument("--only", choices=("large", "small"), default=None)
    parser.add_argument("--storage", action="store_true", help="the storage alone, in this process (see above)")
    arguments = parser.parse_args()
    if arguments.storage:
        storage_costs()
        return
    with tempfile.TemporaryDirectory(prefix="seglog-lookups-") as directory:
        process, address = _start(pathlib.Path(directory))
        try:
            for name in ("large", "small"):
                if arguments.only not in (None, name):
                    continue
                first, last = _produce(address, f"lookups-{name}", arguments.records, small=name == "small")
                rng = random.Random(11)
                times = [rng.randint(first, last) for _ in range(arguments.lookups)]
                sampler = None
                if arguments.profile is not None:
                    out = arguments.profile.with_name(f"{arguments.profile.stem}-{name}{arguments.profile.suffix}")
                    sampler = subprocess.Popen(
                        [str(pathlib.Path(sys.executable).with_name("py-spy")), "record", "--pid", str(process.pid),
                         "--rate", "1000", "--nonblocking", "--format", "raw", "--output", str(out)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.0)  # py-spy attaches
                rates = [_lookups(address, f"lookups-{name}", times, arguments.per_request)
                         for _ in range(arguments.runs)]
                if sampler is not None:
                    sampler.send_signal(signal.SIGINT)
                    sampler.wait(60)
                print(f"{name} batches: {statistics.median(rates):,.0f} lookups/s "
                      f"(runs {', '.join(f'{r:,.0f}' for r in rates)}; load {os.getloadavg()[0]:.2f})", flush=True)
        finally:
            process.terminate()
            process.wait(60)


if __name__ == "__main__":
    main()
