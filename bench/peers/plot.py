"""The PNGs people look at: the medians of the main figures and seglog's advantage over each peer
(``peers.png``), and the latency distributions of every system beside the floor (``peers-cdf.png``)."""

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


CDF_PANELS = (
    ("distribution_lookup_ms", "single time lookup"),
    ("distribution_latency_ms", "produce -> consume at 2,000 records/s"),
)
FLOOR_COLOR = "black"


def cdf_path(results: pathlib.Path) -> pathlib.Path:
    return results.with_name(results.stem + "-cdf.png")


def draw_cdf(report: dict, path: pathlib.Path) -> None:
    """The distribution of each latency (medians of each percentile over the repeats) of every
    system, and of the floor: the bidi-stream ping-pong of an empty handler, measured in the
    same run. Log-scaled milliseconds across, the share of samples at or below up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(CDF_PANELS), figsize=(14, 5.5))
    floor = report["limits"].get("distribution_floor_ms")
    for axis, (key, title) in zip(axes, CDF_PANELS):
        lines = [(name, figures[key], COLORS.get(name, "grey"), "-") for name, figures in report["median"].items()
                 if key in figures]
        if floor:
            lines.append(("floor: bidi ping-pong, empty handler", floor, FLOOR_COLOR, "--"))
        for name, values, color, style in lines:
            shares = [index / (len(values) - 1) for index in range(len(values))]
            axis.step(values, shares, where="post", color=color, linestyle=style, label=name)
        axis.set_xscale("log")
        axis.set_xlabel("ms (log scale)", fontsize=9)
        axis.set_ylabel("share of samples at or below", fontsize=9)
        axis.set_title(title, fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8, loc="lower right")
    load = report["machine"]["load_1min"]
    figure.suptitle(
        f"Latency distributions, medians of each percentile over {report['repeats']} repeats; "
        f"{report['machine']['nproc']} CPUs, 1-min load {load['min']:.1f}-{load['max']:.1f}",
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    """python -m bench.peers.plot results.json: redraw the PNGs beside the JSON."""
    parser = argparse.ArgumentParser(prog="python -m bench.peers.plot", description=main.__doc__)
    parser.add_argument("results", type=pathlib.Path)
    arguments = parser.parse_args(argv)
    report = json.loads(arguments.results.read_text())
    draw(report, arguments.results.with_suffix(".png"))
    draw_cdf(report, cdf_path(arguments.results))


if __name__ == "__main__":
    main()
