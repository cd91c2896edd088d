"""``seglog consume``: print a topic's records as text or JSON lines."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from seglog import Consumer, ConsumerRecord
from seglog_cli._common import (
    CliError, epilog, non_negative_int, parse_time_ms, record_to_json, security_of, server_of,
    text_of,
)

__all__ = ["add_parser"]

# How long one poll waits before the loop checks whether the end was reached.
POLL_TIMEOUT_MS = 500


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "consume",
        parents=parents,
        help="print records from an offset, a time, the beginning or the end",
        description=(
            "Print a topic's records, one per line. Without --follow, reads up to the end offsets "
            "found at start and exits; with --follow, keeps printing new records until interrupted."
        ),
        epilog=epilog(
            """
            Text output prints each value (UTF-8; other bytes escaped, a null value as 'null');
            --print-* options add tab-separated columns in the order partition, offset,
            timestamp, key, headers, value. JSON output has one object per line:
            {"topic","partition","offset","timestamp_ms","key","value","headers"}; keys and values
            that are not UTF-8 appear as key_base64 / value_base64 instead.

            examples:
              seglog consume events --partition 0 --from-beginning --max-records 2
              seglog consume events --from-beginning --format json
              seglog consume events --offset 1200 --partition 2 --print-offset --print-key
              seglog consume events --from-timestamp 2026-11-22T10:00:00Z
              seglog consume events --from-timestamp now-15m --follow        # last 15 minutes, then tail
              seglog consume events --from-end --follow --mode stream     # only new records
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topic", help="topic to read")
    parser.add_argument(
        "--partition", type=non_negative_int, action="append", metavar="N", help="partition to read (repeatable; default: all)"
    )
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--offset", type=non_negative_int, metavar="N", help="start at this offset")
    start.add_argument(
        "--from-timestamp", type=parse_time_ms, metavar="TIME",
        help="start at the first record at or after TIME: ms since the epoch, an ISO time "
        "(UTC unless it has an offset), or relative like now-15m / now-2h / now-1d",
    )
    start.add_argument("--from-beginning", action="store_true", help="start at the log start offset (the default)")
    start.add_argument("--from-end", action="store_true", help="start at the log end: only records appended later")
    parser.add_argument("--max-records", type=non_negative_int, metavar="N", help="stop after N records")
    parser.add_argument("--follow", "-f", action="store_true", help="keep waiting for new records (Ctrl-C stops)")
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    parser.add_argument(
        "--mode", choices=["fetch", "stream"], default="fetch",
        help="long-poll Fetch requests (default) or one streaming Consume call per partition",
    )
    for column in ("partition", "offset", "timestamp", "key", "headers"):
        parser.add_argument(f"--print-{column}", action="store_true", help=f"text output: add the {column}")
    parser.set_defaults(run=_run)


def _start_of(args: argparse.Namespace) -> int | str:
    if args.offset is not None:
        return int(args.offset)
    if args.from_end:
        return "latest"
    return "earliest"  # --from-beginning, and --from-timestamp seeks after opening


def _format(args: argparse.Namespace, record: ConsumerRecord) -> str:
    if args.format == "json":
        return record_to_json(record)
    columns = []
    if args.print_partition:
        columns.append(str(record.partition))
    if args.print_offset:
        columns.append(str(record.offset))
    if args.print_timestamp:
        columns.append(str(record.timestamp_ms))
    if args.print_key:
        columns.append(text_of(record.key))
    if args.print_headers:
        columns.append(",".join(f"{k}={text_of(v)}" for k, v in record.headers))
    columns.append(text_of(record.value))
    return "\t".join(columns)


def _reached(consumer: Consumer, ends: dict[int, int]) -> bool:
    return all(consumer.position(p) >= end for p, end in ends.items())


@contextmanager
def _interrupt_after_block() -> Iterator[None]:
    """Hold a Ctrl-C that arrives inside the block until it ends, so a record is never printed
    without being counted (or counted without being printed). Where SIGINT is ignored (a
    background job of a non-interactive shell), it stays ignored."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return
    pending: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pending:
        raise KeyboardInterrupt


def _past_end(consumer: Consumer, offset: int) -> dict[int, int]:
    """The partitions whose log end offset is below ``offset``, with those ends."""
    return {p: end for p, end in sorted(consumer.end_offsets().items()) if end < offset}


def _wait_for_offset(consumer: Consumer, args: argparse.Namespace) -> None:
    """--offset past a partition's end: an error without --follow (there is nothing to print, and
    silence would look like an empty topic); with --follow, wait until every partition has
    reached it, saying so once on stderr."""
    past = _past_end(consumer, args.offset)
    if not past:
        return
    where = ", ".join(f"partition {p} ends at {end}" for p, end in past.items())
    if not args.follow:
        raise CliError(
            f"--offset {args.offset} is past the log end of {args.topic} ({where}): nothing to read; "
            f"add --follow to wait for offset {args.offset}"
        )
    print(f"waiting for {args.topic} to reach offset {args.offset} ({where})", file=sys.stderr)
    while past:
        time.sleep(POLL_TIMEOUT_MS / 1000)
        past = _past_end(consumer, args.offset)


def _run(args: argparse.Namespace) -> int:
    if args.max_records is not None and args.max_records <= 0:
        return 0
    count = 0
    out = sys.stdout
    with Consumer(
        server_of(args), args.topic, args.partition, start=_start_of(args), mode=args.mode,
        **security_of(args),
    ) as consumer:
        if args.from_timestamp is not None:
            consumer.seek_to_timestamp(args.from_timestamp)
        ends = None if args.follow else consumer.end_offsets()
        try:
            if args.offset is not None:
                _wait_for_offset(consumer, args)
            while ends is None or not _reached(consumer, ends):
                remaining = None if args.max_records is None else args.max_records - count
                records = consumer.poll(POLL_TIMEOUT_MS, max_records=remaining)
                with _interrupt_after_block():
                    for record in records:
                        out.write(_format(args, record) + "\n")
                        count += 1
                    out.flush()
                if args.max_records is not None and count >= args.max_records:
                    break
        except KeyboardInterrupt:
            if not args.follow:
                raise
    if args.follow:
        print(f"processed {count} record{'s' * (count != 1)}", file=sys.stderr)
    return 0
