"""The bounded walkers' hot paths, timed alone: produce validation, lookups, reads, next offset.

    PYTHONPATH=tests/unit/seglog_server/storage .venv/bin/python bench/bench_walkers.py

CPU time per call, median of 7 runs. To compare two commits, run this file against each (for
example with PYTHONPATH pointing at an exported tree of the other commit) in alternating
processes of one session: the shared machine moves single runs by 30-50 %.
"""
import os, statistics, sys, tempfile, time
from seglog.records import RecordBatchBuilder, Compression
from seglog_server.storage.log_validator import LogValidator
from seglog_server.storage.log_config import LogConfig
from seglog_server.storage.clock import FakeClock

from seglog_server.rpc import conversions

NOW = 1_700_000_000_000
def batch(n, size, comp=Compression.NONE):
    b = RecordBatchBuilder(compression=comp)
    for i in range(n):
        b.append(os.urandom(size), key=b"k%d" % i, timestamp_ms=NOW + i)
    return b.build()

def med(fn, loops):
    runs = []
    for _ in range(7):
        t = time.process_time()
        for _ in range(loops):
            fn()
        runs.append((time.process_time() - t) / loops * 1e6)
    return statistics.median(runs)

out = {}
v = LogValidator(LogConfig(), "t-0")
small = batch(10, 80)  # ~1 KiB
out["validate 1 KiB (10 records) us"] = med(lambda: v.validate(small, NOW), 3000)
big = batch(1000, 100)
out["validate 1000-record batch us"] = med(lambda: v.validate(big, NOW), 30)
d = tempfile.mkdtemp()
from log_test_support import open_log  # noqa
log = open_log(d, FakeClock(NOW), LogConfig().replace(segment_bytes=4 * 1024 * 1024))
for i in range(8000):
    log.append(batch(10, 80))
n = log.log_end_offset
import random
rng = random.Random(1)
targets = [rng.randrange(n) for _ in range(2000)]
it = iter(targets * 100)
out["position_of us"] = med(lambda: log.position_of(next(it)), 1000)
it2 = iter(targets * 100)
out["read 1 MiB us"] = med(lambda: log.read(next(it2), 1024 * 1024), 50)
data = log.read(0, 1024 * 1024).records
out["next_offset_after 1 MiB us"] = med(lambda: conversions.next_offset_after(data, 0), 50)
for k, val in out.items():
    print(f"{k}\t{val:.2f}")
