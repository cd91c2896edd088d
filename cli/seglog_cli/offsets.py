"""``seglog offsets``: earliest, latest, max-timestamp or by-time offsets of a topic's partitions."""

from __future__ import annotations

import argparse
import json
from typing import Any

from seglog import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP, Admin, TopicPartition
from seglog_cli._common import epilog, non_negative_int, parse_time_ms, security_of, server_of

__all__ = ["add_parser"]


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "offsets",
        parents=parents,
        help="look up offsets: earliest, latest, max timestamp, or the first at a time",
        description=(
            "Print one line per partition, labelled: 'TOPIC:PARTITION end offset N' (--latest, "
            "the default), 'start offset N' (--earliest), 'offset N timestamp_ms T' (--time, "
            "--max-timestamp), or 'offset none' and why when no record has a timestamp at or after "
            "--time (or the partition is empty, for --max-timestamp). --format json prints the "
            "same as one object a line."
        ),
        epilog=epilog(
            """
            examples:
              seglog offsets events                          # log end offsets (the default)
              seglog offsets events --partition 0 --earliest
              seglog offsets events --time 2026-11-22T10:00:00Z
              seglog offsets events --time now-1h --format json
              seglog offsets events --max-timestamp
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topic", help="topic")
    parser.add_argument("--partition", type=non_negative_int, action="append", metavar="N", help="partition (repeatable; default: all)")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--earliest", action="store_const", dest="target", const=EARLIEST_TIMESTAMP, help="log start offsets")
    target.add_argument(
        "--latest", action="store_const", dest="target", const=LATEST_TIMESTAMP, help="log end offsets (the default)"
    )
    target.add_argument(
        "--max-timestamp", action="store_const", dest="target", const=MAX_TIMESTAMP,
        help="the record with the largest timestamp",
    )
    target.add_argument(
        "--time", type=parse_time_ms, dest="time", metavar="TIME",
        help="first record at or after TIME: ms since the epoch, an ISO time (UTC unless it has an "
        "offset), or relative like now-15m",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    parser.set_defaults(run=_run, target=LATEST_TIMESTAMP)


def _run(args: argparse.Namespace) -> int:
    target = args.time if args.time is not None else args.target
    with_timestamp = args.time is not None or target == MAX_TIMESTAMP
    with Admin(server_of(args), **security_of(args)) as admin:
        partitions = args.partition
        if partitions is None:
            partitions = [p.partition for p in admin.describe_topic(args.topic).partitions]
        found = admin.offsets_for_times({TopicPartition(args.topic, p): target for p in partitions})
    for tp, hit in sorted(found.items()):
        if args.format == "json":
            row = {"topic": tp.topic, "partition": tp.partition, "offset": hit.offset if hit else None}
            if with_timestamp:
                row["timestamp_ms"] = hit.timestamp_ms if hit else None
            print(json.dumps(row))
        else:
            print(f"{tp.topic}:{tp.partition} {_labelled(target, hit, with_timestamp)}")
    return 0


def _labelled(target: int, hit: Any, with_timestamp: bool) -> str:
    """What one partition's answer is, in words: which offset, and its timestamp where asked."""
    if hit is None:
        why = "the partition holds no records" if target == MAX_TIMESTAMP else "no record at or after the time"
        return f"offset none ({why})"
    if with_timestamp:
        return f"offset {hit.offset} timestamp_ms {hit.timestamp_ms}"
    return f"{'start' if target == EARLIEST_TIMESTAMP else 'end'} offset {hit.offset}"
