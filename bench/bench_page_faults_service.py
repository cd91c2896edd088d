"""The page cache at work, through the service and its /metrics: tail readers vs a lagging reader.

    .venv/bin/python bench/bench_page_faults_service.py [--batches 400000] [--phase-s 8]

A partition gets one index entry per batch (index.interval.bytes=1) in 1 MiB segments:
``--batches`` entries (400,000: 3.1 MiB of offset index over about 66 segments). The log is written
in-process through the storage (Log.append: the same bytes a Produce writes, built in seconds
rather than minutes of RPCs) and closed cleanly; every file of the partition is evicted from the
page cache (fdatasync, then POSIX_FADV_DONTNEED: nothing maps them once it is closed), and the
service starts on it.
Then three phases, /metrics scraped every 0.5 s throughout:

  tail        readers at the log end only (Fetch of the last offset): warm lookups
  + lagging   the same, plus a reader walking the old part of the log (every 97th offset from 0):
              cold lookups on pages nobody touched since the eviction
  tail again  the lagging reader stops

For each phase the table gives what the dashboard's panels compute from the scraped series
(lookup rate by zone, pages per lookup = rate(_sum)/rate(_count), page faults/s, index residency,
read age) next to what the benchmark itself did (fetches by kind), so the panels can be checked
against a known workload. The timeline is written to bench/results/page_faults_service.json for
bench/plot_page_faults.py, which draws it.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc
from prometheus_client.parser import text_string_to_metric_families

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.metrics.page_residency import residency_counts
from seglog_server.storage import LogManager

TOPIC = "pages"
SCRAPE_INTERVAL_S = 0.5
# 1 MiB segments: about 6,100 one-record batches, a 48 KiB offset index each, so the partition's
# indexes are many small files. This machine reads ahead 8 MiB on a mapping fault, which pulls a
# whole small index in at its first lookup; residency then shows which segments' indexes the
# readers have brought into the page cache.
SEGMENT_BYTES = 1024 * 1024
LAGGING_STRIDE = 97  # offsets between two reads of the lagging reader: a new index region each time
RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "page_faults_service.json"
# The series the timeline keeps: (sample name, labels).
SERIES = {
    "warm": ("seglog_index_lookups_total", {"index": "offset", "zone": "warm"}),
    "cold": ("seglog_index_lookups_total", {"index": "offset", "zone": "cold"}),
    "pages_sum": ("seglog_index_lookup_pages_sum", {"index": "offset"}),
    "pages_count": ("seglog_index_lookup_pages_count", {"index": "offset"}),
    "minor_index": ("seglog_page_faults_total", {"path": "index_lookup", "kind": "minor"}),
    "major_index": ("seglog_page_faults_total", {"path": "index_lookup", "kind": "major"}),
    "minor_read": ("seglog_page_faults_total", {"path": "log_read", "kind": "minor"}),
    "major_read": ("seglog_page_faults_total", {"path": "log_read", "kind": "major"}),
    "resident": ("seglog_index_resident_ratio", {"topic": TOPIC, "partition": "0", "index": "offset"}),
    "age_sum": ("seglog_fetch_read_age_bytes_sum", {}),
    "age_count": ("seglog_fetch_read_age_bytes_count", {}),
}


class Service:
    def __init__(self, workdir: pathlib.Path) -> None:
        self.workdir = workdir
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        ready, metrics_ready = self.workdir / "ready", self.workdir / "metrics-ready"
        for path in (ready, metrics_ready):
            path.unlink(missing_ok=True)
        command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--ready-file", str(ready),
                   "--metrics-listen", "127.0.0.1:0", "--metrics-ready-file", str(metrics_ready),
                   "--metrics-residency-interval-ms", "500",
                   "--data-dir", str(self.workdir / "data")]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
        self.log = open(self.workdir / "service.log", "ab")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log, env=environ)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((self.workdir / "service.log").read_text())
            time.sleep(0.02)
        self.address = ready.read_text().strip()
        self.metrics_address = metrics_ready.read_text().strip()
        self.channel = grpc.insecure_channel(self.address)
        self.stub = pb_grpc.LogServiceStub(self.channel)

    def stop(self) -> None:
        self.channel.close()
        assert self.process is not None
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


def build_partition(data_dir: pathlib.Path, batch_count: int) -> None:
    """One indexed one-record batch per offset, appended through the storage, closed cleanly."""
    manager = LogManager([str(data_dir)])
    manager.startup()
    try:
        manager.create_topic(TOPIC, 1, {"index.interval.bytes": "1", "segment.bytes": str(SEGMENT_BYTES)})
        log = manager.get_log(TOPIC, 0)
        for number in range(batch_count):
            builder = codec.RecordBatchBuilder()
            builder.append(b"%08d" % number + b"." * 92)
            log.append(builder.build())
    finally:
        manager.shutdown()


def evict(partition_dir: pathlib.Path) -> tuple[int, int]:
    """Drops every file of the partition from the page cache; returns index (resident, pages)."""
    for path in partition_dir.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    counts = [residency_counts(str(path)) for path in partition_dir.glob("*.index")]
    return sum(resident for resident, _ in counts), sum(pages for _, pages in counts)


def scrape(address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {key: 0.0 for key in SERIES}
    wanted = {(name, tuple(sorted(labels.items()))): key for key, (name, labels) in SERIES.items()}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = wanted.get((sample.name, tuple(sorted(sample.labels.items()))))
            if key is not None:
                values[key] = sample.value
    return values


class Scraper(threading.Thread):
    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        self.address = address
        self.timeline: list[dict[str, float]] = []
        self.phase = ""
        self.started = time.monotonic()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            sample = scrape(self.address)
            sample["t"] = time.monotonic() - self.started
            sample["phase"] = self.phase  # type: ignore[assignment]
            self.timeline.append(sample)
            self.stopping.wait(SCRAPE_INTERVAL_S)


def run_phase(stub: pb_grpc.LogServiceStub, seconds: float, end_offset: int, lagging_from: int | None) -> dict:
    tail = lagging = 0
    offset = lagging_from
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        stub.Fetch(pb.FetchRequest(topic=TOPIC, offset=end_offset - 1, max_bytes=1))
        tail += 1
        if offset is not None and offset < end_offset - 2048:
            stub.Fetch(pb.FetchRequest(topic=TOPIC, offset=offset, max_bytes=1))
            lagging += 1
            offset += LAGGING_STRIDE
    return {"tail_fetches": tail, "lagging_fetches": lagging, "lagging_next": offset}


def phase_figures(timeline: list[dict], phase: str) -> dict[str, float]:
    """What the dashboard panels show over one phase (rates from its first to its last scrape)."""
    rows = [row for row in timeline if row["phase"] == phase]
    first, last = rows[0], rows[-1]
    seconds = last["t"] - first["t"]

    def rate(key: str) -> float:
        return (last[key] - first[key]) / seconds

    def ratio(numerator: str, denominator: str) -> float:
        count = last[denominator] - first[denominator]
        return (last[numerator] - first[numerator]) / count if count else 0.0

    return {
        "warm lookups/s": rate("warm"), "cold lookups/s": rate("cold"),
        "pages per lookup": ratio("pages_sum", "pages_count"),
        "minor faults/s (index)": rate("minor_index"), "major faults/s (index)": rate("major_index"),
        "minor faults/s (log read)": rate("minor_read"), "major faults/s (log read)": rate("major_read"),
        "index resident ratio (end)": last["resident"],
        "mean read age KiB": ratio("age_sum", "age_count") / 1024,
        "warm lookups (delta)": last["warm"] - first["warm"], "cold lookups (delta)": last["cold"] - first["cold"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=400_000)
    parser.add_argument("--phase-s", type=float, default=8.0)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    print(f"seglog bench_page_faults_service: Linux {platform.release()}, {args.batches} indexed batches")
    with tempfile.TemporaryDirectory(prefix="seglog-bench-faults-") as directory:
        service = Service(pathlib.Path(directory))
        started = time.perf_counter()
        build_partition(pathlib.Path(directory) / "data", args.batches)
        print(f"built {args.batches} batches in {time.perf_counter() - started:.1f} s")
        resident, pages = evict(pathlib.Path(directory) / "data" / f"{TOPIC}-0")
        print(f"evicted: offset indexes {resident}/{pages} pages resident")
        service.start()
        scraper = Scraper(service.metrics_address)
        scraper.start()
        done = {}
        try:
            for phase, lagging_from in (("tail", None), ("+ lagging", 0), ("tail again", None)):
                scraper.phase = phase
                time.sleep(SCRAPE_INTERVAL_S * 1.5)  # a scrape inside the phase before it starts
                done[phase] = run_phase(service.stub, args.phase_s, args.batches, lagging_from)
                time.sleep(SCRAPE_INTERVAL_S * 1.5)
        finally:
            scraper.stopping.set()
            scraper.join()
            service.stop()
    figures = {phase: phase_figures(scraper.timeline, phase) for phase in done}
    print_table(figures, done)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"batches": args.batches, "timeline": scraper.timeline, "done": done,
                               "figures": figures}, indent=1) + "\n")
    print(f"timeline written to {out}")
    return 0


def print_table(figures: dict[str, dict[str, float]], done: dict[str, dict]) -> None:
    phases = list(figures)
    print(f"{'':32}" + "".join(f"{phase:>16}" for phase in phases))
    for key in figures[phases[0]]:
        print(f"{key:32}" + "".join(f"{figures[p][key]:16.3f}" for p in phases))
    for key in ("tail_fetches", "lagging_fetches"):
        print(f"{'bench: ' + key:32}" + "".join(f"{done[p][key]:16d}" for p in phases))
    for phase in phases:
        lookups = figures[phase]["warm lookups (delta)"] + figures[phase]["cold lookups (delta)"]
        fetches = done[phase]["tail_fetches"] + done[phase]["lagging_fetches"]
        print(f"{phase}: offset-index lookups on /metrics {lookups:.0f}, fetches sent {fetches}"
              f" ({'equal' if lookups == fetches else 'DIFFERENT'})")
    print("Each fetch is one offset-index lookup. Tail fetches are warm; a lagging fetch is cold unless")
    print("it lands in the newest 1,024 entries of its segment's index (about 1 in 6 with 1 MiB segments).")


if __name__ == "__main__":
    sys.exit(main())
