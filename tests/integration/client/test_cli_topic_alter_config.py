"""``seglog topic alter-config`` end to end: a subprocess against a real service."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_set_delete_and_dry_run(run_cli):
    assert run_cli("topic", "create", "cli-alter", "--config", "segment.bytes=65536").returncode == 0
    dry = run_cli("topic", "alter-config", "cli-alter", "--set", "retention.ms=5", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("topic cli-alter: would change 1 configs (nothing changed)\n")
    # -1: the service's topic default (seglog_service keeps records, see keeping_records).
    assert "retention.ms: -1 -> 5" in dry.stdout
    assert "retention.ms=-1" in run_cli("topic", "describe", "cli-alter").stdout
    done = run_cli("topic", "alter-config", "cli-alter", "--set", "retention.ms=3600000",
                   "--set", "cleanup.policy=compact", "--delete", "segment.bytes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "topic cli-alter: changed 3 configs",
        "  cleanup.policy: delete -> compact",
        "  retention.ms: -1 -> 3600000",
        "  segment.bytes: 65536 -> 1073741824",
    ]
    described = json.loads(run_cli("topic", "describe", "cli-alter", "--format", "json").stdout)
    assert described["configs"]["cleanup.policy"] == "compact"
    as_json = json.loads(run_cli("topic", "alter-config", "cli-alter", "--set", "retention.ms=7",
                                 "--format", "json").stdout)
    assert as_json["configs"]["retention.ms"] == "7" and as_json["dry_run"] is False


def test_refusals_are_one_line_errors(run_cli):
    assert run_cli("topic", "create", "cli-alter-bad").returncode == 0
    bad = run_cli("topic", "alter-config", "cli-alter-bad", "--set", "retention.ms=soon")
    assert bad.returncode == 1 and "INVALID_ARGUMENT" in bad.stderr and "retention.ms" in bad.stderr
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    missing = run_cli("topic", "alter-config", "cli-alter-nope", "--set", "retention.ms=1")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
    nothing = run_cli("topic", "alter-config", "cli-alter-bad")
    assert nothing.returncode == 2 and "nothing to change" in nothing.stderr
