"""Admin.alter_topic_configs and its async twin against a real service."""

from __future__ import annotations

import pytest

from seglog import Admin, AsyncAdmin
from seglog.errors import AuthorizationError, InvalidRequestError, TopicNotFoundError

pytestmark = pytest.mark.integration


def test_set_delete_and_validate_only(seglog_service):
    with Admin(seglog_service.address) as admin:
        admin.create_topic("client-alter", 2, {"segment.bytes": 65536})
        dry = admin.alter_topic_configs("client-alter", {"retention.ms": 5}, validate_only=True)
        assert dry["retention.ms"] == "5"
        assert admin.describe_topic("client-alter").configs["retention.ms"] != "5"
        configs = admin.alter_topic_configs("client-alter", {"retention.ms": 86_400_000}, ["segment.bytes"])
        assert configs["retention.ms"] == "86400000"
        assert configs["segment.bytes"] == "1073741824"
        assert admin.describe_topic("client-alter").configs == configs


def test_refusals_are_the_client_errors(seglog_service):
    with Admin(seglog_service.address) as admin:
        admin.create_topic("client-alter-bad")
        with pytest.raises(InvalidRequestError, match="unknown topic config 'retention.mss'"):
            admin.alter_topic_configs("client-alter-bad", {"retention.mss": 1})
        with pytest.raises(TopicNotFoundError):
            admin.alter_topic_configs("client-alter-absent", {"retention.ms": 1})
        with pytest.raises(AuthorizationError, match="internal topic"):
            admin.alter_topic_configs("__consumer_offsets", {"retention.ms": 1})


async def test_async_twin(seglog_service):
    async with AsyncAdmin(seglog_service.address) as admin:
        await admin.create_topic("client-alter-async")
        configs = await admin.alter_topic_configs("client-alter-async", {"cleanup.policy": "compact"})
        assert configs["cleanup.policy"] == "compact"
        assert (await admin.describe_topic("client-alter-async")).configs["cleanup.policy"] == "compact"
