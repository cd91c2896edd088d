"""``seglog delete-records``: move partitions' log start offsets forward (Kafka's DeleteRecords)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from seglog import Admin, TopicPartition
from seglog_cli._common import epilog, non_negative_int, security_of, server_of

__all__ = ["DELETE_ALL", "add_parser"]

# DeleteRecords' sentinel for "up to the high watermark": every record stored so far.
DELETE_ALL = -1


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "delete-records",
        parents=parents,
        help="delete a partition's records below an offset (moves the log start offset)",
        description=(
            "Delete every record below --before (or all records stored so far, with --all) in the "
            "chosen partitions, as Kafka's DeleteRecords does: the log start offset moves up, "
            "reads below it answer OUT_OF_RANGE, and whole segments below it are removed by the "
            "next retention pass. Offsets are never reused. Prints 'TOPIC:PARTITION log start offset N' "
            "for each partition (--format json: one object a line)."
        ),
        epilog=epilog(
            """
            examples:
              seglog delete-records events --partition 0 --before 1200
              seglog delete-records events --before 1200              # every partition
              seglog delete-records events --partition 2 --all        # everything stored so far
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topic", help="topic")
    parser.add_argument(
        "--partition", type=non_negative_int, action="append", metavar="N", help="partition (repeatable; default: all)"
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--before", type=non_negative_int, metavar="OFFSET", help="delete records below OFFSET")
    target.add_argument("--all", action="store_true", help="delete every record up to the high watermark")
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    offset = DELETE_ALL if args.all else args.before
    with Admin(server_of(args), **security_of(args)) as admin:
        partitions = args.partition
        if partitions is None:
            partitions = [p.partition for p in admin.describe_topic(args.topic).partitions]
        starts = admin.delete_records({TopicPartition(args.topic, p): offset for p in partitions})
    for tp, start in sorted(starts.items()):
        if args.format == "json":
            print(json.dumps({"topic": tp.topic, "partition": tp.partition, "log_start_offset": start}))
        else:
            print(f"{tp.topic}:{tp.partition} log start offset {start}")
    return 0
