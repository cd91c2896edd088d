"""``seglog groups list|describe``: the consumer groups the service coordinates, as Kafka's
``kafka-consumer-groups --list`` and ``--describe`` show them."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from seglog import Admin
from seglog_cli._common import epilog, security_of, server_of

__all__ = ["add_parser"]

Parents = list[argparse.ArgumentParser]


def add_parser(commands: Any, parents: Parents) -> None:
    parser = commands.add_parser(
        "groups",
        help="list and describe consumer groups",
        description="Show consumer groups: their members, committed offsets and lag.",
        epilog=epilog(
            """
            examples:
              seglog groups list
              seglog groups describe billing
              seglog groups describe billing --format json | jq '[.partitions[].lag] | add'
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", parents=parents, help="list the groups with their state and member count",
        description="List the consumer groups (those with members or committed offsets).",
        epilog=epilog(
            """
            examples:
              seglog groups list
              seglog groups list --format json
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    listing.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    listing.set_defaults(run=_list)
    describe = actions.add_parser(
        "describe", parents=parents, help="show a group's members, committed offsets and lag",
        description="Show a group's members (id, epoch, owned partitions) and, per partition, the "
                    "committed offset, the log end offset and the lag (log end minus committed).",
        epilog=epilog(
            """
            A "-" is an offset the group has not committed (its lag is unknown).

            examples:
              seglog groups describe billing
              seglog groups describe billing --format json
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    describe.add_argument("group", help="group id")
    describe.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    describe.set_defaults(run=_describe)


def _list(args: argparse.Namespace) -> int:
    with Admin(server_of(args), **security_of(args)) as admin:
        groups = admin.list_groups()
    if args.format == "json":
        print(json.dumps([asdict(g) for g in groups]))
    else:
        _table([["GROUP", "STATE", "MEMBERS"]] + [[g.group, g.state, str(g.member_count)] for g in groups])
    return 0


def _describe(args: argparse.Namespace) -> int:
    with Admin(server_of(args), **security_of(args)) as admin:
        description = admin.describe_group(args.group)
    if args.format == "json":
        print(json.dumps(asdict(description), sort_keys=True))
        return 0
    print(f"group: {description.group}   state: {description.state}   epoch: {description.group_epoch}"
          f"   members: {len(description.members)}")
    if description.state == "Dead":
        print(f"group {description.group} has no members and no committed offsets")
        return 0
    _table([["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER"]] + [
        [p.topic, str(p.partition), _offset(p.committed_offset), _offset(p.log_end_offset), _offset(p.lag),
         p.member_id or "-"]
        for p in description.partitions
    ])
    if description.members:
        print()
        _table([["MEMBER", "EPOCH", "SUBSCRIBED", "ASSIGNMENT"]] + [
            [m.member_id, str(m.member_epoch), ",".join(m.subscribed_topics) or "-",
             ",".join(f"{tp.topic}-{tp.partition}" for tp in m.owned_partitions) or "-"]
            for m in description.members
        ])
    return 0


def _offset(value: int) -> str:
    return "-" if value < 0 else str(value)


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
