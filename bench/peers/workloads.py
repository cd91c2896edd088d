"""The workloads, run in turn against one freshly started system: one sample of every figure."""

from __future__ import annotations

import os
import pathlib
import random
import sys
import time
from typing import Any

from bench.peers import proc
from bench.peers.common import disk_bytes_by_kind, percentile, quantiles

# The count of single lookups (p50/p99) and of lookups in the batched-rate workload.
LOOKUPS = 1000
SMALL_BATCH_SETTLE_S = 3.0
# Lookups asked, untimed, before each batched-rate figure's clock starts: one call of a hundred
# for seglog and Redis (their batch), a hundred single ones for NATS. The figure is ten calls, and
# seglog's first call of a hundred on the small-batch log's fresh service took 2-4 ms against
# 0.5-0.9 for each later one (bench/bench_batched_lookup.py prints a run's first call and the
# rest): that one cold call was about a quarter of the small-batch figure, while the bulk log's
# calls came right after its single lookups. Both logs and every system now start alike; the
# warm-up's own wall time is kept in the sample (a stall there shows).
WARM_LOOKUPS = 100
# Lookups in each batched-rate figure: a hundred calls of a hundred for seglog and Redis, so the
# figure is a steady rate. With the single lookups' thousand it was ten calls, and the second and
# third call after any idle pause still cost 0.2-0.4 ms more than later ones on both sides of
# grpc (bench/bench_batched_lookup.py --pauses): between quiet runs of the same code the
# small-batch figure moved by about that much. The first thousand are the single lookups' times.
# A system whose batched figure is its single lookups asks only those (``batched_lookups_max``:
# NATS, at about 200 a second).
BATCHED_LOOKUPS = 10_000


def _phase(name: str, text: str) -> None:
    print(f"  {name}: {text}", file=sys.stderr, flush=True)


def run_system(factory: Any, root: pathlib.Path, keys: list[bytes], values: list[bytes],
               latency_records: int, lookups: int = LOOKUPS) -> tuple[dict[str, float], dict[str, int]]:
    """One sample of every figure, and the bytes per file kind the produced records took.

    The produce, read and lookups run against one fresh server, stopped afterwards so that what
    is on disk is exactly those records as the server keeps them; the latency workload gets a
    second fresh server, so its records stay out of the disk figures."""
    sample: dict[str, float] = {"load_1min_start": os.getloadavg()[0]}
    (root / "bulk").mkdir()
    (root / "latency").mkdir()
    system = factory(root / "bulk")
    server_cpu_at_start = proc.server_cpu_s(system.pid)
    try:
        sample["server_rss_idle_mb"] = proc.rss_mb(system.pid)
        _produce_and_read(system, keys, values, sample)
        _lookups(system, lookups, sample)
        sample["server_rss_mb"] = proc.rss_mb(system.pid)
        sample["server_peak_rss_mb"] = proc.peak_rss_mb(system.pid)
        sample["server_cpu_s"] = proc.server_cpu_s(system.pid) - server_cpu_at_start
    finally:
        system.stop()  # servers close their files cleanly: what is left is what they keep
    if hasattr(system, "on_disk"):
        sample.update(system.on_disk())
    disk = disk_bytes_by_kind(system.data)
    sample["disk_bytes"] = sum(disk.values())
    sample["disk_bytes_per_record"] = sample["disk_bytes"] / len(values)
    system = factory(root / "latency")
    try:
        if hasattr(system, "produce_small_batches"):  # here: its records stay out of the disk figures
            _small_batch_lookups(system, keys, values, lookups, sample)
        if hasattr(system, "produce_defaults"):
            _defaults(system, keys, values, sample)
        _latency(system, latency_records, sample)
    finally:
        system.stop()
    sample["load_1min_end"] = os.getloadavg()[0]
    return sample, disk


def run_latency(factory: Any, root: pathlib.Path, latency_records: int) -> dict[str, float]:
    """Only the produce -> consume latency, on a fresh server (``--workloads latency``): the
    figure to iterate on without the bulk produce, the reads and the lookups around it."""
    sample: dict[str, float] = {"load_1min_start": os.getloadavg()[0]}
    (root / "latency").mkdir()
    system = factory(root / "latency")
    try:
        _latency(system, latency_records, sample)
    finally:
        system.stop()
    sample["load_1min_end"] = os.getloadavg()[0]
    return sample


def run_batched(factory: Any, root: pathlib.Path, keys: list[bytes], values: list[bytes],
                lookups: int = LOOKUPS) -> dict[str, float]:
    """Only goal 1's batched-lookup figures (``--workloads batched``): the bulk produce on a fresh
    server, then the batched lookups on its log as ``run_system`` asks them (the same warm-up and
    times; there they follow the catch-up read and the single lookups), and the small-batch log's
    on a second fresh server (seglog only) as there: no read, single lookups, defaults, latency
    or disk figures."""
    sample: dict[str, float] = {"load_1min_start": os.getloadavg()[0]}
    (root / "bulk").mkdir()
    (root / "small").mkdir()
    system = factory(root / "bulk")
    try:
        _phase(system.name, f"produce {len(values):,}")
        system.produce(keys, values)
        first, last = system.time_range()
        rng = random.Random(11)
        _batched_lookups(system, first, last, [rng.randint(first, last) for _ in range(lookups)], sample)
    finally:
        system.stop()
    if hasattr(system, "produce_small_batches"):  # (the stopped bulk server's class says)
        system = factory(root / "small")
        try:
            _small_batch_lookups(system, keys, values, lookups, sample)
        finally:
            system.stop()
    sample["load_1min_end"] = os.getloadavg()[0]
    return sample


def _produce_and_read(system: Any, keys: list[bytes], values: list[bytes], sample: dict[str, float]) -> None:
    _phase(system.name, f"produce {len(values):,}")
    with proc.Measured(system.pid) as produced:
        system.produce(keys, values)
    _phase(system.name, "catch-up read")
    with proc.Measured(system.pid) as read:
        count = system.read_all(len(values))
    if count < len(values):
        raise RuntimeError(f"{system.name} read back {count:,} of {len(values):,} records")
    for name, measured in (("produce", produced), ("read", read)):
        sample[f"{name}_records_per_s"] = len(values) / measured.wall_s
        sample[f"{name}_wall_s"] = measured.wall_s
        sample[f"{name}_server_cpu_s"] = measured.server_cpu_s
        sample[f"{name}_client_cpu_s"] = measured.client_cpu_s


def _lookups(system: Any, count: int, sample: dict[str, float]) -> None:
    _phase(system.name, f"{count:,} time lookups")
    first, last = system.time_range()
    rng = random.Random(11)
    times_ms = [rng.randint(first, last) for _ in range(count)]
    with proc.Measured(system.pid) as single:
        latencies = system.lookups(times_ms)
    sample["distribution_lookup_ms"] = quantiles(latencies)
    sample["lookup_p50_ms"] = percentile(latencies, 50)
    sample["lookup_p99_ms"] = percentile(latencies, 99)
    sample["lookups_wall_s"] = single.wall_s
    sample["lookups_server_cpu_s"] = single.server_cpu_s
    sample["lookups_client_cpu_s"] = single.client_cpu_s
    _batched_lookups(system, first, last, times_ms, sample)


def _batched_times(system: Any, first: int, last: int, times_ms: list[int]) -> list[int]:
    """``times_ms`` and more random times in [first, last], BATCHED_LOOKUPS in all (at most the
    system's ``batched_lookups_max``, never fewer than ``times_ms``)."""
    count = max(len(times_ms), min(BATCHED_LOOKUPS, getattr(system, "batched_lookups_max", BATCHED_LOOKUPS)))
    rng = random.Random(12)
    return times_ms + [rng.randint(first, last) for _ in range(count - len(times_ms))]


def _batched_lookups(system: Any, first: int, last: int, times_ms: list[int], sample: dict[str, float]) -> None:
    """The batched-rate figure on the bulk log: the warm-up, then ``times_ms`` and more timed
    (``_batched_times``)."""
    times_ms = _batched_times(system, first, last, times_ms)
    count = len(times_ms)
    _phase(system.name, "batched time lookups")
    sample["batched_lookups_warm_up_ms"] = _warm_up(system.batched_lookups, first, last)
    with proc.Measured(system.pid) as batched:
        system.batched_lookups(times_ms)
    sample["batched_lookups_per_s"] = count / batched.wall_s
    sample["batched_lookups_count"] = count
    sample["batched_lookups_server_cpu_s"] = batched.server_cpu_s
    sample["batched_lookups_client_cpu_s"] = batched.client_cpu_s


def _warm_up(batched_lookups: Any, first: int, last: int) -> float:
    """``WARM_LOOKUPS`` batched lookups of other times than the measured ones (untimed by the
    figure); their wall time, ms."""
    rng = random.Random(13)
    started = time.perf_counter()
    batched_lookups([rng.randint(first, last) for _ in range(WARM_LOOKUPS)])
    return (time.perf_counter() - started) * 1000


def _small_batch_lookups(system: Any, keys: list[bytes], values: list[bytes], count: int,
                         sample: dict[str, float]) -> None:
    """The batched lookups again, on the same records in about 100-record batches (seglog only:
    the peers keep no batches)."""
    _phase(system.name, f"produce {len(values):,} in small batches, batched time lookups")
    first, last = system.produce_small_batches(keys, values)
    # The bulk log's lookups run seconds after its produce (the read comes between): these wait as
    # long, so the topic's flush (flush.ms=1000: an fdatasync of the ~130 MB just written, on the
    # storage pool the lookups run on, the disk busy) is over before the clock starts, as it is
    # there. Measured during it, one repeat saw 529 lookups/s where the others saw 6,000-18,500.
    time.sleep(SMALL_BATCH_SETTLE_S)
    rng = random.Random(11)
    times_ms = _batched_times(system, first, last, [rng.randint(first, last) for _ in range(count)])
    count = len(times_ms)
    sample["batched_lookups_small_batches_warm_up_ms"] = _warm_up(system.batched_lookups_small_batches, first, last)
    with proc.Measured(system.pid) as batched:
        system.batched_lookups_small_batches(times_ms)
    sample["batched_lookups_small_batches_per_s"] = count / batched.wall_s
    sample["batched_lookups_small_batches_count"] = count
    sample["batched_lookups_small_batches_server_cpu_s"] = batched.server_cpu_s


def _defaults(system: Any, keys: list[bytes], values: list[bytes], sample: dict[str, float]) -> None:
    """Produce and catch-up read again with the client's defaults (seglog only: the peers' drivers
    are their defaults already, but seglog's bulk figures use a tuned batch size)."""
    _phase(system.name, f"produce {len(values):,} and read back with the client's defaults")
    with proc.Measured(system.pid) as produced:
        system.produce_defaults(keys, values)
    with proc.Measured(system.pid) as read:
        count = system.read_defaults(len(values))
    if count < len(values):
        raise RuntimeError(f"{system.name} read back {count:,} of {len(values):,} records with its defaults")
    sample["produce_defaults_records_per_s"] = len(values) / produced.wall_s
    sample["produce_defaults_client_cpu_s"] = produced.client_cpu_s
    sample["produce_defaults_server_cpu_s"] = produced.server_cpu_s
    sample["read_defaults_records_per_s"] = len(values) / read.wall_s
    sample["read_defaults_client_cpu_s"] = read.client_cpu_s
    sample["read_defaults_server_cpu_s"] = read.server_cpu_s


def _latency(system: Any, count: int, sample: dict[str, float]) -> None:
    _phase(system.name, f"produce -> consume latency, {count:,} records at 2,000/s")
    started = time.monotonic()
    latencies, acks, rate = system.latency(count)
    if len(latencies) < count:
        raise RuntimeError(f"{system.name} delivered {len(latencies):,} of {count:,} latency records "
                           f"in {time.monotonic() - started:.0f} s")
    sample["distribution_latency_ms"] = quantiles(latencies)
    sample["latency_p50_ms"] = percentile(latencies, 50)
    sample["latency_p99_ms"] = percentile(latencies, 99)
    sample["latency_max_ms"] = max(latencies)
    sample["latency_ack_p50_ms"] = percentile(acks, 50)
    sample["latency_send_rate_per_s"] = rate
    sample["latency_received"] = len(latencies)
