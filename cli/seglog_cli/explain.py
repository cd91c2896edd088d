"""``seglog explain``: the lookup path of one offset or timestamp, as the service walks it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from google.protobuf import json_format

from seglog import Admin
from seglog_cli._common import epilog, non_negative_int, parse_time_ms, security_of, server_of

__all__ = ["add_parser"]


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "explain",
        parents=parents,
        help="show how the service finds an offset or a time: segment, index zone, pages, scan",
        description=(
            "Ask the service (ExplainLookup) how it finds one offset (the path of a Fetch) or one "
            "time (the path of OffsetsForTimes): the segment the segment map chose, each index "
            "searched with its zone (warm: the newest 8 KiB of entries; cold: the rest; none: no "
            "section searched, the index empty or the target below its first entry), the slots "
            "probed, the index pages touched and whether they were in the page cache, the bytes "
            "scanned in the log after the index hit, and the time taken."
        ),
        epilog=epilog(
            """
            examples:
              seglog explain events --partition 0 --offset 0
              seglog explain events --partition 0 --time now-1h --format json
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topic", help="topic")
    parser.add_argument("--partition", type=non_negative_int, default=0, metavar="N", help="partition (default 0)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--offset", type=non_negative_int, metavar="O", help="a record offset (>= 0)")
    target.add_argument(
        "--time", type=parse_time_ms, dest="time", metavar="TIME",
        help="ms since the epoch, an ISO time, or relative like now-15m",
    )
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    parser.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    with Admin(server_of(args), **security_of(args)) as admin:
        response = admin.explain_lookup(
            args.topic, args.partition, offset=args.offset, timestamp_ms=args.time
        )
    if args.format == "json":
        answer = json_format.MessageToDict(
            response, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        )
        for search in answer.get("searches", ()):
            search.pop("path", None)  # the service's file system is not the caller's business
        print(json.dumps(answer))
        return 0
    for line in _text_lines(args, response):
        print(line)
    return 0


def _text_lines(args: argparse.Namespace, response: Any) -> list[str]:
    target = f"offset {args.offset}" if args.offset is not None else f"time {args.time}"
    lines = [f"{args.topic}-{args.partition} {target}"]
    if response.segment_base_offset < 0:
        lines.append(f"segment map: {response.segment_count} segments, no segment holds it")
    elif response.remote_segment_id:
        lines.append(
            f"below the local log start: {response.segment_count} remote segments -> segment "
            f"{response.segment_base_offset} in the object store ({response.remote_segment_id}), "
            "its .index read whole"
        )
    else:
        lines.append(
            f"segment map: {response.segment_count} segments -> segment {response.segment_base_offset}"
        )
    for search in response.searches:
        resident = sum(search.pages_resident)
        lines.append(
            f"{search.index} index: {search.entry_count} entries, zone {search.zone}, slot "
            f"{search.slot}, probed slots {list(search.probed_slots)}, pages {list(search.pages)} "
            f"({resident}/{len(search.pages)} resident)"
        )
    if response.segment_base_offset >= 0:
        # For an offset the service answers the base offset of the batch that holds it (a Fetch
        # starts there); for a time, the offset of the first record at or after it.
        found = (f"batch at offset {response.found_offset} holding the target" if args.offset is not None
                 else f"record at offset {response.found_offset}, the first at or after the time")
        lines.append(
            f"log scan: from position {response.index_position} to {response.found_position} "
            f"({response.scanned_bytes} bytes scanned) -> {found}"
        )
    lines.append(f"time: {response.duration_us} us")
    return lines
