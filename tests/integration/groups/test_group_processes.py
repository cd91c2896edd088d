"""Consumer groups shown with real processes (docs/consumer-groups.md): members are
``group_member.py`` processes, the coordinator a seglog service process, and each claim is read
from the members' journals and the service's own answers (DescribeGroup, FetchOffsets):

- three members split six partitions, disjoint and complete; a member killed with SIGKILL loses
  its partitions to the others, every record is processed at least once, and exactly the records
  the killed member processed after its last commit are processed twice;
- a graceful close hands over with no record processed twice;
- a member restarted after a kill resumes right at the group's committed offsets;
- a static member closed and restarted within the session timeout gets its partitions back, and
  nothing moves meanwhile;
- a zombie (SIGSTOPped past its session timeout) cannot commit over the new owner, and rejoins;
- a coordinator killed with SIGKILL and restarted keeps every commit a member saw acknowledged;
- ``__consumer_offsets`` cleaned by ``seglog cleaner run`` and replayed at a restart gives the
  committed map the live service served.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import grpc
import pytest
from tests.support.compose_processes import free_port
from tests.support.integration_helpers import error_class, rpc_error

from seglog.v1 import log_service_pb2 as pb

from group_process_support import (
    GROUP_ARGS,
    admin_of,
    processed_counts,
    produce,
    settled,
    stable_split,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
OFFSETS_TOPIC = "__consumer_offsets"
# Members process records slowly (10 ms each, ten per poll) so a kill lands mid-stream.
SLOW_MEMBER = ("--record-delay-ms", "10", "--max-records", "10", "--commit-every", "2")


def member_id_of(member) -> str:
    ids = {words[0] for words in member.journal().kinds("M")}
    assert len(ids) == 1, f"{member.name} changed member id: {ids}"  # KIP-1082: one id for life
    return ids.pop()


def processed_total(*members) -> set:
    return set(processed_counts([m.journal() for m in members]))


def three_stable_members(service, members, closing, group, topic, partitions=6):
    service.stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=partitions), timeout=10)
    started = [members(service.address, group, topic, *SLOW_MEMBER) for _ in range(3)]
    admin = closing(admin_of(service))
    split = wait_until(lambda: stable_split(admin, group, 3, partitions), "three members sharing the partitions")
    wait_until(lambda: all(m.journal().kinds("M") for m in started), "each member to report its id")
    return admin, started, split


def stop_between_commits(member, processed_min: int) -> None:
    """SIGSTOPs ``member`` once it has processed at least ``processed_min`` records and some since
    its last acknowledged commit, with no commit in flight (its journal ends with records)."""
    def past_a_commit(journal) -> bool:
        return len(journal.processed) >= processed_min and bool(journal.acked) and journal.lines[-1][0] == "R"

    while True:
        wait_until(lambda: past_a_commit(member.journal()), f"{member.name} to process records past a commit")
        member.signal(signal.SIGSTOP)
        if past_a_commit(member.journal()):
            return
        member.signal(signal.SIGCONT)  # it moved on between the look and the stop: look again


def stop_outside_a_commit(member, processed_min: int) -> None:
    """SIGSTOPs ``member`` once it has processed at least ``processed_min`` records, at a moment
    no commit of it is in flight (its journal does not end with a commit sent)."""
    while True:
        wait_until(lambda: len(member.journal().processed) >= processed_min, f"{member.name} to process records")
        member.signal(signal.SIGSTOP)
        if member.journal().lines[-1][0] != "S":
            return
        member.signal(signal.SIGCONT)


def assert_disjoint_and_complete(split: dict, partitions: int) -> None:
    owned = list(split.values())
    assert sum(len(s) for s in owned) == partitions and set().union(*owned) == set(range(partitions))
    assert max(map(len, owned)) - min(map(len, owned)) <= 1


def test_a_killed_members_partitions_move_on_and_only_its_uncommitted_records_repeat(group_service, members,
                                                                                     closing):
    service = group_service
    admin, started, split = three_stable_members(service, members, closing, "g-kill", "kill-orders")
    assert_disjoint_and_complete(split, 6)
    by_id = {member_id_of(m): m for m in started}
    assert set(by_id) == set(split)
    produced = produce(service.stub, "kill-orders", 6, 60)
    victim, survivors = started[0], started[1:]
    victim_partitions = split[member_id_of(victim)]
    stop_between_commits(victim, 40)
    # Each process read only its own partitions, as DescribeGroup said.
    for member_id, member in by_id.items():
        assert {p for p, _ in member.journal().processed} <= split[member_id]
    victim.kill()  # SIGKILL of the stopped process
    final = victim.journal()
    wait_until(lambda: processed_total(*survivors) | set(final.processed) >= produced, "every record processed")
    after = wait_until(lambda: stable_split(admin, "g-kill", 2, 6), "the survivors to own all six")
    assert member_id_of(victim) not in after
    assert f"group 'g-kill': member {member_id_of(victim)} removed, its session timed out" in service.log()
    for member_id, member in by_id.items():
        if member is not victim:  # sticky: the survivors kept theirs and shared the victim's
            assert split[member_id] < after[member_id]
    journals = [final] + [m.journal() for m in survivors]
    counts = processed_counts(journals)
    assert set(counts) == produced  # at least once, nothing else
    # The new owner of each of the victim's partitions started at the group's committed offset,
    # which is the victim's last commit (stopped outside a commit, it saw that one acknowledged).
    expected_duplicates = set()
    for partition in victim_partitions:
        last_commit = final.last_acked(partition) or 0
        resumed_at = min((o for j in journals[1:] for p, o in j.processed if p == partition), default=None)
        if resumed_at is None:  # the victim had read and committed all of it
            assert last_commit == max(o for p, o in produced if p == partition) + 1
            continue
        assert resumed_at == last_commit
        expected_duplicates |= {(p, o) for p, o in final.processed if p == partition and o >= resumed_at}
    duplicates = {record for record, count in counts.items() if count > 1}
    assert duplicates == expected_duplicates
    assert duplicates  # it was killed with records processed past its last commit
    assert max(counts.values()) <= 2
    print(f"killed member: {len(final.processed)} processed, {len(duplicates)} processed again after it")
    wait_until(lambda: settled(admin, "g-kill", survivors), "the survivors to settle")
    for member in survivors:
        assert member.close() == 0, member.output()


def test_a_graceful_close_hands_over_with_no_duplicates(group_service, members, closing):
    service = group_service
    admin, started, split = three_stable_members(service, members, closing, "g-close", "close-orders")
    produced = produce(service.stub, "close-orders", 6, 60)
    leaving, staying = started[0], started[1:]
    leaving_partitions = split[member_id_of(leaving)]
    wait_until(lambda: len(leaving.journal().processed) >= 40, "the leaving member to process some records")
    assert leaving.close() == 0, leaving.output()
    assert leaving.journal().lines[-1] == "X"
    wait_until(lambda: processed_total(leaving, *staying) >= produced, "every record processed")
    counts = processed_counts([m.journal() for m in started])
    assert set(counts) == produced and set(counts.values()) == {1}
    # The leaving member's partitions went on to the others, who read the rest of them.
    taken_over = {p for m in staying for p, _ in m.journal().processed} & leaving_partitions
    assert taken_over == {p for p, o in produced - set(leaving.journal().processed) if p in leaving_partitions}
    assert wait_until(lambda: stable_split(admin, "g-close", 2, 6), "the others to own all six")
    wait_until(lambda: settled(admin, "g-close", staying), "the others to settle")
    for member in staying:
        assert member.close() == 0, member.output()


def test_a_restarted_member_resumes_right_after_its_committed_offsets(group_service, members, closing):
    service = group_service
    admin = closing(admin_of(service))
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="resume-orders", partitions=2), timeout=10)
    produced = produce(service.stub, "resume-orders", 2, 60)
    first = members(service.address, "g-resume", "resume-orders", "--record-delay-ms", "20", "--max-records", "5")
    stop_outside_a_commit(first, 30)
    first.kill()  # SIGKILL of the stopped process: no commit was in flight
    killed = first.journal()
    committed = {p.partition: p.committed_offset for p in admin.describe_group("g-resume").partitions}
    for partition in (0, 1):
        last_acked = killed.last_acked(partition)
        assert committed.get(partition, -1) == (-1 if last_acked is None else last_acked)
    again = members(service.address, "g-resume", "resume-orders", name="restarted")
    wait_until(lambda: processed_total(first, again) >= produced, "the restarted member to finish")
    resumed = again.journal().processed
    for partition in (0, 1):
        start = max(committed.get(partition, -1), 0)
        assert min(o for p, o in resumed if p == partition) == start
        assert sorted(o for p, o in resumed if p == partition) == list(range(start, 60))
    wait_until(lambda: settled(admin, "g-resume", [again]), "the restarted member to settle")
    assert again.close() == 0, again.output()


def test_a_static_member_restarted_within_the_session_timeout_keeps_its_partitions(start_service, members,
                                                                                   closing):
    # A session long enough for a process restart on a loaded machine: the static leave keeps the
    # member's partitions for that long.
    session = ("--session-ms", "15000")
    service = start_service(["--offsets-topic-partitions", "3", "--group-session-timeout-ms", "15000",
                             "--group-heartbeat-interval-ms", "200"])
    admin = closing(admin_of(service))
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="static-orders", partitions=4), timeout=10)
    first = members(service.address, "g-static", "static-orders", *session, "--instance-id", "host-a", name="a")
    other = members(service.address, "g-static", "static-orders", *session, "--instance-id", "host-b", name="b")
    split = wait_until(lambda: stable_split(admin, "g-static", 2, 4), "two static members sharing four partitions")
    wait_until(lambda: first.journal().kinds("M") and other.journal().kinds("M"), "both to report their ids")
    first_partitions, other_partitions = split[member_id_of(first)], split[member_id_of(other)]
    produced = produce(service.stub, "static-orders", 4, 20)
    wait_until(lambda: processed_total(first, other) >= produced, "the first records processed")
    wait_until(lambda: settled(admin, "g-static", (first, other)), "both members to settle")
    group_epoch = admin.describe_group("g-static").group_epoch
    other_lines_before = len(other.journal().lines)
    assert first.close() == 0, first.output()  # a static leave (member epoch -2)
    produced |= produce(service.stub, "static-orders", 4, 20, start=20)
    restarted = members(service.address, "g-static", "static-orders", *session, "--instance-id", "host-a",
                        name="a-restarted")
    wait_until(lambda: processed_total(first, other, restarted) >= produced, "every record processed")
    after = wait_until(lambda: stable_split(admin, "g-static", 2, 4), "the group stable again")
    assert after[member_id_of(restarted)] == first_partitions and after[member_id_of(other)] == other_partitions
    assert admin.describe_group("g-static").group_epoch == group_epoch  # no rebalance
    # Nothing moved to the other member meanwhile; the restarted one resumed where the first stopped.
    assert [line for line in other.journal().lines[other_lines_before:] if line[0] in "AV"] == []
    assert {p for p, _ in restarted.journal().processed} == first_partitions
    counts = processed_counts([m.journal() for m in (first, other, restarted)])
    assert set(counts) == produced and set(counts.values()) == {1}
    wait_until(lambda: settled(admin, "g-static", (other, restarted)), "both members to settle")
    for member in (other, restarted):
        assert member.close() == 0, member.output()


def test_a_zombies_commit_is_refused_and_it_rejoins(group_service, members, closing):
    service = group_service
    admin = closing(admin_of(service))
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="zombie-orders", partitions=2), timeout=10)
    zombie = members(service.address, "g-zombie", "zombie-orders", "--zombie", name="zombie")
    produce(stub, "zombie-orders", 2, 20)
    wait_until(lambda: len(zombie.journal().processed) == 40 and zombie.journal().acked, "the zombie-to-be to read")
    other = members(service.address, "g-zombie", "zombie-orders", name="other")
    wait_until(lambda: stable_split(admin, "g-zombie", 2, 2), "two members with one partition each")
    zombie.signal(signal.SIGSTOP)
    stopped = zombie.journal()
    zombie_id, zombie_epoch = stopped.kinds("M")[-1]
    try:
        wait_until(lambda: stable_split(admin, "g-zombie", 1, 2), "the other member to own both")
        produce(stub, "zombie-orders", 2, 10, start=20)
        wait_until(lambda: {o for _, o in other.journal().processed} >= set(range(20, 30)), "the other to read on")
        wait_until(lambda: all(p.committed_offset == 30 for p in admin.describe_group("g-zombie").partitions),
                   "the other's commits of both partitions")
        # What the zombie would send, from its last membership: the service refuses it.
        error = rpc_error(stub.CommitOffsets, pb.CommitOffsetsRequest(
            group="g-zombie", member_id=zombie_id, member_epoch=int(zombie_epoch),
            offsets=[pb.OffsetToCommit(topic="zombie-orders", partition=0, offset=5)]),
            grpc.StatusCode.NOT_FOUND, "is not in group")
        assert error_class(error) == "UnknownMemberError"
    finally:
        zombie.signal(signal.SIGCONT)
    # The zombie itself commits what it believes it owns, first thing after SIGCONT: refused by the
    # service, or carrying nothing because its client had already given the partitions up.
    outcome, *owned = wait_until(lambda: zombie.journal().kinds("Z"), "the zombie's commit")[0]
    assert outcome in ("UnknownMemberError", "FencedMemberError") or (outcome == "ok" and owned in ([], [""])), \
        (outcome, owned)
    assert {p.committed_offset for p in admin.describe_group("g-zombie").partitions} == {30}
    # It revoked what it had (uncommitted) before that commit, and rejoins with its own member id.
    rejoined = wait_until(lambda: stable_split(admin, "g-zombie", 2, 2), "the zombie to rejoin")
    assert zombie_id in rejoined
    after_stop = zombie.journal().lines[len(stopped.lines):]
    commit_at = next(i for i, line in enumerate(after_stop) if line.startswith("Z "))
    if outcome == "ok":  # its client had given the partitions up (on_revoke) before the commit
        assert any(line.startswith("V ") for line in after_stop[:commit_at]), after_stop
    wait_until(lambda: settled(admin, "g-zombie", (zombie, other)), "both members to settle")
    for member in (zombie, other):
        assert member.close() == 0, member.output()


def test_a_killed_coordinator_keeps_every_acknowledged_commit(start_service, members, tmp_path, closing):
    args = GROUP_ARGS + ["--listen", f"127.0.0.1:{free_port()}"]  # the members dial it again
    service = start_service(args, workdir=tmp_path / "coordinator")
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="coord-orders", partitions=4), timeout=10)
    started = [members(service.address, "g-coord", "coord-orders", "--record-delay-ms", "10", "--max-records", "10")
               for _ in range(2)]
    admin = closing(admin_of(service))
    wait_until(lambda: stable_split(admin, "g-coord", 2, 4), "two members sharing four partitions")
    produced = produce(service.stub, "coord-orders", 4, 150)
    wait_until(lambda: all(any(m.journal().last_acked(p) is not None for m in started) for p in range(4)),
               "an acknowledged commit of every partition")
    for member in started:
        member.signal(signal.SIGSTOP)  # their journals hold still; a commit may be in flight
    service.process.kill()
    service.wait()
    journals = [m.journal() for m in started]
    assert set(processed_counts(journals)) < produced  # the members have work left for after the restart
    again = start_service(args, workdir=tmp_path / "coordinator")
    with admin_of(again) as first_look:
        committed = {p.partition: p.committed_offset for p in first_look.describe_group("g-coord").partitions}
    for partition in range(4):
        acked = [j.last_acked(partition) for j in journals if j.last_acked(partition) is not None]
        possible = set().union(*(j.possible_commits(partition) for j in journals)) - {None}
        assert acked, f"no acknowledged commit of partition {partition}"
        assert committed[partition] >= max(acked) and committed[partition] in possible, (partition, committed)
    for member in started:
        member.signal(signal.SIGCONT)
    # The members go on with the restarted coordinator (their membership replayed from
    # __consumer_offsets, or by rejoining) and finish; records are read again only from the
    # committed offsets on.
    wait_until(lambda: processed_total(*started) >= produced, "every record processed after the restart")
    counts = processed_counts([m.journal() for m in started])
    assert set(counts) == produced
    assert all(o >= committed[p] for (p, o), count in counts.items() if count > 1)
    again_admin = closing(admin_of(again))
    wait_until(lambda: stable_split(again_admin, "g-coord", 2, 4) and settled(again_admin, "g-coord", started),
               "the members to settle")
    for member in started:
        assert member.close() == 0, member.output()


def committed_map(stub, groups) -> dict:
    out = {}
    for group in groups:
        response = stub.FetchOffsets(pb.FetchOffsetsRequest(group=group), timeout=10)
        out[group] = sorted((o.topic, o.partition, o.offset, o.metadata) for o in response.offsets)
    return out


def offsets_record_count(stub) -> int:
    total = 0
    for partition in range(3):
        offset = 0
        while True:
            response = stub.Fetch(pb.FetchRequest(topic=OFFSETS_TOPIC, partition=partition, offset=offset,
                                                  decode=True), timeout=10)
            records = [r for r in response.decoded_records if r.offset >= offset]
            if not records:
                break
            total += len(records)
            offset = response.next_offset
    return total


def test_the_offsets_topic_cleaned_and_replayed_gives_the_same_committed_map(start_service, tmp_path):
    # Segments roll every 50 ms of appends, so the commits below land in closed (cleanable) ones.
    args = GROUP_ARGS + ["--topic-default", "segment.ms=50", "--topic-default", "file.delete.delay.ms=0"]
    service = start_service(args, workdir=tmp_path / "cleaned")
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="cleaned-orders", partitions=4), timeout=10)
    groups = [f"cleaned-{n}" for n in range(4)]
    for round_number in range(8):
        for n, group in enumerate(groups):
            stub.CommitOffsets(pb.CommitOffsetsRequest(group=group, offsets=[
                pb.OffsetToCommit(topic="cleaned-orders", partition=p, offset=round_number * 10 + n + p,
                                  metadata=f"round-{round_number}") for p in range(4)]), timeout=10)
        time.sleep(0.06)  # the next round appends past segment.ms: it rolls a new segment
    live = committed_map(stub, groups)
    before = offsets_record_count(stub)
    cleaner = subprocess.run([sys.executable, "-m", "seglog_cli", "cleaner", "run", "--once", "--engine", "python",
                              "--topic", OFFSETS_TOPIC, "--server", service.address],
                             capture_output=True, text=True, timeout=120)
    assert cleaner.returncode == 0, cleaner.stdout + cleaner.stderr
    assert offsets_record_count(stub) < before, cleaner.stdout  # superseded commits are gone
    assert committed_map(stub, groups) == live
    assert service.stop() == 0
    again = start_service(args, workdir=tmp_path / "cleaned")  # replays the cleaned log
    assert committed_map(again.stub, groups) == live
