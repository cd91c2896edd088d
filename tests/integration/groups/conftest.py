"""Fixtures of the group process tests: member processes stopped at the end of each test."""

from __future__ import annotations

import pytest
from group_process_support import Member


@pytest.fixture
def members(tmp_path):
    """Factory: members(address, group, topic, *extra) -> Member; every one is stopped at the end."""
    started: list[Member] = []

    def start(address: str, group: str, topic: str, *extra: str, name: str | None = None) -> Member:
        member = Member(tmp_path, name or f"member{len(started)}", address, group, topic, *extra)
        started.append(member)
        return member

    yield start
    for member in started:
        if member.process.poll() is None:
            member.process.kill()
            member.process.wait()


@pytest.fixture(scope="module")
def group_service(tmp_path_factory):
    """A service with the short session timeout the members are given, shared by a module's tests
    (each uses its own group and topic)."""
    from group_process_support import GROUP_ARGS
    from tests.support.integration_helpers import ServiceProcess

    workdir = tmp_path_factory.mktemp("group-service")
    service = ServiceProcess(workdir, [workdir / "data0"], GROUP_ARGS).start()
    yield service
    assert service.stop() == 0, service.log()
