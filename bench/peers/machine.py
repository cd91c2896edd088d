"""What the run ran on: the machine, and the versions of every server and client."""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import platform
import shutil
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]


def _cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gb() -> float:
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) * 1024 / 1e9, 1)
    return 0.0


def _output(command: list[str]) -> str:
    if shutil.which(command[0]) is None:
        return "not installed"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, cwd=REPO)
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown ({error})"
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else ""


def _package(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def describe() -> dict[str, object]:
    dirty = _output(["git", "status", "--porcelain", "--untracked-files=no"])
    return {
        "nproc": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "kernel": platform.release(),
        "memory_gb": _memory_gb(),
        "python": platform.python_version(),
        "seglog_commit": _output(["git", "rev-parse", "--short=12", "HEAD"]) + (" (with local changes)" if dirty else ""),
        "versions": {
            "redis-server": _output(["redis-server", "--version"]),
            "nats-server": _output(["nats-server", "--version"]),
            "redis-py": _package("redis"),
            "hiredis": _package("hiredis"),
            "nats-py": _package("nats-py"),
            "grpcio": _package("grpcio"),
        },
    }
