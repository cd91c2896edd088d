"""Consumer groups with real processes (helpers of test_group_processes.py): a seglog service process and members, each a
``group_member.py`` process writing a journal of what it was assigned, processed and committed.

The service runs with a short session timeout and heartbeat interval (the members are given the
same session timeout), so a killed or stopped member is removed within seconds."""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import signal
import subprocess
import sys
import time

from tests.support.integration_helpers import make_batch, service_environment

from seglog import Admin
from seglog.v1 import log_service_pb2 as pb

MEMBER_SCRIPT = pathlib.Path(__file__).with_name("group_member.py")
SESSION_MS = 2000
HEARTBEAT_MS = 200
GROUP_ARGS = ["--offsets-topic-partitions", "3", "--group-session-timeout-ms", str(SESSION_MS),
              "--group-heartbeat-interval-ms", str(HEARTBEAT_MS)]
# A bound on a hang, never a speed assertion: what the tests wait for takes a few seconds.
WAIT_BOUND_S = 60.0
WAIT_STEP_S = 0.05


def wait_until(condition, what: str, bound_s: float = WAIT_BOUND_S):
    deadline = time.monotonic() + bound_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(WAIT_STEP_S)


@dataclasses.dataclass
class Journal:
    """What one member process wrote (see group_member.py)."""

    processed: list[tuple[int, int]]
    sent: list[dict[int, int]]
    acked: list[dict[int, int]]
    lines: list[str]

    @classmethod
    def read(cls, path: pathlib.Path) -> Journal:
        lines = path.read_text().splitlines() if path.exists() else []
        processed, sent, acked = [], [], []
        for line in lines:
            kind, *words = line.split()
            if kind == "R":
                processed.append((int(words[0]), int(words[1])))
            elif kind in "SK":
                offsets = {int(p): int(o) for p, o in zip(words[::2], words[1::2])}
                (sent if kind == "S" else acked).append(offsets)
        return cls(processed, sent, acked, lines)

    def last_acked(self, partition: int) -> int | None:
        return next((c[partition] for c in reversed(self.acked) if partition in c), None)

    def possible_commits(self, partition: int) -> set[int | None]:
        """What the service may hold from this member for ``partition``: its last acknowledged
        commit, or one sent after it whose answer the member never saw (killed, or failed)."""
        possible: set[int | None] = {self.last_acked(partition)}
        for line in reversed(self.lines):
            kind, *words = line.split()
            offsets = {int(p): int(o) for p, o in zip(words[::2], words[1::2])} if kind in "SK" else {}
            if kind == "K" and partition in offsets:
                break
            if kind == "S" and partition in offsets:
                possible.add(offsets[partition])
        return possible

    def kinds(self, kind: str) -> list[list[str]]:
        return [line.split()[1:] for line in self.lines if line.split()[0] == kind]


class Member:
    """One group_member.py process."""

    def __init__(self, workdir: pathlib.Path, name: str, address: str, group: str, topic: str, *extra: str):
        self.name = name
        self.journal_path = workdir / f"{name}.journal"
        self.output_path = workdir / f"{name}.out"
        with open(self.output_path, "ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, str(MEMBER_SCRIPT), "--server", address, "--group", group, "--topic", topic,
                 "--journal", str(self.journal_path), "--session-ms", str(SESSION_MS), *extra],
                stdout=output, stderr=output, env=service_environment(), cwd=workdir)

    def journal(self) -> Journal:
        return Journal.read(self.journal_path)

    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)

    def close(self) -> int:
        """SIGTERM: the member closes its consumer (commit, leave) and exits."""
        if self.process.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"member {self.name} did not close:\n{self.output()}")


def admin_of(service) -> Admin:
    return Admin(service.address)


def produce(stub, topic: str, partitions: int, per_partition: int, start: int = 0) -> set[tuple[int, int]]:
    """``per_partition`` records to each partition; returns their (partition, offset)."""
    produced = set()
    for partition in range(partitions):
        values = [b"p%d-r%d" % (partition, start + n) for n in range(per_partition)]
        base = stub.Produce(pb.ProduceRequest(topic=topic, partition=partition, records=make_batch(values)),
                            timeout=10).base_offset
        produced |= {(partition, base + n) for n in range(per_partition)}
    return produced


def owners(admin: Admin, group: str) -> dict[str, set[int]]:
    """member id -> partitions it owns, from DescribeGroup."""
    return {m.member_id: {tp.partition for tp in m.owned_partitions} for m in admin.describe_group(group).members}


def stable_split(admin: Admin, group: str, member_count: int, partitions: int):
    """The owners once the group is Stable with ``member_count`` members sharing every partition."""
    description = admin.describe_group(group)
    owned = {m.member_id: {tp.partition for tp in m.owned_partitions} for m in description.members}
    if description.state != "Stable" or len(owned) != member_count:
        return None
    if set().union(*owned.values()) != set(range(partitions)):
        return None
    return owned


def processed_counts(journals) -> collections.Counter:
    return collections.Counter(record for journal in journals for record in journal.processed)


def settled(admin: Admin, group: str, members) -> bool:
    """Each member's client runs at the epoch the service gave it (its journal's last ``M`` line
    says the epoch DescribeGroup shows). Closing before that races an epoch-changing heartbeat,
    which is the bug test_group_close_during_heartbeat.py pins: the tests close settled members."""
    epochs = {m.member_id: m.member_epoch for m in admin.describe_group(group).members}
    for member in members:
        memberships = member.journal().kinds("M")
        if not memberships or epochs.get(memberships[-1][0]) != int(memberships[-1][1]):
            return False
    return True
