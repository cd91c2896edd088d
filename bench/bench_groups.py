"""Consumer groups through a service process: commits per second, rebalance time, and what
auto-commit costs a consumer's throughput.

    .venv/bin/python bench/bench_groups.py [--runs 5] [--seconds 2] [--heartbeat-ms 500] [--records 300000]

Starts one service process (data in a temporary directory, ``__consumer_offsets`` with Kafka's 50
partitions) and drives it from this process through the public client:

- **commits/s**: one group member (``GroupConsumer``, auto-commit off) owning a 64-partition topic
  calls ``commit`` for ``--seconds``: one partition per call, then all 64 per call. A commit is
  answered once fsynced (docs/consumer-groups.md), so this is a figure of the disk as much as of
  the coordinator.
- **rebalance 3 -> 4 -> 3**: three ``AsyncGroupConsumer`` members on a 12-partition topic; a fourth
  joins (from the call to ``start`` until ``DescribeGroup`` says Stable, every member owning its 3),
  then closes (from the call to ``close`` until Stable, every member owning its 4). The service
  computes the targets at once; members learn them on their next heartbeat, and a moved partition is
  granted only once its previous owner's heartbeat reported it revoked, so the time is mostly
  heartbeat intervals (``--heartbeat-ms``, the service's ``group_heartbeat_interval_ms``; Kafka's
  new protocol defaults to 5000).
- **auto-commit's cost**: one member reads ``--records`` records (4 partitions, 100-byte values)
  from the earliest offset with auto-commit off, on at 5000 ms (Kafka's auto.commit.interval.ms)
  and on at 100 ms, in turn within each run (the order rotates); records/s and the commits the
  group made during the read (its batches in ``__consumer_offsets``).

- **heartbeat cost** (``--sections heartbeats``, in-process, no service): one group of
  ``--members`` members on a topic of twice as many partitions, settled; then steady heartbeats
  that write (each member in turn with a new client host: its member record changes), timed per
  call of ``GroupCoordinator.heartbeat`` (the offsets partition flushed between calls, untimed).
  ``--against DIR`` runs the same, interleaved run by run, on another tree's ``server/`` (e.g.
  ``git archive <commit> server | tar -x -C DIR``) and prints the ratio of the medians.

Every figure is the median of ``--runs`` runs; the 1-minute load average is printed before and after
each section (the machines are shared: see bench/README.md).
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

from seglog import AsyncAdmin, AsyncGroupConsumer, GroupConsumer, TopicPartition
from seglog import records as codec
from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import log_service_pb2_grpc as pb_grpc
from seglog_server.groups import OffsetCommitKey, decode_key, partition_for

OFFSETS_TOPIC = "__consumer_offsets"
COMMIT_PARTITIONS = 64  # partitions of one batched commit
REBALANCE_PARTITIONS = 12  # shared evenly by 3 and by 4 members
READ_PARTITIONS = 4
VALUE_BYTES = 100
RECORDS_PER_BATCH = 1000
# DescribeGroup is asked this often while a rebalance runs: small beside a heartbeat interval.
DESCRIBE_EVERY_S = 0.005
# Kafka's published defaults, shown beside ours (KIP-848 consumer protocol and the consumer configs).
KAFKA_DEFAULTS = {"auto.commit.interval.ms": 5000, "group.consumer.session.timeout.ms": 45000,
                  "group.consumer.heartbeat.interval.ms": 5000}


class Service:
    def __init__(self, workdir: pathlib.Path, args: list[str]) -> None:
        ready = workdir / "ready"
        command = [sys.executable, "-m", "seglog_server", "--listen", "127.0.0.1:0", "--metrics-listen", "none",
                   "--ready-file", str(ready), "--data-dir", str(workdir / "data"), *args]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("SEGLOG_")}
        self.log = open(workdir / "service.log", "wb")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log, env=environ)
        deadline = time.monotonic() + 60
        while not ready.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit((workdir / "service.log").read_text())
            time.sleep(0.02)
        self.address = ready.read_text().strip()
        self.channel = grpc.insecure_channel(self.address)
        self.stub = pb_grpc.LogServiceStub(self.channel)

    def commit_count(self, group: str) -> int:
        """The commits ``group`` made so far: batches of __consumer_offsets holding its offsets."""
        partition, offset, count = partition_for(group), 0, 0
        while True:
            try:
                response = self.stub.Fetch(pb.FetchRequest(topic=OFFSETS_TOPIC, partition=partition, offset=offset),
                                           timeout=30)
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:  # no commit yet: the topic is created by the first
                    return 0
                raise
            batches = [b for b in codec.iter_batches(response.records) if b.next_offset > offset]
            if not batches:
                return count
            for batch in batches:
                count += any(_is_commit_of(group, record.key) for record in batch.records())
            offset = batches[-1].next_offset

    def stop(self) -> None:
        self.channel.close()
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


def _is_commit_of(group: str, key: bytes | None) -> bool:
    try:
        decoded = decode_key(key or b"")
    except Exception:  # noqa: BLE001 - a record type this tree does not read is no offset commit
        return False
    return isinstance(decoded, OffsetCommitKey) and decoded.group == group


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def median_line(name: str, values: list[float], unit: str, digits: int = 0) -> str:
    shown = ", ".join(f"{v:.{digits}f}" for v in values)
    return f"{name}: median {statistics.median(values):.{digits}f} {unit} ({shown})"


# -- commits per second -------------------------------------------------------------------------------
def commits_per_second(service: Service, runs: int, seconds: float) -> dict[str, list[float]]:
    topic = "bench-commits"
    service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=COMMIT_PARTITIONS), timeout=30)
    partitions = [TopicPartition(topic, p) for p in range(COMMIT_PARTITIONS)]
    found: dict[str, list[float]] = {"single": [], "batched": []}
    with GroupConsumer(service.address, group_id="bench-commits", topics=[topic], enable_auto_commit=False) as member:
        assert len(member.assignment()) == COMMIT_PARTITIONS, member.assignment()
        offset = 0
        for _ in range(runs):
            for kind in ("single", "batched"):
                calls = 0
                deadline = time.perf_counter() + seconds
                started = time.perf_counter()
                while time.perf_counter() < deadline:
                    offset += 1
                    member.commit({partitions[0]: offset} if kind == "single" else dict.fromkeys(partitions, offset))
                    calls += 1
                found[kind].append(calls / (time.perf_counter() - started))
    return found


# -- rebalance 3 -> 4 -> 3 ------------------------------------------------------------------------------
async def _until_stable(admin: AsyncAdmin, group: str, member_count: int) -> None:
    share = REBALANCE_PARTITIONS // member_count
    while True:
        described = await admin.describe_group(group)
        if (described.state == "Stable" and len(described.members) == member_count
                and all(len(m.owned_partitions) == share for m in described.members)):
            return
        await asyncio.sleep(DESCRIBE_EVERY_S)


async def _one_rebalance_run(address: str, topic: str, group: str, session_ms: int) -> tuple[float, float]:
    def member() -> AsyncGroupConsumer:
        return AsyncGroupConsumer(address, group_id=group, topics=[topic], enable_auto_commit=False,
                                  session_timeout_ms=session_ms)

    async with AsyncAdmin(address) as admin:
        members = [member() for _ in range(3)]
        for each in members:
            await each.start()
        await _until_stable(admin, group, 3)
        fourth = member()
        started = time.perf_counter()
        await fourth.start()
        await _until_stable(admin, group, 4)
        joined_s = time.perf_counter() - started
        started = time.perf_counter()
        await fourth.close()
        await _until_stable(admin, group, 3)
        left_s = time.perf_counter() - started
        for each in members:
            await each.close()
    return joined_s, left_s


def rebalance_times(service: Service, runs: int, session_ms: int) -> dict[str, list[float]]:
    topic = "bench-rebalance"
    service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=REBALANCE_PARTITIONS), timeout=30)
    found: dict[str, list[float]] = {"3->4": [], "4->3": []}
    for run in range(runs):
        joined_s, left_s = asyncio.run(_one_rebalance_run(service.address, topic, f"bench-rebalance-{run}", session_ms))
        found["3->4"].append(joined_s * 1000)
        found["4->3"].append(left_s * 1000)
    return found


# -- auto-commit's cost ---------------------------------------------------------------------------------
def fill(service: Service, topic: str, records: int) -> None:
    service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=READ_PARTITIONS), timeout=30)
    builder = codec.RecordBatchBuilder()
    for _ in range(RECORDS_PER_BATCH):
        builder.append(b"v" * VALUE_BYTES)
    batch = builder.build()
    for n in range(records // RECORDS_PER_BATCH):
        service.stub.Produce(pb.ProduceRequest(topic=topic, partition=n % READ_PARTITIONS, records=batch), timeout=30)


async def _read_all(service: Service, topic: str, group: str, records: int, interval_ms: int | None,
                    session_ms: int) -> tuple[float, int]:
    """Records/s of reading ``records`` from the earliest offset, and the commits made meanwhile
    (counted before the close, which commits once more with auto-commit on)."""
    address = service.address
    consumer = AsyncGroupConsumer(address, group_id=group, topics=[topic], auto_offset_reset="earliest",
                                  enable_auto_commit=interval_ms is not None, session_timeout_ms=session_ms,
                                  auto_commit_interval_ms=interval_ms or 5000)
    await consumer.start()
    try:
        read = 0
        started = time.perf_counter()
        while read < records:
            read += len(await consumer.poll(100))
        rate = read / (time.perf_counter() - started)
        return rate, await asyncio.to_thread(service.commit_count, group)
    finally:
        await consumer.close()


def auto_commit_cost(service: Service, runs: int, records: int, session_ms: int) -> dict[str, dict[str, list[float]]]:
    topic = "bench-auto-commit"
    records -= records % RECORDS_PER_BATCH
    fill(service, topic, records)
    modes: list[tuple[str, int | None]] = [("off", None), ("5000 ms", 5000), ("100 ms", 100)]
    found: dict[str, dict[str, list[float]]] = {name: {"records/s": [], "commits": []} for name, _ in modes}
    asyncio.run(_read_all(service, topic, "bench-auto-warm-up", records, None, session_ms))  # page cache, paths
    for run in range(runs):
        for name, interval_ms in modes[run % len(modes):] + modes[:run % len(modes)]:
            rate, commits = asyncio.run(_read_all(service, topic, f"bench-auto-{run}-{name}", records, interval_ms,
                                                  session_ms))
            found[name]["records/s"].append(rate)
            found[name]["commits"].append(commits)
    return found


def heartbeat_child(members: int, beats: int) -> float:
    """Microseconds per writing steady heartbeat of a settled group of ``members`` (this
    process's seglog_server)."""
    from seglog_server.groups.coordinator import GroupCoordinator
    from seglog_server.storage import FakeClock, LogManager

    with tempfile.TemporaryDirectory(prefix="seglog-bench-heartbeats-") as directory:
        clock = FakeClock()
        manager = LogManager([directory], clock=clock)
        manager.startup()
        try:
            manager.create_topic("t", 2 * members, {})
            coordinator = GroupCoordinator(manager, clock, session_timeout_ms=10**9)
            coordinator.start()
            answers = {}
            for index in range(members):
                answer = coordinator.heartbeat("g", f"m{index}", 0, subscription={"t"})
                answers[answer.member_id] = (answer.member_epoch, answer.assignment)
            for _ in range(3):  # revoke, then be granted: settled
                for member, (epoch, owned) in list(answers.items()):
                    answer = coordinator.heartbeat("g", member, epoch, subscription=None, owned=owned)
                    answers[member] = (answer.member_epoch, answer.assignment)
            log = None
            spent = 0.0
            for beat in range(beats):
                member = f"m{beat % members}"
                epoch, owned = answers[member]
                started = time.perf_counter()
                answer = coordinator.heartbeat("g", member, epoch, subscription=None, owned=owned,
                                               client_host=f"/10.0.{beat // members % 2}.1")
                spent += time.perf_counter() - started
                assert answer.written is not None, "a steady heartbeat that writes"
                log = answer.written.log
                log.flush(answer.written.end_offset)  # untimed: no pending writes pile up
            return spent / beats * 1e6
        finally:
            manager.shutdown()


def heartbeat_costs(runs: int, members: int, beats: int, against: str | None) -> dict[str, list[float]]:
    trees = {"this tree": str(pathlib.Path(__file__).resolve().parent.parent / "server")}
    if against:
        trees["against"] = str(pathlib.Path(against) / "server")
    found: dict[str, list[float]] = {name: [] for name in trees}
    for run in range(runs):
        order = list(trees.items())
        if run % 2:
            order.reverse()
        for name, server in order:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([server, os.environ.get("PYTHONPATH", "")]))
            out = subprocess.run([sys.executable, __file__, "--heartbeat-child", str(members), str(beats)],
                                 env=env, check=True, capture_output=True, text=True).stdout
            found[name].append(float(out.split()[-1]))
    return found


def main() -> None:
    if sys.argv[1:2] == ["--heartbeat-child"]:
        print(f"{heartbeat_child(int(sys.argv[2]), int(sys.argv[3])):.1f}")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each commit measurement")
    parser.add_argument("--heartbeat-ms", type=int, default=500, help="the service's group_heartbeat_interval_ms")
    parser.add_argument("--records", type=int, default=1_000_000, help="records read per auto-commit measurement")
    parser.add_argument("--sections", default="commits,rebalance,auto-commit")
    parser.add_argument("--members", type=int, default=1000, help="group size of the heartbeats section")
    parser.add_argument("--beats", type=int, default=2000, help="heartbeats timed per run of that section")
    parser.add_argument("--against", help="another tree (its server/) for the heartbeats section's A/B")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    session_ms = max(10 * args.heartbeat_ms, 10_000)
    print(f"Kafka's defaults: {KAFKA_DEFAULTS}; here group_heartbeat_interval_ms={args.heartbeat_ms}, "
          f"group_session_timeout_ms={session_ms}, {args.runs} runs")
    if "heartbeats" in sections:
        print(f"steady heartbeats that write, {args.members} members, {args.beats} per run (load {load()})")
        found = heartbeat_costs(args.runs, args.members, args.beats, args.against)
        for name, values in found.items():
            print("  " + median_line(f"{name}, us per heartbeat", values, "us", 1))
        if "against" in found:
            ratio = statistics.median(found["this tree"]) / statistics.median(found["against"])
            print(f"  ratio this tree / against: {ratio:.3f}")
        print(f"  (load {load()})")
        sections.discard("heartbeats")
        if not sections:
            return
    with tempfile.TemporaryDirectory(prefix="seglog-bench-groups-") as workdir:
        service = Service(pathlib.Path(workdir), ["--group-heartbeat-interval-ms", str(args.heartbeat_ms),
                                                  "--group-session-timeout-ms", str(session_ms)])
        try:
            if "commits" in sections:
                print(f"commits/s (load {load()})")
                found = commits_per_second(service, args.runs, args.seconds)
                print("  " + median_line("one partition per commit, commits/s", found["single"], "/s"))
                print("  " + median_line(f"{COMMIT_PARTITIONS} partitions per commit, commits/s", found["batched"], "/s"))
                offsets = [rate * COMMIT_PARTITIONS for rate in found["batched"]]
                print("  " + median_line("  partition offsets committed/s", offsets, "/s"))
                print(f"  (load {load()})")
            if "rebalance" in sections:
                print(f"rebalance of {REBALANCE_PARTITIONS} partitions (load {load()})")
                found = rebalance_times(service, args.runs, session_ms)
                for name, values in found.items():
                    print("  " + median_line(f"{name} members, ms", values, "ms"),
                          f"= {statistics.median(values) / args.heartbeat_ms:.1f} heartbeat intervals")
                print(f"  (load {load()})")
            if "auto-commit" in sections:
                print(f"auto-commit, {args.records} records read per run (load {load()})")
                found = auto_commit_cost(service, args.runs, args.records, session_ms)
                baseline = statistics.median(found["off"]["records/s"])
                for name, values in found.items():
                    rate = statistics.median(values["records/s"])
                    print("  " + median_line(f"auto-commit {name}, records/s", values["records/s"], "/s"),
                          f"ratio to off {rate / baseline:.3f}; commits during the read",
                          [int(c) for c in values["commits"]])
                print(f"  (load {load()})")
        finally:
            service.stop()


if __name__ == "__main__":
    main()
