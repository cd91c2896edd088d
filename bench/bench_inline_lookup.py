"""The inline attempt of a small lookup by time (``Log.lookup_timestamps_without_builds``, the
search bounded by the inline bound) on a log whose time-step tables the appends fed: 200,000
records in 100-record batches over about 20 segments, one target and 100 targets a call; prints
the wall time a call in us (the median of 5 rounds) for each.

    PYTHONPATH=. .venv/bin/python bench/bench_inline_lookup.py

For an A/B between checkouts run it in each tree (``PYTHONPATH=TREE/server:TREE/client:TREE``)
alternately, and compare each pair."""

from __future__ import annotations

import statistics
import tempfile
import time

from tests.support.log_test_support import NOW_MS, batch, config, open_log

from seglog_server.storage.base.clock import FakeClock

INLINE_IO_BYTES_MAX = 65536  # the service's default inline bound


def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        log = open_log(directory, FakeClock(NOW_MS), config(segment_bytes=1 << 20))
        try:
            for number in range(2000):
                log.append(batch(*[b"v" * 20] * 100, timestamps=[NOW_MS + number * 100 + i for i in range(100)]))
            one = [NOW_MS + 123_457]
            many = sorted(NOW_MS + (k * 1999) % 200_000 for k in range(100))
            figures = []
            for targets, calls in ((one, 20000), (many, 1000)):
                log.lookup_timestamps(targets)  # (the first lookup loads the segments' timestamps: pooled)
                assert log.lookup_timestamps_without_builds(targets, INLINE_IO_BYTES_MAX) is not None
                rounds = []
                for _ in range(5):
                    started = time.perf_counter()
                    for _ in range(calls):
                        log.lookup_timestamps_without_builds(targets, INLINE_IO_BYTES_MAX)
                    rounds.append((time.perf_counter() - started) / calls * 1e6)
                figures.append(statistics.median(rounds))
        finally:
            log.close()
    print(f"one target {figures[0]:.2f} us a call, 100 targets {figures[1]:.2f} us a call")


if __name__ == "__main__":
    main()
