"""``seglog cleaner run`` (and ``list``): the offline cleaner's scheduler (Kafka's LogCleaner loop, outside the
service).

Each round: ``ListCleanable``; for each eligible partition, dirtiest first (max.compaction.lag.ms
"must clean" ones are eligible whatever their ratio): ``CreateSnapshot`` -> the cleaning job on
the snapshot directory (shared filesystem: the service returns the snapshot's local path) ->
``CommitCleaned`` (the service records the job's figures for its metrics and removes the
snapshot). A failed job or a refused commit drops the snapshot. ``--dry-run`` runs the job without
writing and drops the snapshot: the figures say what cleaning would reclaim (through the store, on a
copy downloaded here: nothing is written to the store).

Engines: ``spark`` (default) runs the PySpark job (``seglog_spark.job``) on an in-process
SparkSession for ``local[...]`` masters, or through ``spark-submit`` for a cluster
(``--master spark://host:7077``); ``python`` runs the single-process baseline
(``seglog_spark.cleaner_local``), no Java needed. Built only on the public client.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from seglog import Admin, FailedPreconditionError, SeglogError, TopicNotFoundError
from seglog.cleaning import CleanablePartition
from seglog_cli._common import CliError, epilog, progress, server_of

__all__ = ["add_parser", "run_round", "under_store"]

_log = logging.getLogger("seglog_cli.cleaner")

# Seconds between rounds when --interval is not given: a minute keeps the dirty ratio near its
# threshold on busy topics while an idle service sees one ListCleanable call a minute.
INTERVAL_S_DEFAULT = 60.0
# A round longer than this prints a progress line after each partition (when not on a terminal):
# short rounds say everything in their one closing line.
PROGRESS_AFTER_S = 30.0
# Stale snapshot ids named in the start-up line; the count says the rest.
_STALE_SHOWN_MAX = 3
JAVA_MISSING = (
    "java not found: the Spark engine needs Java 17 (apt-get install openjdk-17-jre-headless; "
    "scripts/bootstrap installs it when run as root), or use --engine python"
)


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "cleaner",
        help="clean compacted topics offline (snapshot, cleaning job, commit)",
        description="Clean compacted topics (cleanup.policy=compact) offline, as Kafka's log cleaner would.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser(
        "run",
        parents=parents,
        help="run cleaning rounds: once, or every --interval seconds",
        description="Snapshot the dirtiest compacted partitions, clean them with Spark (or the "
        "single-process baseline) and commit the results to the service.",
        epilog=epilog(
            """
            examples:
              seglog cleaner run --once                              # one round, local Spark
              seglog cleaner run --interval 300                      # a round every 5 minutes
              seglog cleaner run --once --engine python              # no Spark, no Java
              seglog cleaner run --master spark://10.0.0.5:7077      # on a Spark cluster
              seglog cleaner run --once --dry-run                    # what would be reclaimed
              seglog cleaner run --snapshot-store s3://seglog/prod --s3-endpoint http://s3:8333

            Without --snapshot-store the cleaner must share the service's filesystem (it reads the
            snapshot where the service wrote it). With it, the service (started with the same
            --remote-storage) exports each snapshot to the object store, the job reads and writes
            objects there, and the service fetches and checks the result: only the store is shared.
            Credentials come from the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or
            AWS_SHARED_CREDENTIALS_FILE), never from the command line. Each round prints one line of figures; the service exports the
            figures of each installed cleaning as metrics.
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--once", action="store_true", help="run one round and exit")
    run.add_argument("--interval", type=float, default=INTERVAL_S_DEFAULT, metavar="S",
                     help=f"seconds between rounds (default: {INTERVAL_S_DEFAULT:g})")
    run.add_argument("--master", default="local[*]", metavar="URL",
                     help="Spark master: local[N] (in-process, default local[*]) or spark://HOST:PORT")
    run.add_argument("--engine", choices=("spark", "python"), default="spark",
                     help="spark (default) or python: the single-process baseline cleaner")
    run.add_argument("--map-bytes", type=int, default=None, metavar="N",
                     help="memory of each offset map (Kafka's dedupe buffer), bytes")
    run.add_argument("--dry-run", action="store_true", help="report what cleaning would reclaim; change nothing")
    run.add_argument("--topic", default=None, help="only this topic's partitions")
    run.add_argument("--snapshot-store", default=None, metavar="s3://BUCKET[/PREFIX]",
                     help="clean through the object store the service exports snapshots to (its --remote-storage)")
    run.add_argument("--s3-endpoint", default=None, metavar="URL",
                     help="the S3-compatible server of --snapshot-store (default: AWS S3)")
    run.add_argument("--max-partitions", type=int, default=0, metavar="N",
                     help="at most N partitions per round (default: every eligible one)")
    run.set_defaults(run=_run)
    listing = actions.add_parser(
        "list",
        parents=parents,
        help="list compacted partitions with their dirty ratios (what the next round would pick)",
        description="List every compacted partition: dirty ratio against min.cleanable.dirty.ratio, "
        "cleanable bytes, first dirty offset (the cleaner checkpoint), must-clean (max.compaction.lag.ms).",
        epilog=epilog(
            """
            examples:
              seglog cleaner list
              seglog cleaner list --topic users --format json
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listing.add_argument("--topic", default=None, help="only this topic's partitions")
    listing.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    listing.set_defaults(run=_list)


def _list(args: argparse.Namespace) -> int:
    with Admin(server_of(args)) as admin:
        found = admin.list_cleanable(args.topic)
    if args.format == "json":
        for partition in found:
            print(json.dumps(dataclasses.asdict(partition)))
        return 0
    print(f"{'TOPIC':<24} {'PART':>4} {'DIRTY':>6} {'MIN':>5} {'CLEANABLE_BYTES':>16} {'FIRST_DIRTY':>12} "
          f"{'MUST':>4} {'ELIGIBLE':>8} SNAPSHOTS")
    for p in found:
        print(f"{p.topic:<24} {p.partition:>4} {p.dirty_ratio:>6.3f} {p.min_cleanable_dirty_ratio:>5.2f} "
              f"{p.cleanable_bytes:>16} {p.first_dirty_offset:>12} {'yes' if p.must_clean else 'no':>4} "
              f"{'yes' if p.eligible else 'no':>8} {len(p.open_snapshot_ids)}")
    return 0


@dataclass
class RoundFigures:
    """What one round did; printed as one line."""

    number: int
    partitions_cleaned: int = 0
    partitions_refused: int = 0
    partitions_failed: int = 0
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    bytes_reclaimed: int = 0
    duration_s: float = 0.0
    problems: list[str] = field(default_factory=list)
    # Compacted partitions listed, and how many of them were eligible.
    partitions_listed: int = 0
    partitions_eligible: int = 0

    def line(self, dry_run: bool) -> str:
        if self.partitions_eligible == 0:
            return (f"cleaner round {self.number}: nothing to clean ({self.partitions_listed} compacted "
                    f"partitions, none eligible); Spark not used")
        verb = "would reclaim" if dry_run else "reclaimed"
        return (
            f"cleaner round {self.number}: {self.partitions_cleaned} cleaned, {self.partitions_refused} refused, "
            f"{self.partitions_failed} failed; {self.records_read} records read, {self.records_kept} kept; "
            f"{self.bytes_read} bytes read, {self.bytes_written} written, {verb} {self.bytes_reclaimed}; "
            f"{self.duration_s:.2f} s"
        )


def _run(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise CliError(f"--interval must be > 0 seconds, got {args.interval:g}")
    if args.map_bytes is not None and args.map_bytes < 24:
        raise CliError(f"--map-bytes must hold at least one 24-byte entry, got {args.map_bytes}")
    _check_snapshot_store(args)
    # The engine's JVM starts with the first partition to clean, not before: a round with
    # nothing eligible never starts one. (Started by seglog_spark.driver_jvm, with no Python code
    # between fork and exec, so it is safe while gRPC's threads run.)
    job = make_job(args.engine, args.master)
    number = 0
    failed = False
    with Admin(server_of(args)) as admin:
        try:
            if not args.dry_run:
                _drop_stale_snapshots(admin, args.topic)
            while True:
                number += 1
                figures = run_round(admin, job, number, args=args, out=sys.stdout)
                print(figures.line(args.dry_run), flush=True)
                for problem in figures.problems:
                    print(f"  {problem}", file=sys.stderr, flush=True)
                failed = failed or figures.partitions_failed > 0
                if args.once:
                    break
                time.sleep(args.interval)
        finally:
            job.close()
    return 1 if failed else 0


def _drop_stale_snapshots(admin: Admin, topic: str | None) -> list[str]:
    """Drop the snapshots open when this cleaner starts, and say so in one line.

    A cleaner drops or commits every snapshot it takes before its round ends, so one still open
    at start was left by a cleaner that was killed mid-round (kill -9, OOM, a container
    restart); it would pin the segments it links, and their disk space, until the service's
    snapshot time limit (6 h by default). One scheduled cleaner runs per service (compose's
    ``cleaner``): a second one started beside it would drop the first's snapshot too, and the
    first's commit is then refused (harmless: its next round snapshots again). A dry run
    changes nothing, so it leaves them.
    """
    stale = [snapshot for partition in admin.list_cleanable(topic) for snapshot in partition.open_snapshot_ids]
    dropped = [snapshot for snapshot in stale if _drop(admin, snapshot)]
    if dropped:
        shown = ", ".join(dropped[:_STALE_SHOWN_MAX]) + (", ..." if len(dropped) > _STALE_SHOWN_MAX else "")
        print(f"cleaner: dropped {len(dropped)} snapshot(s) left open by an earlier cleaner: {shown}", flush=True)
    return dropped


def run_round(admin: Admin, job: Any, number: int, *, args: argparse.Namespace, out: TextIO) -> RoundFigures:
    """One round over the eligible partitions; returns its figures."""
    started = time.monotonic()
    figures = RoundFigures(number)
    listed = admin.list_cleanable(args.topic)
    chosen = [c for c in listed if c.eligible]
    if args.max_partitions > 0:
        chosen = chosen[: args.max_partitions]
    figures.partitions_listed, figures.partitions_eligible = len(listed), len(chosen)
    total_bytes = sum(c.cleanable_bytes for c in chosen)
    # On a terminal a bar in bytes; in a log (compose), a line per partition once a round is long.
    bar = progress(total=total_bytes, desc=f"cleaning round {number}", unit="B", stream=out)
    lines = not out.isatty()
    try:
        for done, cleanable in enumerate(chosen, start=1):
            _clean_one(admin, job, cleanable, args, figures)
            bar.update(cleanable.cleanable_bytes)
            if lines and done < len(chosen) and time.monotonic() - started >= PROGRESS_AFTER_S:
                print(f"cleaner round {number}: {done}/{len(chosen)} partitions, {figures.records_read} records "
                      f"read, {figures.bytes_read} of {total_bytes} cleanable bytes", file=out, flush=True)
    finally:
        bar.close()
    figures.duration_s = time.monotonic() - started
    return figures


def _check_snapshot_store(args: argparse.Namespace) -> None:
    store = getattr(args, "snapshot_store", None)
    if store is None:
        return
    bucket = store[len("s3://"):].split("/", 1)[0] if store.startswith("s3://") else ""
    if not bucket:
        raise CliError(f"--snapshot-store must be s3://BUCKET[/PREFIX], got {store!r}")
    if args.dry_run and args.engine == "spark" and not args.master.startswith("local"):
        raise CliError("--dry-run with --snapshot-store runs on this machine: use --engine python or a "
                       "local[...] master (a cluster's dry run works on a shared disk only)")


def under_store(url: str, store: str) -> bool:
    """Whether a snapshot's ``store_url`` lies in ``--snapshot-store`` (``s3://BUCKET[/PREFIX]``, a
    trailing slash or not), at a key-path boundary: ``s3://b/pre`` does not hold ``s3://b/prefix/``."""
    return url.startswith(store.rstrip("/") + "/")


def _clean_one(admin: Admin, job: Any, cleanable: CleanablePartition, args: argparse.Namespace,
               figures: RoundFigures) -> None:
    name = f"{cleanable.topic}-{cleanable.partition}"
    through_store = getattr(args, "snapshot_store", None) is not None
    try:
        snapshot = admin.create_snapshot(cleanable.topic, cleanable.partition, include_local_path=not through_store,
                                         export_to_store=through_store)
    except (FailedPreconditionError, TopicNotFoundError) as error:
        figures.partitions_refused += 1
        figures.problems.append(f"{name}: not snapshotted: {error}")
        return
    except SeglogError as error:
        if not through_store:
            raise
        # The store down or failing mid-export: the service removed the snapshot; nothing changed.
        figures.partitions_failed += 1
        figures.problems.append(f"{name}: not snapshotted: {type(error).__name__}: {error}")
        return
    try:
        if through_store:
            result = _clean_in_store(job, snapshot, args)
        elif snapshot.local_path is None or not os.path.isdir(snapshot.local_path):
            raise CliError(
                f"snapshot {snapshot.snapshot_id} is not at {snapshot.local_path!r} here: the cleaner must "
                f"share the service's filesystem"
            )
        else:
            result = job.clean(snapshot.local_path, map_bytes=args.map_bytes, dry_run=args.dry_run)
    except Exception as error:  # noqa: BLE001 - a failed job drops its snapshot; the round goes on
        figures.partitions_failed += 1
        figures.problems.append(f"{name}: cleaning job failed: {type(error).__name__}: {error}")
        _drop(admin, snapshot.snapshot_id)
        return
    stats = result.get("stats", {})
    if args.dry_run:
        _drop(admin, snapshot.snapshot_id)
        reclaimed = int(stats.get("bytes_read", 0)) - int(stats.get("bytes_written", 0))
    else:
        try:
            commit = admin.commit_cleaned(snapshot.snapshot_id)
        except (FailedPreconditionError, TopicNotFoundError) as error:
            # NOT_FOUND: the topic was deleted, or another cleaner's start dropped the snapshot.
            figures.partitions_refused += 1
            figures.problems.append(f"{name}: result refused: {error}")
            _drop(admin, snapshot.snapshot_id)
            return
        except SeglogError as error:
            if not through_store:
                raise
            # The store failed while the service fetched the result: nothing was installed.
            figures.partitions_failed += 1
            figures.problems.append(f"{name}: commit failed: {type(error).__name__}: {error}")
            _drop(admin, snapshot.snapshot_id)
            return
        reclaimed = commit.bytes_before - commit.bytes_after
    figures.partitions_cleaned += 1
    figures.records_read += int(stats.get("records_read", 0))
    figures.records_kept += int(stats.get("records_kept", 0))
    figures.bytes_read += int(stats.get("bytes_read", 0))
    figures.bytes_written += int(stats.get("bytes_written", 0))
    figures.bytes_reclaimed += max(0, reclaimed)


def _clean_in_store(job: Any, snapshot: Any, args: argparse.Namespace) -> dict[str, Any]:
    url = snapshot.store_url or ""
    if not under_store(url, args.snapshot_store):
        raise CliError(
            f"snapshot {snapshot.snapshot_id} was exported to {url or 'nowhere'}, not under --snapshot-store "
            f"{args.snapshot_store}: give the service's --remote-storage location"
        )
    return job.clean_store(url, args.s3_endpoint, map_bytes=args.map_bytes, dry_run=args.dry_run)


def _drop(admin: Admin, snapshot_id: str) -> bool:
    try:
        return admin.drop_snapshot(snapshot_id)
    except SeglogError as error:  # expiry (snapshot_ttl_ms) removes it later anyway
        _log.warning("could not drop snapshot %s: %s", snapshot_id, error)
        return False


# -- cleaning engines ----------------------------------------------------------------------------


def make_job(engine: str, master: str) -> Any:
    _check_dependencies(engine)
    _spark_environment(master)
    if engine == "python":
        return PythonJob()
    if not _java_available():
        raise CliError(JAVA_MISSING)
    if master.startswith("local"):
        return SparkLocalJob(master)
    return SparkSubmitJob(master)


SPARK_EXTRA = "pip install 'seglog[spark]'"


def _check_dependencies(engine: str) -> None:
    """One line naming the extra when the engine's packages are missing (a client-only install):
    both engines run the cleaning job's code (seglog_spark), which needs numpy; the Spark engine
    needs pyspark too (the single-process one needs neither pyspark nor Java)."""
    needed = ("pyspark", "numpy") if engine == "spark" else ("numpy",)
    missing = [] if _job_code_present() else ["seglog_spark"]
    for name in needed:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise CliError(f"the cleaner's {engine} engine needs {' and '.join(missing)}, which a client-only install "
                       f"lacks: {SPARK_EXTRA}")


def _job_code_present() -> bool:
    """Whether the cleaning job's package is installed; found, not imported (importing it needs
    numpy, which the caller names on its own)."""
    try:
        return importlib.util.find_spec("seglog_spark") is not None
    except ImportError:
        return False


def _spark_environment(master: str) -> None:
    """What Spark needs on this machine, set before any JVM starts: workers run this Python, and
    a local master binds to loopback (a machine's hostname may not resolve)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local") or "://127." in master or "://localhost" in master:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _java_available() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return True
    return shutil.which("java") is not None


class PythonJob:
    """The single-process baseline (no Spark, no Java)."""

    def clean(self, snapshot_dir: str, *, map_bytes: int | None, dry_run: bool) -> dict[str, Any]:
        from seglog_spark import cleaner_local

        options = {} if map_bytes is None else {"map_bytes": map_bytes}
        return dict(cleaner_local.clean_snapshot(snapshot_dir, dry_run=dry_run, **options))

    def clean_store(self, url: str, endpoint: str | None, *, map_bytes: int | None,
                    dry_run: bool = False) -> dict[str, Any]:
        from seglog_spark import cleaner_local, object_io

        options: dict[str, Any] = {} if map_bytes is None else {"map_bytes": map_bytes}
        store = object_io.StoreSnapshot.parse(url, endpoint)
        return dict(object_io.clean_downloaded(store, cleaner_local.clean_snapshot, dry_run=dry_run, **options))

    def close(self) -> None:
        pass


class SparkLocalJob:
    """The PySpark job on one in-process SparkSession, kept across rounds."""

    def __init__(self, master: str) -> None:
        self._master = master
        self._spark: Any = None

    def start(self) -> None:
        if self._spark is None:
            from seglog_spark.session import build_session

            self._spark = build_session(self._master, app_name="seglog-cleaner")

    def clean(self, snapshot_dir: str, *, map_bytes: int | None, dry_run: bool) -> dict[str, Any]:
        from seglog_spark import job

        self.start()
        options = {} if map_bytes is None else {"map_bytes": map_bytes}
        return dict(job.clean_snapshot(self._spark, snapshot_dir, dry_run=dry_run, **options))

    def clean_store(self, url: str, endpoint: str | None, *, map_bytes: int | None,
                    dry_run: bool = False) -> dict[str, Any]:
        from seglog_spark import job, job_store, object_io

        self.start()
        options = {} if map_bytes is None else {"map_bytes": map_bytes}
        store = object_io.StoreSnapshot.parse(url, endpoint)
        if dry_run:  # a local master shares this disk: the shared-disk job on a downloaded copy
            return dict(object_io.clean_downloaded(
                store, lambda path, **more: job.clean_snapshot(self._spark, path, **more), dry_run=True, **options))
        return dict(job_store.clean_store_snapshot(self._spark, store, **options))

    def close(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None


class SparkSubmitJob:
    """``spark-submit`` of the job's entry point to a cluster; the result is read back from the
    snapshot's result.json (the job writes it last, atomically)."""

    def __init__(self, master: str) -> None:
        self._master = master

    def clean_store(self, url: str, endpoint: str | None, *, map_bytes: int | None,
                    dry_run: bool = False) -> dict[str, Any]:
        if dry_run:  # _check_snapshot_store refuses it first
            raise CliError("a cluster's dry run works on a shared disk only")
        # The driver and the executors take the store's credentials from their own environment.
        return self.clean(url, map_bytes=map_bytes, dry_run=False,
                          extra=[] if endpoint is None else ["--s3-endpoint", endpoint])

    def clean(self, snapshot_dir: str, *, map_bytes: int | None, dry_run: bool,
              extra: list[str] | None = None) -> dict[str, Any]:
        import seglog_spark

        entry = os.path.join(os.path.dirname(seglog_spark.__file__), "__main__.py")
        from seglog_spark.session import driver_java_options

        command = [_spark_submit(), "--master", self._master, "--driver-java-options", driver_java_options(),
                   entry, snapshot_dir, "--master", self._master]
        if dry_run:
            command.append("--dry-run")
        if map_bytes is not None:
            command += ["--map-bytes", str(map_bytes)]
        command += extra or []
        finished = subprocess.run(_dies_with_this_process() + command, capture_output=True, text=True, check=False)
        if finished.returncode != 0:
            tail = " | ".join(finished.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"spark-submit exited {finished.returncode}: {tail}")
        return _result_from_stdout(finished.stdout)

    def close(self) -> None:
        pass


def _dies_with_this_process() -> list[str]:
    """A prefix that makes a child end when this process dies, however it dies.

    spark-submit's JVM is the job's driver and, unlike the gateway of an in-process session
    (which exits when its stdin closes), outlives a cleaner killed with SIGKILL: it would go on
    cleaning a snapshot nobody will commit, holding the cluster's cores. ``setpriv --pdeathsig``
    (util-linux, in every Debian image) asks the kernel to send it SIGTERM when its parent dies;
    the signal survives spark-submit's exec of java, and SIGTERM lets Spark's shutdown hooks stop
    the application on the cluster. A preexec_fn would do the same from Python, but Python code
    in a child forked while gRPC's threads run is not safe. Spawned from the main thread: the
    kernel sends the signal when the spawning thread ends."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        _log.warning("setpriv not found: a cleaner killed mid-round leaves its spark-submit running")
        return []
    return [setpriv, "--pdeathsig", "TERM", "--"]


def _result_from_stdout(stdout: str) -> dict[str, Any]:
    """The job prints its result JSON on stdout (the last JSON object there; Spark may print
    other lines before it)."""
    try:
        return dict(json.loads(stdout))
    except ValueError:
        pass
    for line in reversed(stdout.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    raise RuntimeError(f"the cleaning job printed no result JSON (stdout: {stdout[-200:]!r})")


def _spark_submit() -> str:
    from pyspark.find_spark_home import _find_spark_home

    path = os.path.join(_find_spark_home(), "bin", "spark-submit")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"spark-submit not found at {path}")
    return path
