"""Per-principal quotas and the cost of security, end to end through real service processes.

    .venv/bin/python bench/bench_quota.py [--runs 3] [--seconds 3] [--quota-bytes-per-s 1000000]

1. Fairness: principals "slow" (produce quota ``--quota-bytes-per-s``) and "fast" (no quota)
   produce 64 KB batches back to back, at the same time, from two threads, for ``--seconds``.
   Reported per run and as medians: each one's acknowledged bytes/s, the slow one's rate over its
   quota (about 1 plus the burst credit spread over the run), and fast/slow.
2. Call overhead: the median round trip of ListTopics (no storage work: the gRPC floor) on a
   plaintext service without credentials, the same with a bearer token (cached after the first
   call), and over TLS with the token; ratios to the first.

The machine is shared and noisy: compare ratios measured in the same run (bench/README.md).
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the repository root: tests.support

from tests.support.certificate_authority import TestCA  # noqa: E402
from tests.support.integration_helpers import ServiceProcess, make_batch  # noqa: E402

from seglog.v1 import log_service_pb2 as pb  # noqa: E402
from seglog_server.security.token_file import create_token, format_entry  # noqa: E402

BATCH = make_batch([b"q" * 1000] * 64)


def _tokens(directory: pathlib.Path, names) -> dict[str, str]:
    tokens, lines = {}, []
    for name in names:
        tokens[name], entry = create_token(name)
        lines.append(format_entry(entry))
    (directory / "tokens").write_text("".join(lines))
    return tokens


def _produce(stub, token, seconds, out, name):
    metadata = (("authorization", f"Bearer {token}"),)
    acknowledged = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        stub.Produce(pb.ProduceRequest(topic="quota", partition=0, records=BATCH), timeout=60,
                     metadata=metadata)
        acknowledged += len(BATCH)
    out[name] = acknowledged / (time.monotonic() - started)


def fairness(workdir: pathlib.Path, runs: int, seconds: float, quota: int) -> None:
    tokens = _tokens(workdir, ["slow", "fast"])
    (workdir / "quotas.toml").write_text(f"[principals.slow]\nproduce_bytes_per_s = {quota}\n")
    service = ServiceProcess(workdir, [workdir / "data"], [
        "--auth-tokens", str(workdir / "tokens"), "--quotas", str(workdir / "quotas.toml"),
    ]).start()
    try:
        md = (("authorization", f"Bearer {tokens['fast']}"),)
        service.stub.CreateTopic(pb.CreateTopicRequest(topic="quota", partitions=1), timeout=10, metadata=md)
        slow_rates, fast_rates = [], []
        for run in range(runs):
            results: dict[str, float] = {}
            threads = [threading.Thread(target=_produce, args=(service.stub, tokens[n], seconds, results, n))
                       for n in ("slow", "fast")]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            slow_rates.append(results["slow"])
            fast_rates.append(results["fast"])
            print(f"  run {run + 1}: slow {results['slow'] / 1e6:7.3f} MB/s   "
                  f"fast {results['fast'] / 1e6:7.2f} MB/s")
            time.sleep(1.5)  # let the slow principal's debt clear between runs
        slow, fast = statistics.median(slow_rates), statistics.median(fast_rates)
        print(f"fairness (median of {runs}, {seconds:g} s each, 64 KB batches, quota {quota / 1e6:g} MB/s):")
        print(f"  slow principal   {slow / 1e6:8.3f} MB/s   = {slow / quota:.2f} x its quota")
        print(f"  fast principal   {fast / 1e6:8.2f} MB/s   = {fast / slow:.1f} x the slow one")
    finally:
        service.stop()


def _round_trip_us(stub, metadata, count=400) -> float:
    samples = []
    for _ in range(count):
        started = time.perf_counter_ns()
        stub.ListTopics(pb.ListTopicsRequest(), timeout=10, metadata=metadata)
        samples.append((time.perf_counter_ns() - started) / 1000)
    return statistics.median(samples)


def overhead(workdir: pathlib.Path, runs: int) -> None:
    ca = TestCA(workdir / "ca")
    server = ca.server()
    tokens = _tokens(workdir, ["bench"])
    md = (("authorization", f"Bearer {tokens['bench']}"),)
    setups = {
        "plaintext, no credentials": ([], None, ()),
        "plaintext, bearer token": (["--auth-tokens", str(workdir / "tokens")], None, md),
        "TLS, bearer token": (["--auth-tokens", str(workdir / "tokens"), "--tls-cert", str(server.cert),
                               "--tls-key", str(server.key)],
                              grpc.ssl_channel_credentials(ca.ca_file.read_bytes()), md),
    }
    medians = {}
    for index, (name, (args, credentials, metadata)) in enumerate(setups.items()):
        sub = workdir / f"overhead{index}"
        sub.mkdir()
        service = ServiceProcess(sub, [sub / "data"], args, credentials=credentials).start()
        try:
            _round_trip_us(service.stub, metadata, 50)  # warm: connection, token cache
            medians[name] = statistics.median(_round_trip_us(service.stub, metadata) for _ in range(runs))
        finally:
            service.stop()
    base = medians["plaintext, no credentials"]
    print(f"call overhead (ListTopics round trip, median of {runs} x 400 calls):")
    for name, value in medians.items():
        print(f"  {name:28s} {value:7.0f} us   {value / base:.2f} x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--quota-bytes-per-s", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-quota-") as directory:
        workdir = pathlib.Path(directory)
        (workdir / "fairness").mkdir()
        fairness(workdir / "fairness", args.runs, args.seconds, args.quota_bytes_per_s)
        overhead(workdir, args.runs)


if __name__ == "__main__":
    main()
