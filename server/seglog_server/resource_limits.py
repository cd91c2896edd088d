"""Process limits the service adjusts or reads at start: descriptors and mappings.

The soft RLIMIT_NOFILE is often 1024 while the hard one is far higher (systemd's default is
1024:524288, Docker's 1048576:1048576); a process may raise its soft limit to the hard one without
privileges, as Kafka's packaging asks operators to. seglog raises it itself at start and logs
both values, then sizes the open-segment budget from what it got (storage/segment/open_segments.py).
"""

from __future__ import annotations

import logging
import resource

from seglog_server.storage.segment.open_segments import open_segments_max_for

__all__ = ["MAX_MAP_COUNT_PATH", "open_segments_budget", "raise_descriptor_limit", "read_max_map_count"]

_log = logging.getLogger("seglog_server")

MAX_MAP_COUNT_PATH = "/proc/sys/vm/max_map_count"
# What an unlimited RLIMIT_NOFILE counts as when sizing the budget (Linux's nr_open default).
_UNLIMITED_DESCRIPTORS = 1 << 20


def raise_descriptor_limit() -> int:
    """Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as exc:  # a hard limit above the kernel's nr_open
            _log.warning("could not raise RLIMIT_NOFILE from %s to %s: %s", soft, hard, exc)
            return _count(soft)
        _log.info("raised the descriptor limit (RLIMIT_NOFILE) from %s to %s", soft, hard)
        soft = hard
    return _count(soft)


def read_max_map_count(path: str = MAX_MAP_COUNT_PATH) -> int | None:
    try:
        with open(path, encoding="ascii") as file:
            return int(file.read().strip())
    except (OSError, ValueError):
        return None


def open_segments_budget(configured: int) -> int:
    """``configured`` when set (non-zero), else derived from the (raised) descriptor limit and
    vm.max_map_count; logs the figures it used."""
    descriptor_limit = raise_descriptor_limit()
    if configured:
        budget = configured
    else:
        budget = open_segments_max_for(descriptor_limit, read_max_map_count())
    _log.info(
        "descriptor limit %d: up to %d segments hold descriptors at once (open_segments_max%s)",
        descriptor_limit, budget, "" if configured else ", derived",
    )
    return budget


def _count(limit: int) -> int:
    return _UNLIMITED_DESCRIPTORS if limit == resource.RLIM_INFINITY else limit
