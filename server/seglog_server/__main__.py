"""``python -m seglog_server`` / ``seglog-server``: run the service.

Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 1 when the service cannot start or fails,
2 for invalid settings (a one-line message naming the setting).

glibc allocator thresholds. gRPC messages of 1 MiB and more are allocated fresh per request; with
glibc's defaults each one is mmap'd and first-touched page by page, which costs 2-13 us per 4 KiB
page on this machine kind. Keeping such buffers on the heap tripled 1 MiB message throughput
(reference/platform-notes.md section 1). glibc reads these variables once, when the process
starts, so setting them in ``os.environ`` here would be too late: when any of them is missing,
``main`` sets the missing ones and re-executes the same command once (same PID, same arguments).
Values already set by the user are kept. Opt out with ``--no-malloc-tuning``,
``SEGLOG_MALLOC_TUNING=false`` or ``malloc_tuning = false`` in the TOML file.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence

from seglog_server.config import ConfigError, ServiceConfig, load_config

__all__ = ["MALLOC_TUNING", "main", "malloc_environment"]

MALLOC_TUNING: Mapping[str, str] = {
    # Allocations below 32 MiB come from the heap, so a 1-16 MiB message buffer is reused memory
    # instead of a fresh mmap (and the threshold stops adapting upwards on its own).
    "MALLOC_MMAP_THRESHOLD_": "33554432",
    # Return freed heap to the kernel only past 512 MiB, so the next message finds it touched.
    "MALLOC_TRIM_THRESHOLD_": "536870912",
    # Grow the heap 64 MiB at a time: fewer brk calls while buffers of messages come and go.
    "MALLOC_TOP_PAD_": "67108864",
}
# Set in the re-executed process, so a missing setting can never cause a second exec.
_REEXEC_GUARD = "SEGLOG_MALLOC_REEXEC"

EXIT_FAILURE = 1
EXIT_USAGE = 2


def malloc_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """The environment to re-execute with, or None when nothing is missing (or already done)."""
    if environ.get(_REEXEC_GUARD) or all(name in environ for name in MALLOC_TUNING):
        return None
    updated = dict(environ)
    for name, value in MALLOC_TUNING.items():
        updated.setdefault(name, value)
    updated[_REEXEC_GUARD] = "1"
    return updated


def _reexec_with(environ: dict[str, str], argv: Sequence[str]) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "seglog_server", *argv], environ)


def _configure_logging(config: ServiceConfig) -> None:
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the service. With ``argv`` None (a real process start) it may re-exec once for the
    allocator settings; given explicit arguments (tests, embedding) it never execs."""
    real_start = argv is None
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        config = load_config(args)
    except ConfigError as exc:
        print(f"seglog-server: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if real_start and config.malloc_tuning:
        environ = malloc_environment(os.environ)
        if environ is not None:
            _reexec_with(environ, args)
    _configure_logging(config)
    # Imported only now: the process that re-executes itself never loads gRPC and the storage.
    from seglog_server.app import run

    try:
        return run(config)
    except Exception:  # noqa: BLE001 - the process boundary: report, exit non-zero
        logging.getLogger("seglog_server").exception("seglog failed")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
