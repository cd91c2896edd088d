"""What bounds each figure, read from the run's own measurements: for a throughput, the shares of
its wall time the client and the server spent on CPU (and, for produce, the disk's share); for a
lookup or a latency, the empty gRPC call measured in the same run; for disk and memory, where the
bytes go. Every sentence here is computed from the JSON, so a rerun rewrites it."""

from __future__ import annotations

from bench.peers.common import KEY_BYTES, VALUE_BYTES

# Below this share of the wall time neither side was busy: the run waited (round trips, or a
# CPU taken by other processes on a loaded machine).
BUSY_SHARE = 0.5
PAYLOAD_BYTES = KEY_BYTES + VALUE_BYTES


def _us_per_record(seconds: float, records: int) -> float:
    return seconds * 1e6 / records


def throughput_bound(figures: dict, phase: str, records: int, limits: dict,
                     oversubscribed: bool = False) -> tuple[str, str]:
    """(the bound's name, a sentence with the shares) of the produce or read phase.

    When neither side was busy for half the wall time: on an oversubscribed machine (load
    average above the CPU count) the processes were waiting for a CPU, and the side that spent
    more CPU per record is named as the one that bounds it there; otherwise the run waited on
    round trips."""
    wall = figures[f"{phase}_wall_s"]
    client_s, server_s = figures[f"{phase}_client_cpu_s"], figures[f"{phase}_server_cpu_s"]
    shares = {"client CPU": client_s / wall, "server CPU": server_s / wall}
    if phase == "produce" and limits.get("disk_write_fsync_mb_s"):
        shares["disk"] = figures["disk_bytes"] / 1e6 / wall / limits["disk_write_fsync_mb_s"]
    bound = max(shares, key=shares.get)
    detail = ", ".join(f"{name} {share:.0%}" for name, share in shares.items())
    costs = (f"client {_us_per_record(client_s, records):.2f} µs/record, "
             f"server {_us_per_record(server_s, records):.2f} µs/record")
    if shares[bound] >= BUSY_SHARE:
        return bound, f"of the wall time: {detail} ({costs})"
    if oversubscribed:
        heavier = "client CPU" if client_s >= server_s else "server CPU"
        return heavier, (f"of the wall time: {detail} ({costs}); the machine was oversubscribed, so both "
                         f"waited for a CPU, and the {heavier.split()[0]} spent the most CPU per record")
    return "waiting", f"of the wall time: {detail} ({costs}); neither side busy: round trips"


def lookup_bound(figures: dict, lookups: int, limits: dict) -> tuple[str, str]:
    floor = limits["empty_grpc_call_p50_ms"]
    p50 = figures["lookup_p50_ms"]
    server_ms = figures["lookups_server_cpu_s"] * 1000 / lookups
    client_ms = figures["lookups_client_cpu_s"] * 1000 / lookups
    parts = {"gRPC round trip": floor, "server CPU": server_ms, "client CPU": client_ms}
    bound = max(parts, key=parts.get)
    text = (f"p50 {p50:.3f} ms = {p50 / floor:.1f}x the empty gRPC call ({floor:.3f} ms); "
            f"per lookup: server CPU {server_ms:.3f} ms, client CPU {client_ms:.3f} ms")
    if figures.get("records_per_batch"):
        text += (f"; the log's batches hold {figures['records_per_batch']:,.0f} records on average, and a lookup "
                 "walks the records of the batch the time index lands in")
    return bound, text


def peer_lookup_bound(figures: dict, lookups: int) -> tuple[str, str]:
    server_ms = figures["lookups_server_cpu_s"] * 1000 / lookups
    client_ms = figures["lookups_client_cpu_s"] * 1000 / lookups
    bound = "client CPU" if client_ms >= server_ms else "server CPU"
    return bound, f"per lookup: server CPU {server_ms:.3f} ms, client CPU {client_ms:.3f} ms"


def batched_bound(figures: dict, lookups: int) -> tuple[str, str]:
    """``lookups``: what the run asked where the figures do not say (runs before the batched
    figures asked a count of their own, ``batched_lookups_count``)."""
    asked = figures.get("batched_lookups_count", lookups)
    server_us = figures["batched_lookups_server_cpu_s"] * 1e6 / asked
    client_us = figures["batched_lookups_client_cpu_s"] * 1e6 / asked
    wall_us = 1e6 / figures["batched_lookups_per_s"]
    bound = "server CPU" if server_us >= client_us else "client CPU"
    if max(server_us, client_us) < BUSY_SHARE * wall_us:
        bound = "waiting"
    return bound, f"per lookup: {wall_us:.1f} µs wall, server CPU {server_us:.1f} µs, client CPU {client_us:.1f} µs"


def latency_bound(figures: dict, limits: dict) -> str:
    """The latency against the empty gRPC call, split at the producer's acknowledgement."""
    floor = limits["empty_grpc_call_p50_ms"]
    p50 = figures["latency_p50_ms"]
    text = f"p50 {p50:.3f} ms = {p50 / floor:.1f}x the empty gRPC call ({floor:.3f} ms)"
    if "latency_ack_p50_ms" in figures:
        ack = figures["latency_ack_p50_ms"]
        text += (f"; the producer's acknowledgement came after {ack:.3f} ms (p50), so "
                 f"{'the write round trip is most of it' if ack >= p50 / 2 else 'most of it is the delivery to the consumer'}")
    return text + f"; sent at {figures['latency_send_rate_per_s']:,.0f}/s of the 2,000/s asked"


def disk_breakdown(figures: dict, kinds: dict[str, int], records: int) -> str:
    per_kind = sorted(kinds.items(), key=lambda item: -item[1])
    shown = ", ".join(f"{kind} {size / records:.1f}" for kind, size in per_kind if size / records >= 0.05)
    overhead = figures["disk_bytes_per_record"] - PAYLOAD_BYTES
    return f"{overhead:.1f} bytes/record above the {PAYLOAD_BYTES}-byte key+value; by file kind: {shown or 'none'}"


def memory_breakdown(figures: dict) -> str:
    grown = figures["server_rss_mb"] - figures["server_rss_idle_mb"]
    return (f"idle {figures['server_rss_idle_mb']:.1f} MB, {grown:+.1f} MB after produce, read and lookups, "
            f"peak {figures['server_peak_rss_mb']:.1f} MB")


def rss_growth_bytes_per_record(figures: dict, records: int) -> float:
    return (figures["server_rss_mb"] - figures["server_rss_idle_mb"]) * 1e6 / records


def rss_crossover(seglog: dict, peer: dict, records: int) -> int | None:
    """Records at which the peer's RSS would pass seglog's, if the peer's grows with the data
    and seglog's does not (None when the peer's does not grow)."""
    growth = (peer["server_rss_mb"] - peer["server_rss_idle_mb"]) / records
    if growth <= 0:
        return None
    return int((seglog["server_rss_mb"] - peer["server_rss_idle_mb"]) / growth)
