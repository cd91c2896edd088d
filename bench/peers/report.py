"""docs/performance.md, generated from the JSON of a run of ``python -m bench.peers``:

    .venv/bin/python -m bench.peers.report bench/results/peers.json > docs/performance.md

Everything on the page is read or computed from the JSON: the table, the ratios, the goals, the
machine, its load, its limits and what bounds each figure. Rerun the benchmark, rerun this."""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from bench.peers import bounds
from bench.peers.figures import BASELINE, FIGURES

FULL_RECORDS = 1_000_000
FULL_REPEATS = 3
FULL_COMMAND = (
    "scripts/peers-setup   # as root: Debian's redis-server and nats-server, then the venv\n"
    f".venv/bin/python -m bench.peers --records {FULL_RECORDS} --repeats {FULL_REPEATS} --out bench/results/peers.json\n"
    ".venv/bin/python -m bench.peers.report bench/results/peers.json > docs/performance.md"
)
# A run counts as preliminary below the issue's size, or when the 1-minute load average's median
# exceeded this share of the CPUs: other work then took CPU time from the servers and clients.
QUIET_LOAD_PER_CPU = 0.5
NAMES = {"seglog": "seglog", "redis": "Redis Streams", "nats": "NATS JetStream"}
LIMITS = (
    ("empty_grpc_call_p50_ms", "empty gRPC unary call (Health Check), p50", "ms", 3),
    ("empty_grpc_call_p99_ms", "empty gRPC unary call, p99", "ms", 3),
    ("disk_write_fsync_mb_s", "sequential write + fsync, 1 MiB writes, data dir's disk", "MB/s", 0),
    ("disk_read_mb_s", "sequential read, pages dropped from the cache first", "MB/s", 0),
    ("page_cache_read_mb_s", "sequential read from the page cache", "MB/s", 0),
    ("crc32c_mb_s", "crc32c (the `crc32c` package) over 64 MiB", "MB/s", 0),
    ("floor_p50_ms", "the floor: round trip of an empty message on an open grpc.aio bidi stream (empty handler), p50",
     "ms", 3),
    ("floor_p99_ms", "the floor, p99", "ms", 3),
)
# The latency goals: (label, figure over the floor, the most it may be).
FLOOR_GOALS = (
    ("single time lookup p50", "lookup_p50_over_floor", 1.2),
    ("single time lookup p99", "lookup_p99_over_floor", 2.0),
    ("produce -> consume p50 at 2,000/s", "latency_p50_over_floor", 1.5),
    ("produce -> consume p99 at 2,000/s", "latency_p99_over_floor", 3.0),
)
PEER = "redis"
# What would move a goal figure seglog does not lead on, by what bounds it.
MOVES = {
    ("produce_records_per_s", "client CPU"): "less client CPU per record on the send path (issue 10's producer speed: "
    "one future per batch, per-record metadata computed lazily)",
    ("produce_records_per_s", "server CPU"): "less server CPU per record on the append path (validation walks, the copy into the segment)",
    ("produce_records_per_s", "waiting"): "more produce requests in flight per partition",
    ("produce_records_per_s", "disk"): "fewer bytes per record (compression)",
    ("read_records_per_s", "client CPU"): "less client CPU per record when decoding (issue 10's consumer speed: lazy "
    "fields or a batch-level view)",
    ("read_records_per_s", "server CPU"): "less server CPU per fetched batch",
    ("read_records_per_s", "waiting"): "fetches kept in flight (the Consumer's stream mode)",
}


def _batched_asked(report: dict) -> str:
    """The batched-rate figures' own count, where the run's samples say it (see workloads)."""
    counts = {sample["batched_lookups_count"] for runs in report.get("samples", {}).values()
              for sample in runs if "batched_lookups_count" in sample}
    if not counts:
        return ""
    return f" (the batched rate over {' or '.join(f'{count:,}' for count in sorted(counts))})"


def _number(value: float | None, digits: int | None = None) -> str:
    if value is None:
        return "-"
    if digits is None:
        digits = 0 if abs(value) >= 100 else 2 if abs(value) >= 1 else 3
    return f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"**{value:.2f}x**" if value >= 1 else f"{value:.2f}x"


def _oversubscribed(report: dict) -> bool:
    """More runnable work than CPUs for most of the run (the load average's median)."""
    return report["machine"]["load_1min"]["median"] > report["machine"]["nproc"]


def preliminary(report: dict) -> list[str]:
    """Why this run's figures are preliminary (empty: they are not)."""
    reasons = []
    if report["records"] < FULL_RECORDS:
        reasons.append(f"{report['records']:,} records instead of {FULL_RECORDS:,}")
    load = report["machine"]["load_1min"]
    if load["median"] > QUIET_LOAD_PER_CPU * report["machine"]["nproc"]:
        reasons.append(f"the machine was shared: 1-minute load average {load['min']:.1f}-{load['max']:.1f} "
                       f"(median {load['median']:.1f}) on {report['machine']['nproc']} CPUs")
    if report["repeats"] < FULL_REPEATS:
        reasons.append(f"{report['repeats']} repeat(s) instead of {FULL_REPEATS}")
    return reasons


def _header(report: dict) -> list[str]:
    lines = [
        "# Performance: seglog beside Redis Streams and NATS JetStream",
        "",
        "<!-- Generated by `python -m bench.peers.report` from the benchmark's JSON; edit bench/peers/report.py, not this page. -->",
        "",
        "The full run (1,000,000 records, three interleaved repeats), and this page regenerated from it:",
        "",
        "```sh",
        FULL_COMMAND,
        "```",
        "",
    ]
    reasons = preliminary(report)
    if reasons:
        lines += ["**Preliminary figures:** " + "; ".join(reasons) + ". Rerun the commands above on a quiet "
                  "machine for the figures to quote.", ""]
    return lines


def _run(report: dict) -> list[str]:
    machine = report["machine"]
    load = machine["load_1min"]
    versions = ", ".join(f"{name} {version}" for name, version in machine["versions"].items())
    minutes = report["duration_s"] / 60
    lines = [
        "## The run",
        "",
        f"- Command: `{report['command']}` ({report['records']:,} records of {bounds.VALUE_BYTES}-byte values and "
        f"{bounds.KEY_BYTES}-byte keys per system; {report['lookups']:,} time lookups{_batched_asked(report)}; {report['latency_records']:,} "
        f"records at 2,000/s for the latency), started {report['started_utc']}, took {minutes:.1f} minutes.",
        f"- Machine: {machine['nproc']} CPUs ({machine['cpu_model']}), {machine['memory_gb']} GB, Linux "
        f"{machine['kernel']}, Python {machine['python']}; seglog at {machine['seglog_commit']}.",
        f"- Load during the run (1-minute load average, sampled every {load['interval_s']:.0f} s): min "
        f"{load['min']:.2f}, median {load['median']:.2f}, max {load['max']:.2f}.",
        f"- Versions: {versions}.",
        f"- Each figure is the median of {report['repeats']} repeat(s). In each repeat the machine's limits are "
        "measured first, then every system in turn (the order rotates), each with a fresh server and data directory.",
    ]
    for name, reason in report["skipped"].items():
        lines.append(f"- **{NAMES.get(name, name)} skipped:** {reason}.")
    return lines + [""]


def _table(report: dict) -> list[str]:
    names = list(report["median"])
    peers = [name for name in names if name != BASELINE]
    head = "| figure | " + " | ".join(NAMES.get(n, n) for n in names) + " | " + " | ".join(
        f"seglog vs {NAMES.get(p, p)}" for p in peers) + " |"
    lines = [
        "## Results",
        "",
        "Medians; the ratio columns say how many times better seglog's figure is (above 1, in bold: seglog ahead; "
        "for rates seglog ÷ peer, for times, bytes and memory peer ÷ seglog). Goal figures are marked ★.",
        "",
        head,
        "|" + "---|" * (1 + len(names) + len(peers)),
    ]
    for figure in FIGURES:
        if not all(figure.key in report["median"][n] for n in names):
            continue
        star = " ★" if figure.goal else ""
        cells = [_number(report["median"][n][figure.key]) for n in names]
        ratios = [_ratio(report["advantage"].get(p, {}).get(figure.key)) for p in peers]
        lines.append(f"| {figure.label}{star}, {figure.unit} | " + " | ".join(cells + ratios) + " |")
    lines += ["", "![seglog, Redis Streams and NATS JetStream side by side](../bench/results/peers.png)", ""]
    return lines


def _goals(report: dict) -> list[str]:
    if BASELINE not in report["median"] or not report["advantage"]:
        return ["## Goals", "", "Not judged: the run had no peer to compare with.", ""]
    lines = ["## Goals", "", "seglog ahead of both peers, through its own client, on each ★ figure:", ""]
    for figure in (f for f in FIGURES if f.goal):
        ratios = {p: report["advantage"][p][figure.key] for p in report["advantage"]}
        reached = all(r is not None and r > 1 for r in ratios.values())
        against = ", ".join(f"{_ratio(r)} vs {NAMES.get(p, p)}" for p, r in ratios.items())
        lines.append(f"- {figure.label}: {'reached' if reached else '**not reached**'} ({against}).")
    return lines + [""]


def _met(value: float | None, reached: bool) -> str:
    return "-" if value is None else ("met" if reached else "**not met**")


def _floor_goals(report: dict) -> list[str]:
    """The lookups-and-latency goals, each met or not with its measured ratio and the command."""
    seglog = report["median"].get(BASELINE)
    if seglog is None or "lookup_p50_over_floor" not in seglog:
        return []
    peer = report["median"].get(PEER)
    ratios = report["advantage"].get(PEER, {})
    # A run from before the JSON named it measured Kafka's 16 KiB, the default then.
    default_batch = f"{report.get('seglog_default_batch_bytes', 16384) // 1024} KiB batches"
    command = f"`.venv/bin/python -m {report['command'].removeprefix('python -m ')}`"
    lines = ["## Lookups and latency at the floor", "",
             "Each goal with the ratio measured in this run (medians over the repeats; a ratio to the floor is taken "
             f"against the floor of its own repeat), all from {command}; the distributions below.", "",
             "| goal | measured | |", "|---|---|---|"]
    if peer is not None:
        large = ratios.get("batched_lookups_per_s")
        small = (seglog.get("batched_lookups_small_batches_per_s", 0) / peer["batched_lookups_per_s"]
                 if peer.get("batched_lookups_per_s") else None)
        asked = f", {seglog['batched_lookups_count']:,.0f} asked" if "batched_lookups_count" in seglog else ""
        lines.append(f"| 1. batched time lookups >= 2x Redis Streams' pipelined XRANGE, large batches "
                     f"({seglog.get('records_per_batch', 0):,.0f} records a batch) | {_number(large)}x "
                     f"({_number(seglog['batched_lookups_per_s'])} vs {_number(peer['batched_lookups_per_s'])} lookups/s"
                     f"{asked}) "
                     f"| {_met(large, (large or 0) >= 2)} |")
        if "batched_lookups_small_batches_per_s" in seglog:
            small_asked = (f", {seglog['batched_lookups_small_batches_count']:,.0f} asked"
                           if "batched_lookups_small_batches_count" in seglog else "")
            lines.append(f"| 1. the same, small batches (about 100 records) | {_number(small)}x "
                         f"({_number(seglog['batched_lookups_small_batches_per_s'])} lookups/s{small_asked}) "
                         f"| {_met(small, (small or 0) >= 2)} |")
    for label, key, most in FLOOR_GOALS:
        number = "2" if key.startswith("lookup") else "3"
        value = seglog.get(key)
        lines.append(f"| {number}. {label} <= {most}x the floor | {_number(value)}x | {_met(value, (value or 1e9) <= most)} |")
    if peer is not None:
        for key, label, least in (("produce_records_per_s", "client produce", 3.0),
                                  ("read_records_per_s", "catch-up read", 2.0)):
            value = ratios.get(key)
            lines.append(f"| 4. {label} >= {least:g}x Redis Streams (tuned producer: 512 KiB batches) | "
                         f"{_number(value)}x | {_met(value, (value or 0) >= least)} |")
        for key, peer_key, label, least in (
                ("produce_defaults_records_per_s", "produce_records_per_s", "client produce", 3.0),
                ("read_defaults_records_per_s", "read_records_per_s", "catch-up read (poll_batches)", 2.0)):
            if key in seglog and peer.get(peer_key):
                value = seglog[key] / peer[peer_key]
                lines.append(f"| 4. {label} >= {least:g}x Redis Streams, every client default ({default_batch}) | "
                             f"{_number(value)}x ({_number(seglog[key])} records/s) | {_met(value, value >= least)} |")
    if "produce_defaults_records_per_s" in seglog:
        records = report["records"]
        lines += ["", f"Per record, with every client default ({default_batch}) against the tuned producer (512 KiB): "
                  f"produce {seglog['produce_defaults_client_cpu_s'] / records * 1e6:.2f} us of client CPU and "
                  f"{seglog['produce_defaults_server_cpu_s'] / records * 1e6:.2f} us of service CPU against "
                  f"{seglog['produce_client_cpu_s'] / records * 1e6:.2f} and {seglog['produce_server_cpu_s'] / records * 1e6:.2f}; "
                  f"catch-up read {seglog['read_defaults_client_cpu_s'] / records * 1e6:.2f} us of client CPU against "
                  f"{seglog['read_client_cpu_s'] / records * 1e6:.2f}."]
    floor = report["limits"]
    lines += ["", f"The floor in this run: p50 {_number(floor['floor_p50_ms'], 3)} ms, p99 "
              f"{_number(floor['floor_p99_ms'], 3)} ms ({report.get('floor_calls', 0):,} round trips a repeat, "
              "`bench/peers/floor.py`).", "",
              "![latency distributions of seglog, the floor and both peers](../bench/results/peers-cdf.png)", ""]
    return lines


# The state of the lookups-and-latency work, beside the figures of the run (kept by hand: what was
# built, what was found, what remains; each figure with its command).
NOTES = """## Lookups and latency: what works, what remains

What works:

- A lookup by time walks a batch's records in C (`seglog.records._walk_c`, built by the editable
  install; the Python walk where it is not built) with every rule of `walk_records`, proven equal
  to it, refusals and messages included, by Hypothesis differential tests on valid, hostile and
  random bytes (`tests/unit/seglog/records/test_walk_compiled.py`). The targets of a batched lookup
  landing in one batch are answered by one walk (`first_reaching_each`), and a batch of 64 records
  or more (256 before the batch directory) gets a record-time table on its first lookup (`record_times`: the running maximum of its
  timestamps, 8 bytes a record, 16 MiB for every log, least recently used out, keyed by the
  batch's 61 header bytes), which later lookups bisect without reading the batch. A lookup's first
  read covers two batches of the size it last found: one pread per target on 100-record batches.
- Storage CPU per lookup (`.venv/bin/python bench/bench_batched_lookup.py --storage`, load 9-16 on
  2 CPUs): on 4,000-record batches single lookups 104 us with one walk per target, 91 us with one
  walk, 22-34 us with the tables; batched lookups (1,000 a call) 23-24, 8.4-8.6 and 4.1-5.0 us.
  On 100-record batches the tables change nothing (13-20 us; the single read per target brought
  the batched cost from 19.8 to 13.1 us). Both kept: the one walk for batches without a table.
- A segment's batch directory (`storage/segment/batch_directory.py`) answers batched lookups whose
  targets land in distinct batches: per batch its position, last offset and the running maximum of
  the max timestamps (24 bytes a batch, in memory only; the files stay Kafka's), built by the
  checked header walk every reader uses once a segment's batched lookups searched 16 targets a MiB
  of log without it, extended as the active segment grows (at most 4 MiB of the file a lookup, the rest answered by the scans until later lookups catch up, so no lookup holds the event loop for a large segment's walk), dropped on truncation and recovery,
  16 MiB for all directories, least recently used out. A target then costs a bisection, the read of
  its batch's header (checked against the entry: bytes changed since fail as the scans fail) and
  the table's bisection; what the directory cannot answer (a batch below the log start's, past a
  batch its walk refused, a failed read) goes to the scans. Proven equal to the per-target search by
  Hypothesis across appends after the build, truncation, a log start inside the log, rolls and
  damaged files (`tests/unit/seglog_server/storage/segment/test_batch_directory.py`). Its walk,
  and a time-step table's build, also refuse a batch that spans an offset index entry: a length
  rotted into one ending exactly on a later batch's header made them jump over batches a search
  starting at that entry reads (offset 28 answered where the search answers 4); the search
  answers from there on. A single
  lookup uses a segment's directory once batched lookups built one (it builds none). Storage CPU a
  target, 100 targets a call (`PYTHONPATH=. .venv/bin/python bench/bench_batched_lookup.py
  --storage`, medians of 5 interleaved repeats, load 8-10 on 2 CPUs): 291 batches of 3,436 records
  26.1 us before, 10.1 us after; 10,000 batches of 100 records 29.5 us before, 12.1 us after
  (16.9 us with tables from 256 records); at load 22, single lookups 48.7 and 43.0 us before,
  21.5 and 16.8 us after. End to end (`.venv/bin/python
  bench/bench_batched_lookup.py --records 1000000 --lookups 20000 --per-request 100 --runs 3`,
  the service before and after run alternately, six times each, 08:56-09:23 UTC at load 8-25; the
  median of the six runs' medians): large batches 18,669 lookups/s before, 32,821 after (1.76x);
  small batches 14,042 before, 26,076 after (1.86x). The first run after a produce builds the
  tables and directories and is the slowest. A loaded machine's figures: rerun quiet. Goal 1 is
  still far (about 105,000/s): the storage's share of a lookup is now the smaller one.
- What bounds the single lookup and the tail: both sides' per-message cost in grpcio's Python
  bindings. Profiled (cProfile, 3,000 single lookups through `AsyncAdmin.offsets_for_times` on
  200,000 records): the service's `OrderedReplies.send` (the stream's write) and the client's
  `grpc.aio` `_write` take most of each side's time, as in the floor; seglog adds the storage
  search above and its RPC layers (routing, conversions) on each side. The produce -> consume
  latency is mostly the producer's acknowledgement (its p50 is in the bounds below), then one push
  on the Consume stream (woken one loop turn after the append). `AsyncProducer` and `AsyncConsumer`
  on one loop did worse here than the synchronous pair (p50 5.4-6.0 against 3.9-4.6 ms at load
  7.8), so the benchmark keeps the latter.
- The single lookup's own path, profiled on both sides beside the floor
  (`bench/bench_single_lookup.py`: the floor and the lookup alternately in one run, each side's
  CPU a lookup, `--tree NAME=PATH` for an A/B between checkouts, `--per-call N` for batched calls,
  `--profile-client`/`--profile-service`). Above the floor a lookup cost about 200 us of client
  CPU and 230 us of service CPU (load 19; the floor's own: 197 and 187 us), and the client's loop
  turned 10 times a lookup where the floor's turns 4. Now a request whose targets all route to one
  channel (every lookup in a single process) is sent from the caller's task as built, without a
  task, a gather, a copy of the request or a rebuild of the answer; the LookupStream's
  `RequestStream.ask` waits for the answer as soon as the write is under way; the admin builds its
  targets in place and reads the answers in one pass: 6 loop turns a lookup, client CPU 396 -> 306
  us, p50 2.14x -> 1.85x the floor, p99 4.03x -> 1.96x (medians over 5 interleaved repeats of
  3,000 lookups on 200,000 records, `.venv/bin/python -m bench.bench_single_lookup --repeats 5
  --tree base=<tree before> --tree after=<tree after>`, 2026-11-27 09:05, load 18.6-19.7 on 2
  CPUs). Calls of 100 targets (`--per-call 100 --lookups 400 --repeats 3`, load 22-23): p50 3.84
  -> 2.39 ms a call, client CPU 1,309 -> 656 us a call; `.venv/bin/python
  bench/bench_batched_lookup.py --records 200000 --lookups 20000 --per-request 100 --runs 3`, the
  two trees alternately, twice (load 21.6-24.8): large batches 20,780 and 12,657 -> 33,235 and
  26,260 lookups/s, small batches 10,896 and 12,603 -> 12,313 and 13,620. On the service the RPC layer of
  OffsetsForTimes costs 6 us for one target and 129 us for 100 (175 before: each target's fields
  read once, the answers filled field by field), in process with the storage stubbed; the rest is
  the storage search and grpcio's per-message cost.
- A request of one target has its own path on both sides: the service answers it without the
  per-target rows, grouping dict and second pass (the same checks, owner hint, inline/pool choice
  and offline handling, proven byte for byte equal to the general path by a Hypothesis test), the
  admin builds its one target's request without a list of targets, the router takes a single
  target's route without a set. Service RPC layer and storage search of one lookup, in process
  with the metrics observer on: 21.3-24.1 -> 17.7-19.7 us (0.86-0.87x; medians of 15 alternating
  rounds of 5,000, load 4.6-4.9). End to end it is within the noise: p50 1.52x/1.60x the floor
  before, 1.59x/1.63x after, p99 1.64x/1.68x and 1.92x/1.54x, CPU a lookup about 320 us a side
  both ways (two runs of `.venv/bin/python -m bench.bench_single_lookup --records 100000
  --repeats 5 --tree base=<tree before> --tree after=<tree after>`, load 1.5-2.6): what separates
  a lookup from the floor is grpcio's per-message cost and the loop's turns, not this layer. Not
  done: the two getrusage a lookup (0.66 us each) come from `LogSegment.find_offset_by_timestamp`
  even when the time-step table answers from memory. Posting the stream's read only after its
  write completed, not kept: against the floor's server, a reader task reading ahead against one
  woken by the write's end, p50 0.35 vs 0.33 ms and client CPU 226 vs 260 us a round trip
  (medians of 4 alternations of 3,000, load 4-6.6): the write is cheaper but the wake costs more.
- The single lookup's one-call inline path (`UnifiedLog.lookup_timestamp_inline`) counts the
  storage calls as `StorageCalls.sized` counts the general path's: an inline attempt that raised
  (log closed or offline) counts inline, and a target whose segments are unchecked since a restart
  goes to the pool with no busy fallback, tiered or not. A tiered log's bounded lookup
  (`lookup_timestamps_without_builds`) answers None and never searches the store itself, even
  when a tier attached after `inline_lock` chose the real lock (no store call on the event loop).
- Where the single lookup's gap above the floor is not: the seglog process. The floor's own echo
  handler registered inside a seglog service process (its grpc.aio server and options, uvloop,
  allocator settings, storage and flusher threads, metrics server) answers at the floor: p50
  0.99x, and the same serving CPU (155 us a round trip). A protobuf echo there (a
  LookupStreamRequest in, its correlation id out, after initial metadata) costs 1.05x, the
  LookupStream with its lookup stubbed 1.07x, the real one-target lookup 1.28x, serving CPU 160,
  195 and 235 us (medians of 11 interleaved repeats of 2,000 round trips, load 3.5-4.2,
  `.venv/bin/python -m bench.bench_lookup_floor_split --repeats 11`; two runs of its scratch form, load 6-8:
  1.00-1.03, 1.04-1.13, 1.03-1.15, 1.24-1.46). The wire is the same too: one sendmsg an answer
  (60 bytes against the floor's 40), 34 us each in the floor's server, 34 us for the echo inside
  seglog and 39 us for the LookupStream (`perf trace -s -e sendmsg -p <pid>`, about 3,000 each,
  load 7). A native py-spy profile's samples in sendmsg are no measure of it: they swung 2x
  between identical repeats. What is left above the floor is Python on the service's loop: the
  lookup path (`_answer_one` -> `_search_one` -> `log_call` -> `StorageCalls.sized` ->
  `lookup_timestamps_without_builds` -> `timestamp_lookups` -> `LogSegment`, about 25 frames of
  1-5 us each, 16-22 us a lookup in a warm loop in process, no single hot spot) and the stream's
  layers (gate, admission, ordered replies, metrics).
- A single lookup's answer is read by its caller, as the floor's client reads: an `ask` on the
  LookupStream (`RequestStream(caller_reads=True)`) whose answer is the next owed, with no read
  under way, reads it in its own task, so no reader task reads it and hands it over. A read of
  grpc.aio's that is cancelled cancels its whole call, so the caller's task waits on a stand-in
  for the read's future (`_Handover`): the read's own future wakes it (no proxy, no turn more),
  and a cancellation of the caller hands the read, where it stands, to a task of its own that
  matches and drops the answer; the stream goes on. The reader task reads only while answers
  are owed and no caller reads, or when the call ends while nothing reads (a stream the service
  closed is still seen before the next ask). A stream write's rest is driven by its futures'
  done callbacks, not a task, and the requests' timeouts share one timer a stream (a
  `call_later` and its cancel a request before, about 5 us): an ask on an open stream starts no
  task, and the client's loop turns 2.6 times a lookup against 4.8 before (3,000 lookups each
  under `--profile-client`, both trees in one run). Tests on a real gRPC server
  (`tests/integration/client/test_lookup_stream_caller_reads.py`): who reads, cancellation
  mid-read and the stream ending after it, the stream ending, closing or timing out under the
  caller's read, asks made meanwhile, timeouts at their own deadlines, no task an ask, and a
  Hypothesis mix of asks and cancellations at any loop turn. End to end it is within the noise
  of this machine's load (`.venv/bin/python -m bench.bench_single_lookup --records 50000
  --lookups 3000 --repeats 3 --tree base=<tree before> --tree after=<tree after>`, ten runs
  with the trees' order swapped, 30 interleaved pairs, 2026-11-27 15:28-15:52, load 11-35 on 2
  CPUs): p50 1.62x the floor before, 1.55x after (median of the pairs' after/before 0.96, lower
  in 21 of 30), client CPU a lookup 0.96 (lower in 19); p99 1.69x before and 2.38x after (median
  ratio 1.15, lower in 14 of 30; the last six pairs 0.74, lower in 5: the floor's own p99 ran
  0.3-14 ms). A quiet machine decides both.
- A single lookup's path is shorter on both sides. The service: `LookupRpcs._search_one` asks the
  log once, in cluster mode too on the partition's owner (`UnifiedLog.lookup_timestamp_inline`:
  the lock taken without waiting, the search bounded by the inline bound, a string saying why
  when it does not answer: a tiered log or a busy lock, segments not checked since a restart, a refused step; the pool answers those as
  before, the storage calls counted as before), not `log_call` -> `StorageCalls.sized` ->
  `lookup_timestamps_without_builds` -> `lookup_timestamps`; a time-step table answering from
  memory times its index search without a fault count (two getrusage calls a lookup). The
  client: `AsyncAdmin.offsets_for_times` of one partition builds its LookupStreamRequest once and
  sets its target in place (kept only after an answer), handed to the transport as it is (no
  request copied into a message), one coroutine layer fewer. In process, warm
  (`bench/bench_single_lookup_layers.py` in each tree, six alternations with the order swapped,
  2026-11-27 16:17, load 2.7-3.0): the service's `LookupRpcs.offsets_for_times` of one target on
  50,000 records 11.8 -> 9.8 us a lookup, the client's layers above a stream answering at once
  4.0 -> 2.6 us (medians). End to end (`.venv/bin/python -m
  bench.bench_single_lookup --records 50000 --lookups 3000 --repeats 3 --tree base=<tree before>
  --tree after=<tree after>`, four runs with the order swapped, 12 interleaved repeats,
  2026-11-27 16:13-16:15, load 4.2-4.8): p50 1.62x the floor before, 1.53x after (median of the
  repeats' after/before 0.92), p99 1.85x -> 1.60x, CPU a lookup client 233 -> 220 us and service
  247 -> 229 us. Tests: `tests/unit/seglog_server/rpc/test_single_lookup_fast_path.py` (a log
  start inside the table's segment, a damaged table, a busy lock, a first lookup after a
  restart, the fault count), `tests/integration/remote/test_tiered_single_lookup.py`,
  `tests/integration/client/test_single_lookup_message.py` (concurrent and cancelled lookups,
  error answers, the unary fallback), `tests/integration/cluster/test_single_lookup_owner_moves.py`.
- A batched call's per-target cost in the client (`Admin.offsets_for_times_many`): each target
  built field by field (keywords cost a third more), each answer made with `tuple.__new__` (no
  NamedTuple `__new__` frame), the answers walked once (the router hands its first answer to the
  admin's reader, which reports an owner hint, instead of a separate pass for hints), and each
  partition's route looked up once, not each target's. Calls of 100 targets
  (`.venv/bin/python -m bench.bench_single_lookup --records 50000 --lookups 1000 --repeats 5
  --per-call 100 --tree base=<tree before> --tree after=<tree after>`, 2026-11-27 09:56, load
  2.0-2.4): client CPU 595 -> 503 us a call (median; each repeat's after/before 0.67-1.05, median
  0.87), 3.9 -> 3.0 us a target above the floor's 203 us. `bench/bench_batched_lookup.py
  --records 100000 --lookups 20000 --per-request 100 --runs 3 --only large`, the two trees
  alternately six times (load 2.1-2.7): 65,800 -> 70,200 lookups/s (medians; each pair's ratio
  median 1.14). What is left a target in the client is upb itself: three field writes and two
  reads (about 0.4 us each way), and grpcio's write of the larger message.
- A synchronous call's handoff to the client's loop thread (`seglog._sync.LoopThread.run`, paid
  by every call of `Admin`, `Producer` and `Consumer`): the loop is uvloop's where installed
  (asyncio's in a client-only install), and a call is handed over with a lock its task releases
  as it ends, not `run_coroutine_threadsafe`'s concurrent future (no Condition, no chaining, no
  loop turn for the done-callbacks): an empty call's handoff 47-51 -> 21-27 us of CPU. The
  service builds a packed answer whose targets all found a record by one zip of the storage's
  pairs (100 answers 53-62 -> 42-48 us, timeit at load 14); the admin reads it by `map` over
  `tuple.__new__` with its class repeated, not a `functools.partial` (26 -> 16-17 us). Calls of
  100 targets (`.venv/bin/python bench/bench_batched_lookup.py --records 1000000 --lookups 20000
  --per-request 100 --runs 3`, `git archive` trees before and after on PYTHONPATH, run
  alternately seven times each, 2026-11-27 15:46-15:54 at load 7-22; medians): client CPU a call
  426 -> 323 us on large batches (0.76x), 439 -> 341 us on small (0.78x); service CPU 450 -> 400
  and 500 -> 450 us (clock ticks, 50 us steps); 124,696 -> 138,446 lookups/s (1.11x) and 119,458
  -> 127,940 (1.07x), each tree's runs spreading 45-153 k at that load: the quiet run decides.
  On `AsyncAdmin` (no handoff: the packed answer's two changes alone; `.venv/bin/python -m
  bench.bench_single_lookup --records 50000 --lookups 1000 --repeats 5 --per-call 100 --tree
  base=<before> --tree after=<after>`, 15:57 at load 7.7-11.5): service CPU a call 450 -> 370 us
  (lower in 5 of 5 repeats), client 319 -> 305 us, p50 2.40x -> 2.31x the floor (0.61 -> 0.57 ms).
- What the 4 ms of the tail are made of (one record's timeline, `time.perf_counter_ns` stamps in
  the client at load 5-6): `send` returns in 4 us; the sender starts its request 0.4 ms later (p50;
  p90 3.6 ms: the append wakes the loop thread); the producer's acknowledgement is 75-80 % of the
  end-to-end figure in every run; the consumer's poll returned 2.1 ms (p50) after the push reached
  the client. No timer is in the path: the Consume stream waits on the append's event and reads inline,
  the consumer asks `fetch_min_bytes` 1 (its `fetch_max_wait_ms` only bounds an empty wait), the
  producer runs at `linger_ms=0` (the client's default is 5 ms, as Kafka's since 4.0: a
  latency-minded user sets 0, and the default stays). Without the consumer the acknowledgement is
  1.1 ms p50 at 2,000/s and 0.55 ms one record at a time (about 2x the floor). With it, the client
  (four threads: the paced sender, the loop, grpc's poller, the reader) and the service spend
  0.15-0.53 ms of CPU each per record, and every record crosses about six thread or process
  wake-ups where the floor crosses four: on 2 CPUs at load 10-17 the run queue sets the figure (a
  repeat swings 10-50x the floor), and under it the producer already batches (415 requests for
  4,000 records at load 14). The synchronous `Consumer` in stream mode now polls from its own
  thread once the streams run (a task, a timer and two thread wake-ups fewer a poll); at load
  10-17 the change is within the noise (p50 14.4x before, 14.0x after, 10 repeats each).
- The consumer's half of the tail, step by step (`.venv/bin/python bench/bench_tail_steps.py --runs 5
  --tree A --tree B`: the goal-3 workload with monotonic stamps from the storage's append
  announcement to poll's return, per record; A and B `git archive` trees of the service before and
  after the change below, interleaved run by run). At load 7 on 2 CPUs (one run): 5.8 ms from the
  record's creation to poll's return (p50), 3.7 ms of it before the append (the producer's half),
  1.6 ms after: 0.36 to the Consume stream's read, 0.04 to its write, 0.23 for the write to
  return, 0.18 to the client's receipt, 0.39 from there to poll's return (the loop thread's
  absorption, the reading thread's wake-up and decode; some 35 us of that is CPU). A Consume stream
  of an admitted call (every call) woke three loop turns after the append (a task around the wait,
  then asyncio.wait's callback), a Fetch long poll two: both now one, every wait parking a future
  of its own that the append, its timer or a policy reload completes. 5 interleaved runs at load
  22-26: append -> poll p50 3.25 ms before, 1.74 ms after (append -> read 0.50 -> 0.34 ms), the
  producer's half 6.1 and 3.2 ms, so the consumer's share stays about a third and the noise is
  as large as the change; `bench.peers --workloads latency`, 2 x 3 repeats each, A/B interleaved,
  load 16-22: p50 23.3x the floor before, 20.2x after (floor p50 0.34-0.36 ms).
- The tail, both halves (`bench/bench_tail_steps.py` now stamps the producer's too: the sender
  starting a batch's request, its ProduceStream write's start and the completion grpc.aio reports,
  the service's append, the answer reaching the record's future). At load 9.5 (one run): creation
  -> request start 1.8 ms, write start -> completion reported 3.9 ms while the service had
  appended it before that (0.16 ms earlier; the append 0.2 ms), append -> future 2.6 ms. grpc.aio
  writes one message of a call at a time, each until its completion crosses grpc's poller thread
  and the loop: at `linger_ms=0` every batch drained meanwhile queued a request of its own behind
  it. Now a partition whose connection is writing keeps its open batch (the records sent
  meanwhile join it) and the end of the write wakes the sender. On the service, an append that
  woke Consume streams parked at the tail gives them one loop turn before the ProduceStream's
  answer is written, so the push starts ahead of the acknowledgement
  (`tests/integration/test_push_before_ack.py`); and the synchronous Producer's wake-up from the
  caller's thread starts the ready batch in the callback itself (a turn less). Measured, A/B
  interleaved (`git worktree` trees of the commit before and of it plus each change):
  `bench_tail_steps.py` 5 runs each, load 5.5-8.6: append -> Consume read p50 452 -> 103 us,
  append -> poll's return 1.65 -> 1.24 ms (medians of the runs; the acknowledgement 5.7 -> 6.2
  ms, within the noise); the caller's-thread start alone within the noise (6 runs, load 6-8);
  `.venv/bin/python -m bench.peers --systems seglog --workloads latency --repeats 3
  --latency-records 6000`, before and after (all three changes) alternately 6 times, load
  6.0-11.1: p50 6.45 -> 4.55 ms (medians; lower in each of the 6 pairs), 20.0x -> 17.6x the
  floor (0.25-0.34 ms), p99 11.5x -> 13.4x (the load's spikes: 4.6-79x in single runs); the
  acknowledgement p50 5.5 -> 4.5 ms. Goal 3 stays far (1.5x and 3x).
- The independent harness's produce 1.5-2.6x and read 1.26-1.29x Redis: it ran the client with its
  defaults, Kafka's batch.size of 16 KiB (about 120 of these records a batch), where bench/peers
  tunes the producer to 512 KiB batches. Per-batch costs then dominate, on both sides (the CPU per
  record of each, from this run, is under the goal table); a log of 16 KiB batches also reads
  slower. The harness is right about the defaults: the run now measures them too (the 'every
  client default' rows of the goal table), and its poll_batches reads are the client's fastest.
- Produce with every client default: a partition's ready batches go in one ProduceStream message
  (`more`; as many as its window has room for, 5), each admitted, appended or refused as a
  message of its own and answered in its slot, so order, idempotence and per-batch errors hold
  (the service says `seglog-stream-batches-max`, 16, at open; an older one gets a message a batch).
  A message stays under the smaller of the client's and the service's request limits, envelope
  counted (`seglog-stream-request-bytes-max`, announced at open); a reopened stream forgets the
  last service's announcements, and batches an answer has no slot for (an older service, a token
  revoked mid-message) were not appended and are sent again. A batch that fails to build fails
  alone (the rest of its group goes out after a new producer id), and a sender loop that dies
  fails what waits instead of hanging `flush`/`close`.
  Profiled (py-spy, cProfile): grpc.aio's per-message cost was most of a 16 KiB batch's on both
  sides (an empty grpc.aio stream costs about the same a message at 16 and 64 KiB), and
  `send_many` sized its slice's rest again at each wait for buffer space (11x its records): now
  once. `.venv/bin/python bench/bench_produce_defaults.py --records 300000 --repeats 2 --read`,
  before and after run alternately, 3 runs each, load 13-22 on 2 CPUs: CPU a record 5.1-5.7 us
  of client and 3.4-4.0 of service before, 2.0-2.8 and 1.7-2.4 after; 86-110 k records/s before,
  88-197 k after. Redis ran at 15-23 k/s at that load (86 k quiet), so the ratio awaits a quiet run.
- Catch-up read with every client default (fetch mode, 16 KiB batches): the sync `Consumer`
  takes what its Fetches buffered from the polling thread (no call into the loop thread: that
  round trip, and the batches' decoding on the loop thread, were most of the loop thread's
  per-batch work), and a poll that drains a partition starts its next Fetch at once, so it runs
  while the caller handles the records (`tests/integration/client/test_consumer_fetch_thread_polls.py`).
  `decode_columns` checks a run at its longest first and maps one-byte timestamp deltas without
  a per-run table: a 120-record batch decodes in about 0.68x the time (`RecordBatch.columns()`
  of one such batch 3,000 times, 7 repeats, before and after alternately twice: 157-169 against
  233-251 us at load ~5). Read of 300,000 records (a 300,000-record log made by a
  default Producer, `Consumer.poll_batches`), before and after alternately, 5 x 3 reads each, load
  3.5-6: client CPU 2.19 -> 1.91 us a record (0.87x; 2.19 -> 1.74 with the consumer change
  alone in an earlier run), records/s 325 k -> 322 k (0.99x; 1.11x in the earlier run): the
  loop thread now waits in `select` for the service most of the read (py-spy), so the wall time
  is the Fetch round trips' and the service's. `bench_produce_defaults.py --read --repeats 1`,
  3 alternations, load 4.5-6.3: read ratio to Redis median 1.98x before, 2.63x after (Redis
  itself varied 68-201 k/s: a quiet run decides).
- OffsetsForTimes has a packed form (`OffsetsForTimesRequest.packed`: per entry a partition and
  its timestamps as one packed list; answered in `OffsetsForTimesResponse.packed`, offsets and
  answer times as two packed lists and an error only for a target that failed, with its index
  and the old form's PartitionError and owner hint), read and written as lists on both sides.
  `Admin.offsets_for_times_many` asks in it from eight targets on, sixteen a partition on average
  over several (below, the old form's message a target is cheaper: one target built and read in
  2.5 us against 5.6; 100 targets over 100 partitions 121 us against 458), routed by entry in
  cluster mode; a service that answers no packed entries (a build from before them) is asked
  again in the old form and from then on; the service answers each form in its own, so older
  clients are unchanged. Proven to answer any mix of targets as the old form does, on the wire and
  through the client, by Hypothesis (`tests/integration/client/test_packed_lookups.py`). In one
  process, 100 targets of one partition: the request built in 13 us against 92, the answer read
  in 66 against 95 (load 8). End to end, before and after run alternately (`PYTHONPATH=.
  .venv/bin/python bench/bench_single_lookup.py --per-call 100 --lookups 1000 --repeats 5 --tree
  before=A --tree after=B`, load 7.0-9.1, two runs): CPU a call of 100 targets, client 551 -> 456
  and 561 -> 486 us, service 1,190 -> 940 and 1,240 -> 1,050 us. `bench/bench_batched_lookup.py
  --records 200000 --lookups 20000 --per-request 1000 --runs 3` (now printing each side's CPU a
  call), three alternations at load 9.5-10.5: client 2,332 -> 1,782 us a call on large batches,
  3,111 -> 1,927 on small; service 3,500 -> 2,000 and 11,000 -> 9,500; large batches 123 k ->
  187 k lookups/s (small batches 57 k -> 64 k: their storage search dominates). At 100 a call
  (five alternations, load 8.4-11.4) client 781 -> 744 and 827 -> 697 us, service 1,200 -> 1,050
  and 1,850 -> 1,700: a call's fixed cost (the stream's message each way, the storage pool's hop)
  is most of it there. `.venv/bin/python -m bench.peers --systems seglog --records 200000
  --repeats 1` after it (load 9.3-11.4): batched lookups 36,510/s on large batches and 71,994/s on
  small (10 calls of 100 each: noise at that load), single lookup p50 1.67x the floor; after the
  inline cap's raise below and with the time-step tables, three runs at load 4.7-6.7: medians
  87,507/s and 82,964/s, single lookup p50 1.70x the floor.
- The tuned producer (512 KiB batches) ran at 599,863 records/s in the full run of 10:48 UTC
  against 746,239 before messages of several batches (949,118 in the quiet run of 14:07 UTC): a partition's batches drained together went as one request
  even when each filled a message of its own (two 512 KiB batches never share a 1 MiB message),
  and that request settled only on its last message's answer, so a window of large batches
  refilled only once all of it came back. Each message is now a request of its own, settled on
  its own answer (`Sender._start_requests`). A/B of three trees (before messages of several
  batches, before this change, after), send_many 300,000 records in 512 KiB batches, linger 5,
  5 interleaved runs at load 8.9-9.8 (a one-off script around `Producer.send_many`, as
  `bench/peers/seglog_system.py`): 489,916 / 287,075 / 508,054 records/s (medians; after 1.77x
  before, 1.04x the older tree), client CPU 0.98 / 1.11 / 0.96 us a record, service 0.87 / 0.83
  / 0.83. With every client default (16 KiB batches; 3 runs, load 6.9-8.3) it stays at 218 k
  against 221 k before (0.99x), against 116 k with one batch a message.
- Each segment has a time-step table (`storage/segment/time_steps.py`): the rises of the running
  maximum of its record timestamps, (timestamp, offset), 16 bytes a step. The first record at
  or after a target is always a step, so a target costs one bisection and no read of the .log.
  The active segment's table is fed by the appends from the batch in hand (`record_steps`, in
  C); it is kept when the segment is sealed. A segment without a table (after a restart, or
  dropped from the 32 MiB budget, least recently used first) builds one from its file the way the
  batch directory does (at most 4 MiB a call, every walker check: a refused batch ends the table).
  A step below the log start, or a target past a table that ends early, goes to the directory or
  the scans. Proven equal to the per-target search, batched and single, errors included, by
  Hypothesis across appends in any time order, LogAppendTime, gzip, rolls, truncation,
  DeleteRecords, restarts, dropped tables, tiny budgets and files damaged before a build
  (`tests/unit/seglog_server/storage/segment/test_time_steps.py`). Storage CPU a target
  (`PYTHONPATH=. .venv/bin/python bench/bench_batched_lookup.py --storage`: one million records
  at 4 a millisecond, so 250,000 steps; three modes interleaved, medians of 5, load 7.9):
  3,436-record batches, 100 a call 3.8 us against 9.8 with the directory alone and 24.7 before
  both, single 7.1 against 16.9; 100-record batches, 100 a call 5.0 against 10.3, single 10.3
  against 21.3. Produce got faster: the validator walks the records in the same compiled
  function in place of its Python loop (validation alone: 1,414 -> 53 us for a 3,436-record
  batch, 55.6 -> 5.5 us for a 100-record one, medians of 5 alternating at load 4.7). Feeding
  the table costs about 6.5 us for a 100-record batch measured alone; in the bench's append
  figure, which includes the validator's old Python walk, it adds 4 % and 12 % (a noisy
  figure). End to end (`.venv/bin/python -m bench.peers --systems seglog --records 200000
  --repeats 1`, the tree before and after run alternately three times, load 4.0-6.4, medians):
  batched lookups 45,500 -> 80,000/s on large batches and 8,540 -> 71,200/s on small ones (the
  service's CPU for the small batches' 1,000 lookups 0.11 -> 0.01 s), tuned produce 470 k ->
  752 k records/s (service CPU 0.18 -> 0.07 s), single lookup p50 2.10x -> 1.58x the floor;
  produce with the client's defaults 293 k -> 252 k (service CPU 0.34 -> 0.32 s; that figure
  swung 234-311 k before and 78-264 k after).
- A call's targets on a segment with a time-step table are answered in one compiled call
  (`step_answers` in `_walk_c.c`, exposed by `seglog.records.walk_compiled`, whose Python
  reference answers where the extension is not built): a bisection a target in C over the
  table's two int64 columns, eight targets in lockstep with each probe prefetched (a
  250,000-step table is 4 MB), the answer tuples built there. Above it a call does its work once
  a run, not once a target: the sorted targets cut into runs sharing their first segment by a
  bisection a run (`SegmentTimestamps.runs_reaching`), a later segment's share taken as a prefix
  by a bisection, a segment's answers put into the result in bulk. Proven equal to the reference
  and to a linear definition by Hypothesis, targets in any order and past int64, hostile columns
  (none, unequal lengths, other item sizes or kinds, non-contiguous, two-dimensional) refused
  alike with TypeError or ValueError (`tests/unit/seglog/records/test_step_answers.py`); the runs
  equal to the per-target first segments (`test_segment_runs_reaching.py`); the segment and log
  differential tests unchanged. Storage CPU a target (`PYTHONPATH=. .venv/bin/python
  bench/bench_batched_lookup.py --storage`, the tree before and after alternately, two runs each
  of medians of 5, 15:58-16:00 UTC, load 5.0-8.4): 3,436-record batches, 100 a call 2.8 and 2.4
  us before, 0.9 and 0.9 after, 1,000 a call 3.0 and 2.5 -> 0.9 and 0.8, single 5.9 and 5.6 ->
  4.5 and 4.4; 100-record batches, 100 a call 3.5 and 2.5 -> 1.1 and 1.1, single 5.9 and 5.6 ->
  4.6 and 4.4. End to end (`.venv/bin/python bench/bench_batched_lookup.py --records 1000000
  --lookups 20000 --per-request 100 --runs 3`, before and after alternately three times, load
  6-11): the service's CPU a call of 100 400-450 -> 350-450 us on large batches and 400-450 ->
  350-400 on small (the figure's grain is 50 us); lookups/s within the noise (before 114-150 k
  on large batches and 114-158 k on small, after 63-172 k and 76-153 k: single runs swung 2x at
  that load). That log's tables hold about 1,500 steps (records produced over a second or two),
  where the Python bisection was already cheap; the storage bench's 250,000 are where it counts.
- The producer's batch_size, measured (the default stays Kafka's 16 KiB, see "What remains"):
  with 5 batches of a partition in flight the batch size bounds a default producer's rate, a
  batch still leaves at linger_ms (5) at a low rate, and the buffer (32 MiB) counts queued
  bytes, not batch_size a partition.
  `.venv/bin/python bench/bench_produce_defaults.py --records 300000 --repeats 5 --read
  --batch-sizes 16384,65536,131072,262144,524288` (sizes interleaved, order rotated each repeat;
  load 2.4-3.2), medians for 16 / 64 / 128 / 256 / 512 KiB: produce 246 k / 456 k / 516 k / 672 k /
  708 k records/s (3.75x / 5.99x / 7.74x / 10.1x / 10.7x the same run's Redis, which ran at 67 k,
  slower than on a quiet machine), client CPU 2.34 / 1.47 / 1.01 / 0.98 / 1.08 us a record,
  service 1.87 / 0.73 / 0.83 / 0.57 / 0.40; the default Consumer's catch-up read of each log
  459 k / 693 k / 697 k / 645 k / 646 k records/s (client CPU 1.60 / 1.05 / 1.11 / 1.13 / 1.17
  us). Single sends awaited one by one (`--latency 200`, 3 repeats, 16 / 128 / 256 KiB): p50
  6.6 / 6.9 / 6.4 ms, p99 10.9 / 9.9 / 10.3 ms, linger_ms's wait either way. The cost: at a rate
  where a 16 KiB batch fills before linger_ms (above some 25 k records/s of these records a
  partition) and a 256 KiB one does not, a record waits up to linger_ms longer; keyless records
  stay on one partition for 256 KiB at a time (the sticky partitioner switches at batch_size).
- A batch the service refuses as too large (above max.message.bytes or segment.bytes, or more
  records than it takes) is split and its pieces sent first in its place, as Kafka's producer
  does (`client/seglog/_sender.py` `_split`, `RecordAccumulator.split`): pieces of at most
  batch_size, half the refused batch and the limit the refusal names, numbered from its first
  sequence; each record's future gets its piece's offset, callbacks run once; a record alone
  above the limit fails with RecordTooLargeError and the partition's later batches are
  renumbered past it (the producer id stays). An idempotent producer keeps one batch of a
  partition in flight until its id wrote there (the service takes an unknown id's first batch
  whatever its sequence). The limit a refusal names (max.message.bytes, segment.bytes) is kept
  by topic and that topic's later batches are split within it before they are sent, so only the
  first goes out in vain. Tests: `tests/integration/client/test_producer_split_batches.py`
  (256 KiB batches into a 64 KiB topic, with and without idempotence, gzip, one refusal for
  many batches, a Hypothesis property over sizes and limits), `tests/unit/seglog/test_batch_split.py`.
  The pieces, the resends behind them and batches split before they are sent go out no more at
  once than the partition's in-flight limit (`SendWindow.queued`, `resending(held=...)`; 25 were
  in flight on one partition, and with idempotence a connection break then sent early pieces again
  outside the service's 5 kept batches); a batch above the service's request limit (announced at
  the stream's open, or named by gRPC's "Received message larger than max") is split the same
  way; a resend waits its backoff unless all it sends is free of one; a request task failing on
  an unexpected error fails its partition's batches (flush and close returned never). Tests:
  `test_producer_split_pacing.py`, `test_producer_request_limit.py`, `test_producer_sender_faults.py`.
  The sender's own faults end in failed batches, never in a wait: a loop that dies fails the
  groups it drained and holds in hand and the batches it put in a window with no request yet
  (flush waited forever on them); a request task cancelled from underneath retries its batches
  as after a stream break, one cancelled by the loop's shutdown (asyncio.run ending, a loop
  thread stopping) is never resent; several batches are packed into a message within every
  request limit known for their connection (the client's, the current stream's announced one, a
  gRPC refusal's there), and a record alone above it fails unsent with RecordTooLargeError (it
  ended the shared stream, retrying every batch in flight on it). Tests: fault injection in
  each loop step and a Hypothesis property over the crash point
  (`test_producer_sender_faults.py`), `tests/unit/seglog/test_message_packing_limits.py`.
- A producer id retired while a partition's window is full (a batch failed for good, or one
  refused out of order with every batch before it written: a sequence the service's state cannot
  resolve) no longer fails the batches behind it: as Kafka's producer since KIP-360, the
  partition's batches the service holds none of (refused out of order past the gap, or never
  sent: in flight, queued, split pieces) go again on the new id in their window order, sequences
  from 0, once nothing of the partition is in flight; one that may have been appended under the
  old id goes first as it was (answered as a duplicate, or refused and then renumbered). A
  batch that may have been appended and is then split (refused as too large: the service checks
  the size before duplicates) leaves pieces no answer resolves: refused out of order, they and
  the batches sent behind them fail as out of sequence, never renumbered (that wrote them twice).
  A renumbered batch keeps its encoded records (header fields and CRC rewritten). Tests on a
  real service, at 1 and 5 in flight, with splits, an appended batch whose answer was lost, and
  Hypothesis properties over where the retirement lands and over answers lost before a split
  (`test_producer_retired_id.py`: every record once, in order, at its future's offset or failed;
  on the code before, the batches behind it failed out of order), with no new id to be had and a
  close while it is awaited; `tests/unit/seglog/test_renumbered_batch_bytes.py`.
  A request limit is the word of the live stream that announced it: an ended stream announces
  nothing, so a service restarted at the same address with a larger limit takes a record the old
  one refused (it failed unsent for good); a gRPC refusal's limit is kept for the connection the
  message went out on and answers its own batch whatever the age limits are kept for; the
  envelope is counted as protobuf encodes it (a record ~40 bytes under the limit failed unsent);
  a loop cancelled by its event loop's shutdown fails what it held in hand. Tests:
  `test_producer_restarted_limit.py`, `test_sender_loop_cancelled.py`, `test_learned_limits.py`.
  The pacing's cost, the trees before the pacing, with it a window at a time and with the refill
  as each answer comes (`SendWindow.refill`) alternately five times (load 0.7-1.2, the command
  below with `--records 200000 --repeats 1 --batch-sizes 16384,262144`): 256 KiB into the 64 KiB
  topic 471 k / 407 k / 497 k records/s (1.41x / 1.34x / 1.57x the same run's 16 KiB), client CPU
  1.35 / 1.89 / 1.66 us a record (queued pieces go a request each, not packed several a message).
  200,000 records into a topic of max.message.bytes 65,536 (`.venv/bin/python
  bench/bench_produce_defaults.py --records 200000 --repeats 3 --batch-sizes 16384,65536,262144
  --topic-config max.message.bytes=65536`, load 5.0): medians 331 k / 529 k / 557 k records/s
  for 16 / 64 / 256 KiB (256 KiB against 16 KiB in each repeat 1.66x / 1.69x / 1.57x), client
  CPU 1.56 / 0.96 / 1.28 us a record, service 1.15 / 0.50 / 0.40. Without the kept limit (every
  256 KiB batch sent in vain, with the batches behind it) the same command gave 110 k, 0.41x
  the 16 KiB rate (load 13.9-16.7).
- Whether a small lookup by time runs inline is decided by the search itself
  (`storage/segment/lookup_budget.py`): the inline attempt, OffsetsForTimes' and now Consume's
  start by timestamp (which ran inline whatever it read or built), searches with a budget of
  `inline_io_bytes_max` bytes and refuses, before the step, to build or extend a time-step
  table, to build a batch directory or record-time table, to decompress a batch, to run a
  segment's first-use check or to read past the bound (a scan's chunks of batch headers,
  MAX_TIMESTAMP's walk of them, a batch read for its records, a batch directory's extension:
  the appends feed the table, not the directory, so refusing every extension sent the first
  lookup after each append to a segment with a directory and no table to the pool); the build
  counters it moved are put back, its stopwatch laps and faults and its index searches (the
  observer's index lookups and pages, the indexes' warm and cold counts), held, are forgotten
  (counted only when it answers: a refused attempt's were counted again by the pool's search,
  `LookupBudget.held_searches`, `AbstractIndex.count_held`), and the
  pool runs the unbounded search. A remote tier attached while the attempt waited for the
  log's lock is checked again under it (the unbounded path searches the store). The estimate that mirrored the build decisions
  (`search_read_bytes`, `LogSegment.time_lookup_read_bytes`) is gone, and with it what it
  missed: decompressed bytes (a gzip batch of 40 KiB of records counted as its few hundred) and
  Consume's start. A build that fits the bound now goes to the pool too, once. A compacted
  topic's (or a timestamp window's) compressed append is decompressed once: the validation's
  area feeds the table. Proven by a Hypothesis differential over random logs and budgets (it
  answers as the unbounded search or refuses, and builds and decompresses nothing when it
  answers: `tests/unit/seglog_server/storage/log/test_bounded_time_search.py`) and placement
  tests (`tests/unit/seglog_server/rpc/test_bounded_lookup_placement.py`). The inline attempt
  on 200,000 records whose tables the appends fed (`PYTHONPATH=. .venv/bin/python
  bench/bench_inline_lookup.py` in the trees before and after, alternately 6 times, load
  5.8-7.7): one target 13.4 -> 7.9 us a call (medians; each pair's after/before median 0.67),
  100 targets 193 -> 154 us (pairs' median 0.99: within the noise).
- Goal 1's small-batch figure (1.45x Redis in the quiet run of 18:24 UTC against 2.22x on large batches) was
  not a per-call cost: per call the two logs cost the same. Its ten calls ran on a fresh service
  (produce in 100-record batches, the 3 s settle), and the first took 2.8-3.7 ms against 0.5-0.95
  for each later one; the bulk log's first, right after its read and single lookups, 0.8-1.6 ms
  (the peers' sequence replayed with each call timed, fresh services, 1,000,000 records, six runs
  a log, 18:45-18:55 UTC, load 2.3-5.4; the rounds after the first 5.4-6.4 ms of ten calls on both
  logs, about 165,000 lookups/s). The service's CPU of that first round was 5.0-7.7 ms against
  2.9-3.6 for the next, nearly all on its event loop's thread; the storage search and adapter
  (`LookupRpcs.offsets_for_times`, timed in the process) 350-460 us on the first call against
  120-150 us later, so most of the excess was the message's way between the processes: 1.8-3.9 ms
  from the client's write to the service's read, or from the service's write to the call's
  return (monotonic stamps in both). Not the client's GC (a `gc.collect()` first: 2.9-4.5 ms),
  not grpc's BDP probe (off: 2.8-3.0), not the small log (ten calls on another topic first: its
  first call 0.66-0.99 ms), not the single lookups (1,000 through `AsyncAdmin` first, another
  connection: 3.2-3.5). `bench/peers` now asks one untimed call (other times) before each
  batched-rate clock, for every system and both logs, its wall time kept in the sample
  (`batched_lookups_warm_up_ms`, `batched_lookups_small_batches_warm_up_ms`), and
  `bench/bench_batched_lookup.py` prints each run's first call beside the rest's median. A/B of
  the workloads on the same service code (`.venv/bin/python -m bench.peers --systems seglog
  --records 1000000 --repeats 1 --latency-records 1000`, six pairs alternately, 18:56-19:03 UTC,
  load 3.7-7.9): small batches 50.8 k -> 113.4 k lookups/s (medians; before 7.8, 53.0, 132.7,
  8.7, 123.6 and 48.5 k, after 177.8, 164.4, 119.7, 107.0, 4.0 and 8.5 k), large batches 139 k ->
  144 k; the warm-up took 0.9-7.1 ms on large batches, 1.9-3.2 ms on small in three runs and
  15, 107 and 11 ms in the others (the last two stalled, below). Redis's figure gets the same
  warm-up: in the quiet run of 19:48 UTC Redis's batched rate rose too (61,390 -> 74,917/s
  against 18:24), so large batches went 2.22x (cold) -> 1.74x (warm), small 1.45x -> 1.82x; in
  the one of 20:38 UTC (the same code for lookups) large 2.11x (157,261/s), small 1.79x: between
  quiet runs seglog's large-batch rate alone moved 130-157 k/s, so goal 1 on large batches sits
  at its line and is not yet met by a margin.
- Goal 1 over 10,000 lookups a figure (a hundred calls of a hundred, the same for Redis; ten calls
  before: `workloads.BATCHED_LOOKUPS`). The quiet run of 23:24 UTC (load 0.1-2.0, the code of
  this page): large batches 2.41x, small 2.43x, met in each repeat (seglog 160, 131 and 120 k
  lookups/s on large batches, 149, 133 and 119 k on small; Redis 55, 64 and 52 k). Part of the
  change is Redis's: its steady rate over a hundred calls (52-64 k/s) is below the ten-call rate
  of the 20:38 run (74.6 k/s), where seglog's moved less (120-160 k against 130-157 k). In that
  run goal 2's p50 was 1.73x the floor (1.36x, 1.73x and 1.81x by repeat; the floor 0.299 ms
  against 0.278 at 20:38, Redis's single lookup 0.165 ms against 0.122): the single lookup's
  cuts of this stop (`lookup_one_in_memory`, the client's layers) are within that noise.
- Goal 1 on small batches, where the time goes (21:44-22:06 UTC, load 1-9 on 2 CPUs). Not the
  storage: with the time-step tables a target of a call of 100 costs 1.3 us of storage CPU on
  100-record batches and 0.9 on 3,436-record ones (`PYTHONPATH=. .venv/bin/python
  bench/bench_batched_lookup.py --storage`, load 6.7-7.8), so a compiled directory hit or a
  record-time table for small batches would save nothing. Per call the two logs cost the same:
  calls of 100 alternating between them on one service (1,000,000 records each, 50 calls a log,
  ten rounds, load 7.1) took 0.692 ms (small) and 0.699 ms (large), medians. Of a steady call
  (about 0.65 ms) the service's event loop spent 0.13 ms in the handler (read to answer built)
  and 0.14 ms in the answer's write (grpc's, its sendmsg inline), medians of 400 calls timed in
  the process; each process about 0.37 ms of CPU a call, where the floor's 1 KiB echo costs 0.19
  (server) and 0.21 (client) and takes 0.31-0.36 ms (load 7.6). Now a batched lookup whose
  targets all first reach one segment is answered from that segment's time-step table in one
  call (`timestamp_lookups._records_in_memory`: the targets as asked, one `step_answers` in C,
  the shared search's laps; anything else takes the shared search, which extends a table behind
  its file): storage CPU of the inline attempt 0.66 -> 0.54 us a target (5,000 batches of 100,
  three alternations, load 6.4) and the handler 0.130 -> 0.094 ms a call of 100 (medians of
  400 calls, three alternations of the service tree without and with it, load 5.8-6.3); end
  to end (`bench/bench_batched_lookup.py --records 1000000 --lookups 20000 --per-request 100
  --runs 3`, four alternations, load 4.1-7.0) within the noise: small batches 125.6, 139.3,
  97.4, 134.1 k lookups/s before, 130.4, 123.4, 112.5, 133.7 k after. Proven equal to the
  shared search and the per-target scans by a Hypothesis differential
  (`tests/unit/seglog_server/storage/log/test_batched_lookup_in_memory.py`; the time-step
  tables' own property over damage, truncation and restarts goes through it too).
- Goal 1's figures alone: `.venv/bin/python -m bench.peers --systems seglog,redis --workloads
  batched --repeats 3 --out /tmp/batched.json` (the bulk produce and its batched lookups on a
  fresh server, the small-batch log on a second one, the same warm-up and times as the full
  run; no read, single lookups, latency or limits). On the loaded machine (22:05-22:16 UTC,
  load 7-11, the service tree without and with the in-memory batched lookup alternately, two
  runs each) the figures spread far more than any change: Redis's batched rate 8.3-89 k
  lookups/s within one run, seglog's 79-195 k on large batches and 22-169 k on small; medians
  of three before 112.9 and 103.3 k (large), 42.6 and 58.9 k (small), after 173.5 and 163.1 k,
  96.6 and 160.2 k. Only a quiet run decides goal 1.
- The cold call (goal 1's "first call"), measured beside the floor
  (`PYTHONPATH=. .venv/bin/python bench/bench_batched_lookup.py --pauses --records 200000
  --per-request 100 --runs 8`, load 5.0): after an idle pause of 10 ms to 1 s a call of 100
  took 1.70-2.07 ms, the next 1.07-1.23 and the third 0.81-1.01 (0.79-1.01 without a pause);
  the floor's 1 KiB round trip after the same pauses 0.72-0.78 ms (1.70 after 1 s), then
  0.32-0.37 (0.33 without). So a pause costs grpc itself 0.4-0.45 ms (1.3 after a second) and
  seglog about twice that: the wake-ups of each side's threads (strace of the service: a
  message goes from grpc's poller thread to a worker (futex), to the completion queue's thread
  (eventfd), to the event loop (a socket), four threads each way, as in the floor) and the
  Python of both sides on cold caches. The handler itself is not it: timed in the service, a
  fresh service's first call of 100 spent 0.42-0.47 ms in it (0.33-1.57 after each pause,
  0.17 steady) while the client waited 2.3-3.4 ms; nor the answer's write (0.04-0.17 ms).
- A Consume stream that has pushed up to the high watermark parks on the partition's next append
  at once: before, it read the log first, a read that could only come back empty (a storage read
  and a consume-buffer reservation a record for a stream keeping up; the ticket is taken before
  the high watermark is looked at, so an append in between is pushed:
  `tests/integration/test_consume_tail_reads.py`, reads at offsets 0,0,1,1,... before, 0,1,...
  after). Counted: 284 -> 264 Python calls a record for a raw ProduceStream and Consume stream and
  the service in one process (a scratch script, 1,000 records one at a time, the same in two runs
  each). End to end within the noise (what `bench/bench_tail_cpu.py --rates 500,2000 --records
  3000` measures, with `PYTHONPATH` at `git archive` trees before and after, run alternately 5
  times, 21:53-21:58 UTC at load 4-7: produce -> consume p50 at 500/s 1.29 -> 1.24 ms (4.3x ->
  3.9x the floor), at 2,000/s 4.64 -> 4.53 ms, service CPU a record within +-15 % run to run).

What remains:

- The producer's renumbering on a new id takes an out-of-order refusal as proof that a batch,
  and every batch of its id after it in the window, was not appended, as Kafka does: were the
  id's state on the partition to expire between two of them (the service then takes a batch
  whatever its sequence), a later one whose answer was lost could be written twice. The pieces
  of a split batch that may have been appended fail as out of sequence (the caller retries):
  the service cannot tell what of them it holds.
- Goal 1's per-call cost outside the storage is now mostly grpcio's: profiled on both sides
  (`.venv/bin/python -m bench.bench_single_lookup --per-call 100 --profile-client DIR
  --profile-service DIR`, load 2.4), the client's grpc.aio `_write` and the service's stream write
  (`OrderedReplies.send`) take most of each side's time, as in the floor (168 and 180 us of CPU a
  round trip); seglog's request, routing and answer conversions are some 10-40 us a call a side.
  What is left to try: the sync `Admin` asking on grpc's synchronous API (no loop thread and no
  poller hop a call). A sync client closing printed "Event loop is closed" from grpc's poller now
  and then (0-8 in 40 open/close cycles): completions of calls cancelled at close reached the
  clients' loop after it closed. That loop is now stopped, not closed, and run again by the next
  sync client (grpc.aio keeps every loop it served for the process's life anyway).
- Goal 1's storage side is about 1 us a target in calls of 100 on the storage bench's
  250,000-step tables (2.4-3.5 us before `step_answers`, same runs): some 0.25 us the table's
  answers in C (mostly a 4 MB table's cache misses; 0.1 us on a table the caches hold).
  `lookup_timestamps` without a negative target now checks, dedupes and reads its answers in
  C-level passes (`UnifiedLog.offsets_for_timestamps` on the storage bench's 3,436-record log,
  100 a call, timed in process by a one-off script: 0.55 -> 0.51 us a target, medians of three
  alternations at load 2.7); what is left a target is the sort and dict of the targets and the callers' pass over
  the outcomes (`offsets_for_timestamps`' error check about 0.1 us, the service's adapter):
  lists from the storage would take those. The single-target path stays at 4.4 us
  (stopwatches, segment choice). A segment restarted or dropped
  from the budget builds its table from the file only after 16 targets a MiB, and a compressed
  batch that raises the maximum leaves the feed to that build.
- The consumer's half of the tail (1.6 ms p50 at load 7) is thread and process wake-ups more
  than CPU: a push crosses the service's loop, its write's completion, grpc's poller and the
  client's loop before the reading thread wakes, each a run-queue wait on 2 busy CPUs. Reading the
  sync `Consumer`'s Consume stream on grpc's synchronous API in a thread of its own (the thread
  fills the buffers and wakes the polling thread, no loop turn) was tried and not kept: its p50
  lost in every pair (`.venv/bin/python -m bench.peers --systems seglog --workloads latency
  --repeats 3`, `git worktree` trees run alternately, 2026-11-27 15:19-15:45, load 8-31). With
  grpc's default stream (its channel thread reads for the iterating thread) p50 21-37x the floor
  against 8-21x, p99 higher in 4 of 5 pairs; with `SingleThreadedUnaryStream` (the iterating
  thread polls the call itself) p50 19.2x against 16.0x and p99 41.1x against 9.9x (medians of 4
  pairs). At 2,000/s the produce -> consume p50 with the loop's reader (kept) is within 0.12 ms of
  the producer's acknowledgement in every run (the push leaves before the answer): the producer's
  half sets the figure. The reading thread on grpc's default stream ran the p50 0.8-4.7 ms above
  the acknowledgement in 4 of 5 runs; on the single-threaded one the p50 stayed at the
  acknowledgement's, which rose instead (5.07 ms against 4.54, medians): one more client thread
  taking the GIL slows the producer's loop more than the loop turn saved gains.
- The producer's half at 2,000/s is the write completions: one message a ProduceStream write,
  each done only when grpc's poller thread and the client's loop have run (1-4 ms at load 9-11,
  where the service appended it long before). Fewer messages (the open batch taking what comes
  meanwhile) is what the client can do on grpc.aio; a producer stream on grpc's synchronous API,
  or two streams' writes overlapped, would remove the hop itself. The open batch kept while a
  write is under way (linger_ms=0) stays: against the same tree without it (the same command, 8
  pairs run alternately, 15:15-15:31, load 2.5-26) p50 3.60 ms against 5.29 (13.7x and 20.1x the
  floor; lower in 8 of 8 pairs) and p99 12.8x against 34.7x (lower in 7 of 8), so the quiet
  run's p99 of 16.8x is not its doing. Step by step (`bench/bench_tail_steps.py --runs 3 --records
  4000 --tree <tree without it>`, load 17-23, medians of the runs): creation -> acknowledgement p50
  4.56 ms against 6.38 (p90 12.0 against 132 ms); from the write's completion to the service's
  append 7 us against 2,363 (each record's batch queued behind the write under way); the write
  itself 0.76 ms either way and the answer's way back to the record's future 1.25 against 1.53 ms:
  those two hops are the producer's half now. A producer stream on grpc's synchronous API does not
  remove them as a bare one is built here (`.venv/bin/python bench/bench_sync_produce_stream.py
  --runs 3`: one batch a record queued to grpc's request iterator, what queued meanwhile joined as
  the message's `more`, answers read in a thread; against `Producer(linger_ms=0)` alternately on
  one service, load 9-10): acknowledgement p50 7-202 ms against 0.9-5.5 ms, p99 93-327 against
  14-117 ms, falling behind at 2,000/s with 1.1-1.6 batches a message (why it backs up is not
  found; grpc's synchronous stream writes each message from a thread of its own and waits for
  its completion). Not pursued in the client.
- Goal 3 needs a quiet machine to be judged at all (`--workloads latency`, a minute a run). The
  acknowledgement one record at a time (`Producer(linger_ms=0)`, 3,000 records, load 19-21): p50
  1.9-2.8x the floor; the client's loop thread spends 350-420 us of CPU a record where the floor's
  client spends 100-140 us a round trip: grpc.aio's `_write` alone about 245 us (80 in the
  floor, the same size of message; its reader task awaiting a read meanwhile is the difference
  left to test) and some 10 loop turns a record against 3-4. Starting the request from the
  caller's thread a turn sooner changed nothing measurable (not kept). Several batches a message
  (above) leave the tail as it was: `--workloads latency --repeats 3`, before and after run
  alternately twice, load 13-19: p50 21.7x and 16.8x the floor before, 16.0x and 18.4x after.
- The "reader task awaiting a read meanwhile" of the note above does not make grpc.aio's write
  dearer: `.venv/bin/python bench/bench_aio_read_pending.py --count 2000 --repeats 4` (the
  floor's server, a 120-byte message, write then read in the task against a reader task with a
  read always pending, interleaved, load 1.3-5.3): the loop thread's CPU a round trip 76 us with
  the read pending against 89 without (0.86x), the write's p50 1.04x; at 2,000/s (`--rate 2000`)
  0.85x and 1.08x. So the ProduceStream keeps its reader task (`caller_reads` would save the
  acknowledgement a loop turn, not the push; not tried). Where the producer's half goes instead:
  `bench/bench_tail_steps.py` now stamps the service's read of each message (`pread`). At load 3.6
  the read returned 0.98 ms (p50) after the client saw its write complete, the append 17 us after
  the read; the read had been issued 0.32 ms after the client's write began (p50 of the
  matched pairs, one run), the message waiting in the transport: the stream read its next message only
  once grpc.aio reported its last answer's write complete, a hop through grpc's poller thread
  and the loop. Now a ready answer starts its write in the read loop's step and is not waited
  for (`OrderedReplies.send`; the write counts as owed until it completes, a later failure ends
  the stream before the next request read is worked on), on both streams, while the answers
  written and not reported complete plus those queued hold under 256 KiB
  (`STREAM_HELD_BYTES_MAX`): a larger answer (a big batched lookup) has its write waited for
  before the next request is read, as before, so a client that does not read holds a stream at
  256 KiB plus one answer instead of 64 answers (a LookupStream of 2 MB answers left unread, the
  service in-process: 3 requests read and 80 MB RSS against 68 requests and 244 MB before, one
  run each; tests/integration/test_stream_held_bytes.py drives it with 430 KB answers). The
  stream serializes each answer itself to count it (`len`; grpc.aio passes the bytes through,
  so one encoding as before): `bench_single_lookup_layers.py --side service --calls` 90 -> 91
  Python calls a lookup on the stream, plus the serializer's own frame inside grpc.aio.
  A raw ProduceStream against each service tree
  (`.venv/bin/python bench/bench_produce_stream_turns.py --tree base=<before> --rounds 6 --count
  400`, interleaved, load 4.8): one message at a time the acknowledgement is unchanged (576
  against 571 us p50: the answer is read before the next message leaves); one message every
  0.5 ms, a batch each, the service falls behind at that load and the acknowledgement p50 is
  18.2 ms against 34.1 (0.53x), the push alike. The goal's workload, the trees run alternately
  (`git worktree` of the commit and its parent, `--workloads latency --repeats 3
  --latency-records 4000`, 5 pairs, order swapped each pair, 19:01-19:05 at load 5.9-8.2): p50
  3.77 ms against 4.88 (medians; lower in 3 of 5 pairs), 18.0x against 19.1x the floor, p99 25.5
  against 78.6 ms; `bench_tail_steps.py --runs 4` at load 6.1-6.5: the read after the client's
  write 2.37 against 2.87 ms, creation -> append 4.25 ms either way. At that load the run is a
  backlog (a batch of two records a request); what each message still pays is one poller hop
  a side to be read and one to have its write reported, the quiet run will say how much.
- Goal 3 is not a saturated thread. Each thread's CPU and wake-ups a record (`.venv/bin/python
  bench/bench_tail_cpu.py --rates 500,2000 --records 3000`; 10 of the 11 runs with the same count
  in a scratch script before it was committed, 2026-11-27 21:45-22:03 UTC, load 4-9 on 2 CPUs,
  floor p50 0.26-0.49 ms): at 500 records/s, where nothing queues, produce -> consume p50 is still
  1.2-1.5 ms in 8 of 10 runs (2.2 in two; 4.0x the floor, the median of the runs' ratios,
  2.8-6.2x) and the acknowledgement 1.3-1.5 ms, while the client's loop thread is 19-28 % busy
  (380-570 us a record) and the service's 21-33 % (430-660 us); at 2,000/s they spend 150-240 and
  190-320 us a record (a wake-up serves several records) and the run is bimodal at that load: p50
  1.3-2.8 ms, or a standing backlog at 4.5-6.3 ms (p99 20-135 ms), the sender's batches waiting on
  the write in flight (grpc.aio writes one message of a stream at a time, and its completion
  crosses grpc's threads and the loop). So the gap is the length of one record's path, in CPU and
  thread hops, not a queue on one thread (at load 7.7, two repeats of `--rates 500,1000,2000`,
  floor 0.39-0.40 ms, the rate hardly mattered: p50 1.22 and 2.50 ms at 500/s, 1.99 and 1.80 at
  1,000/s, 2.02 and 2.73 at 2,000/s); at 2,000/s the whole workload takes about 1.1 of the 2 CPUs
  (client 300, service 250 us a record, all threads), which turns a loaded machine's run-queue
  waits into the backlog. The path at 500/s, step by step (`.venv/bin/python
  bench/bench_tail_steps.py --runs 3 --records 3000 --rate 500`, load 5.3, p50 us): the caller's
  send to the sender's start 174 (the loop thread's wake-up), the write to the service's read 222,
  admission and append 142, the append to the Consume stream's read done 118, its write to the
  client's receipt about 210, the client's receipt to poll's return 205 (the loop's absorb, the
  reading thread's wake-up); the floor's one way is about 150. Wake-ups a record at 500/s: the
  client's loop 2.1-2.9, grpc's event-engine threads 3.9-5.4, its completion-queue thread 2.7-3.6
  (the floor's client: 2.1, 3.4 and 3.3 a round trip), the service's loop 3.6-5.2. What the loop
  threads run (`py-spy record --native`, 500/s): on the client the producer's Python is about two
  thirds of the loop's calls (168 Python calls a record on the loop, 110 of them the producer's
  modules: sender, accumulator, builder, send window, idempotence, turns, transport; the stream
  consumer's about 6: a scratch `sys.setprofile` count), the rest grpc's write (its `sendmsg`, and
  an `eventfd` write waking its own event-engine thread) and the wake-ups of the reading thread;
  on the service the Consume push's write alone is a quarter of the process's samples (`py-spy
  record` without `--native`; with it, half of that write is `sendmsg` and half grpc's `eventfd`
  wake-up), the ProduceStream a seventh. Tried and not kept: the stream consumer on a loop thread
  of its own (3 pairs at 2,000/s, load 4-5: p50 6.19/5.77/4.88 ms against 4.59/5.42/4.87 shared),
  a 0.2 ms GIL switch interval in the client (3 pairs, load 8.5: 1.80/2.83/3.66 ms against
  5.26/3.95/2.41). Left: a push served from the appended batch's bytes (the log read between the
  append and the push is about 100 us of profiled time a record on the service), fewer Python
  calls in the producer's per-record path (the client loop's largest share), and for the backlog a
  way to have a second message under way on a ProduceStream (not possible on one grpc.aio call).
- Goal 3's two thread hand-offs of the synchronous client cost what a bare hand-off costs; the
  steps around them are Python. Stamped (`.venv/bin/python bench/bench_tail_handoffs.py --rate
  500 --records 2000 --runs 4` and `--rate 2000 --records 3000`, 22:18-22:20 UTC, load 5-8, p50
  us of each run): the caller's `send` to its `call_soon_threadsafe` 19-36 (the append), that
  wake-up to the loop running it 32-37 at 500/s (37-109 at 2,000/s), against a bare
  `call_soon_threadsafe` to an idle uvloop thread in the same process of 23-28; the loop's
  wake-up to the batch's request task starting 88-108 (140-456 at 2,000/s: the drain, the
  build, the window, and a loop turn for the task's first step: the producer's Python, not a
  hop); the push received to the stream task's `_notify` 22-41 (the absorb); `_notify` to the
  polling thread's `Event.wait` returning 69-85 when the loop has nothing else to do (41-163 at
  2,000/s), against a bare `threading.Event` set from a uvloop task of 16-39, but 152-361 (289-734
  at 2,000/s) for the 20-45 % of pushes where the loop handles the producer's acknowledgement
  first (the two answers land together): the woken thread waits for the GIL while the loop runs
  the acknowledgement's read and the sender's `_answer` (24-31 us itself); poll's take and
  decode 38-75. The loop is not asleep with a timeout and no wake-up is doubled (one
  `call_soon_threadsafe` per batch opened, as many run; records joining an open batch wake
  nothing). So no hand-off is the gap; what would shorten the path is fewer Python steps on the
  loop per record (the producer's, above) and the acknowledgement not holding the GIL ahead of
  the push. The asyncio client instead (`AsyncProducer(linger_ms=0)` and
  `AsyncConsumer(mode="stream")` on one uvloop loop, paced by `steady_ticks`; `--async`, run
  alternately with the sync one, the floor in the same run): at 500/s it is ahead, the runs'
  ratios to the floor 2.75x against 3.92x (medians; lower in 3 of 4 runs; 6 of 6 in a scratch
  run at load 10, p50 0.88 against 1.08 ms), but at the goal's 2,000/s behind, 11.6x against
  8.1x (lower in 1 of 4; a second run 12.9x against 11.9x, 2 of 4; a third at load 3-5, 12.4x
  against 11.6x, 2 of 4; a scratch run at load 8.4, 11.7x against 6.5x, 2 of 6), everything of
  both clients on one thread: so bench/peers keeps the sync figure alone. Its poll now waits in
  a timeout scope rather than `wait_for`'s task (uvloop: set -> resumed p50 2.4-3.8 against
  5.2-8.2 us, 4-7 us less CPU a wait).
- Goal 3, the three cuts the notes above left (01:00-01:20 UTC, load 5-12 on 2 CPUs; A/B of `git
  archive` trees of the commit before and after, run alternately). (1) A Consume stream parked at
  the tail pushes the batch whose append woke it without reading the log: the append hands its
  change listener the batch as written (`AppendedBatch`), the partition's wake-up ticket carries
  it, and `UnifiedLog.read_appended` answers the read at its base offset as the log would, only
  while no append, roll or truncation has moved the log's version since, the log start is not
  past it and the log's lock is free; anything else reads the log (a Hypothesis property holds
  every answer equal to `log.read` at every max_bytes; a stream served from its appends pushes
  the same bytes as one reading the log). `.venv/bin/python bench/bench_tail_steps.py --runs 4
  --tree A --tree B`: append -> the stream's read done p50 110 -> 56 us at 2,000/s (load 5-9)
  and 111 -> 46 us at 500/s (`--rate 500 --records 2000`, load 5.5-8; lower in 4 of 4 runs);
  end to end within the noise (`bench.peers --systems seglog --workloads latency --repeats 1
  --latency-records 6000`, 3 pairs at load 5.5-9: p50 4.08 against 4.19 ms, medians; again on
  top of (2) and (3), `bench_tail_cpu.py --rates 500,2000 --records 3000`, 3 pairs at load 3.9-5.2:
  p50 0.98 against 0.86 ms at 500/s, 1.56 either way at 2,000/s), the service's CPU a record at
  500/s 410-490 -> 283-387 us (lower in 3 of 3). A batch above 1 MiB is read from the log on the
  pool instead (its join on the loop: 22 us a MiB, 225 us at 8 MiB, against 27 us of the loop's
  CPU for a pooled read's hand-off: medians of 200 timed `b"".join` calls and 300
  `run_in_executor` round trips, 3 runs at load 4.5), the join outside the log's lock; a batch the
  validator rewrote (LogAppendTime, a corrected maxTimestamp) is always read from the log. (2) The
  polling thread no longer waits for the GIL behind the acknowledgement: the service already
  starts the push a loop turn ahead of the ProduceStream's answer (`test_push_before_ack.py`),
  and in the client the push's `_notify` came first too; what held the woken thread was the loop
  going on to the acknowledgement's read and the sender's `_answer` with the GIL. `_notify` now
  calls `os.sched_yield()` (where the platform has it: not on Windows) after setting the event
  of a polling thread that cleared it (an asyncio consumer's never is: it yields once at most).
  `bench_tail_handoffs.py --runs 1`, 3 pairs: `_notify` -> the polling thread's wake p50 109-147 -> 25-37 us at 500/s (load 8.6-12),
  138-576 -> 37-75 us at 2,000/s (load 12-13), the pushes with the acknowledgement handled
  between 25-59 % -> 0.3-13 %; `bench.peers --systems seglog --workloads latency --repeats 1
  --latency-records 6000`, 4 pairs at load 7.6-8.8: p50 2.85 -> 1.52 ms (medians; lower in 4 of
  4), 11.0x -> 5.9x the floor, the acknowledgement 2.7 -> 1.8 ms, p99 43 against 45 ms (the
  load's spikes); `bench_tail_cpu.py --rates 500,2000 --records 3000`, 3 pairs at load 5.8-6.7
  (floor p50 0.28-0.32 ms): at 2,000/s p50 2.43 -> 1.56 ms and p99 42.7 -> 6.0 ms (medians;
  lower in 3 of 3), at 500/s p50 0.92 -> 0.85 ms, the loop thread's CPU a record unchanged
  (400-437 against 387-427 us). (3) Fewer Python calls in the producer's per-batch path: `_batch_bytes_within`
  (a pure function of the request limit, topic and partition, asked for each batch drained) is
  remembered, and the batch builder tests its header and producer fields in one expression (each
  field's own check only names the failing one): a `sys.setprofile` count on the client's
  threads, one record a batch, 235-239 -> 207-216 Python calls a record (C calls 178-180 ->
  141-147); the loop thread's CPU a record (`bench_tail_cpu.py --rates 500,2000 --records 3000`,
  3 pairs, load 5.5-7) 393 -> 373 us at 500/s (lower in 3 of 3), at 2,000/s within the noise
  (193 against 217; records a batch vary). All three together, `bench.peers --systems seglog
  --workloads latency --repeats 3 --latency-records 6000` at load 10-11.7 (01:20 UTC): p50 2.13 ms,
  7.7x the floor, p99 4.9x; the quiet run will say. Left: the producer's remaining Python on the
  loop (about 210 calls a record, grpc.aio's write and read among them), the Fetch long poll
  served from the append alike (not done: goal 3 uses the stream), and for the backlog a second
  message under way on a ProduceStream.
- Goals 2 and 3 (p50 within 1.2x and 1.5x of the floor) are not met. For the single lookup what
  remains above the floor is split about evenly in three (below): the service's stream with no
  lookup in it, the lookup's work on the service, and the client above a bare stream (the
  reader task's hop is gone: above). The service's event-loop thread while serving single lookups
  (`py-spy record --native`, 3,000 lookups on 50,000 records, load ~20): the stream's write 58 %
  (grpc core's `sendmsg` alone 39 %), reading the next message 16 %, the storage search 15 % (its
  stopwatches' `getrusage` calls about 2-3 % of the thread), the RPC layers above it 8 %. That
  sendmsg is no more than the floor's (39 against 34 us a call, `perf trace`), and the floor's
  echo inside a seglog process answers at the floor (0.99x, `bench/bench_lookup_floor_split.py`):
  what remains is the lookup path's and the stream layers' Python, not the process or the wire.
  With the lookup's path shortened on both sides ("What works": 1.62x -> 1.53x at load 4-5), the
  lookup's own Python on the service is about 10 us in process; what is left is the stream's
  layers on the service (the LookupStream with its lookup stubbed 1.07-1.35x in
  `bench_lookup_floor_split`, which swung that much between runs at load 3-5) and grpcio's
  per-message cost on both sides, measurable only on a quiet machine.
- Where the single lookup's gap to the floor lies, by step (`.venv/bin/python -m
  bench.bench_lookup_floor_split --repeats 9`, now with an `admin` case: the same lookup through
  `AsyncAdmin.offsets_for_times`; three runs, 2026-11-27 18:35-18:56, load 2.3-5.9, medians of the
  repeats' paired differences in units of the floor's p50; two runs with a scratch stub in its
  stubbed service: `_lookup_message` answering at once, or the lookup without its bookkeeping):
  the stream's read loop with nothing in a message +0.03, a message's bookkeeping (request slot,
  call gate, principal quota, metrics) +0.08, the lookup itself (RPC layer and storage search)
  +0.17, the client above a bare grpc.aio stream +0.18-0.21; 1.37-1.50x the floor end to end in
  those runs. Counted, not timed (`PYTHONPATH=client:server:. .venv/bin/python
  bench/bench_single_lookup_layers.py --calls`: Python function calls a lookup, builtins
  included, the same at any load): the LookupStream handler on an in-memory stream makes 102 a
  message (13.4 us warm), the floor's echo handler 3 (0.8 us): the lookup 71 (its RPC layer
  about 10, the storage's single-target search the rest, 12 of them its stopwatches' marks and
  laps), the stream's layers 31 (admission, gate and quotas 13). The client on a real service
  makes 170-179 a round trip against the floor client's 97, at the same 4 loop turns (cProfile
  of 2,000 round trips, a scratch script): its admin, router and transport 16 (2.7 us warm),
  the loop's arithmetic for the request timeout's timer 7, the RequestStream's ask about 50
  (write lock, write driver, the caller's read and its stand-in, timeout watch). In the ping-pong
  each costs several times its warm time (caches cold between messages, 2 CPUs shared with the
  other side): no single cut is left, goal 2 needs about half of each side's Python gone. The
  largest blocks: the storage's single-target search answered from memory, the message's
  admission (a slot taken and given back where a check would do when it answers without
  waiting), the client's ask. The read loop now makes no coroutine to wait for room or recheck
  the stream's rights when neither is due (103 -> 102 calls a message; end to end within the
  noise: `.venv/bin/python -m bench.bench_single_lookup --records 50000 --lookups 3000 --repeats
  3 --tree base=<before> --tree after=<after>`, two runs with the order swapped, 18:43-18:48,
  load 5.7-6.3: p50 1.64x and 1.37x the floor before, 1.62x and 1.57x after).
- The single lookup's storage search answered from memory in one step: for a target >= 0,
  `UnifiedLog.lookup_timestamp_inline` first asks `timestamp_lookups.lookup_one_in_memory` (the
  first segment reaching the target by the running maximum, the active one's largest timestamp
  read without `_load_max_timestamp` once known; that segment's time-step table answered in C,
  `LogSegment.answer_from_time_steps`; the segment touched; its two laps, `segment_lookup` and
  `index_search`, counted once it answers from three clock reads, `observer.count_laps`): no
  LookupBudget, held stopwatch, release or per-segment loop. Anything else (no table, a step
  below the log start or past the table, no record in that segment, the log start's segment
  after it) takes the bounded search as before; a fault in the segment choice answers as that
  search does. The same series exported (the laps counted once each, no fault count on this
  path, as before). Held to the unbounded search by the bounded search's Hypothesis
  differential (its single lookups too; 18 % of them answered in memory there), the laps by
  `test_a_single_lookup_answered_from_memory_counts_the_laps_of_the_search`. Counted
  (`PYTHONPATH=client:server:. .venv/bin/python bench/bench_single_lookup_layers.py --calls`):
  the lookup 69 -> 45 Python calls, the LookupStream handler 92 -> 68 a message; the client's
  admin, router and transport 16 -> 12 (the transport's stream not looked up again, the
  router's sole channel and answer list inline) and the ask's timeout watch one fewer (cProfile
  of 2,000 round trips, `bench_single_lookup --profile-client`: 123.2 -> 119.6 calls outside the
  loop's machinery). In one process (`bench_single_lookup_layers.py --in-memory`: the storage
  call with and without the step, alternately, four runs at load 5.7-8): 0.53-0.63x (e.g. 11.9
  -> 7.2 us). End to end within the noise: `.venv/bin/python -m bench.bench_single_lookup
  --records 50000 --lookups 3000 --repeats 5 --tree before=<HEAD with these commits reverted>
  --tree after=<HEAD>`, three runs (two with the order swapped, one with the stop's start
  5833f8a beside them), 2026-11-27 21:59-22:03 UTC, load 5.5-8.0: p50 1.43x, 1.49x, 1.49x the
  floor before, 1.51x, 1.51x, 1.42x after (5833f8a 1.42x), the median of the fifteen pairs'
  after/before 1.00 (0.84-1.45); service CPU a lookup 297 / 283 / 263 us before, 290 / 270 / 267
  after. At that load a round trip's p50 moved 0.25-0.38 ms between repeats: a cut of some 25
  calls on the service and 4 on the client is below what such a run resolves; the quiet run
  will say. Goal 2 stays unmet: what is left of the lookup on the service is its RPC layer
  (about 20 calls: the partition's log found, the inline bound, the counts) and the stream's
  layers; on the client the ask (write lock, the caller's read hand-over, futures).
- Three of the single lookup's named blocks cut, counted (Python calls a lookup, the same at any
  load): a LookupStream message nothing binds (no reload since the stream's last check, no ACL
  over lookups, no byte quota, a free request slot and room under the principal's cap) is
  admitted by a check, its slots taken only if its lookup waits (the pool), for as long as it
  waits, and a found answer skips two isinstance calls: the service's handler 102 -> 90 calls a
  message (`PYTHONPATH=client:server:. .venv/bin/python bench/bench_single_lookup_layers.py
  --calls`). An ask with nothing under way on its stream writes without `send` (the free lock
  taken before anything is owed, no future of its write): the client 121 -> 116 calls a round
  trip outside the loop's own per-turn calls (cProfile of 2,000 lookups, `bench_single_lookup
  --profile-client`; the loop's turns a round trip moved 2.6-4.0 between runs with the load, so
  the total is not a stable figure). End to end within the noise: `.venv/bin/python -m
  bench.bench_single_lookup --records 50000 --lookups 3000 --repeats 5 --tree base=<HEAD with
  these commits reverted> --tree after=<HEAD>`, two runs with the trees' order swapped,
  2026-11-27 19:10-19:11, load 5.9-7.0: p50 1.51x and 1.57x the floor before, 1.42x and 1.36x
  after, the median of the ten pairs' after/before 0.98 (0.76-1.38); client CPU a lookup 249 /
  228 us before, 233 / 243 after. What the ask still spends: the write lock (asyncio.Lock's
  acquire and release, 4 calls), the answer's future, the caller's read hand-over object (4), the
  timeout's watch (9); the admin, router and transport 16; what the goal needs is still half of
  each side's Python, not one block.
- What the single lookup's ~0.2 ms above the floor is, per thread, in one run
  (`.venv/bin/python -m bench.bench_lookup_gap --records 20000 --round-trips 3000 --repeats 5
  --threads`: the floor; a server of handlers each a step nearer the LookupStream; the service,
  once plain and once with timers in its loop thread; raw grpc.aio clients and `AsyncAdmin`, each
  case in a fresh client process; each server thread's CPU and context switches a round trip
  from /proc; 2026-11-28 01:42-01:44 UTC, load 5.5-6.4, medians of 5 interleaved repeats). Not
  a thread waking on its own: over the same wall time with no request each server's threads
  spent nothing (0.01 wakes a round trip's share), and during the ping-pong grpc.aio's poller
  (27-37 us, 2.4-3.0 wakes) and its four event_engine threads (13-17 us, one wake each) cost
  the same in the floor's server, the handlers' and the service. Not the stream's shape: the
  service's own `OrderedReplies` writing an empty answer 1.04x the floor (its loop thread 83 us
  a round trip against the floor's 73), the awaited write 0.93x, the write's rest driven by
  callbacks instead of a drainer task a message 1.00x (70 us); the client's write started
  unawaited as `RequestStream.ask` starts it 0.86x. The excess is all on the two loop threads,
  and it is their Python running cold: a canned LookupStreamResponse 1.13x (loop 103 us), the
  service 1.23x (143 us), through `AsyncAdmin` 1.47x. Timed inside the service's loop thread,
  a message's handler costs 35-39 us of thread CPU (wall the same: no GIL wait, no preemption
  in it) and its lookup 24-27 us, where in a warm loop in process they cost 19.6 and 11.4
  (`bench_single_lookup_layers.py`, same hour, same load); the same lookup asked again at once
  within the message costs 11.5 us, its warm figure. Between two messages each CPU runs the
  other process, the kernel's loopback path and grpc's threads, so each message's Python starts
  on cold caches at about twice its warm cost, on both sides: that is why 24 calls fewer (about
  3 us warm, 6-7 cold, 2 % of a round trip) moved nothing a run at this load resolves. With
  every server thread held on one CPU and the client on the other (`--pin`, 01:45-01:48, load
  3.9-4.7) the floor is 0.205 ms and the lookup as far above it (`AsyncAdmin` 1.46x), the
  lookup still 21.6 us against 10.0 asked again: the caches go cold within each side's own
  round of kernel and grpc threads, not only from sharing CPUs. The client alike: `AsyncAdmin`
  above a raw client on the same canned server spends 37 us more CPU a round trip where its
  layers cost 4.6 us warm; the client's split is below this machine's noise, though (7 repeats,
  01:48-01:50, load 2.8-4.6: a raw client 1.41x, `RequestStream.ask` on the transport's stream
  1.22x, `AsyncAdmin` 1.41x, where the run above had 1.23x and 1.47x). Tried on that evidence
  and not kept: `OrderedReplies` driving the head answer's write by its futures' callbacks, no
  task an answer
  (`.venv/bin/python -m bench.bench_single_lookup --records 50000 --lookups 3000 --repeats 5
  --tree base=<HEAD> --tree after=<HEAD with it>`, six runs with the order swapped, 01:31-01:42,
  load 3.5-6.6: 30 pairs, p50 after/before median 0.99, lower in 16; service CPU 0.97, lower in
  18). What goal 2 needs is each side's per-message Python cut to a fraction, not by calls:
  fewer distinct code paths and objects touched a message (each cold), or the LookupStream's
  one-target message answered below Python.
- What the single lookup pays above the floor is Python, not gRPC: `strace -c -f` on each server
  during 3,000 round trips counts the same system calls a lookup as a floor message (3,236 and
  3,238 sendmsg, 12,811 and 12,803 write, 6,475 and 6,458 recvmsg, the epoll waits alike), plus
  two getrusage (the storage's stopwatches) and 1.4 more futex (the loop thread and grpc's poller
  handing the GIL over). On the service's loop thread (`bench/bench_single_lookup.py
  --profile-service DIR --native`, the floor's server sampled in the same run; idle waits left
  out) a lookup's own work (`_lookup_message`: RPC layers and storage) weighs as much as the
  write's `sendmsg`; the stream's per-message bookkeeping (admission, call gate, metrics) is
  under 3 % of the thread, its stopwatches' getrusage under 2 %. The garbage collector is not
  it either (a gc callback in each process: the service collected nothing during 3,000 lookups,
  the client once, a full collection of 60 ms: one sample past the p99). A
  RequestStream write now starts in the caller's step (the first step of grpc.aio's write runs
  at once, the rest in a task, so no await point for a cancellation): one loop turn fewer, but
  within the noise at load 8-11 on 2 CPUs (`.venv/bin/python -m bench.bench_single_lookup
  --records 50000 --lookups 3000 --repeats 3 --tree base=<before> --tree after=<after>`, four
  runs with the trees' order swapped, 12 interleaved pairs, 2026-11-27 12:22-12:25): p50 1.91x
  the floor before and 1.87x after (median of the pairs' after/before 0.99), client CPU a lookup
  median ratio 0.92; p99 1.51x before, 1.78x after (after above before in 8 of the 12 pairs, but
  at that load the floor's own p99 ran 0.46-5.2 ms: the run queue's).
- Where the single lookup's gap to the floor lies, in one run (a one-off script: the floor's
  server and client; a bare grpc.aio client writing a LookupStreamRequest and reading its
  answer, against the service and against the same service whose `_lookup_message` returns a
  built answer at once, with no admission, storage or metrics; `AsyncAdmin.offsets_for_times`;
  3,000 round trips each, 5 interleaved repeats, load 17.5-19): p50 1.00 / 1.49 / 1.25 / 1.72x
  the floor, service CPU a message 137 / 230 / 203 / 247 us. So a third of the gap is the
  service's stream with no lookup in it (some 66 us of CPU a message above the floor's
  handler), a third the lookup's work on the service (some 27 us), a third the client above a
  bare stream. The floor's server with the service's gRPC options and
  `maximum_concurrent_rpcs`, or with `context.read`/`context.write` and initial metadata in
  place of its generator, costs what the floor does (same run style, load 16-18): neither is the
  stream's excess. `py-spy --native` puts most of it in the write's `sendmsg` (1,639 samples on
  the service's loop thread against 445 on the floor's for the same 3,000 messages, as many
  calls, 60-byte against 40-byte payloads); why is not yet known. Left on the client: the
  transport's copy of the request into the stream message (1.7 us; the admin could build the
  stream message, through the router) and the admin, routing and transport layers; on the
  service the two getrusage a lookup when the time-step table answers (the table's call site in
  `log_segment.py`).
- Goal 1: with the batch directory a target's storage search is a bisection, a 61-byte read and a
  table's bisection, some 10 us of Python at load 8-10 (a run of calls each: the table cache's
  lookup, the header check, the answer objects); moving that run into C, or trusting the
  directory's entry without the header read, would take most of it. A segment only asked single
  lookups builds no directory (they keep the index searches and scans). The rest of each lookup's
  cost is the client's routing and the adapter's per-target conversions: on both sides now mostly
  upb's per-field cost (a target is a message of three fields, an answer one of four): now the
  packed form's (above) from eight targets a call, sixteen a partition; left per target there
  are the service's loop over the storage's outcomes (an isinstance and two attribute reads:
  lists from the storage would take it) and the client's answer tuples (about 0.2 us each). The inline
  cap of a call's targets on the service (`_INLINE_LOOKUPS_MAX`) was 64: at 128 a call of 100
  targets spent 2,125 us of service CPU against 2,375 us pooled (one run, load 20, before the
  directory), but inline it holds the event loop for the whole search (about 1 ms a call at 10 us
  a target); worth raising once the per-target search is a few microseconds. With the packed
  form, 64 against 256 (`bench/bench_batched_lookup.py --per-request 100`, four alternations,
  load 8.5-10): service CPU a call of 100 a median 800 us either way on large batches, 1,875
  against 1,475 on small, where inline would hold the loop some 1.5 ms a call: kept at 64 then.
  With the time-step tables (a few us a target), again four alternations at load 6.3-8.6: service
  CPU a call 525 -> 400 us on large batches, 700 -> 475 on small, lookups/s 85.7 k -> 89.4 k and
  83.0 k -> 99.6 k: raised to 256.
- Goal 1: a call after an idle pause pays the wake-up of grpc's threads on both sides (the
  floor's own 0.4-0.45 ms, above) and about as much again of seglog's Python on cold caches; a
  fresh service's first call of 100 2.3-3.4 ms, the handler 0.4-0.5 of it: the rest of that
  excess over a pause's is not located (grpc's first messages of that size on the stream, as far
  as it shows). The small-batch figure is ten calls after one warm-up call, and the second call
  after a pause still costs 0.2-0.4 ms more than the third (above): a figure of ten calls moves
  by that much from run to run; a longer warm-up or more calls would measure the steady rate
  (both peers alike), not done here. Per call the small batches cost what the large do. And at load 4-8 the small-batch lookups stalled 100 ms or
  more in 4 of 12 runs of `bench.peers --systems seglog` (4.0-8.7 k lookups/s, without the
  warm-up and with it alike); the large batches' once (9.5 k). One traced (the peers' sequence,
  the bulk service stopped just before, load 5.7): 62 ms between the client's write of a call's
  message and the service's read of it, with no collection in either process's GC then (the
  service's one gen2 collection, 43 ms, came later, between calls): a process waiting for a CPU
  on a loaded machine, as far as it shows. The first call there took 2.9-13.3 ms (four runs).
- Lookups measured right after a large produce ran at a fraction of their rate while the topic's
  flush (an fdatasync of the ~130 MB just written) ran on the storage pool: the benchmark now
  waits for it; why lookups slow down so much during a flush is not yet known.
- The bounded lookup by time charges what it reads and refuses what it would build, but not the
  index searches (mapped files: a page fault each at worst) nor the segments' running maximum
  rebuilt after a roll or a deletion (one question a segment).
- Goal 4 with every client default: the produce's ratio to Redis on a quiet machine (CPU a record
  now 2.0-2.8 us client, 1.7-2.4 service, against 1.1 and 0.8 with 512 KiB batches: the
  per-batch build, window and append remain); the catch-up read of a log of 16 KiB batches
  (client CPU 1.9 us a record after the change above) now waits on the
  Fetch round trips and the service: a larger default fetch ahead (several Fetches in flight, or
  the Consume stream as the default mode) is what is left to try, on a quiet machine.
- A ProduceStream batch nothing binds (no reload since the stream's last check, no ACL over
  produce, no produce byte rate for the principal, a free request slot and room under the
  principal's cap) is admitted by a check, as a LookupStream message is: its slots are taken only
  if its append waits (the pool, a busy log), for as long as it waits. Counted: the handler's
  Python calls a batch outside the append 23 -> 11 (sys.setprofile over `_produce_message` with
  the append stubbed). End to end within the noise: `bench/bench_produce_defaults.py --records
  300000 --repeats 2`, before (a worktree of the commit before) and after alternately 6 times,
  order swapped after 3, 20:02-20:04, load 1.8-2.7 with a CI run going: medians 331 k -> 348 k
  records/s, service CPU 1.44 -> 1.35 us a record (lower in 3 pairs of 6), ratio to Redis 3.45x
  -> 3.50x (Redis itself moved 69-114 k/s under the load). The quiet runs: 2.87x at 19:48 UTC
  (before this change), 3.65x at 20:38 (after it; 397,291 records/s, Redis 108,719/s), so every
  default's figure is over its line in that run; one run of each, so the share of this change
  in it is not known.
- Produce with every client default, traced (the sender's writes and answers timestamped, 300,000
  records through `send_many` as bench/peers does): the producer and the service took turns. An
  idempotent producer has 5 batches of a partition in flight (Kafka's limit); an answer freed all
  5 at once, the loop drained them into one message and encoded them there (70-80 us each), so
  560 of 562 messages carried 5 batches and exactly one was in flight: the service idled while
  the client encoded, the client while the service appended. Now a closed batch is encoded while
  its partition's window is full (`ProducerBatch.encode_ahead`, from `RecordAccumulator.drain`, at
  most 5 a partition, their encoded records held once, in the form the batch carries, from
  encoding until the batch is built, within a quarter of buffer_bytes and at most 64 KiB encoded
  a drain: `ENCODE_AHEAD_BYTES_PER_DRAIN`),
  and sending it once an answer comes writes only its header and CRC (the producer's fields are
  given after the records: `RecordBatchBuilder.set_producer`, `seal`); proven equal to a batch
  built at once by Hypothesis (`tests/unit/seglog/test_batch_encode_ahead.py`). The answer -> next
  write gap 428 -> 207 us (medians, the trees alternately five times, load 2.3-2.9); on the
  service an indexed append (every 16 KiB batch is one) did six fstats of its indexes' length
  check, now four (the roll check's counts touch no mapped page; the reservation before the
  write keeps its check, so an index cut from outside refuses the append before its batch is
  written: a review found the refusal had moved after the write with the reservation's fstat
  skipped). Both together, `PYTHONPATH=<tree>/client:<tree>/server
  .venv/bin/python bench/bench_produce_defaults.py --records 300000 --repeats 2`, the tree before
  and after alternately three times (load 3.3-5.8, Redis itself at 40-90 k/s there): 221 k -> 305 k
  records/s (medians of the runs' medians), the ratio to the same run's Redis higher in each
  pair (3.51 / 4.49 / 3.24 -> 3.72 / 4.60 / 3.41); a lighter script of the same produce alone,
  six alternations at load 2.8-3.4: 279 k -> 318 k. The CPU a record was unchanged (client 1.8-2.6
  us, service 1.3-1.7: the encoding moved, it did not shrink; see the C encoder below). What
  bounds it now: one message of
  5 batches in flight, so a cycle is the service's append of 5 batches (550-700 us) plus the
  client's turn (about 200 us: settling 5 batches, the drain, the message built and written, a
  loop turn or two between each); splitting the window into two messages (3 + 2, so the client
  refills while the service appends) ran no faster in 4 alternations (more messages, each
  about 100 us of grpc.aio CPU a side). Some runs also fall into a regime where the 80 KiB
  message's write completes only with its answer (write 700-800 us instead of 150-200, 20-30 %
  fewer records/s; HTTP/2 flow control is the suspect: gRPC's `grpc.http2.lookahead_bytes` of 4 MiB
  on the service changed nothing in 4 alternations).
- The producer's records are encoded in C where the install built it (`seglog.records._encode_c`,
  an optional extension beside `_walk_c`, used by `RecordBatchBuilder.extend` for a run of records
  sharing a timestamp; the Python paths where it is not built, and for what it leaves to them),
  proven equal to the Python encoder by Hypothesis (`tests/unit/seglog/records/test_encode_compiled.py`):
  a 120-record batch builds in about 13 us against 50-108. `.venv/bin/python
  bench/bench_produce_defaults.py --records 300000 --repeats 2 --batch-sizes 16384,524288`, the
  tree before and after alternately twice (load 4.6-6.8): client CPU a record 1.90 / 2.02 -> 1.38
  / 1.64 us with 16 KiB batches, 0.86 / 0.95 -> 0.55 / 0.55 with 512 KiB; records/s 315 / 252 k ->
  382 / 351 k and 811 / 1,016 k -> 1,377 / 1,084 k (noise at that load; the encoding was off the
  16 KiB path's turn already). Left for goal 4 with every default: the service's per-batch path
  (about 130 us of CPU a 16 KiB batch beside 40 us of `Log.append`: the stream's read and answer,
  the admission and gate, the observer's page-fault marks), the client's turn between an answer
  and the next write (`_sender.py`), and a quiet run to read the ratio.
- The quiet run of 14:07 UTC (load median 1.46, the benchmark's own) against
  the one of 10:48 the same day (load median 1.53), same command: batched lookups 0.47x -> 1.86x
  Redis on large batches and 0.22x -> 1.68x on small ones (the time-step tables and the packed
  form); single lookup p50 1.94x -> 1.66x the floor, p99 2.57x -> 1.34x; produce -> consume p50
  9.1x -> 6.4x, p99 11.9x -> 16.8x (8.66 ms: the p99 grew, not yet explained; the linger-0 hold
  of an open batch while a write is under way is the first suspect to A/B on a quiet machine);
  every-default produce 2.46x -> 3.19x (16 KiB batches; 276,810 records/s), tuned produce 5.80x ->
  10.95x. Goal 1 now stops at the calls' fixed cost: 100 targets a call, ten calls, each one
  stream message each way through grpc.aio on both sides (the floor's bare round trip alone is
  0.315 ms of the 1.05 ms a call).
  Fewer, larger calls (the admin splitting a caller's list as it likes) or the per-target
  conversions in C are what is left to measure.
- Produce with 16 KiB batches (Kafka's batch.size, the client's default) is capped by the window of 5 batches a partition (Kafka's
  limit with idempotence, and the service keeps 5 batches a producer to answer a resent one):
  its messages carried 2.5 batches on average. 16 batches in flight (`max_in_flight_per_partition=16`,
  which an idempotent producer now refuses, as Kafka's does) ran 277 k against 227 k records/s
  with 10 % less client and 25 % less service CPU a record (3 alternations, load 7.4-8.0): more
  batches a message needs the service to keep more batches a producer (`BATCHES_RETAINED`). The
  per-record `send` path is about 1 us of CPU a record in `append_plain` (the lock, three list
  appends, the clock, the RecordFuture; the client-only row of `bench/bench_client.py --sections
  client-only`: 1.8 us at load 10).
- A default batch_size of 256 KiB (about 2.7x the rate of 16 KiB above) was tried and taken
  back: a topic whose max.message.bytes lies below the batch size refused every full batch. The
  producer now splits those and keeps the topic's limit (above: 256 KiB into a 64 KiB topic ran
  1.68x the rate of 16 KiB), so a larger default no longer loses records there; it stays Kafka's
  16 KiB until a quiet run of bench/peers weighs 256 KiB on every workload (the rows above name
  16 KiB; keyless records would stay on one partition for 256 KiB at a time).
- Split pieces queued beyond a partition's in-flight limit go a request each (1.35 -> 1.66 us of
  client CPU a record for 256 KiB batches into a 64 KiB topic): packing the refill's pieces several
  a message, as drained batches are, is not done.
- The before/after figures in these notes were measured while other engineers' test runs shared
  the machine (each with its load): they are A/B ratios within one run, not figures to quote. The
  tables at the top of this page come from the full run named there, made with the machine
  otherwise idle (its load is in "The run").
- Goal 1 between two quiet runs (the same command, 2026-11-27 23:24 and 2026-11-28 02:29 UTC,
  load 0.1-2.0 and 0.4-2.3): seglog's batched rate stayed where it was (large batches 120-160 k/s
  by repeat, then 127-146 k/s; small 132.6 k then 144.7 k median), Redis's steady rate did not
  (52-64 k/s by repeat, then 73-86 k/s), so the ratio went from 2.41x to 1.66x (small batches
  2.43x to 1.81x): met in the first run, not in the second. Redis's own rate moves 1.5x between
  quiet runs of this machine; the goal wants seglog's rate up, not a run where Redis is slow.
  In the second run goal 3 came to 3.20x the floor at p50 (0.907 ms; 6.12x in the first): the
  push served from the appended batch and the polling thread handed the GIL at the push (above).
- The run of 2026-11-28 05:52 UTC (code of this page's run, load 1.2-2.1) ran on a slower
  machine than the one of 02:29 the same day: the floor's p50 0.283 -> 0.361 ms and Redis's batched
  rate 79,922 -> 32,633 lookups/s (its produce and read fell too), while seglog's batched rate went
  132,990 -> 116,819 (large batches). So goal 1 shows met there (3.58x, small batches 3.09x) by
  Redis's fall, not by seglog's rise: not a figure to quote. Goals 2 and 3 read 1.54x and 6.36x the
  floor at p50 (p99 1.59x, 15.2x); goal 3's latency path was not changed since the 02:29 run
  (3.20x), so that spread is the machine's, a quiet run to say which.
- Goal 1 work in this stop, each A/B-ed in interleaved pairs at load 6-12 (others' tests running):
  the admin's answers to a packed lookup built in C (`seglog._answers_c`, the Python reference
  where it is not built, Hypothesis-differential): the reader of 100 answers 0.48x its time, the
  client's CPU a call of 100 (synchronous Admin) 0.865 and 0.927 the before in two runs of 6
  pairs, the AsyncAdmin's not resolved; a one-partition request's timestamps written as the packed
  field's bytes in C: `_packed_request` of 100 targets 0.58x in process, end to end within the
  noise (wall lower in 24 of 36 pairs); a call's one target of a partition answered by the single
  lookup's path (`LookupRpcs._search_one`): the service's CPU a call of ten partitions 0.796 (8 of
  8 pairs; `bench/bench_lookup_service_ab.py --shape spread`). Tried and not kept: a batched
  call answered in one in-memory step of the log (service CPU 0.967, lookups/s not resolved),
  `sys.setswitchinterval(0.0005)` (wall 1.025), grpc's `event_engine_endpoint` experiment off
  (1.04-1.08), grpc's synchronous stream API (no better wall). The synchronous Admin's hand-off to
  its loop thread costs 50-65 us of wall a call (two cross-thread wake-ups: the caller blocks on a
  lock, then for the GIL); what remains of a call's client CPU is mostly grpc's write and its
  poller thread's wake-up, as in the floor. The storage's "1.9 against 1.0 us a lookup" on 100-
  against 3,436-record batches did not reproduce in a clean process (about 0.6 us a target both).
- What the transport alone allows goal 3 (`.venv/bin/python bench/bench_tail_relay.py --records 4000
  --repeats 5`, 2026-11-28 08:30-08:33 UTC, load 0.7-1.6, nothing else running): goal 3's shape with
  nothing of seglog in it, a grpc.aio relay on uvloop whose bidi Produce acknowledges each message
  and pushes it to every open Consume-like stream, raw bytes, beside seglog's own goal-3 workload
  and the floor of each repeat. At 2,000/s, medians of 5 repeats (ratios to the repeat's floor): the
  relay driven from one uvloop loop p50 1.31x, p99 4.24x (p99 within 3x in 2 of the 5 repeats,
  2.33-125x); driven in the synchronous client's thread shape (the caller's thread hands each
  message to a loop thread, a reading thread is woken by a `threading.Event`, as `Producer` and
  `Consumer` are) p50 1.60x (within 1.5x in 2 of 5), p99 11.9x (3.24-23.4x, never within 3x);
  seglog p50 7.20x, p99 20.7x. So goal 3's p99 bound is below what the transport itself holds on
  this machine in most repeats, whatever the service and client do, and its p50 bound is below the
  relay in the shape bench/peers drives: it cannot be met as written; measured against the relay in
  the same shape, seglog is 4.6x at p50 (2.25 against 0.487 ms). The floor itself moved 0.217-0.345
  ms between repeats of that quiet run. CPU a record at 2,000/s: the relay 305-312 us on the server
  and 398-409 us in the client, seglog 365 and 545 (at 500/s, where no two records share a
  message, 400-442 and 541-684 against 860 and 1,230): seglog's CPU is not what puts it 4.6x
  above the relay. What does, by `bench/bench_tail_steps.py --runs 2 --records 4000` at load 1.0:
  a record waits 703 us p50 in the producer before its request starts (the relay's hand-off:
  tens of us), and the ProduceStream's write takes 536 us p50 to complete (the relay's write in
  the same thread shape: 106-124 us p50, measured the same way) while the acknowledgement comes
  back 1.1 ms after the append: the next cut is the producer's write path on the client's loop,
  not the service. Under load (other engineers' tests, load 7-8) the relay, one message a record,
  fell behind without bound (p50 72 ms from one loop, 546 ms in the thread shape) where seglog,
  whose producer puts what waits into one request, held 7.2 ms. A quiet rerun of goal 3 alone
  (`bench.peers --systems seglog --workloads latency --repeats 3 --latency-records 6000`, 07:11 UTC,
  load 0.7) read 8.53x the floor at p50 (2.57 ms) and 18.7x at p99, the acknowledgement 2.74 ms;
  `os.sched_yield` in the consumer's `_notify` made no difference there (6 interleaved pairs at
  2,000/s: 6.89x with it, 8.82x without, medians).
"""


def _notes(report: dict) -> list[str]:
    return NOTES.splitlines() + [""] if "lookup_p50_over_floor" in report["median"].get(BASELINE, {}) else []


def _bounds(report: dict) -> list[str]:
    records, lookups, limits = report["records"], report["lookups"], report["limits"]
    kinds = report.get("disk_by_kind_last_repeat", {})
    lines = ["## What bounds each figure", "",
             "Computed from the same run: CPU seconds from /proc/<pid>/stat (server, with its reaped children) and "
             "getrusage (this client process, all threads) over each workload's wall time; the lookups and latencies "
             "against the empty gRPC call; the bytes per file kind the server left on disk. On a loaded machine a "
             "process waits for a CPU too, so its CPU share of the wall time understates the work it would do alone.",
             ""]
    for name, figures in report["median"].items():
        title = NAMES.get(name, name)
        lines.append(f"### {title}")
        lines.append("")
        for phase, label in (("produce", "produce"), ("read", "catch-up read")):
            bound, detail = bounds.throughput_bound(figures, phase, records, limits, _oversubscribed(report))
            lines.append(f"- {label}: **{bound}**, {detail}.")
        if name == BASELINE:
            bound, detail = bounds.lookup_bound(figures, lookups, limits)
        else:
            bound, detail = bounds.peer_lookup_bound(figures, lookups)
        lines.append(f"- time lookup: **{bound}**, {detail}.")
        bound, detail = bounds.batched_bound(figures, lookups)
        lines.append(f"- batched time lookups: **{bound}**, {detail}.")
        lines.append(f"- produce -> consume: {bounds.latency_bound(figures, limits)}.")
        lines.append(f"- disk: {bounds.disk_breakdown(figures, kinds.get(name, {}), records)}.")
        lines.append(f"- memory: {bounds.memory_breakdown(figures)} "
                         f"({bounds.rss_growth_bytes_per_record(figures, records):,.0f} bytes per record stored).")
        lines.append("")
    return lines


def _moves(report: dict) -> list[str]:
    """For each goal seglog misses: what bounds it and what would move it."""
    if BASELINE not in report["median"] or not report["advantage"]:
        return []
    seglog = report["median"][BASELINE]
    records = report["records"]
    lines = []
    for figure in (f for f in FIGURES if f.goal):
        behind = [p for p, ratios in report["advantage"].items() if (ratios[figure.key] or 0) <= 1]
        if not behind:
            continue
        against = " and ".join(NAMES.get(p, p) for p in behind)
        if figure.key in ("produce_records_per_s", "read_records_per_s"):
            phase = figure.key.split("_")[0]
            bound, detail = bounds.throughput_bound(seglog, phase, records, report["limits"], _oversubscribed(report))
            move = MOVES[(figure.key, bound)]
            lines.append(f"- {figure.label}, behind {against}: bounded by {bound} ({detail}). Would move it: {move}.")
        elif figure.key == "disk_bytes_per_record":
            lines.append(f"- {figure.label}, behind {against}: "
                         f"{bounds.disk_breakdown(seglog, report.get('disk_by_kind_last_repeat', {}).get(BASELINE, {}), records)}. "
                         "The .log bytes are Kafka's v2 record format; would move it: compression of the batches.")
        elif figure.key == "server_rss_mb":
            for peer in behind:
                figures = report["median"][peer]
                crossover = bounds.rss_crossover(seglog, figures, records)
                where = (f"{NAMES.get(peer, peer)}'s RSS grew by {bounds.rss_growth_bytes_per_record(figures, records):,.0f} "
                         f"bytes per record stored: growing so, it would pass seglog's at about {crossover:,} records"
                         if crossover else f"{NAMES.get(peer, peer)}'s RSS did not grow with the data")
                lines.append(f"- {figure.label}, behind {NAMES.get(peer, peer)}: seglog's "
                             f"{bounds.memory_breakdown(seglog)}; the idle part is the Python server process "
                             f"(interpreter, gRPC, protobuf, prometheus-client). {where}. Would move it: a smaller "
                             "server process (fewer modules imported at start, smaller buffers).")
    if not lines:
        return []
    return ["## Goals not reached: what bounds them and what would move them", ""] + lines + [""]


def _limits(report: dict) -> list[str]:
    lines = ["## The machine's limits, measured in the same run", "",
             "Medians over the repeats, each measured at the start of its repeat.", "",
             "| limit | value |", "|---|---|"]
    for key, label, unit, digits in LIMITS:
        if key in report["limits"]:
            lines.append(f"| {label} | {_number(report['limits'][key], digits)} {unit} |")
    seglog = report["median"].get(BASELINE)
    if seglog:
        record_mb_s = seglog["produce_records_per_s"] * seglog["disk_bytes_per_record"] / 1e6
        lines += ["", f"seglog's produce wrote {record_mb_s:,.0f} MB/s of log: "
                  f"{record_mb_s / report['limits']['disk_write_fsync_mb_s']:.1%} of the disk's write + fsync rate and "
                  f"{record_mb_s / report['limits']['crc32c_mb_s']:.1%} of the crc32c rate (each batch's CRC is checked "
                  "on produce), so neither the disk nor the checksum bounds it."]
    return lines + [""]


def _systems(report: dict) -> list[str]:
    lines = ["## How each system is run", "",
             "Every server on loopback, started by the benchmark, with fsync at most about once a second where "
             "the server offers it; every client in this one Python process.", "",
             "| | server | durability | client | time lookup | batched lookups | latency |",
             "|---|---|---|---|---|---|---|"]
    for name, text in report["systems"].items():
        cells = [text[key] for key in ("server", "durability", "client", "lookup", "batched lookup", "latency")]
        if name == BASELINE and "seglog_batch_bytes" in report:
            cells[2] += f"; this run: batch_size {report['seglog_batch_bytes']:,} bytes"
        lines.append(f"| {NAMES.get(name, name)} | " + " | ".join(cells) + " |")
    return lines + [""]


def render(report: dict) -> str:
    if report.get("workloads", "all") != "all":  # `--workloads latency` or `batched`: those figures and their goals
        sections = [_header(report), _run(report), _table(report), _floor_goals(report)]
    else:
        sections = [_header(report), _run(report), _table(report), _goals(report), _floor_goals(report),
                    _notes(report), _moves(report), _bounds(report), _limits(report), _systems(report)]
    return "\n".join(line for section in sections for line in section).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=pathlib.Path, help="the JSON written by python -m bench.peers")
    arguments = parser.parse_args(argv)
    sys.stdout.write(render(json.loads(arguments.results.read_text())))


if __name__ == "__main__":
    main()
