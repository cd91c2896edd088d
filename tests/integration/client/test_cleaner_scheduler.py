"""The scheduler's round (``seglog cleaner run``) against a real service, with the cleaning job
swapped for the codec-based hand cleaner at the job seam: which partitions it picks, commits,
refusals and failures dropping their snapshots, dry runs; and the command's one-line answer when
Java is missing."""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys

import pytest
from tests.support.integration_helpers import service_environment

from seglog import Admin, Producer
from seglog_cli.cleaner import JAVA_MISSING, run_round
from tests.support.cleaning_support import hand_clean

pytestmark = pytest.mark.integration

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1024"}


class HandJob:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.cleaned: list[str] = []

    def clean(self, snapshot_dir, *, map_bytes, dry_run):
        if self.fail:
            raise RuntimeError("the job broke")
        self.cleaned.append(os.path.basename(snapshot_dir))
        return hand_clean(snapshot_dir, dry_run=dry_run)

    def close(self):
        pass


def options(**overrides) -> argparse.Namespace:
    values = {"topic": None, "max_partitions": 0, "dry_run": False, "map_bytes": None}
    values.update(overrides)
    return argparse.Namespace(**values)


def fill(server, topic, count=80, keys=5) -> dict[bytes, bytes]:
    latest = {}
    with Producer(server) as producer:
        for n in range(count):
            key, value = b"k%d" % (n % keys), b"value-%d" % n + b"z" * 30
            producer.send(topic, value, key=key, partition=0).result()
            latest[key] = value
    return latest


def read_latest(server, topic) -> dict[bytes, bytes]:
    from seglog import Consumer

    out = {}
    with Admin(server) as admin:
        end = admin.latest_offsets(topic)[0]
    with Consumer(server, topic, partition=0, start="earliest") as consumer:
        position = 0
        while position < end:
            for record in consumer.poll(timeout_ms=2000):
                out[record.key] = record.value
                position = record.offset + 1
    return out


def test_a_round_cleans_the_eligible_partitions_only(service):
    server = service.address
    with Admin(server) as admin:
        admin.create_topic("sched-dirty", 1, COMPACT)
        admin.create_topic("sched-never", 1, {**COMPACT, "min.cleanable.dirty.ratio": "1.0"})
        admin.create_topic("sched-plain", 1)
        expected = fill(server, "sched-dirty")
        fill(server, "sched-never")
        job = HandJob()
        figures = run_round(admin, job, 1, args=options(), out=io.StringIO())
        assert figures.partitions_cleaned == 1 and figures.partitions_failed == 0
        assert figures.bytes_reclaimed > 0 and figures.records_kept == 5
        assert [name.rsplit("-", 3)[0] for name in job.cleaned] == ["sched-dirty"]
        listed = {p.topic: p for p in admin.list_cleanable()}
        # Every record of the cleaned range was read: the checkpoint moved to the range's end.
        assert listed["sched-dirty"].first_dirty_offset == figures.records_read
        assert not listed["sched-dirty"].open_snapshot_ids
        assert "sched-plain" not in listed
    assert read_latest(server, "sched-dirty") == expected
    assert "cleaner round 1: 1 cleaned, 0 refused, 0 failed" in figures.line(False)


def test_a_failed_job_and_a_dry_run_leave_no_snapshot(service):
    server = service.address
    with Admin(server) as admin:
        admin.create_topic("sched-fail", 1, COMPACT)
        fill(server, "sched-fail")
        failed = run_round(admin, HandJob(fail=True), 1, args=options(topic="sched-fail"), out=io.StringIO())
        assert failed.partitions_failed == 1 and "the job broke" in failed.problems[0]
        dry = run_round(admin, HandJob(), 2, args=options(topic="sched-fail", dry_run=True), out=io.StringIO())
        assert dry.partitions_cleaned == 1 and dry.bytes_reclaimed > 0
        [listed] = admin.list_cleanable("sched-fail")
        assert listed.open_snapshot_ids == () and listed.first_dirty_offset == 0  # nothing installed
        assert "would reclaim" in dry.line(True)


def test_the_command_says_so_in_one_line_when_java_is_missing(service):
    environ = service_environment({"PATH": os.path.dirname(sys.executable)})
    environ.pop("JAVA_HOME", None)
    finished = subprocess.run(
        [sys.executable, "-m", "seglog_cli", "cleaner", "run", "--once", "--server", service.address],
        capture_output=True, text=True, env=environ, timeout=60,
    )
    assert finished.returncode == 1
    assert finished.stderr.strip() == f"seglog: error: {JAVA_MISSING}"


def test_cleaner_list_shows_the_dirty_ratios(service):
    server = service.address
    with Admin(server) as admin:
        admin.create_topic("sched-list", 1, COMPACT)
    fill(server, "sched-list")
    run = [sys.executable, "-m", "seglog_cli", "cleaner", "list", "--server", server, "--topic", "sched-list"]
    text = subprocess.run(run, capture_output=True, text=True, env=service_environment(), timeout=60)
    assert text.returncode == 0, text.stderr
    header, row = text.stdout.strip().splitlines()
    assert header.split()[:3] == ["TOPIC", "PART", "DIRTY"]
    assert row.split()[:3] == ["sched-list", "0", "1.000"] and row.split()[-2:] == ["yes", "0"]
    as_json = subprocess.run(run + ["--format", "json"], capture_output=True, text=True,
                             env=service_environment(), timeout=60)
    [entry] = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert entry["topic"] == "sched-list" and entry["eligible"] is True and entry["dirty_ratio"] == 1.0
