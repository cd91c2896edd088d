"""The ids and names a client sends the group coordinator, at and around their limits (Kafka's
STRING: 32,767 UTF-8 bytes for the ids, a topic name's 249 for topics): a call is refused with
InvalidGroupRequestError naming the field and the limit exactly when one is past its limit, before
anything changes, and every accepted call's records encode (once a ValueError from the encoder,
after the group had changed)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seglog_server.groups.coordinator import CLIENT_ID_BYTES_MAX, ID_BYTES_MAX, GroupCoordinator, OffsetCommit
from seglog_server.groups.errors import InvalidGroupRequestError
from seglog_server.storage import FakeClock, LogManager
from seglog_server.storage.base.topic_partition import TOPIC_NAME_LENGTH_MAX

TOPIC = "orders"
LIMITS = {"group id": ID_BYTES_MAX, "member id": ID_BYTES_MAX, "instance id": ID_BYTES_MAX,
          "subscribed topic": TOPIC_NAME_LENGTH_MAX, "client id": CLIENT_ID_BYTES_MAX}


@pytest.fixture(scope="module")
def coordinator(tmp_path_factory):
    clock = FakeClock(1_700_000_000_000)
    manager = LogManager([str(tmp_path_factory.mktemp("groups"))], clock=clock)
    manager.startup()
    manager.create_topic(TOPIC, 2, {})
    coordinator = GroupCoordinator(manager, clock, partitions=3)
    coordinator.start()
    yield coordinator
    manager.shutdown()


def _text(limit: int) -> st.SearchStrategy[str]:
    """Strings whose UTF-8 size lands at, just below and just past ``limit`` (1- to 4-byte
    characters), or anywhere up to it."""
    def build(char: str, size: int) -> str:
        return char * max(1, size // len(char.encode()))
    sizes = st.sampled_from([limit - 3, limit - 1, limit, limit + 1, limit + 4]) | st.integers(1, limit + 8)
    return st.builds(build, st.sampled_from(["a", "\u00e9", "\u20ac", "\U0001f600"]), sizes)


def _size(text: str) -> int:
    return len(text.encode())


_examples = itertools.count()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(fields=st.fixed_dictionaries({field: _text(limit) for field, limit in LIMITS.items()}))
def test_a_join_is_refused_exactly_when_a_field_is_past_its_limit(coordinator, fields):
    group = fields["group id"] = f"{next(_examples)}-{fields['group id']}"[: len(fields["group id"])]
    over = sorted(field for field, limit in LIMITS.items() if _size(fields[field]) > limit)
    try:
        answer = coordinator.heartbeat(
            group, fields["member id"], 0, subscription={TOPIC, fields["subscribed topic"]},
            instance_id=fields["instance id"], client_id=fields["client id"], client_host="/127.0.0.1")
    except InvalidGroupRequestError as exc:
        assert over, exc
        field = next(f for f in over if str(exc).startswith(f"{f} is "))
        assert f"at most {LIMITS[field]}" in str(exc)
        assert coordinator.group_snapshot(group) is None  # nothing changed
        return
    assert not over
    assert answer.written is not None  # the member's records were encoded and appended
    coordinator.heartbeat(group, answer.member_id, -1, subscription=None, instance_id=fields["instance id"])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(group=_text(ID_BYTES_MAX), topic=_text(TOPIC_NAME_LENGTH_MAX), member=_text(ID_BYTES_MAX))
def test_a_simple_commit_is_refused_exactly_when_a_field_is_past_its_limit(coordinator, group, topic, member):
    over = [name for name, value, limit in (("group id", group, ID_BYTES_MAX), ("member id", member, ID_BYTES_MAX),
                                            ("topic", topic, TOPIC_NAME_LENGTH_MAX)) if _size(value) > limit]
    try:
        coordinator.commit(group, member, 1, [OffsetCommit(topic, 0, 7)])
    except InvalidGroupRequestError as exc:
        assert over and any(str(exc).startswith(f"{name} is ") for name in over), exc
        return
    except Exception as exc:  # within the limits: refused for what the state is, never by the encoder
        assert not over and not isinstance(exc, ValueError), exc
        return
    raise AssertionError(f"a commit to an unknown topic {topic[:20]!r} or as an unknown member was accepted")
