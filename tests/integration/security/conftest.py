"""Fixtures for the security suites: a test CA and services with TLS, tokens, ACLs, quotas."""

from __future__ import annotations

import pytest
from tests.support.certificate_authority import TestCA


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return TestCA(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    """An authority the service does not trust."""
    return TestCA(tmp_path_factory.mktemp("other-ca"), "some other CA")
