"""The cleaner's housekeeping against a real service, with the single-process engine (fast): the
snapshots a killed cleaner left open are dropped when a cleaner starts, a dry run leaves them, and
a commit whose snapshot another cleaner's start dropped is a refused result, not a crash."""

from __future__ import annotations

import argparse
import io

import pytest
from seglog import Admin
from seglog_cli import cleaner as cleaner_cli
from seglog_cli.cleaner import PythonJob, run_round
from test_cleaner_cli import compacted, run_cleaner, workload

pytestmark = pytest.mark.integration


def open_snapshots(admin: Admin, topic: str) -> list[str]:
    return [snapshot for partition in admin.list_cleanable(topic) for snapshot in partition.open_snapshot_ids]


def test_a_starting_cleaner_drops_the_snapshots_a_killed_one_left(start_service):
    service = start_service()
    compacted(service.stub, "left-open")
    workload(service.stub, "left-open", seed=3)
    with Admin(service.address) as admin:
        # What a cleaner killed between CreateSnapshot and CommitCleaned leaves behind.
        left = admin.create_snapshot("left-open", 0).snapshot_id
        assert open_snapshots(admin, "left-open") == [left]

        looked = run_cleaner(service, "--engine", "python", "--topic", "left-open", "--dry-run")
        assert looked.returncode == 0, looked.stdout + looked.stderr
        assert "dropped" not in looked.stdout and left in open_snapshots(admin, "left-open")  # a dry run changes nothing

        finished = run_cleaner(service, "--engine", "python", "--topic", "left-open")
        assert finished.returncode == 0, finished.stdout + finished.stderr
        assert finished.stdout.splitlines()[0] == f"cleaner: dropped 1 snapshot(s) left open by an earlier cleaner: {left}"
        assert "cleaner round 1: 1 cleaned, 0 refused, 0 failed" in finished.stdout, finished.stdout
        assert open_snapshots(admin, "left-open") == []


class DroppedMeanwhile(PythonJob):
    """The real single-process job, with another cleaner starting (and dropping every open
    snapshot) while it runs."""

    def __init__(self, address: str) -> None:
        self.address = address

    def clean(self, snapshot_dir: str, **options):
        result = super().clean(snapshot_dir, **options)
        with Admin(self.address) as other:
            for snapshot in open_snapshots(other, ""):
                other.drop_snapshot(snapshot)
        return result


def test_a_commit_whose_snapshot_was_dropped_meanwhile_is_refused(start_service):
    service = start_service()
    compacted(service.stub, "dropped-meanwhile")
    workload(service.stub, "dropped-meanwhile", seed=4)
    args = argparse.Namespace(topic="dropped-meanwhile", max_partitions=0, map_bytes=None, dry_run=False)
    with Admin(service.address) as admin:
        figures = run_round(admin, DroppedMeanwhile(service.address), 1, args=args, out=io.StringIO())
        assert (figures.partitions_cleaned, figures.partitions_refused, figures.partitions_failed) == (0, 1, 0)
        assert "result refused" in figures.problems[0]
        assert open_snapshots(admin, "dropped-meanwhile") == []


def test_a_long_round_reports_progress_in_records_and_bytes(start_service, monkeypatch):
    service = start_service()
    for topic in ("progress-a", "progress-b"):
        compacted(service.stub, topic)
        workload(service.stub, topic, seed=7)
    # Every round counts as long: a line after each partition but the last.
    monkeypatch.setattr(cleaner_cli, "PROGRESS_AFTER_S", 0.0)
    args = argparse.Namespace(topic=None, max_partitions=0, map_bytes=None, dry_run=True)
    out = io.StringIO()
    with Admin(service.address) as admin:
        eligible = [c for c in admin.list_cleanable() if c.eligible]
        figures = run_round(admin, PythonJob(), 1, args=args, out=out)
    assert figures.partitions_cleaned == len(eligible) >= 2
    lines = out.getvalue().splitlines()
    assert len(lines) == len(eligible) - 1
    total = sum(c.cleanable_bytes for c in eligible)
    assert lines[0].startswith("cleaner round 1: 1/%d partitions, " % len(eligible))
    assert lines[0].endswith(f" of {total} cleanable bytes") and " records read, " in lines[0]
