"""CPU time and memory of a process from /proc, this process's CPU from getrusage, the load average."""

from __future__ import annotations

import os
import pathlib
import resource
import statistics
import threading
import time

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# /proc/<pid>/stat after the ")" closing the command name: field 3 (state) is index 0, so
# utime (14), stime (15), cutime (16) and cstime (17) sit at 11..14.
_STAT_CPU_FIELDS = slice(11, 15)
# The 1-minute load average sampled this often: often enough to see a burst, rarely enough
# to cost nothing.
LOAD_SAMPLE_INTERVAL_S = 1.0


def server_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its waited-for children (Redis forks to rewrite
    its AOF; a child's time lands in cutime/cstime once the server reaps it)."""
    text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return sum(int(field) for field in fields[_STAT_CPU_FIELDS]) / CLOCK_TICKS_PER_S


def _status_kib(pid: int, name: str) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise LookupError(f"/proc/{pid}/status has no {name}")


def rss_mb(pid: int) -> float:
    """Resident set size now, MB (10^6 bytes)."""
    return _status_kib(pid, "VmRSS") * 1024 / 1e6


def peak_rss_mb(pid: int) -> float:
    """The highest resident set size since the process started (VmHWM), MB."""
    return _status_kib(pid, "VmHWM") * 1024 / 1e6


def client_cpu_s() -> float:
    """User + system CPU seconds of this process, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Measured:
    """Wall time, server CPU and client CPU spent inside a ``with`` block."""

    def __init__(self, server_pid: int) -> None:
        self._pid = server_pid

    def __enter__(self) -> Measured:
        self._server_cpu = server_cpu_s(self._pid)
        self._client_cpu = client_cpu_s()
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._started
        self.server_cpu_s = server_cpu_s(self._pid) - self._server_cpu
        self.client_cpu_s = client_cpu_s() - self._client_cpu


class LoadSampler:
    """Samples the 1-minute load average in a background thread for the whole run."""

    def __init__(self, interval_s: float = LOAD_SAMPLE_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="load-sampler", daemon=True)

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while True:
            self._samples.append(os.getloadavg()[0])
            if self._stop.wait(self._interval_s):
                return

    def summary(self) -> dict[str, float | int]:
        samples = self._samples or [os.getloadavg()[0]]
        return {
            "min": min(samples),
            "median": statistics.median(samples),
            "max": max(samples),
            "samples": len(samples),
            "interval_s": self._interval_s,
        }
