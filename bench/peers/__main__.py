"""python -m bench.peers: run every system, interleaved, write the JSON and the PNG."""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import pathlib
import shlex
import shutil
import statistics
import sys
import tempfile
import time

from bench.peers import floor, limits, machine, plot, seglog_system, workloads
from bench.peers.common import percentile, quantiles, workload
from bench.peers.figures import BY_KEY, advantage
from bench.peers.proc import LoadSampler
from bench.peers.systems import BASELINE, SYSTEMS, available
from seglog._producer_config import BATCH_SIZE_DEFAULT

OUT_DEFAULT = pathlib.Path(__file__).resolve().parent.parent / "results" / "peers.json"
LATENCY_RECORDS_DEFAULT = 10_000
FLOOR_CALLS_DEFAULT = 5000
WORKLOADS = ("all", "latency", "batched")
SCHEMA = 2
# Each system's latencies over the same repeat's floor (the bidi-stream ping-pong, p50 or p99).
FLOOR_RATIOS = (
    ("lookup_p50_over_floor", "lookup_p50_ms", "floor_p50_ms"),
    ("lookup_p99_over_floor", "lookup_p99_ms", "floor_p99_ms"),
    ("latency_p50_over_floor", "latency_p50_ms", "floor_p50_ms"),
    ("latency_p99_over_floor", "latency_p99_ms", "floor_p99_ms"),
)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000, help="records produced and read back per system")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats; figures are their medians")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, from " + ",".join(SYSTEMS))
    parser.add_argument("--out", type=pathlib.Path, default=OUT_DEFAULT,
                        help="the JSON file to write; the plot goes beside it (.png)")
    parser.add_argument("--latency-records", type=int, default=LATENCY_RECORDS_DEFAULT,
                        help="records sent at 2,000/s in the latency workload")
    parser.add_argument("--lookups", type=int, default=workloads.LOOKUPS, help="time lookups per system")
    parser.add_argument("--data-dir", type=pathlib.Path, default=None,
                        help="where the servers keep their data (default: a temporary directory)")
    parser.add_argument("--limits-disk-mib", type=int, default=limits.DISK_MIB_DEFAULT)
    parser.add_argument("--limits-calls", type=int, default=limits.EMPTY_CALLS_DEFAULT)
    parser.add_argument("--floor-calls", type=int, default=FLOOR_CALLS_DEFAULT,
                        help="round trips of the bidi-stream ping-pong floor, each repeat")
    parser.add_argument("--seglog-batch-bytes", type=int, default=seglog_system.PRODUCE_BATCH_BYTES,
                        help="the seglog producer's batch_size in the produce workload")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.add_argument("--workloads", choices=WORKLOADS, default="all",
                        help="all of them, or only the produce -> consume latency beside the floor, or "
                             "only the batched lookups (goal 1: both logs; no machine limits, no plot)")
    arguments = parser.parse_args(argv)
    if arguments.workloads != "all":
        arguments.no_plot = True  # the plots draw figures this run does not measure
    arguments.command = "python -m bench.peers " + shlex.join(argv if argv is not None else sys.argv[1:])
    return arguments


def _medians(samples: list[dict]) -> dict:
    """Each figure's median over the repeats; a distribution's (a list of quantiles) point by point."""
    medians: dict = {}
    for key in samples[0]:
        values = [sample[key] for sample in samples]
        if isinstance(values[0], list):
            medians[key] = [statistics.median(column) for column in zip(*values)]
        else:
            medians[key] = statistics.median(values)
    return medians


def _floor(calls: int) -> dict:
    samples = floor.measure(calls)
    return {"floor_p50_ms": percentile(samples, 50), "floor_p99_ms": percentile(samples, 99),
            "distribution_floor_ms": quantiles(samples)}


def _ratios(medians: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    if BASELINE not in medians:
        return {}
    base = medians[BASELINE]
    return {
        name: {key: advantage(BY_KEY[key], base[key], value) for key, value in figures.items() if key in BY_KEY}
        for name, figures in medians.items() if name != BASELINE
    }


def run(arguments: argparse.Namespace, data_dir: pathlib.Path) -> dict[str, object]:
    factories = {**SYSTEMS, "seglog": functools.partial(SYSTEMS["seglog"], batch_bytes=arguments.seglog_batch_bytes)}
    names, skipped = available(arguments.systems.split(","))
    for name, reason in skipped.items():
        print(f"skipping {name}: {reason}", file=sys.stderr)
    keys, values = workload(arguments.records) if arguments.workloads != "latency" else ([], [])
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    disk: dict[str, dict[str, int]] = {}
    limit_samples: list[dict[str, float]] = []
    started = time.time()
    with LoadSampler() as load:
        for repeat in range(arguments.repeats):
            root = data_dir / f"repeat-{repeat}"
            root.mkdir(exist_ok=True)
            if arguments.workloads == "all":
                print(f"repeat {repeat + 1}/{arguments.repeats}: the machine's limits", file=sys.stderr, flush=True)
                limit_samples.append(
                    limits.measure(root, disk_mib=arguments.limits_disk_mib, calls=arguments.limits_calls))
            else:
                limit_samples.append({})
            limit_samples[-1].update(_floor(arguments.floor_calls))
            order = names[repeat % len(names):] + names[: repeat % len(names)] if names else []
            for name in order:  # interleaved: every system once per repeat, the order rotating
                print(f"repeat {repeat + 1}/{arguments.repeats}: {name}", file=sys.stderr, flush=True)
                system_root = root / name
                shutil.rmtree(system_root, ignore_errors=True)
                system_root.mkdir()
                if arguments.workloads == "all":
                    sample, disk[name] = workloads.run_system(
                        factories[name], system_root, keys, values, arguments.latency_records, arguments.lookups)
                elif arguments.workloads == "batched":
                    sample = workloads.run_batched(factories[name], system_root, keys, values, arguments.lookups)
                else:
                    sample = workloads.run_latency(factories[name], system_root, arguments.latency_records)
                for ratio, figure, limit in FLOOR_RATIOS:  # against this repeat's floor
                    if figure in sample:
                        sample[ratio] = sample[figure] / limit_samples[-1][limit]
                samples[name].append(sample)
                shutil.rmtree(system_root, ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)
    medians = {name: _medians(runs) for name, runs in samples.items() if runs}
    return {
        "schema": SCHEMA,
        "command": arguments.command,
        "started_utc": datetime.datetime.fromtimestamp(started, datetime.timezone.utc).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 1),
        "records": arguments.records if arguments.workloads != "latency" else 0,
        "workloads": arguments.workloads,
        "repeats": arguments.repeats,
        "latency_records": arguments.latency_records,
        "lookups": arguments.lookups,
        "seglog_batch_bytes": arguments.seglog_batch_bytes,
        "seglog_default_batch_bytes": BATCH_SIZE_DEFAULT,  # the 'every client default' workloads'
        "floor_calls": arguments.floor_calls,
        "machine": {**machine.describe(), "load_1min": load.summary()},
        "systems": {name: SYSTEMS[name].description for name in names},
        "skipped": skipped,
        "limits": _medians(limit_samples),
        "limits_samples": limit_samples,
        "median": medians,
        "advantage": _ratios(medians),
        "disk_by_kind_last_repeat": disk,
        "samples": samples,
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    arguments = _arguments(argv)
    if arguments.data_dir is None:
        with tempfile.TemporaryDirectory(prefix="seglog-peers-") as directory:
            report = run(arguments, pathlib.Path(directory))
    else:
        arguments.data_dir.mkdir(parents=True, exist_ok=True)
        report = run(arguments, arguments.data_dir)
    arguments.out.parent.mkdir(parents=True, exist_ok=True)
    arguments.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {arguments.out}", file=sys.stderr)
    if not arguments.no_plot and report["median"]:
        png = arguments.out.with_suffix(".png")
        plot.draw(report, png)
        print(f"wrote {png}", file=sys.stderr)
        plot.draw_cdf(report, plot.cdf_path(arguments.out))
        print(f"wrote {plot.cdf_path(arguments.out)}", file=sys.stderr)
    return report


if __name__ == "__main__":
    main()
