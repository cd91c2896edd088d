"""Server-side assignment (uniform, sticky) and the revocation protocol with member epochs, over
random joins, leaves, heartbeats, acknowledgements, zombies and session timeouts (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings, target
from hypothesis import strategies as st

from seglog_server.groups.assignor import assign
from seglog_server.groups.errors import FencedMemberError, UnknownMemberError
from seglog_server.groups.reconciliation import JOIN_EPOCH, LEAVE_EPOCH, GroupReconciliation

COUNTS = {"a": 6, "b": 3}


def every(assignment) -> list:
    return sorted(p for partitions in assignment.values() for p in partitions)


def test_three_members_share_six_partitions_two_each():
    result = assign({"m1": {"a"}, "m2": {"a"}, "m3": {"a"}}, {"a": 6})
    assert every(result) == [("a", p) for p in range(6)] and {len(v) for v in result.values()} == {2}


def test_a_member_joining_takes_partitions_only_from_those_above_their_share():
    before = assign({"m1": {"a"}, "m2": {"a"}, "m3": {"a"}}, {"a": 6})
    after = assign({"m1": {"a"}, "m2": {"a"}, "m3": {"a"}, "m4": {"a"}}, {"a": 6}, before)
    moved = sum(len(before[m] - after[m]) for m in before)
    assert moved == 1 and len(after["m4"]) == 1  # shares 2, 2, 1, 1: one partition moves, the fewest possible


def test_a_partition_goes_only_to_a_subscriber_and_an_unknown_topic_is_ignored():
    result = assign({"m1": {"a"}, "m2": {"b", "absent"}}, COUNTS)
    assert result["m1"] == {("a", p) for p in range(6)} and result["m2"] == {("b", p) for p in range(3)}


members = st.lists(st.sampled_from([f"m{i}" for i in range(6)]), min_size=1, max_size=6, unique=True)


@settings(max_examples=200)
@given(steps=st.lists(members, min_size=1, max_size=8), counts=st.fixed_dictionaries(
    {"a": st.integers(0, 12), "b": st.integers(0, 5)}))
def test_uniform_sticky_across_random_joins_and_leaves(steps, counts):
    current: dict = {}
    universe = [(t, p) for t, n in counts.items() for p in range(n)]
    for group in steps:
        result = assign({m: {"a", "b"} for m in group}, counts, current)
        assert every(result) == sorted(universe)  # every partition exactly once
        sizes = [len(v) for v in result.values()]
        assert max(sizes) - min(sizes) <= 1  # balanced within one
        for giver in set(current) & set(group):
            kept = len(current[giver])
            for taker in set(group) - {giver}:
                moved = current[giver] & result[taker]
                # sticky: a partition leaves a member that stays only when it held more than its share
                assert not moved or kept > len(result[giver]), (giver, taker, moved)
        current = result


# -- the revocation protocol ---------------------------------------------------------------------

def test_a_partition_moves_only_after_its_owner_acknowledged_the_revocation():
    group = GroupReconciliation("g", {"a": 2})
    first = group.heartbeat("m1", JOIN_EPOCH, 0, subscription={"a"})
    assert first.assignment == {("a", 0), ("a", 1)}
    second = group.heartbeat("m2", JOIN_EPOCH, 0, subscription={"a"})
    assert second.assignment == frozenset()  # its target is still m1's
    revoke = group.heartbeat("m1", first.member_epoch, 1, owned=first.assignment)
    assert len(revoke.assignment) == 1 and revoke.member_epoch == first.member_epoch  # not yet reconciled
    assert group.heartbeat("m2", second.member_epoch, 1).assignment == frozenset()
    acked = group.heartbeat("m1", revoke.member_epoch, 2, owned=revoke.assignment)
    assert acked.member_epoch == group.group_epoch
    assert len(group.heartbeat("m2", second.member_epoch, 2).assignment) == 1


def test_a_stale_epoch_is_fenced_and_a_removed_member_is_unknown():
    group = GroupReconciliation("g", {"a": 2}, session_timeout_ms=100)
    answer = group.heartbeat("m1", JOIN_EPOCH, 0, subscription={"a"})
    with pytest.raises(FencedMemberError, match="sent epoch 7, its epoch is 1"):
        group.check_commit("m1", 7)
    assert group.expire_sessions(100) == ["m1"]
    with pytest.raises(UnknownMemberError, match="not in group 'g'"):
        group.heartbeat("m1", answer.member_epoch, 101, owned=answer.assignment)


def test_a_lost_answer_does_not_fence_the_member_its_retry_at_the_previous_epoch_is_accepted():
    group = GroupReconciliation("g", {"a": 2})
    first = group.heartbeat("m1", JOIN_EPOCH, 0, subscription={"a"})
    group.heartbeat("m2", JOIN_EPOCH, 0, subscription={"a"})  # m1 must give one partition up
    revoke = group.heartbeat("m1", first.member_epoch, 1, owned=first.assignment)
    (kept,) = revoke.assignment
    lost = group.heartbeat("m1", revoke.member_epoch, 2, owned={kept})  # acknowledged: the epoch moves ...
    assert lost.member_epoch > revoke.member_epoch
    # ... and that answer never arrived: the member retries with the epoch it knows.
    retried = group.heartbeat("m1", revoke.member_epoch, 3, owned={kept})
    assert (retried.member_epoch, retried.assignment) == (lost.member_epoch, lost.assignment)
    group.check_commit("m1", retried.member_epoch)


def test_a_previous_epoch_reporting_more_than_it_owned_then_or_an_older_epoch_is_fenced():
    group = GroupReconciliation("g", {"a": 2})
    first = group.heartbeat("m1", JOIN_EPOCH, 0, subscription={"a"})
    group.heartbeat("m2", JOIN_EPOCH, 0, subscription={"a"})
    revoke = group.heartbeat("m1", first.member_epoch, 1, owned=first.assignment)
    moved = group.heartbeat("m1", revoke.member_epoch, 2, owned=revoke.assignment)
    with pytest.raises(FencedMemberError):  # a zombie still holding what it gave up
        group.heartbeat("m1", revoke.member_epoch, 3, owned=first.assignment)
    group.heartbeat("m3", JOIN_EPOCH, 3, subscription={"a"})
    again = group.heartbeat("m1", moved.member_epoch, 4, owned=moved.assignment)
    newer = group.heartbeat("m1", again.member_epoch, 5, owned=again.assignment)
    assert newer.member_epoch > moved.member_epoch > revoke.member_epoch
    with pytest.raises(FencedMemberError):  # two epochs behind: never a lost answer
        group.heartbeat("m1", revoke.member_epoch, 6, owned=frozenset())
    with pytest.raises(FencedMemberError):  # commits: the current epoch only
        group.check_commit("m1", revoke.member_epoch if newer.member_epoch != revoke.member_epoch else -5)


operation = st.one_of(
    st.tuples(st.just("lost"), st.integers(0, 4)),  # a heartbeat whose answer never arrives
    st.tuples(st.just("join"), st.integers(0, 4)),
    st.tuples(st.just("ack"), st.integers(0, 4)),  # heartbeat reporting exactly its last answer
    st.tuples(st.just("hold"), st.integers(0, 4)),  # heartbeat still reporting everything it had
    st.tuples(st.just("leave"), st.integers(0, 4)),
    st.tuples(st.just("zombie"), st.integers(0, 4)),  # a stale epoch: must be fenced
    st.tuples(st.just("time"), st.integers(0, 60_000)),
)


ALL_PARTITIONS = frozenset((topic, p) for topic, count in COUNTS.items() for p in range(count))


def test_a_member_that_missed_two_epoch_moves_is_fenced_and_its_rejoin_gets_its_share():
    """Kafka's rule: a lost answer's retry carries the previous epoch; two answers lost while
    the member's epoch moved twice leave it two behind, which is fenced (FENCED_MEMBER_EPOCH).
    The member gives its partitions up and rejoins at epoch 0, owning nothing."""
    group = GroupReconciliation("g", {"a": 2})
    m0 = group.heartbeat("m0", JOIN_EPOCH, 0, subscription={"a"})
    m1 = group.heartbeat("m1", JOIN_EPOCH, 0, subscription={"a"})
    group.heartbeat("m0", LEAVE_EPOCH, 0)
    first_lost = group.heartbeat("m1", m1.member_epoch, 1, owned=m1.assignment)  # takes both partitions
    m0 = group.heartbeat("m0", JOIN_EPOCH, 1, subscription={"a"})  # m1 must give one up
    second_lost = group.heartbeat("m1", m1.member_epoch, 2, owned=m1.assignment)  # the previous epoch: accepted
    assert m1.member_epoch < first_lost.member_epoch < second_lost.member_epoch
    with pytest.raises(FencedMemberError, match=f"sent epoch {m1.member_epoch}, its epoch is {second_lost.member_epoch}"):
        group.heartbeat("m1", m1.member_epoch, 3, owned=m1.assignment)
    rejoined = group.heartbeat("m1", JOIN_EPOCH, 3, subscription={"a"})
    m0 = group.heartbeat("m0", m0.member_epoch, 4, owned=m0.assignment)
    assert len(rejoined.assignment) == len(m0.assignment) == 1 and rejoined.assignment != m0.assignment
    assert group.owners() == group.target()


@settings(max_examples=300)
@given(operations=st.lists(operation, max_size=40))
# Two answers lost while the member's epoch moved twice: fenced, it rejoins (found by a random run).
@example(operations=[("join", 0), ("join", 1), ("leave", 0), ("lost", 1), ("join", 0), ("lost", 1)])
def test_no_partition_is_ever_owned_by_two_members_and_acks_converge(operations):
    group = GroupReconciliation("g", COUNTS, session_timeout_ms=30_000)
    now = 0
    clients: dict[str, tuple[int, frozenset]] = {}  # member -> (epoch, what it may own)
    old_epochs: dict[str, int] = {}
    unanswered: set[str] = set()  # members whose last heartbeat's answer was lost
    # member -> the epochs the coordinator moved it to in answers it never got. Kafka's rule: its
    # retry at the epoch it knows is accepted after one such move (the previous epoch) and fenced
    # after two; fenced, the member gives its partitions up and rejoins at epoch 0, as the group
    # consumer does (client/seglog/group_consumer.py, _rejoin).
    missed: dict[str, set[int]] = {}
    moves_missed = 0  # steers the search (hypothesis.target) to runs where members miss epochs: fencing

    def send(member, epoch, owned):
        """A heartbeat from the client's state; None when it was fenced (it has rejoined)."""
        if len(missed.get(member, ())) < 2:
            return group.heartbeat(member, epoch, now, owned=owned)
        with pytest.raises(FencedMemberError):
            group.heartbeat(member, epoch, now, owned=owned)
        answer = group.heartbeat(member, JOIN_EPOCH, now, subscription={"a", "b"})  # owning nothing
        clients[member] = (answer.member_epoch, answer.assignment)
        missed.pop(member, None)
        unanswered.discard(member)
        return None

    for kind, argument in operations:
        member = f"m{argument}"
        if kind == "time":
            now += argument
            for gone in group.expire_sessions(now):
                clients.pop(gone, None)
                unanswered.discard(gone)
                missed.pop(gone, None)
        elif kind == "join" and member not in clients:
            answer = group.heartbeat(member, JOIN_EPOCH, now, subscription={"a", "b"})
            clients[member] = (answer.member_epoch, answer.assignment)
        elif kind == "lost" and member in clients:
            epoch, owned = clients[member]
            answer = send(member, epoch, owned)  # the member keeps its state: retries next
            if answer is not None:
                unanswered.add(member)
                if answer.member_epoch != epoch:
                    missed.setdefault(member, set()).add(answer.member_epoch)
                    moves_missed += 1
        elif kind in ("ack", "hold") and member in clients:
            epoch, owned = clients[member]
            # "hold" reports all it was handed; a lost answer handed it nothing it knows of.
            reported = owned if kind == "ack" or member in unanswered else group.owners()[member]
            answer = send(member, epoch, reported)
            if answer is not None:
                unanswered.discard(member)
                missed.pop(member, None)
                old_epochs[member] = epoch
                clients[member] = (answer.member_epoch, answer.assignment)
        elif kind == "leave" and member in clients:
            group.heartbeat(member, LEAVE_EPOCH, now)
            del clients[member]
            unanswered.discard(member)
            missed.pop(member, None)
        elif kind == "zombie" and member in clients and old_epochs.get(member, clients[member][0]) != clients[member][0]:
            with pytest.raises(FencedMemberError):  # an old epoch holding what it never owned at it
                group.heartbeat(member, old_epochs[member], now, owned=ALL_PARTITIONS | {("gone", 0)})
        owners = group.owners()
        assert sum(len(v) for v in owners.values()) == len(set().union(*owners.values())) if owners else True
        for member_id, (_, may_own) in clients.items():
            assert may_own <= owners[member_id]  # what a member was told it may own, the coordinator holds it owns
    for _ in range(3):  # every member acknowledges in turn: the group reaches its target
        for member_id in sorted(clients):
            epoch, owned = clients[member_id]
            answer = send(member_id, epoch, owned)
            if answer is None:  # fenced: rejoined, which moves the group on; acknowledge again
                epoch, owned = clients[member_id]
                answer = group.heartbeat(member_id, epoch, now, owned=owned)
            missed.pop(member_id, None)
            clients[member_id] = (answer.member_epoch, answer.assignment)
    target(float(moves_missed), label="epoch moves a member missed")
    assert group.owners() == group.target()
    assert all(epoch == group.group_epoch for epoch, _ in clients.values())
