"""docs/performance.md's generator (bench/peers/report.py) and the arithmetic under it, on
hand-made results whose every figure is known."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.peers import bounds, report, workloads
from bench.peers.__main__ import _medians, _ratios
from bench.peers.common import percentile
from bench.peers.figures import BY_KEY, FIGURES, advantage

RECORDS = 1_000_000


def _figures(**overrides: float) -> dict:
    figures = {
        "produce_records_per_s": 100_000.0, "produce_wall_s": 10.0, "produce_client_cpu_s": 9.0,
        "produce_server_cpu_s": 2.0, "read_records_per_s": 200_000.0, "read_wall_s": 5.0,
        "read_client_cpu_s": 1.0, "read_server_cpu_s": 4.0, "lookup_p50_ms": 0.5, "lookup_p99_ms": 1.0,
        "lookups_wall_s": 0.6, "lookups_server_cpu_s": 0.1, "lookups_client_cpu_s": 0.2,
        "batched_lookups_per_s": 10_000.0, "batched_lookups_server_cpu_s": 0.08,
        "batched_lookups_client_cpu_s": 0.01, "latency_p50_ms": 1.0, "latency_p99_ms": 2.0,
        "latency_max_ms": 3.0, "latency_ack_p50_ms": 0.4, "latency_send_rate_per_s": 2000.0,
        "latency_received": 10_000, "disk_bytes": 130_000_000, "disk_bytes_per_record": 130.0,
        "server_rss_idle_mb": 50.0, "server_rss_mb": 60.0, "server_peak_rss_mb": 70.0,
        "server_cpu_s": 8.0,
    }
    figures.update(overrides)
    return figures


def _report(medians: dict, **overrides) -> dict:
    result = {
        "schema": 1, "command": "python -m bench.peers --records 1000000", "started_utc": "2026-11-24T00:00:00+00:00",
        "duration_s": 600.0, "records": RECORDS, "repeats": 3, "latency_records": 10_000, "lookups": 1000,
        "machine": {"nproc": 2, "cpu_model": "a CPU", "kernel": "6.1", "memory_gb": 8.0, "python": "3.11.7",
                    "seglog_commit": "abc", "versions": {"redis-server": "7.0.15"},
                    "load_1min": {"min": 0.1, "median": 0.2, "max": 0.4, "samples": 600, "interval_s": 1.0}},
        "systems": {name: {"server": "s", "durability": "d", "client": "c", "lookup": "l", "batched lookup": "b",
                           "latency": "t"} for name in medians},
        "skipped": {},
        "limits": {"empty_grpc_call_p50_ms": 0.25, "empty_grpc_call_p99_ms": 1.0, "disk_write_fsync_mb_s": 500.0,
                   "disk_read_mb_s": 1000.0, "page_cache_read_mb_s": 5000.0, "crc32c_mb_s": 10_000.0},
        "median": medians,
        "advantage": _ratios(medians),
        "disk_by_kind_last_repeat": {name: {".log": 120_000_000, ".index": 10_000_000} for name in medians},
    }
    result.update(overrides)
    return result


def test_advantage_is_above_one_when_seglog_is_better_whichever_way_is_better():
    assert advantage(BY_KEY["produce_records_per_s"], 300.0, 100.0) == 3.0
    assert advantage(BY_KEY["lookup_p50_ms"], 0.5, 1.0) == 2.0
    assert advantage(BY_KEY["disk_bytes_per_record"], 200.0, 100.0) == 0.5


def test_advantage_over_a_zero_is_none_not_infinity():
    assert advantage(BY_KEY["read_server_cpu_s"], 0.0, 1.0) is None
    assert advantage(BY_KEY["produce_records_per_s"], 1.0, 0.0) is None


def test_medians_and_ratios_over_repeats():
    medians = _medians([{"produce_records_per_s": v} for v in (1.0, 9.0, 3.0)])
    assert medians == {"produce_records_per_s": 3.0}
    ratios = _ratios({"seglog": {"produce_records_per_s": 4.0, "produce_wall_s": 1.0},
                      "redis": {"produce_records_per_s": 2.0, "produce_wall_s": 2.0}})
    assert ratios == {"redis": {"produce_records_per_s": 2.0}}  # supporting keys get no ratio
    assert _ratios({"redis": {"produce_records_per_s": 2.0}}) == {}  # no seglog, no ratios


@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=200),
       st.floats(min_value=0, max_value=100))
def test_percentile_is_one_of_the_values_and_grows_with_the_percent(values, percent):
    found = percentile(values, percent)
    assert found in values
    assert found <= percentile(values, min(100.0, percent + 10))
    assert percentile(values, 100) == max(values)


def test_percentile_of_nothing_is_an_error():
    with pytest.raises(ValueError):
        percentile([], 50)


def test_the_table_has_every_figure_and_the_ratio_columns():
    page = report.render(_report({"seglog": _figures(), "redis": _figures(produce_records_per_s=50_000.0)}))
    for figure in FIGURES:
        assert f"| {figure.label}{' ★' if figure.goal else ''}, {figure.unit} |" in page
    assert "| figure | seglog | Redis Streams | seglog vs Redis Streams |" in page
    assert "| produce ★, records/s | 100,000 | 50,000 | **2.00x** |" in page
    assert "| catch-up read ★, records/s | 200,000 | 200,000 | **1.00x** |" in page


def test_goals_reached_and_not_reached():
    medians = {"seglog": _figures(),
               "redis": _figures(produce_records_per_s=50_000.0, read_records_per_s=400_000.0),
               "nats": _figures(produce_records_per_s=20_000.0, read_records_per_s=100_000.0)}
    page = report.render(_report(medians))
    assert "- produce: reached (**2.00x** vs Redis Streams, **5.00x** vs NATS JetStream)." in page
    assert "- catch-up read: **not reached** (0.50x vs Redis Streams, **2.00x** vs NATS JetStream)." in page
    # A tie is not ahead.
    assert "- disk bytes per record: **not reached**" in page


def test_a_goal_not_reached_says_what_bounds_it_and_what_would_move_it():
    medians = {"seglog": _figures(read_client_cpu_s=4.5, read_server_cpu_s=0.5),
               "redis": _figures(read_records_per_s=400_000.0)}
    page = report.render(_report(medians))
    assert ("- catch-up read, behind Redis Streams: bounded by client CPU (of the wall time: client CPU 90%, "
            "server CPU 10% (client 4.50 µs/record, server 0.50 µs/record)). Would move it: less client CPU per record "
            "when decoding") in page


def test_memory_behind_a_peer_whose_rss_grows_with_the_data_gives_the_crossover():
    seglog = _figures(server_rss_idle_mb=50.0, server_rss_mb=60.0)
    redis = _figures(server_rss_idle_mb=10.0, server_rss_mb=30.0)  # 20 bytes per record stored
    assert bounds.rss_crossover(seglog, redis, RECORDS) == 2_500_000
    assert bounds.rss_crossover(seglog, _figures(server_rss_idle_mb=10.0, server_rss_mb=10.0), RECORDS) is None
    page = report.render(_report({"seglog": seglog, "redis": redis}))
    assert "it would pass seglog's at about 2,500,000 records" in page


def test_throughput_bounds_name_the_busiest_side_or_waiting():
    limits = {"disk_write_fsync_mb_s": 100.0}
    busy_client = _figures(produce_client_cpu_s=9.0, produce_server_cpu_s=2.0)
    assert bounds.throughput_bound(busy_client, "produce", RECORDS, limits)[0] == "client CPU"
    busy_server = _figures(read_client_cpu_s=1.0, read_server_cpu_s=4.0)
    assert bounds.throughput_bound(busy_server, "read", RECORDS, limits)[0] == "server CPU"
    # 130 MB in 1 s against a 100 MB/s disk: the disk.
    disk = _figures(produce_wall_s=1.0, produce_client_cpu_s=0.2, produce_server_cpu_s=0.2)
    assert bounds.throughput_bound(disk, "produce", RECORDS, limits)[0] == "disk"
    idle = _figures(produce_client_cpu_s=1.0, produce_server_cpu_s=2.0)
    assert bounds.throughput_bound(idle, "produce", RECORDS, {})[0] == "waiting"
    # Idle on an oversubscribed machine: waiting for a CPU; the side spending more CPU bounds it.
    bound, text = bounds.throughput_bound(idle, "produce", RECORDS, {}, oversubscribed=True)
    assert bound == "server CPU"
    assert "oversubscribed" in text


def test_seglog_lookup_is_read_against_the_empty_grpc_call():
    bound, text = bounds.lookup_bound(_figures(lookup_p50_ms=0.5), 1000, {"empty_grpc_call_p50_ms": 0.25})
    assert bound == "gRPC round trip"  # 0.25 ms floor > 0.1 ms server CPU, 0.2 ms client CPU per lookup
    assert "2.0x the empty gRPC call" in text


def test_a_full_run_on_a_quiet_machine_is_not_preliminary():
    page = report.render(_report({"seglog": _figures(), "redis": _figures()}))
    assert "Preliminary" not in page
    assert ".venv/bin/python -m bench.peers --records 1000000 --repeats 3" in page


def test_a_small_run_on_a_loaded_machine_says_it_is_preliminary_and_why():
    loaded = _report({"seglog": _figures()}, records=200_000)
    loaded["machine"]["load_1min"] = {"min": 3.0, "median": 6.5, "max": 11.0, "samples": 100, "interval_s": 1.0}
    reasons = report.preliminary(loaded)
    assert reasons == ["200,000 records instead of 1,000,000",
                       "the machine was shared: 1-minute load average 3.0-11.0 (median 6.5) on 2 CPUs"]
    page = report.render(loaded)
    assert page.count("**Preliminary figures:**") == 1
    assert "min 3.00, median 6.50, max 11.00" in page


def test_skipped_systems_are_named_with_their_reason():
    page = report.render(_report({"seglog": _figures()}, skipped={"nats": "`nats-server` is not installed"}))
    assert "- **NATS JetStream skipped:** `nats-server` is not installed." in page


def test_the_command_line_renders_a_json_file(tmp_path, capsys):
    path = tmp_path / "peers.json"
    path.write_text(json.dumps(_report({"seglog": _figures(), "nats": _figures()})))
    report.main([str(path)])
    assert capsys.readouterr().out == report.render(json.loads(path.read_text()))


def test_the_floor_goals_say_met_or_not_with_each_ratio_and_the_command():
    seglog = _figures(batched_lookups_per_s=30_000.0, batched_lookups_small_batches_per_s=9_000.0,
                      produce_defaults_records_per_s=250_000.0, read_defaults_records_per_s=500_000.0,
                      produce_defaults_client_cpu_s=5.0, produce_defaults_server_cpu_s=3.0,
                      read_defaults_client_cpu_s=1.5,
                      records_per_batch=3400.0, lookup_p50_over_floor=1.1, lookup_p99_over_floor=2.5,
                      latency_p50_over_floor=1.4, latency_p99_over_floor=2.9)
    redis = _figures(batched_lookups_per_s=10_000.0)
    result = _report({"seglog": seglog, "redis": redis}, floor_calls=5000)
    result["limits"].update(floor_p50_ms=0.07, floor_p99_ms=0.12)
    page = report.render(result)
    assert "## Lookups and latency at the floor" in page
    assert "large batches (3,400 records a batch) | 3.00x (30,000 vs 10,000 lookups/s) | met |" in page
    assert "small batches (about 100 records) | 0.900x (9,000 lookups/s) | **not met** |" in page
    assert "| 2. single time lookup p50 <= 1.2x the floor | 1.10x | met |" in page
    assert "| 2. single time lookup p99 <= 2.0x the floor | 2.50x | **not met** |" in page
    assert "| 3. produce -> consume p99 at 2,000/s <= 3.0x the floor | 2.90x | met |" in page
    assert "`.venv/bin/python -m bench.peers --records 1000000`" in page
    assert "peers-cdf.png" in page
    assert "produce 5.00 us of client CPU and 3.00 us of service CPU against 9.00 and 2.00" in page
    assert "## Lookups and latency: what works, what remains" in page
    assert "every client default (16 KiB batches) | 2.50x (250,000 records/s) | **not met** |" in page
    assert "catch-up read (poll_batches) >= 2x Redis Streams, every client default (16 KiB batches) | 2.50x" in page


def test_a_run_without_the_floor_has_no_floor_section():
    page = report.render(_report({"seglog": _figures(), "redis": _figures()}))
    assert "## Lookups and latency at the floor" not in page


def test_distributions_are_medianed_point_by_point():
    assert _medians([{"d": [1.0, 2.0, 9.0]}, {"d": [3.0, 4.0, 5.0]}, {"d": [2.0, 3.0, 4.0]}]) == {"d": [2.0, 3.0, 5.0]}


def test_the_every_default_goals_name_the_runs_default_batch_size():
    seglog = _figures(produce_defaults_records_per_s=250_000.0, read_defaults_records_per_s=500_000.0,
                      produce_defaults_client_cpu_s=5.0, produce_defaults_server_cpu_s=3.0,
                      read_defaults_client_cpu_s=1.5, lookup_p50_over_floor=1.1)
    result = _report({"seglog": seglog, "redis": _figures()}, floor_calls=5000, seglog_default_batch_bytes=262_144)
    result["limits"].update(floor_p50_ms=0.07, floor_p99_ms=0.12)
    page = report.render(result)
    assert "client produce >= 3x Redis Streams, every client default (256 KiB batches) |" in page
    assert "Per record, with every client default (256 KiB batches) against" in page
    assert "16 KiB batches) |" not in page


class _Batched:
    """A system as workloads sees it: only the cap on its batched figure, when it has one."""

    def __init__(self, most=None):
        if most is not None:
            self.batched_lookups_max = most


@given(st.lists(st.integers(0, 10**6), max_size=50), st.one_of(st.none(), st.integers(0, 20_000)))
def test_the_batched_figure_asks_the_single_lookups_times_first_and_its_own_count(times, most):
    asked = workloads._batched_times(_Batched(most), 0, 10**6, list(times))
    limit = workloads.BATCHED_LOOKUPS if most is None else min(most, workloads.BATCHED_LOOKUPS)
    assert asked[: len(times)] == times
    assert len(asked) == max(len(times), limit)
    assert all(0 <= at <= 10**6 for at in asked)


def test_nats_batched_figure_is_its_single_lookups_alone():
    from bench.peers.nats_system import NatsSystem

    assert workloads._batched_times(NatsSystem, 0, 9, [3, 1, 4]) == [3, 1, 4]


def test_the_batched_bound_divides_by_the_lookups_the_figure_asked():
    figures = {"batched_lookups_server_cpu_s": 0.02, "batched_lookups_client_cpu_s": 0.038,
               "batched_lookups_per_s": 1e6 / 6.4, "batched_lookups_count": 10_000}
    _bound, detail = bounds.batched_bound(figures, 1_000)
    assert "server CPU 2.0 µs, client CPU 3.8 µs" in detail
    del figures["batched_lookups_count"]  # a run before the figure asked its own count
    assert "server CPU 20.0 µs" in bounds.batched_bound(figures, 1_000)[1]


def test_the_run_line_names_the_batched_count_where_the_samples_have_it():
    report_of = {"samples": {"seglog": [{"batched_lookups_count": 10_000}], "nats": [{"batched_lookups_count": 1_000}]}}
    assert report._batched_asked(report_of) == " (the batched rate over 1,000 or 10,000)"
    assert report._batched_asked({"samples": {"seglog": [{}]}}) == ""
