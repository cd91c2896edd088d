"""The PNG people look at: the medians of the main figures, and seglog's advantage over each peer."""

from __future__ import annotations

import argparse
import json
import pathlib

from bench.peers.figures import BY_KEY, FIGURES

PANELS = (
    "produce_records_per_s", "read_records_per_s", "disk_bytes_per_record", "server_rss_mb",
    "lookup_p50_ms", "batched_lookups_per_s", "latency_p50_ms", "produce_client_cpu_s",
)
# Panels whose systems differ by orders of magnitude: drawn on a log scale.
LOG_SCALE = {"lookup_p50_ms", "batched_lookups_per_s", "latency_p50_ms"}
COLORS = {"seglog": "#2a6fdb", "redis": "#d9534f", "nats": "#5cb85c"}


def _bars(axis, report: dict, key: str) -> None:
    figure = BY_KEY[key]
    names = list(report["median"])
    heights = [report["median"][name][key] for name in names]
    bars = axis.bar(names, heights, color=[COLORS.get(name, "grey") for name in names])
    better = "higher" if figure.higher_is_better else "lower"
    axis.set_title(f"{figure.label}, {figure.unit}\n({better} is better)", fontsize=9)
    axis.bar_label(bars, labels=[f"{h:,.3g}" for h in heights], fontsize=8)
    axis.tick_params(labelsize=8)
    if key in LOG_SCALE and all(h > 0 for h in heights):
        axis.set_yscale("log")
        axis.set_title(axis.get_title() + ", log scale", fontsize=9)


def _advantage(axis, report: dict) -> None:
    keys = [figure.key for figure in FIGURES if figure.key in PANELS]
    peers = list(report["advantage"])
    height = 0.8 / max(1, len(peers))
    for index, peer in enumerate(peers):
        ratios = [report["advantage"][peer][key] or 0 for key in keys]
        positions = [row + index * height for row in range(len(keys))]
        axis.barh(positions, ratios, height=height, color=COLORS.get(peer, "grey"), label=f"vs {peer}")
    axis.axvline(1, color="black", linewidth=0.8)
    axis.set_xscale("log")
    axis.set_yticks([row + 0.4 - height / 2 for row in range(len(keys))])
    axis.set_yticklabels([BY_KEY[key].label for key in keys], fontsize=7)
    axis.invert_yaxis()
    axis.set_title("seglog's advantage (x, > 1: seglog ahead)", fontsize=9)
    axis.tick_params(axis="x", labelsize=8)
    if peers:
        axis.legend(fontsize=7)


def draw(report: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(3, 3, figsize=(15, 11))
    for axis, key in zip(axes.flat, PANELS):
        _bars(axis, report, key)
    _advantage(axes.flat[-1], report)
    load = report["machine"]["load_1min"]
    figure.suptitle(
        f"seglog, Redis Streams and NATS JetStream: {report['records']:,} records, medians of "
        f"{report['repeats']} interleaved repeats, {report['machine']['nproc']} CPUs, "
        f"1-min load {load['min']:.1f}-{load['max']:.1f} during the run",
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    """python -m bench.peers.plot results.json: redraw the PNG beside the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.peers.plot", description=main.__doc__)
    parser.add_argument("results", type=pathlib.Path)
    arguments = parser.parse_args(argv)
    draw(json.loads(arguments.results.read_text()), arguments.results.with_suffix(".png"))


if __name__ == "__main__":
    main()
