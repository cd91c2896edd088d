"""Draws bench/page_faults.png: the page cache at work, as seglog's /metrics shows it.

    .venv/bin/python bench/bench_page_faults_service.py     # writes bench/results/page_faults_service.json
    .venv/bin/python bench/plot_page_faults.py               # reads it, writes bench/page_faults.png

Top row, through the service (bench_page_faults_service.py's scrapes of /metrics, the same series
the Grafana dashboard plots): index lookups per second by zone, index pages touched per lookup and
index residency, page faults per second, over the three phases (tail readers; a lagging reader
joins; tail readers again).

Bottom row, plain binary search vs the warm/cold search (bench_index_pages.py's probe model, the
same functions storage uses): pages touched by each tail lookup while an offset index grows, and
the pages the first tail lookup after each page of growth touches that the previous ones did not
(the pages an LRU page cache would have evicted: a fault each).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bench_index_pages import ENTRIES_PER_PAGE, SEARCHES, entries_bytes, probe_growth  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
PROBE_PAGES = 512  # a 2 MiB index: enough growth steps to show the pattern, seconds to compute
COLORS = {"warm": "#2b8cbe", "cold": "#e34a33", "plain": "#e34a33", "warm/cold": "#2b8cbe"}


def rates(timeline: list[dict], key: str) -> tuple[list[float], list[float]]:
    times, values = [], []
    for before, after in zip(timeline, timeline[1:]):
        seconds = after["t"] - before["t"]
        if seconds > 0:
            times.append(after["t"])
            values.append(max(0.0, (after[key] - before[key]) / seconds))
    return times, values


def pages_per_lookup(timeline: list[dict]) -> tuple[list[float], list[float]]:
    times, values = [], []
    for before, after in zip(timeline, timeline[1:]):
        count = after["pages_count"] - before["pages_count"]
        if count > 0:
            times.append(after["t"])
            values.append((after["pages_sum"] - before["pages_sum"]) / count)
    return times, values


def shade_phases(axis, timeline: list[dict]) -> None:
    spans: dict[str, list[float]] = {}
    for row in timeline:
        spans.setdefault(row["phase"], []).append(row["t"])
    for phase, times in spans.items():
        if phase == "+ lagging":
            axis.axvspan(min(times), max(times), color="#fee8c8", zorder=0)
        axis.text((min(times) + max(times)) / 2, 0.98, phase, transform=axis.get_xaxis_transform(),
                  ha="center", va="top", fontsize=8, color="#555")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeline", default=str(HERE / "results" / "page_faults_service.json"))
    parser.add_argument("--out", default=str(HERE / "page_faults.png"))
    args = parser.parse_args()
    run = json.loads(pathlib.Path(args.timeline).read_text())
    timeline = run["timeline"]

    figure, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    figure.suptitle(f"seglog: the page cache at work ({run['batches']:,} indexed batches)", fontsize=14)

    axis = axes[0][0]
    for zone in ("warm", "cold"):
        axis.plot(*rates(timeline, zone), label=f"{zone} zone", color=COLORS[zone])
    axis.set(title="index lookups/s (seglog_index_lookups_total)", xlabel="seconds", ylabel="lookups/s")
    axis.legend()

    axis = axes[0][1]
    axis.plot(*pages_per_lookup(timeline), color="#6a51a3", label="pages per lookup")
    axis.set(title="pages per lookup and index residency", xlabel="seconds", ylabel="pages per lookup")
    axis.set_ylim(bottom=0)
    twin = axis.twinx()
    twin.plot([row["t"] for row in timeline], [row["resident"] for row in timeline], color="#31a354",
              linestyle="--", label="index resident ratio")
    twin.set_ylim(0, 1.05)
    twin.set_ylabel("resident ratio (mincore)")
    lines = axis.get_lines() + twin.get_lines()
    axis.legend(lines, [line.get_label() for line in lines], loc="center left")

    axis = axes[0][2]
    for key, label, color in (("minor_read", "log read, minor", "#fdae6b"), ("major_read", "log read, major", "#e6550d"),
                              ("minor_index", "index lookup, minor", "#9ecae1"),
                              ("major_index", "index lookup, major", "#3182bd")):
        axis.plot(*rates(timeline, key), label=label, color=color)
    axis.set(title="page faults/s (seglog_page_faults_total)", xlabel="seconds", ylabel="faults/s")
    axis.legend()
    for axis in axes[0]:
        shade_phases(axis, timeline)

    buffer = entries_bytes(0, PROBE_PAGES * ENTRIES_PER_PAGE + 1)
    probes = {name: probe_growth(search, buffer, PROBE_PAGES) for name, search in SEARCHES.items()}
    axis = axes[1][0]
    for name, figures in probes.items():
        steps = len(figures.pages_per_lookup)
        axis.plot([index * PROBE_PAGES / steps for index in range(steps)], figures.pages_per_lookup,
                  label=name, color=COLORS[name], linewidth=0.8)
    axis.set(title="pages touched per tail lookup as the index grows", xlabel="index size (pages)",
             ylabel="pages")
    axis.legend()

    axis = axes[1][1]
    for name, figures in probes.items():
        running, total = [], 0
        for count in figures.new_pages_per_growth:
            total += count
            running.append(total)
        axis.plot(range(1, len(running) + 1), running, label=f"{name}: {total} in all", color=COLORS[name])
    axis.set(title="cold pages touched after growth (would-be faults), cumulative",
             xlabel="index size (pages)", ylabel="pages")
    axis.legend()

    axis = axes[1][2]
    axis.axis("off")
    figures = run["figures"]
    lines = ["what the dashboard shows, per phase", ""]
    for phase, values in figures.items():
        lines.append(f"{phase}")
        lines.append(f"  lookups/s warm {values['warm lookups/s']:.0f}, cold {values['cold lookups/s']:.0f}")
        lines.append(f"  pages/lookup {values['pages per lookup']:.2f}, read age {values['mean read age KiB']:.0f} KiB")
        lines.append(f"  log-read faults/s minor {values['minor faults/s (log read)']:.1f}, "
                     f"major {values['major faults/s (log read)']:.1f}")
    lines += ["", "bottom: plain binary search vs warm/cold", "(bench_index_pages.py probe model)"]
    axis.text(0, 1, "\n".join(lines), va="top", family="monospace", fontsize=9)

    figure.tight_layout()
    figure.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
