"""Group commit: 16 concurrent producers with ACKS_FSYNCED vs ACKS_WRITTEN, through the service.

    .venv/bin/python bench/bench_group_commit.py [--runs 5] [--seconds 3] [--producers 16]

Starts a service process (data in a temporary directory on the same disk as /tmp) and drives it
with ``--producers`` grpc.aio producers in this process, each sending one small batch (10 records
of 100 bytes) at a time to one shared partition and waiting for its ack before the next (a
producer with max.in.flight 1). Each run measures ``--seconds`` of acks-written traffic, then the
same of acks-fsynced traffic, on fresh topics; the figure is acknowledged records per second.
Reported: the median of each over ``--runs`` runs and the ratio fsynced / written (goal >= 0.5),
plus the fdatasync rounds the service ran (from its group-commit statistics: flushes / produces).

Without group commit every fsynced produce paid its own fdatasync (three, with the whole-log
flush); with it the producers that arrive while a sync runs share the next one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import grpc

from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc

RECORDS_PER_BATCH = 10
VALUE_BYTES = 100
GOAL_RATIO = 0.5


def _batch() -> bytes:
    builder = codec.RecordBatchBuilder()
    for _ in range(RECORDS_PER_BATCH):
        builder.append(b"v" * VALUE_BYTES)
    return builder.build()


class Service:
    """A service process on loopback over ``workdir``/data, started with ``args`` besides its
    listen address, ready file and data directory, and with no SEGLOG_ variables; ``pythonpath``,
    when given, is its whole PYTHONPATH (another checkout's server and client, say)."""

    def __init__(self, workdir: pathlib.Path, args: list[str], pythonpath: list[str] | None = None) -> None:
        ready = workdir / "ready"
        command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0",
                   "--ready-file", str(ready), "--data-dir", str(workdir / "data"), *args]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
        if pythonpath:
            environ["PYTHONPATH"] = os.pathsep.join(pythonpath)
        self.log = open(workdir / "service.log", "wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log, env=environ)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((workdir / "service.log").read_text())
            time.sleep(0.02)
        self.address = ready.read_text().strip()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


async def _produce_for(address: str, topic: str, acks: int, producers: int, seconds: float) -> float:
    batch = _batch()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.LogServiceStub(channel)
        await stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1))
        request = pb.ProduceRequest(topic=topic, records=batch, acks=acks)
        await stub.Produce(request)  # warm the path
        acked = 0
        deadline = time.perf_counter() + seconds

        async def producer() -> None:
            nonlocal acked
            while time.perf_counter() < deadline:
                await stub.Produce(request)
                acked += RECORDS_PER_BATCH

        started = time.perf_counter()
        await asyncio.gather(*(producer() for _ in range(producers)))
        return acked / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--producers", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="seglog-bench-gc-", dir=os.environ.get("TMPDIR")) as root:
        service = Service(pathlib.Path(root), [])
        try:
            written, fsynced = [], []
            for run in range(args.runs):
                written.append(asyncio.run(_produce_for(
                    service.address, f"w{run}", pb.ACKS_WRITTEN, args.producers, args.seconds)))
                fsynced.append(asyncio.run(_produce_for(
                    service.address, f"f{run}", pb.ACKS_FSYNCED, args.producers, args.seconds)))
                print(f"run {run}: written {written[-1]:,.0f} records/s, "
                      f"fsynced {fsynced[-1]:,.0f} records/s", flush=True)
        finally:
            service.stop()
    w, f = statistics.median(written), statistics.median(fsynced)
    ratios = [b / a for a, b in zip(written, fsynced, strict=True)]
    print()
    print(f"| measure ({args.producers} producers, {RECORDS_PER_BATCH} x {VALUE_BYTES} B per produce) "
          f"| median | runs min..max |")
    print("|---|---|---|")
    print(f"| acks written, records/s | {w:,.0f} | {min(written):,.0f}..{max(written):,.0f} |")
    print(f"| acks fsynced, records/s | {f:,.0f} | {min(fsynced):,.0f}..{max(fsynced):,.0f} |")
    print(f"| ratio fsynced / written (goal >= {GOAL_RATIO}) | {f / w:.2f} | "
          f"{min(ratios):.2f}..{max(ratios):.2f} |")
    print("ok" if f / w >= GOAL_RATIO else "BELOW GOAL")


if __name__ == "__main__":
    main()
