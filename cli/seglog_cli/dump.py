"""``seglog dump``: print and verify segment files (.log, .index, .timeindex) offline."""

from __future__ import annotations

import argparse
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from seglog_cli import _segment_files as files
from seglog_cli._common import CliError, Progress, epilog, progress, text_of
from seglog.records import Compression, RecordBatch, TimestampType

__all__ = ["add_parser"]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "dump",
        help="print or verify segment files (.log, .index, .timeindex) offline",
        description=(
            "Decode Kafka segment files as seglog (and Kafka) write them: batch headers with their "
            "positions, offsets and CRCs, records with --print-records, and index entries. Reads the "
            "files directly; no service needed."
        ),
        epilog=epilog(
            """
            --verify checks instead of printing: every batch's CRC, magic and offsets; every
            .index entry (its position starts a batch whose last offset is the entry's offset);
            every .timeindex entry (timestamps increase, the offset ends a batch whose max timestamp
            is the entry's, no earlier batch has a larger one); bytes after the last whole batch.
            A .log is verified with the .index and .timeindex next to it; a directory means every
            segment in it. The exit status is 1 when anything is wrong, and each problem is listed.

            examples:
              seglog dump data/events-0/00000000000000000000.log
              seglog dump data/events-0/00000000000000000000.log --print-records
              seglog dump data/events-0/00000000000000000000.index
              seglog dump data/events-0/00000000000000000000.log --verify
              seglog dump data/events-0 --verify --deep        # every segment, decode every record
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="segment files, or partition directories")
    parser.add_argument("--verify", action="store_true", help="check the files instead of printing them")
    parser.add_argument("--deep", action="store_true", help="with --verify: also decode every record")
    parser.add_argument("--print-records", action="store_true", help="print each record (offset, key, value, ...)")
    parser.set_defaults(run=_run)


def _segment_paths(paths: list[str]) -> list[str]:
    found: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith(SUFFIXES))
            found.extend(os.path.join(path, n) for n in names)
        elif os.path.exists(path):
            if not path.endswith(SUFFIXES):
                raise CliError(f"{path}: not a segment file (expected {', '.join(SUFFIXES)})")
            found.append(path)
        else:
            raise CliError(f"{path}: no such file or directory")
    return found


@contextmanager
def _mapped(path: str) -> Iterator[bytes]:
    """The file's bytes, memory-mapped (read-only) when not empty."""
    try:
        with open(path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size == 0:
                yield b""
                return
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                yield mapped  # type: ignore[misc]
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}") from None


def _sibling(path: str, suffix: str) -> str:
    return os.path.join(os.path.dirname(path), os.path.basename(path).split(".", 1)[0] + suffix)


def _base_offset(path: str) -> int:
    try:
        return files.base_offset_from_name(path)
    except ValueError as error:
        raise CliError(str(error)) from None


def _run(args: argparse.Namespace) -> int:
    paths = _segment_paths(args.paths)
    if args.verify:
        return _verify(paths, deep=args.deep)
    for path in paths:
        print(f"Dumping {path}")
        if path.endswith(LOG_SUFFIX):
            _print_log(path, print_records=args.print_records)
        elif path.endswith(INDEX_SUFFIX):
            _print_index(path, time_index=False)
        else:
            _print_index(path, time_index=True)
    return 0


# -- printing ---------------------------------------------------------------------------------------


def _print_log(path: str, *, print_records: bool) -> None:
    base_offset = _base_offset(path)
    print(f"Log starting offset: {base_offset}")

    def on_batch(batch: RecordBatch) -> None:
        print(_describe_batch(batch))
        if print_records:
            for line in _describe_records(batch):
                print(line)

    with _mapped(path) as buffer:
        scan = files.scan_log(path, buffer, base_offset, on_batch=on_batch)
    for problem in scan.problems:
        print(f"problem at {problem.where}: {problem.message}")


def _describe_batch(batch: RecordBatch) -> str:
    last_sequence = -1 if batch.base_sequence < 0 else batch.base_sequence + batch.last_offset_delta
    horizon = batch.delete_horizon_ms
    return (
        f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.records_count} "
        f"baseSequence: {batch.base_sequence} lastSequence: {last_sequence} "
        f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
        f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
        f"isTransactional: {_bool(batch.is_transactional)} isControl: {_bool(batch.is_control)} "
        f"deleteHorizonMs: {'none' if horizon is None else horizon} "
        f"position: {batch.position} {_timestamp_type(batch)}: {batch.max_timestamp} "
        f"size: {batch.size_in_bytes} magic: {batch.magic} compresscodec: {_codec(batch)} "
        f"crc: {batch.crc} isvalid: {_bool(batch.is_valid())}"
    )


def _describe_records(batch: RecordBatch) -> Iterator[str]:
    kind = _timestamp_type(batch)
    try:
        for record in batch.records():
            header_keys = ",".join(k for k, _ in record.headers)
            key = "" if record.key is None else f" key: {text_of(record.key)}"
            yield (
                f"| offset: {record.offset} {kind}: {record.timestamp_ms} "
                f"keySize: {-1 if record.key is None else len(record.key)} "
                f"valueSize: {-1 if record.value is None else len(record.value)} "
                f"headerKeys: [{header_keys}]{key} payload: {text_of(record.value)}"
            )
    except Exception as error:  # a corrupt batch still prints what came before
        yield f"| records do not decode: {error}"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _timestamp_type(batch: RecordBatch) -> str:
    return "LogAppendTime" if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"


def _codec(batch: RecordBatch) -> str:
    try:
        return Compression(batch.compression).name.lower()
    except ValueError:
        return f"unknown({batch.compression})"


def _print_index(path: str, *, time_index: bool) -> None:
    base_offset = _base_offset(path)
    with _mapped(path) as buffer:
        read = (files.read_time_index if time_index else files.read_offset_index)(path, buffer, base_offset)
    if not read.entries:
        print(f"{path} is empty ({read.free_slots} free slots)")
    for entry in read.entries:
        if time_index:
            print(f"timestamp: {entry.key} offset: {entry.value}")
        else:
            print(f"offset: {entry.key} position: {entry.value}")
    for problem in read.problems:
        print(f"problem at {problem.where}: {problem.message}")


# -- verifying --------------------------------------------------------------------------------------


@dataclass
class _Report:
    checked: list[str] = field(default_factory=list)
    problems: list[files.Problem] = field(default_factory=list)

    def add(self, summary: str, problems: list[files.Problem]) -> None:
        status = "OK" if not problems else f"{len(problems)} problem{'s' * (len(problems) != 1)}"
        print(f"{summary}: {status}")
        for problem in problems:
            print(f"  {problem.where}: {problem.message}")
        self.checked.append(summary)
        self.problems.extend(problems)


def _verify(paths: list[str], *, deep: bool) -> int:
    logs = sorted({p if p.endswith(LOG_SUFFIX) else _sibling(p, LOG_SUFFIX) for p in paths})
    wanted = set(paths)
    report = _Report()
    total_bytes = sum(os.path.getsize(p) for p in logs if os.path.exists(p))
    bar = progress(total=total_bytes, desc="verify", unit="B")
    try:
        for log_path in logs:
            _verify_segment(log_path, wanted, deep, report, bar)
    finally:
        bar.close()
    if report.problems:
        print(f"FAILED: {len(report.problems)} problems in {len(report.checked)} files checked")
        return 1
    print(f"all {len(report.checked)} files OK")
    return 0


def _verify_segment(log_path: str, wanted: set[str], deep: bool, report: _Report, bar: Progress) -> None:
    indexes = [
        p for p in (_sibling(log_path, INDEX_SUFFIX), _sibling(log_path, TIME_INDEX_SUFFIX))
        if os.path.exists(p) and (log_path in wanted or p in wanted)
    ]
    if not os.path.exists(log_path):
        for index_path in indexes or [p for p in wanted if _sibling(p, LOG_SUFFIX) == log_path]:
            report.add(index_path, [files.Problem(index_path, "file", f"no {log_path} next to it to check against")])
        return
    base_offset = _base_offset(log_path)

    def advance(batch: RecordBatch) -> None:
        bar.update(batch.size_in_bytes)

    with _mapped(log_path) as buffer:
        scan = files.scan_log(log_path, buffer, base_offset, deep=deep, on_batch=advance)
    report.add(
        f"{log_path}: {len(scan.batches)} batches, {scan.record_count} records, {scan.size_bytes} bytes", scan.problems
    )
    for index_path in indexes:
        time_index = index_path.endswith(TIME_INDEX_SUFFIX)
        with _mapped(index_path) as buffer:
            if time_index:
                read = files.read_time_index(index_path, buffer, base_offset)
                problems = files.verify_time_index(index_path, read, scan)
            else:
                read = files.read_offset_index(index_path, buffer, base_offset)
                problems = files.verify_offset_index(index_path, read, scan)
        report.add(f"{index_path}: {len(read.entries)} entries, {read.free_slots} free slots", problems)
