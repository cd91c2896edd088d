"""Moving a partition between two instances on this machine: time and MB/s of a 256 MiB and a
1 GiB partition, and how long produce is fenced for the final catch-up.

    .venv/bin/python bench/bench_partition_move.py [--runs 3] [--sizes-mib 256,1024] [--segment-mib 64]

Starts a real etcd (Debian's etcd-server, tests/support/etcd_server.py) and two service processes
(a and b, ``--etcd``) on loopback, data in a temporary directory. For each size a topic of one
partition (``segment.bytes`` = ``--segment-mib``: every segment is copied while produce could go
on, only the tail appended since the last pass during the fence) is filled at a with raw Produce calls of one 512 KiB
batch (512 records of 1 KiB), then moved a -> b, b -> a, a -> b, ... (``Admin.move_partition``, one
run each): the move's own elapsed time and fenced time (MovePartitionResponse), bytes copied and
MB/s (bytes copied / elapsed). A size is skipped when the disk has less than 4 x its size free (the
source and the target each hold a copy until the source drops its own, plus the staging copy).

Every figure is the median of ``--runs`` runs; the 1-minute load average is printed with each run
(the machines are shared: see bench/README.md). Both instances, etcd and this client share the
machine's cores and one disk: the copy reads and writes the same disk, so MB/s is a floor of what
two machines would do.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seglog import Admin  # noqa: E402
from seglog import records as codec  # noqa: E402
from seglog.v1 import log_service_pb2 as pb  # noqa: E402
from tests.support.etcd_server import EtcdServer, free_port  # noqa: E402
from tests.support.integration_helpers import ServiceProcess  # noqa: E402

MIB = 1 << 20
RECORD_BYTES = 1024
RECORDS_PER_BATCH = 512  # one 512 KiB batch per Produce: well below request_bytes_max (8 MiB)


def load() -> str:
    return "%.2f" % os.getloadavg()[0]


def start(workdir: pathlib.Path, name: str, etcd: EtcdServer) -> ServiceProcess:
    data = workdir / name / "data"
    data.mkdir(parents=True)
    return ServiceProcess(workdir / name, [data], [
        "--listen", f"127.0.0.1:{free_port()}", "--metrics-listen", "none", "--etcd", etcd.endpoint,
        "--cluster-name", "movebench", "--instance-id", name]).start()


def wait_until(predicate, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)


def fill(service: ServiceProcess, topic: str, size_bytes: int) -> float:
    """Produces ``size_bytes`` of records into partition 0 at ``service``; returns MB/s."""
    builder = codec.RecordBatchBuilder()
    for n in range(RECORDS_PER_BATCH):
        builder.append(n.to_bytes(4, "big") * (RECORD_BYTES // 4))
    batch = builder.build()
    sends = -(-size_bytes // len(batch))
    started = time.perf_counter()
    for _ in range(sends):
        service.stub.Produce(pb.ProduceRequest(topic=topic, partition=0, records=batch), timeout=60)
    return sends * len(batch) / MIB / (time.perf_counter() - started)


def bench_size(admin: Admin, services: dict[str, ServiceProcess], size_mib: int, segment_mib: int,
               runs: int) -> dict[str, float]:
    topic = f"move{size_mib}"
    admin.create_topic(topic, partitions=1, configs={"segment.bytes": str(segment_mib * MIB)})
    owner = admin.metadata([topic]).owner_of(topic, 0).owner_id
    for name, service in services.items():
        with Admin(service.address) as one:
            wait_until(lambda: topic in {t.topic for t in one.list_topics()}, f"{name} holding {topic}")
    fill_mb_s = fill(services[owner], topic, size_mib * MIB)
    print(f"{size_mib} MiB filled at {owner}: {fill_mb_s:.0f} MB/s (load {load()})", flush=True)
    elapsed, fenced, rates = [], [], []
    for run in range(runs):
        target = "b" if owner == "a" else "a"
        move = admin.move_partition(topic, 0, target, from_instance=owner)
        rate = move.bytes_copied / MIB / (move.elapsed_ms / 1000)
        print(f"  run {run + 1}: {owner} -> {target} {move.bytes_copied / MIB:.0f} MiB in {move.elapsed_ms} ms "
              f"({rate:.0f} MB/s), fenced {move.fenced_ms} ms (load {load()})", flush=True)
        elapsed.append(move.elapsed_ms / 1000)
        fenced.append(move.fenced_ms)
        rates.append(rate)
        owner = target
    admin.delete_topic(topic)
    return {"seconds": statistics.median(elapsed), "mb_s": statistics.median(rates),
            "fenced_ms": statistics.median(fenced)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes-mib", default="256,1024")
    parser.add_argument("--segment-mib", type=int, default=64)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes_mib.split(",")]
    with tempfile.TemporaryDirectory(prefix="seglog-move-bench-") as directory:
        workdir = pathlib.Path(directory)
        (workdir / "etcd").mkdir()
        etcd = EtcdServer.start(str(workdir / "etcd"))
        services: dict[str, ServiceProcess] = {}
        try:
            services = {name: start(workdir, name, etcd) for name in ("a", "b")}
            with Admin(services["a"].address) as admin:
                wait_until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == {"a", "b"},
                           "a seeing b")
                print(f"cpus {os.cpu_count()}, load {load()}, runs {args.runs}, segment.bytes {args.segment_mib} MiB")
                results = {}
                for size_mib in sizes:
                    free = shutil.disk_usage(directory).free
                    if free < 4 * size_mib * MIB:
                        print(f"{size_mib} MiB skipped: {free // MIB} MiB free, {4 * size_mib} MiB wanted")
                        continue
                    results[size_mib] = bench_size(admin, services, size_mib, args.segment_mib, args.runs)
            print("\nsize      move time (median)  MB/s (median)  fenced (median)")
            for size_mib, result in results.items():
                print(f"{size_mib:5d} MiB  {result['seconds']:8.2f} s          {result['mb_s']:8.0f}       "
                      f"{result['fenced_ms']:6.0f} ms")
        finally:
            for service in services.values():
                service.stop()
            etcd.stop()


if __name__ == "__main__":
    main()
