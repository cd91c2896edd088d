"""The systems the benchmark compares, in their default order, and which of them can run here."""

from __future__ import annotations

import shutil

from bench.peers.figures import BASELINE  # noqa: F401  (re-exported)
from bench.peers.nats_system import NatsSystem
from bench.peers.redis_system import RedisSystem
from bench.peers.seglog_system import SeglogSystem

SYSTEMS = {"seglog": SeglogSystem, "redis": RedisSystem, "nats": NatsSystem}


def available(names: list[str]) -> tuple[list[str], dict[str, str]]:
    """The systems among ``names`` whose server is installed, and why each other one is skipped."""
    unknown = [name for name in names if name not in SYSTEMS]
    if unknown:
        raise ValueError(f"unknown systems {unknown}: choose from {sorted(SYSTEMS)}")
    chosen, skipped = [], {}
    for name in names:
        binary = SYSTEMS[name].binary
        if binary is not None and shutil.which(binary) is None:
            skipped[name] = f"`{binary}` is not installed (scripts/peers-setup installs it as root)"
        else:
            chosen.append(name)
    return chosen, skipped
