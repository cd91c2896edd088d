"""seglog cluster rebalance's plan (cli/seglog_cli/cluster.py plan_rebalance), against its rules
for any placement: counts at most one apart among the live instances when nothing is pinned,
moves only between live instances, each partition once, deterministic."""

from hypothesis import given
from hypothesis import strategies as st

from seglog_cli.cluster import PlannedMove, plan_rebalance

INSTANCES = ["a", "b", "c", "d"]


@st.composite
def placements(draw):
    live = draw(st.lists(st.sampled_from(INSTANCES), min_size=1, max_size=4, unique=True))
    count = draw(st.integers(0, 40))
    owners = {("t", p): draw(st.sampled_from(INSTANCES)) for p in range(count)}
    pinned = frozenset(tp for tp in owners if draw(st.booleans()) and draw(st.booleans()))
    return owners, live, pinned


def _after(owners, plan):
    result = dict(owners)
    for move in plan:
        assert result[(move.topic, move.partition)] == move.from_instance
        result[(move.topic, move.partition)] = move.to_instance
    return result


@given(placements())
def test_a_plan_moves_live_partitions_once_between_live_instances_and_evens_them_out(placement):
    owners, live, pinned = placement
    plan = plan_rebalance(owners, live, pinned)
    assert plan == plan_rebalance(owners, list(reversed(live)), pinned)  # deterministic
    moved = [(m.topic, m.partition) for m in plan]
    assert len(moved) == len(set(moved)) and not set(moved) & pinned
    assert all(m.from_instance in live and m.to_instance in live and m.from_instance != m.to_instance
               for m in plan)
    after = _after(owners, plan)
    assert {tp: o for tp, o in after.items() if o not in live} == {tp: o for tp, o in owners.items()
                                                                    if o not in live}
    if not pinned:
        counts = [sum(1 for o in after.values() if o == instance) for instance in live]
        assert max(counts) - min(counts) <= 1


def test_an_added_instance_takes_partitions_from_the_most_loaded_greatest_first():
    owners = {("t", p): "a" if p < 3 else "b" for p in range(6)}
    assert plan_rebalance(owners, ["a", "b", "c"]) == [PlannedMove("t", 5, "b", "c"), PlannedMove("t", 2, "a", "c")]
    assert plan_rebalance(owners, ["a", "b"]) == []
    assert plan_rebalance({("t", 0): "dead", ("t", 1): "dead"}, ["a"]) == []  # only a takeover moves them
