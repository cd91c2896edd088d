"""Cluster mode on this machine: produce and read through the client against one and three
instances, the cost of routing, and how soon clients follow an ownership change.

    .venv/bin/python bench/bench_cluster.py [--runs 3] [--records 60000] [--partitions 6]

Starts a real etcd (Debian's etcd-server, tests/support/etcd_server.py) and service processes on
loopback, data in temporary directories, and drives them from this process through the public
client (``Producer.send_many`` in slices of 5,000 records of 100 bytes, ``flush``; a ``Consumer``
over every partition from the earliest offset):

- **single**: one process without ``--etcd`` (the baseline);
- **cluster-1**: one instance with ``--etcd`` (the cost of cluster mode's checks on one machine);
- **cluster-3**: three instances with ``--etcd``, the clients bootstrapped with instance a only:
  partitions placed two per instance, each request routed to its owner. Records/s in total, and
  per instance (the records of the partitions it owns over the same wall time).

The cost of routing: a fresh ``Producer`` bootstrapped with a sends one record to a partition a
owns (straight there) and one to a partition b owns (refused at a with b's hint, one ``Metadata``
call, sent again to b): the first send's latency, each. Then the same producer's next sends to the
b partition: straight to b.

Ownership change: the owner record of a partition is moved from a to b in etcd (what a move's
commit writes: ``change_owner``, epoch + 1); the time until every instance's ``Metadata`` answers
the new owner (the watch), and the latency of the first send of a producer that had routed the
partition to a (refused with the hint, sent again to b), beside that producer's steady sends.

Every figure is the median of ``--runs`` runs (a new cluster each run, the modes in turn, single
and cluster-1 in alternating order); the
1-minute load average is printed with each run (the machines are shared: see bench/README.md).
Two cores are shared by every process here (client, three instances, etcd): totals are a floor of
what three machines would do, and the per-instance figures are what one core's share gives.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seglog import Admin, Consumer, Producer  # noqa: E402
from seglog_server.cluster import ClusterKeys, EtcdGateway, change_owner, read_owner  # noqa: E402
from tests.integration.cluster.test_cluster_client_routing import _holds  # noqa: E402
from tests.support.etcd_server import EtcdServer, free_port  # noqa: E402
from tests.support.integration_helpers import ServiceProcess  # noqa: E402

TOPIC = "bench"
VALUE = b"v" * 100
SLICE = 5000
CLUSTER = "bench"


def load() -> str:
    return "%.2f" % os.getloadavg()[0]


def start(workdir: pathlib.Path, name: str, args: list[str]) -> ServiceProcess:
    data = workdir / name / "data"
    data.mkdir(parents=True)
    return ServiceProcess(workdir / name, [data], ["--listen", f"127.0.0.1:{free_port()}",
                                                   "--metrics-listen", "none", *args]).start()


def cluster_args(etcd: EtcdServer, instance_id: str, cluster: str = CLUSTER) -> list[str]:
    return ["--etcd", etcd.endpoint, "--cluster-name", cluster, "--instance-id", instance_id]


def wait_until(predicate, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout_s} s: {what}")
        time.sleep(0.01)


def produce_and_read(bootstrap: str, partitions: int, records: int) -> tuple[float, float]:
    """(produce records/s, read records/s) through the client, every partition evenly."""
    per_partition = records // partitions
    values = [VALUE] * SLICE
    with Producer(bootstrap, linger_ms=5) as producer:
        producer.send(TOPIC, VALUE, partition=0).result(timeout=60)  # routes learned before timing
        for p in range(partitions):
            producer.send(TOPIC, VALUE, partition=p).result(timeout=60)
        started = time.perf_counter()
        for start_at in range(0, per_partition, SLICE):
            for p in range(partitions):
                producer.send_many(TOPIC, values[:min(SLICE, per_partition - start_at)], partition=p)
        producer.flush()
        produced = time.perf_counter() - started
    total = per_partition * partitions + 2 * partitions
    wanted = total - partitions - 1
    with Consumer(bootstrap, TOPIC, partition=list(range(partitions)), start="earliest",
                  max_poll_records=10_000) as consumer:
        read, started = 0, time.perf_counter()
        while read < wanted:
            read += len(consumer.poll(timeout_ms=1000))
        reading = time.perf_counter() - started
    return per_partition * partitions / produced, read / reading


def first_send_ms(bootstrap: str, partition: int) -> tuple[float, float]:
    """(first send's latency, median of the next 20) of a fresh producer, in ms."""
    with Producer(bootstrap, linger_ms=0) as producer:
        started = time.perf_counter()
        producer.send(TOPIC, VALUE, partition=partition).result(timeout=60)
        first = (time.perf_counter() - started) * 1000
        steady = []
        for _ in range(20):
            started = time.perf_counter()
            producer.send(TOPIC, VALUE, partition=partition).result(timeout=60)
            steady.append((time.perf_counter() - started) * 1000)
    return first, statistics.median(steady)


def ownership_change(etcd: EtcdServer, services: dict[str, ServiceProcess], partition: int) -> tuple[float, float, float]:
    """(ms until every instance's Metadata names b, first send after the change, steady send) for
    a partition a owns, moved to b in etcd while a producer has it routed to a."""
    admins = {name: Admin(service.address) for name, service in services.items()}
    gateway = EtcdGateway((etcd.endpoint,), timeout_s=5)
    keys = ClusterKeys(CLUSTER)
    try:
        with Producer(services["a"].address, linger_ms=0) as producer:
            producer.send(TOPIC, VALUE, partition=partition).result(timeout=60)
            steady = []
            for _ in range(20):
                started = time.perf_counter()
                producer.send(TOPIC, VALUE, partition=partition).result(timeout=60)
                steady.append((time.perf_counter() - started) * 1000)
            change_owner(gateway, keys, TOPIC, partition, "b", read_owner(gateway, keys, TOPIC, partition))
            changed = time.perf_counter()
            waiting = dict(admins)
            while waiting:
                for name in [n for n, admin in waiting.items()
                             if admin.metadata([TOPIC]).owner_of(TOPIC, partition).owner_id == "b"]:
                    del waiting[name]
            propagated = (time.perf_counter() - changed) * 1000
            started = time.perf_counter()
            producer.send(TOPIC, VALUE, partition=partition).result(timeout=60)
            followed = (time.perf_counter() - started) * 1000
    finally:
        gateway.close()
        for admin in admins.values():
            admin.close()
    return propagated, followed, statistics.median(steady)


def one_run(number: int, records: int, partitions: int, results: dict) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as directory:
        workdir = pathlib.Path(directory)
        etcd = EtcdServer.start(str(workdir))
        started: list[ServiceProcess] = []
        try:
            # single and cluster-1, which first alternating from run to run (no order bias)
            modes = [("single", []), ("cluster-1", cluster_args(etcd, "one", "bench-one"))]
            for mode, args in modes if number % 2 else modes[::-1]:
                service = start(workdir / mode, mode, args)
                started.append(service)
                Admin(service.address).create_topic(TOPIC, partitions=partitions)
                results[mode].append(produce_and_read(service.address, partitions, records))
                service.stop()
            # cluster-3 (its own cluster name: the one instance above stays out of its placement)
            services = {name: start(workdir / "three", name, cluster_args(etcd, name)) for name in "abc"}
            started += services.values()
            admin = Admin(services["a"].address)
            wait_until(lambda: {i.instance_id for i in admin.metadata().instances if i.alive} == set("abc"),
                       "three instances alive")
            admin.create_topic(TOPIC, partitions=partitions)
            owners = {p: admin.metadata([TOPIC]).owner_of(TOPIC, p).owner_id for p in range(partitions)}
            for service in services.values():
                wait_until(lambda: _holds(service, TOPIC), "topic held")
            produce_rate, read_rate = produce_and_read(services["a"].address, partitions, records)
            results["cluster-3"].append((produce_rate, read_rate))
            shares = {name: sum(1 for owner in owners.values() if owner == name) / partitions for name in "abc"}
            results["per-instance"].append({name: (produce_rate * share, read_rate * share)
                                            for name, share in shares.items()})
            on_a = next(p for p, owner in owners.items() if owner == "a")
            on_b = next(p for p, owner in owners.items() if owner == "b")
            results["first-send-own"].append(first_send_ms(services["a"].address, on_a))
            results["first-send-routed"].append(first_send_ms(services["a"].address, on_b))
            results["ownership-change"].append(ownership_change(etcd, services, on_a))
            admin.close()
            print(f"run {number}: done (load {load()})", flush=True)
        finally:
            for service in started:
                service.stop()
            etcd.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--partitions", type=int, default=6)
    options = parser.parse_args()
    results: dict = {key: [] for key in ("single", "cluster-1", "cluster-3", "per-instance", "first-send-own",
                                         "first-send-routed", "ownership-change")}
    print(f"load before: {load()} ({os.cpu_count()} cores)", flush=True)
    for number in range(1, options.runs + 1):
        one_run(number, options.records, options.partitions, results)
    print(f"load after: {load()}")

    def median(rows, index):
        return statistics.median(row[index] for row in rows)

    base_produce, base_read = median(results["single"], 0), median(results["single"], 1)
    print(f"\n{options.records} records of {len(VALUE)} B over {options.partitions} partitions, "
          f"medians of {options.runs} runs\n")
    print("| setup | produce records/s | vs single | read records/s | vs single |")
    print("|---|---|---|---|---|")
    for mode in ("single", "cluster-1", "cluster-3"):
        produce, read = median(results[mode], 0), median(results[mode], 1)
        print(f"| {mode} | {produce:,.0f} | {produce / base_produce:.2f} | {read:,.0f} | {read / base_read:.2f} |")
    for name in "abc":
        produce = statistics.median(run[name][0] for run in results["per-instance"])
        read = statistics.median(run[name][1] for run in results["per-instance"])
        print(f"| cluster-3, instance {name} | {produce:,.0f} | | {read:,.0f} | |")
    own, routed = results["first-send-own"], results["first-send-routed"]
    print("\n| send through a fresh Producer(a) | first send, ms | next sends, ms (median) |")
    print("|---|---|---|")
    print(f"| partition owned by a | {median(own, 0):.2f} | {median(own, 1):.2f} |")
    print(f"| partition owned by b (refusal, Metadata, resend) | {median(routed, 0):.2f} | {median(routed, 1):.2f} |")
    change = results["ownership-change"]
    print("\n| ownership change a -> b in etcd | ms (median) |")
    print("|---|---|")
    print(f"| until every instance's Metadata names b | {median(change, 0):.1f} |")
    print(f"| first send after it (refused at a, Metadata, resent to b) | {median(change, 1):.2f} |")
    print(f"| steady send before it | {median(change, 2):.2f} |")


if __name__ == "__main__":
    main()
