"""Consumer groups through a real service process: committed offsets in __consumer_offsets
(commit, fetch, kept across a restart by replay), the internal topic protected from users, the
ACL on commits, and membership by Heartbeat (the assignment split and handed over, zombies and
departed members refused)."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.integration_helpers import make_batch, rpc_error, wait_until

from seglog.v1 import log_service_pb2 as pb
from seglog_server.security.token_file import create_token, format_entry

pytestmark = pytest.mark.integration
Code = grpc.StatusCode
OFFSETS_TOPIC = "__consumer_offsets"
FEW_PARTITIONS = ["--offsets-topic-partitions", "3"]


def commit(stub, group, *offsets, member_id="", member_epoch=-1, **kwargs):
    stub.CommitOffsets(pb.CommitOffsetsRequest(group=group, member_id=member_id, member_epoch=member_epoch, offsets=[
        pb.OffsetToCommit(topic=t, partition=p, offset=o, leader_epoch=e, metadata=m) for t, p, o, e, m in offsets
    ]), timeout=10, **kwargs)


def fetched(stub, group, *partitions, **kwargs):
    response = stub.FetchOffsets(pb.FetchOffsetsRequest(group=group, partitions=[
        pb.GroupPartition(topic=t, partition=p) for t, p in partitions]), timeout=10, **kwargs)
    return [(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata) for o in response.offsets]


def heartbeat(stub, group, member_id="", epoch=0, topics=(), owned=()):
    answer = stub.Heartbeat(pb.HeartbeatRequest(
        group=group, member_id=member_id, member_epoch=epoch, subscribed_topics=list(topics),
        owned_partitions=[pb.GroupPartition(topic=t, partition=p) for t, p in owned]), timeout=10)
    return answer.member_id, answer.member_epoch, {(a.topic, a.partition) for a in answer.assignment}


# -- committed offsets ------------------------------------------------------------------------------


def test_commit_then_fetch_answers_offset_epoch_and_metadata(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="orders-g1", partitions=2))
    commit(stub, "g1", ("orders-g1", 0, 42, 3, "host-a"), ("orders-g1", 1, 7, -1, ""))
    assert fetched(stub, "g1", ("orders-g1", 0), ("orders-g1", 1)) == [
        ("orders-g1", 0, 42, 3, "host-a"), ("orders-g1", 1, 7, -1, "")]
    commit(stub, "g1", ("orders-g1", 0, 50, 3, ""))
    assert fetched(stub, "g1") == [("orders-g1", 0, 50, 3, ""), ("orders-g1", 1, 7, -1, "")]
    assert fetched(stub, "other-group", ("orders-g1", 0)) == [("orders-g1", 0, -1, -1, "")]


def test_bad_commits_are_refused_and_change_nothing(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="orders-bad", partitions=1))
    rpc_error(stub.CommitOffsets, pb.CommitOffsetsRequest(group="", offsets=[
        pb.OffsetToCommit(topic="orders-bad", partition=0, offset=1)]), Code.INVALID_ARGUMENT, "group id is empty")
    rpc_error(stub.CommitOffsets, pb.CommitOffsetsRequest(group="gb", offsets=[
        pb.OffsetToCommit(topic="orders-bad", partition=0, offset=-5)]), Code.INVALID_ARGUMENT, "offset -5")
    # All or nothing: one unknown partition refuses the whole commit.
    rpc_error(stub.CommitOffsets, pb.CommitOffsetsRequest(group="gb", offsets=[
        pb.OffsetToCommit(topic="orders-bad", partition=0, offset=1),
        pb.OffsetToCommit(topic="orders-bad", partition=9, offset=1)]), Code.NOT_FOUND)
    assert fetched(stub, "gb") == []


def test_commits_survive_a_restart_by_replay(start_service, tmp_path):
    service = start_service(FEW_PARTITIONS, workdir=tmp_path / "kept")
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="kept", partitions=3))
    for group in ("a", "b", "c", "d"):
        commit(service.stub, group, ("kept", 0, 1, -1, ""), ("kept", 2, 9, 1, group))
    commit(service.stub, "a", ("kept", 0, 5, 2, "later"))
    assert service.stop() == 0
    again = start_service(FEW_PARTITIONS, workdir=tmp_path / "kept")
    assert fetched(again.stub, "a") == [("kept", 0, 5, 2, "later"), ("kept", 2, 9, 1, "a")]
    for group in ("b", "c", "d"):
        assert fetched(again.stub, group) == [("kept", 0, 1, -1, ""), ("kept", 2, 9, 1, group)]


def offsets_partition_dirs(service):
    return sorted(p.name for d in service.data_dirs if d.exists() for p in d.iterdir()
                  if p.name.startswith(OFFSETS_TOPIC + "-"))


def test_answered_commits_survive_a_kill_9_of_the_service(start_service, tmp_path):
    """A commit answers once fsynced (its recovery point past it): kill -9 and a restart that
    recovers the directory keep every answered commit."""
    service = start_service(FEW_PARTITIONS, workdir=tmp_path / "killed")
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="killed", partitions=2))
    for offset in range(1, 6):
        commit(service.stub, "k", ("killed", 0, offset, -1, ""), ("killed", 1, 10 * offset, -1, ""))
    service.process.kill()
    service.wait()
    again = start_service(FEW_PARTITIONS, workdir=tmp_path / "killed")
    assert fetched(again.stub, "k") == [("killed", 0, 5, -1, ""), ("killed", 1, 50, -1, "")]


def test_the_offsets_topic_is_created_on_the_first_commit_only(start_service, tmp_path):
    service = start_service(FEW_PARTITIONS, workdir=tmp_path / "lazy")
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="lazy", partitions=1))
    assert offsets_partition_dirs(service) == []
    # A fetch before any commit answers no offset and creates nothing; a restart creates nothing.
    assert fetched(stub, "g", ("lazy", 0)) == [("lazy", 0, -1, -1, "")]
    assert fetched(stub, "g") == []
    assert OFFSETS_TOPIC not in [t.topic for t in stub.ListTopics(pb.ListTopicsRequest(include_internal=True)).topics]
    # Absent, the name stays the service's: a user cannot create or produce to it.
    rpc_error(stub.CreateTopic, pb.CreateTopicRequest(topic=OFFSETS_TOPIC, partitions=1), Code.PERMISSION_DENIED)
    rpc_error(stub.Produce, pb.ProduceRequest(topic=OFFSETS_TOPIC, partition=0, records=make_batch([b"x"])),
              Code.PERMISSION_DENIED, "internal topic")
    assert service.stop() == 0
    service = start_service(FEW_PARTITIONS, workdir=tmp_path / "lazy")
    assert offsets_partition_dirs(service) == []
    commit(service.stub, "g", ("lazy", 0, 4, -1, ""))
    assert offsets_partition_dirs(service) == [f"{OFFSETS_TOPIC}-{p}" for p in range(3)]
    assert fetched(service.stub, "g") == [("lazy", 0, 4, -1, "")]


def test_a_first_join_creates_the_offsets_topic(start_service):
    service = start_service(FEW_PARTITIONS)
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="joined", partitions=1))
    heartbeat(service.stub, "j", topics=["joined"])
    assert offsets_partition_dirs(service) == [f"{OFFSETS_TOPIC}-{p}" for p in range(3)]


def test_concurrent_first_commits_all_succeed_and_create_the_topic_once(start_service, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    service = start_service(FEW_PARTITIONS + ["--storage-threads", "8"], workdir=tmp_path / "race")
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="race", partitions=1))
    groups = [f"racer-{i}" for i in range(8)]
    with ThreadPoolExecutor(len(groups)) as pool:
        list(pool.map(lambda g: commit(stub, g, ("race", 0, len(g), -1, g)), groups))
    assert offsets_partition_dirs(service) == [f"{OFFSETS_TOPIC}-{p}" for p in range(3)]
    for group in groups:
        assert fetched(stub, group) == [("race", 0, len(group), -1, group)]
    assert service.stop() == 0
    again = start_service(FEW_PARTITIONS, workdir=tmp_path / "race")  # replayed at start
    for group in groups:
        assert fetched(again.stub, group) == [("race", 0, len(group), -1, group)]


def test_another_partition_count_of_an_existing_offsets_topic_stops_the_start(start_service, tmp_path):
    service = start_service(FEW_PARTITIONS, workdir=tmp_path / "count")
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="count", partitions=1))
    commit(service.stub, "g", ("count", 0, 1, -1, ""))  # the topic exists from the first commit
    assert service.stop() == 0
    with pytest.raises(AssertionError, match="__consumer_offsets has 3 partitions, the coordinator expects 4"):
        start_service(["--offsets-topic-partitions", "4"], workdir=tmp_path / "count")


# -- the internal topic ---------------------------------------------------------------------------


def test_users_may_not_produce_to_delete_or_create_the_internal_topic(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="internal-check", partitions=1))
    commit(stub, "internal-check", ("internal-check", 0, 1, -1, ""))  # the topic exists from a commit on
    error = rpc_error(stub.Produce, pb.ProduceRequest(topic=OFFSETS_TOPIC, partition=0, records=make_batch([b"x"])),
                      Code.PERMISSION_DENIED, "internal topic")
    assert "not produce to it" in error.details()
    rpc_error(stub.DeleteTopic, pb.DeleteTopicRequest(topic=OFFSETS_TOPIC), Code.PERMISSION_DENIED, "not delete it")
    rpc_error(stub.DeleteRecords, pb.DeleteRecordsRequest(topic=OFFSETS_TOPIC, partition=0, offset=-1),
              Code.PERMISSION_DENIED, "not delete records of it")
    rpc_error(stub.CreateTopic, pb.CreateTopicRequest(topic=OFFSETS_TOPIC, partitions=1), Code.PERMISSION_DENIED)
    # ProduceStream shares Produce's append: refused per message, the stream goes on.
    answer = next(stub.ProduceStream(iter([pb.ProduceStreamRequest(correlation_id=1, produce=pb.ProduceRequest(
        topic=OFFSETS_TOPIC, partition=0, records=make_batch([b"x"])))]), timeout=10))
    assert answer.error.code == Code.PERMISSION_DENIED.value[0]
    # Readable and described as internal; ListTopics shows it only when asked (Kafka's listInternal).
    assert OFFSETS_TOPIC not in [t.topic for t in stub.ListTopics(pb.ListTopicsRequest()).topics]
    listed = {t.topic: t for t in stub.ListTopics(pb.ListTopicsRequest(include_internal=True)).topics}
    assert listed[OFFSETS_TOPIC].internal and listed[OFFSETS_TOPIC].partitions == 50
    described = stub.DescribeTopic(pb.DescribeTopicRequest(topic=OFFSETS_TOPIC))
    assert described.configs["cleanup.policy"] == "compact"


# Every spelling of __consumer_offsets with '.' or '_' at each of its three separators.
_COLLIDING = st.tuples(*[st.sampled_from("._")] * 3).map(lambda c: f"{c[0]}{c[1]}consumer{c[2]}offsets")
_ANY_NAME = st.from_regex(r"[A-Za-z0-9._-]{1,40}", fullmatch=True).filter(
    lambda name: name.replace(".", "_") != OFFSETS_TOPIC and name not in (".", ".."))


@pytest.fixture(scope="module")
def fresh_service(tmp_path_factory):
    """A service whose __consumer_offsets does not exist yet (no commit, no join)."""
    from tests.support.integration_helpers import ServiceProcess

    workdir = tmp_path_factory.mktemp("collisions")
    process = ServiceProcess(workdir, [workdir / "data0"], FEW_PARTITIONS).start()
    process.stub.CreateTopic(pb.CreateTopicRequest(topic="after-collision", partitions=1), timeout=10)
    yield process
    assert process.stop() == 0, process.log()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_COLLIDING)
def test_a_topic_colliding_with_the_internal_topic_is_refused_and_groups_still_work(fresh_service, name):
    stub = fresh_service.stub
    if name != OFFSETS_TOPIC:
        error = rpc_error(stub.CreateTopic, pb.CreateTopicRequest(topic=name, partitions=1),
                          Code.INVALID_ARGUMENT, "collides with the internal topic")
        assert OFFSETS_TOPIC in error.details()
    # The lazy creation of __consumer_offsets on the first commit is never blocked.
    commit(stub, "collision-group", ("after-collision", 0, 3, -1, ""))
    assert fetched(stub, "collision-group", ("after-collision", 0)) == [("after-collision", 0, 3, -1, "")]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_ANY_NAME)
def test_names_not_colliding_with_an_internal_topic_are_not_refused_as_such(stub, name):
    try:
        stub.CreateTopic(pb.CreateTopicRequest(topic=name, partitions=1), timeout=10)
    except grpc.RpcError as error:  # already there, or colliding with a user topic: the registry's answers
        assert "internal topic" not in (error.details() or ""), (name, error.details())


def test_the_internal_topic_holds_kafka_records_of_the_commit(stub):
    from seglog_server.groups import OffsetCommitKey, decode_key, decode_value, partition_for

    stub.CreateTopic(pb.CreateTopicRequest(topic="kafka-bytes", partitions=1))
    commit(stub, "bytes-group", ("kafka-bytes", 0, 11, -1, "m"))
    partition = partition_for("bytes-group")
    response = stub.Fetch(pb.FetchRequest(topic=OFFSETS_TOPIC, partition=partition, offset=0, decode=True))
    keys = [decode_key(r.key) for r in response.decoded_records]
    assert OffsetCommitKey("bytes-group", "kafka-bytes", 0) in keys
    record = response.decoded_records[keys.index(OffsetCommitKey("bytes-group", "kafka-bytes", 0))]
    value = decode_value(OffsetCommitKey("bytes-group", "kafka-bytes", 0), record.value)
    assert (value.offset, value.metadata) == (11, "m")


# -- ACL: the model has topics only, so a commit needs read on each topic it commits ---------------

ACL = """
[[allow]]
principals = ["root"]
operations = ["read", "write", "admin"]
topics = ["*"]

[[allow]]
principals = ["consumer"]
operations = ["read"]
topics = ["readable"]

[[allow]]
principals = ["viewer"]
operations = ["describe"]
topics = ["readable"]
"""


def test_commit_needs_read_on_each_topic_and_fetch_describe(start_service, tmp_path):
    workdir = tmp_path / "acl"
    workdir.mkdir()
    tokens, lines = {}, []
    for name in ("root", "consumer", "viewer"):
        tokens[name], entry = create_token(name)
        lines.append(format_entry(entry))
    (workdir / "tokens").write_text("".join(lines))
    (workdir / "acl.toml").write_text(ACL)
    service = start_service(FEW_PARTITIONS + ["--auth-tokens", str(workdir / "tokens"), "--acl",
                                              str(workdir / "acl.toml")], workdir=workdir)

    def as_(name):
        return {"metadata": (("authorization", f"Bearer {tokens[name]}"),)}

    stub = service.stub
    for topic in ("readable", "secret"):
        stub.CreateTopic(pb.CreateTopicRequest(topic=topic, partitions=1), timeout=10, **as_("root"))
    commit(stub, "g", ("readable", 0, 3, -1, ""), **as_("consumer"))
    commit(stub, "g", ("secret", 0, 8, -1, ""), **as_("root"))
    with pytest.raises(grpc.RpcError) as denied:
        commit(stub, "g", ("readable", 0, 4, -1, ""), ("secret", 0, 9, -1, ""), **as_("consumer"))
    assert denied.value.code() == Code.PERMISSION_DENIED and "'secret'" in denied.value.details()
    with pytest.raises(grpc.RpcError) as denied:
        commit(stub, "g", ("readable", 0, 4, -1, ""), **as_("viewer"))  # describe is not read
    assert denied.value.code() == Code.PERMISSION_DENIED
    # Fetching needs describe; without partitions named, only the topics the caller may describe.
    assert fetched(stub, "g", ("readable", 0), **as_("viewer")) == [("readable", 0, 3, -1, "")]
    assert fetched(stub, "g", **as_("viewer")) == [("readable", 0, 3, -1, "")]
    assert fetched(stub, "g", **as_("root")) == [("readable", 0, 3, -1, ""), ("secret", 0, 8, -1, "")]
    with pytest.raises(grpc.RpcError) as denied:
        fetched(stub, "g", ("secret", 0), **as_("viewer"))
    assert denied.value.code() == Code.PERMISSION_DENIED
    # The operators' views: every group's name, and in a description only describable topics.
    assert [g.group for g in stub.ListGroups(pb.ListGroupsRequest(), timeout=10, **as_("viewer")).groups] == ["g"]
    described = stub.DescribeGroup(pb.DescribeGroupRequest(group="g"), timeout=10, **as_("viewer"))
    assert [(p.topic, p.committed_offset, p.log_end_offset) for p in described.partitions] == [("readable", 3, 0)]
    assert [p.topic for p in stub.DescribeGroup(pb.DescribeGroupRequest(group="g"), timeout=10,
                                                **as_("root")).partitions] == ["readable", "secret"]


# -- membership (Heartbeat, KIP-848's shape) -------------------------------------------------------


def test_two_members_split_the_partitions_and_one_gets_all_after_the_other_leaves(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="split", partitions=4))
    a, a_epoch, a_owns = heartbeat(stub, "hb", topics=["split"])
    assert a and a_owns == {("split", p) for p in range(4)}
    b, b_epoch, b_owns = heartbeat(stub, "hb", topics=["split"])
    assert b != a and b_owns == set()  # all four are a's until a gives two up
    # a's answer shrinks to its target; what it leaves out it must revoke.
    a, a_epoch, a_owns = heartbeat(stub, "hb", a, a_epoch, ["split"], owned=a_owns)
    assert len(a_owns) == 2
    b, b_epoch, b_owns = heartbeat(stub, "hb", b, b_epoch, ["split"])
    assert b_owns == set()  # a has not reported the revocation yet: never two owners
    a, a_epoch, a_owns = heartbeat(stub, "hb", a, a_epoch, ["split"], owned=a_owns)  # revoked
    b, b_epoch, b_owns = heartbeat(stub, "hb", b, b_epoch, ["split"])
    assert len(b_owns) == 2 and not a_owns & b_owns and a_owns | b_owns == {("split", p) for p in range(4)}
    # a commits as a member; b leaves; a gets all four.
    commit(stub, "hb", ("split", sorted(a_owns)[0][1], 5, -1, ""), member_id=a, member_epoch=a_epoch)
    assert heartbeat(stub, "hb", b, -1)[1] == -1
    a, a_epoch, a_owns = heartbeat(stub, "hb", a, a_epoch, ["split"], owned=a_owns)
    assert a_owns == {("split", p) for p in range(4)}


def test_a_client_id_above_its_limit_is_refused_and_the_group_keeps_serving(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="long-ids", partitions=1))
    for client_id in ("x" * 1025, "\u00e9" * 513):
        rpc_error(stub.Heartbeat, pb.HeartbeatRequest(group="long-ids", member_epoch=0, subscribed_topics=["long-ids"],
                                                      client_id=client_id), Code.INVALID_ARGUMENT, "client id is")
    assert stub.DescribeGroup(pb.DescribeGroupRequest(group="long-ids"), timeout=10).members == []
    answer = stub.Heartbeat(pb.HeartbeatRequest(group="long-ids", member_epoch=0, subscribed_topics=["long-ids"],
                                                client_id="x" * 1024), timeout=10)
    described = stub.DescribeGroup(pb.DescribeGroupRequest(group="long-ids"), timeout=10)
    assert [(m.member_id, m.client_id) for m in described.members] == [(answer.member_id, "x" * 1024)]


def test_the_same_join_sent_twice_is_one_member_holding_the_partitions(stub):
    """A client-chosen member id (KIP-1082): a join retried after its answer was lost is the
    same member, not a phantom besides it."""
    stub.CreateTopic(pb.CreateTopicRequest(topic="rejoined", partitions=3))
    chosen = "5f0c7a52-9a4e-4d0e-8f7e-2d6c1b1f6b11"
    heartbeat(stub, "g-twice", chosen, 0, ["rejoined"])  # its answer lost
    member, epoch, assignment = heartbeat(stub, "g-twice", chosen, 0, ["rejoined"])
    assert member == chosen and assignment == {("rejoined", p) for p in range(3)}
    heartbeat(stub, "g-twice", chosen, epoch, ["rejoined"], owned=assignment)
    described = stub.DescribeGroup(pb.DescribeGroupRequest(group="g-twice"), timeout=10)
    assert [(m.member_id, len(m.owned_partitions)) for m in described.members] == [(chosen, 3)]


def test_a_fenced_or_departed_member_commit_is_refused(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="zombies", partitions=2))
    a, a_epoch, a_owns = heartbeat(stub, "zg", topics=["zombies"])
    b, b_epoch, _ = heartbeat(stub, "zg", topics=["zombies"])
    a, new_epoch, a_owns = heartbeat(stub, "zg", a, a_epoch, ["zombies"], owned=a_owns)
    a, new_epoch, a_owns = heartbeat(stub, "zg", a, new_epoch, ["zombies"], owned=a_owns)
    assert new_epoch != a_epoch
    request = pb.CommitOffsetsRequest(group="zg", member_id=a, member_epoch=a_epoch, offsets=[
        pb.OffsetToCommit(topic="zombies", partition=0, offset=3)])
    error = rpc_error(stub.CommitOffsets, request, Code.FAILED_PRECONDITION, f"sent epoch {a_epoch}")
    assert dict(error.trailing_metadata())["seglog-error"] == "FencedMemberError"
    request.member_id = "never-joined"
    rpc_error(stub.CommitOffsets, request, Code.NOT_FOUND, "is not in group 'zg'")
    # A simple commit (no member id) is refused while the group has members.
    request.member_id = ""
    rpc_error(stub.CommitOffsets, request, Code.FAILED_PRECONDITION, "has 2 members")
    rpc_error(stub.Heartbeat, pb.HeartbeatRequest(group="zg", member_id=b, member_epoch=b_epoch + 7,
                                                  subscribed_topics=["zombies"]), Code.FAILED_PRECONDITION)
    assert fetched(stub, "zg") == []


def test_a_silent_member_is_removed_after_the_session_timeout(start_service, tmp_path):
    import time

    service = start_service(FEW_PARTITIONS + ["--group-session-timeout-ms", "1500",
                                              "--group-heartbeat-interval-ms", "500"])
    stub = service.stub
    stub.CreateTopic(pb.CreateTopicRequest(topic="silent", partitions=2))
    a, a_epoch, a_owns = heartbeat(stub, "sg", topics=["silent"])
    b, b_epoch, _ = heartbeat(stub, "sg", topics=["silent"])
    answer = stub.Heartbeat(pb.HeartbeatRequest(group="sg", member_id=b, member_epoch=b_epoch,
                                                subscribed_topics=["silent"]), timeout=10)
    assert answer.heartbeat_interval_ms == 500
    # b keeps heartbeating; a stops. Once a's session ran out b owns both partitions.
    deadline = time.monotonic() + 20  # a bound on a hang, not a speed assertion
    b_owns: set = set()
    while True:
        b, b_epoch, b_owns = heartbeat(stub, "sg", b, b_epoch, ["silent"], owned=b_owns)
        if b_owns == {("silent", 0), ("silent", 1)}:
            break
        assert time.monotonic() < deadline, "a's session never expired"
        time.sleep(0.3)
    rpc_error(stub.CommitOffsets, pb.CommitOffsetsRequest(group="sg", member_id=a, member_epoch=a_epoch, offsets=[
        pb.OffsetToCommit(topic="silent", partition=0, offset=1)]), Code.NOT_FOUND)
    assert "session timed out" in service.log()


# -- membership kept in __consumer_offsets, static members, rebalance timeout ---------------------


def beat(stub, group, member_id="", epoch=0, topics=(), owned=(), instance_id="", rebalance_timeout_ms=0):
    answer = stub.Heartbeat(pb.HeartbeatRequest(
        group=group, member_id=member_id, member_epoch=epoch, subscribed_topics=list(topics),
        instance_id=instance_id, rebalance_timeout_ms=rebalance_timeout_ms,
        owned_partitions=[pb.GroupPartition(topic=t, partition=p) for t, p in owned]), timeout=10)
    return answer.member_id, answer.member_epoch, {(a.topic, a.partition) for a in answer.assignment}


def settled(stub, group, members: dict, rounds=3):
    """Heartbeats each member (member id -> (epoch, owned)) a few rounds, revoking as told."""
    for _ in range(rounds):
        for member, (epoch, owned) in list(members.items()):
            _, epoch, owned = beat(stub, group, member, epoch, owned=owned)
            members[member] = (epoch, owned)
    return members


def test_members_epochs_and_assignments_survive_a_kill_9_of_the_coordinator(start_service, tmp_path):
    flags = FEW_PARTITIONS + ["--group-session-timeout-ms", "6000", "--group-heartbeat-interval-ms", "500"]
    service = start_service(flags, workdir=tmp_path / "members")
    service.stub.CreateTopic(pb.CreateTopicRequest(topic="kept-members", partitions=4))
    a, a_epoch, _ = beat(service.stub, "km", "member-a", 0, ["kept-members"])
    b, b_epoch, _ = beat(service.stub, "km", "member-b", 0, ["kept-members"])
    members = settled(service.stub, "km", {a: (a_epoch, set()), b: (b_epoch, set())})
    assert members[a][1] | members[b][1] == {("kept-members", p) for p in range(4)}
    service.process.kill()
    service.wait()
    again = start_service(flags, workdir=tmp_path / "members")
    # a carries on with its epoch and partitions, no rejoin.
    epoch, owned = members[a]
    assert beat(again.stub, "km", a, epoch, owned=owned) == (a, epoch, owned)
    described = again.stub.DescribeGroup(pb.DescribeGroupRequest(group="km"), timeout=10)
    assert sorted(m.member_id for m in described.members) == sorted([a, b])
    # b never comes back: a session timeout after the restart, its partitions go to a.
    state = {"epoch": epoch, "owned": owned}

    def a_owns_all():
        _, state["epoch"], state["owned"] = beat(again.stub, "km", a, state["epoch"], owned=state["owned"])
        return state["owned"] == {("kept-members", p) for p in range(4)}

    wait_until(a_owns_all, "b removed after the restart", timeout_s=30, poll_s=0.2)
    assert [m.member_id for m in again.stub.DescribeGroup(pb.DescribeGroupRequest(group="km"), timeout=10).members] == [a]


def test_a_static_member_rejoining_under_a_new_id_takes_its_partitions_with_no_rebalance(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="static-t", partitions=4))
    a, a_epoch, _ = beat(stub, "st", "a-1", 0, ["static-t"], instance_id="host-a")
    b, b_epoch, _ = beat(stub, "st", "b-1", 0, ["static-t"])
    members = settled(stub, "st", {a: (a_epoch, set()), b: (b_epoch, set())})
    described = stub.DescribeGroup(pb.DescribeGroupRequest(group="st"), timeout=10)
    assert {m.member_id: m.instance_id for m in described.members} == {a: "host-a", b: ""}
    # A second live member with host-a's instance id is refused.
    error = rpc_error(stub.Heartbeat, pb.HeartbeatRequest(
        group="st", member_id="a-2", member_epoch=0, subscribed_topics=["static-t"], instance_id="host-a"),
        Code.ALREADY_EXISTS, "held by live member 'a-1'")
    assert dict(error.trailing_metadata())["seglog-error"] == "UnreleasedInstanceIdError"
    # a restarts: leaves with -2, keeps its partitions; the new process takes them over.
    assert beat(stub, "st", a, -2, instance_id="host-a")[1] == -2
    away = stub.DescribeGroup(pb.DescribeGroupRequest(group="st"), timeout=10)
    assert {m.member_id: m.member_epoch for m in away.members}[a] == -2
    settled(stub, "st", {b: members[b]})
    new_id, new_epoch, new_owns = beat(stub, "st", "a-2", 0, ["static-t"], instance_id="host-a")
    assert new_id == "a-2" and new_owns == members[a][1]
    assert stub.DescribeGroup(pb.DescribeGroupRequest(group="st"), timeout=10).group_epoch == described.group_epoch
    # The old process, still heartbeating, is fenced by its instance id.
    error = rpc_error(stub.Heartbeat, pb.HeartbeatRequest(
        group="st", member_id=a, member_epoch=members[a][0], instance_id="host-a"),
        Code.FAILED_PRECONDITION, "is now member 'a-2'")
    assert dict(error.trailing_metadata())["seglog-error"] == "FencedInstanceIdError"


def test_a_member_not_revoking_within_its_rebalance_timeout_is_removed(stub):
    stub.CreateTopic(pb.CreateTopicRequest(topic="slow-revoke", partitions=2))
    a, a_epoch, a_owns = beat(stub, "rt", "", 0, ["slow-revoke"], rebalance_timeout_ms=1000)
    assert a_owns == {("slow-revoke", 0), ("slow-revoke", 1)}
    b, b_epoch, b_owns = beat(stub, "rt", "", 0, ["slow-revoke"])
    # a keeps heartbeating (its session is fine) but never gives a partition up.
    state = {"b": (b_epoch, b_owns)}

    def b_owns_both():
        try:
            beat(stub, "rt", a, a_epoch, owned=a_owns)
        except grpc.RpcError as error:
            assert error.code() == Code.NOT_FOUND  # removed: its rebalance timeout ran out
        _, epoch, owns = beat(stub, "rt", b, state["b"][0], owned=state["b"][1])
        state["b"] = (epoch, owns)
        return owns == {("slow-revoke", 0), ("slow-revoke", 1)}

    wait_until(b_owns_both, "the member holding on to its partitions removed", timeout_s=30, poll_s=0.2)
    rpc_error(stub.Heartbeat, pb.HeartbeatRequest(group="rt", member_id=a, member_epoch=a_epoch),
              Code.NOT_FOUND, "is not in group 'rt'")
