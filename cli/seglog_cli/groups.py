"""``seglog groups list|describe|delete|reset-offsets``: the consumer groups the service
coordinates, as Kafka's ``kafka-consumer-groups --list``, ``--describe``, ``--delete`` and
``--reset-offsets`` handle them."""

from __future__ import annotations

import argparse
import datetime
import json
from dataclasses import asdict
from typing import Any

from seglog import Admin
from seglog_cli._common import CliError, epilog, security_of, server_of

__all__ = ["add_parser"]

Parents = list[argparse.ArgumentParser]


def add_parser(commands: Any, parents: Parents) -> None:
    parser = commands.add_parser(
        "groups",
        help="list, describe, delete consumer groups and reset their offsets",
        description="Show consumer groups: their members, committed offsets and lag.",
        epilog=epilog(
            """
            examples:
              seglog groups list
              seglog groups describe billing
              seglog groups describe billing --format json | jq '[.partitions[].lag] | add'
              seglog groups delete billing
              seglog groups reset-offsets billing --topic orders --to-earliest --execute
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
    delete = actions.add_parser(
        "delete", parents=parents, help="delete a group without members and its committed offsets",
        description="Delete a consumer group and its committed offsets. Only a group without members "
                    "(state Empty) is deleted: stop its consumers first, or wait for their sessions to time out.",
        epilog=epilog(
            """
            examples:
              seglog groups delete billing
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    delete.add_argument("group", help="group id")
    delete.set_defaults(run=_delete)
    reset = actions.add_parser(
        "reset-offsets", parents=parents, help="show or commit new offsets for a group without members",
        description="Reset a group's committed offsets on a topic's partitions, as kafka-consumer-groups "
                    "--reset-offsets: a dry run by default (prints the new offsets), --execute commits them. "
                    "Only for a group without members. Offsets are kept within [log start, log end].",
        epilog=epilog(
            """
            --to-datetime takes ISO 8601 (2024-05-01T12:00:00, 2024-05-01T12:00:00+02:00; local
            time without an offset): the first offset at or after it, the log end when none.
            --shift-by moves each committed offset (negative: back).

            examples:
              seglog groups reset-offsets billing --topic orders --to-earliest
              seglog groups reset-offsets billing --topic orders --partition 0 --to-offset 42 --execute
              seglog groups reset-offsets billing --topic orders --to-datetime 2024-05-01T00:00:00 --execute
              seglog groups reset-offsets billing --topic orders --shift-by -100 --execute
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    reset.add_argument("group", help="group id")
    reset.add_argument("--topic", required=True, help="the topic whose offsets are reset")
    reset.add_argument("--partition", type=int, action="append", metavar="P",
                       help="a partition (repeat for several; default: every partition)")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument("--to-datetime", metavar="ISO", help="the first offset at or after the time")
    target.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only show them (the default)")
    reset.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    reset.set_defaults(run=_reset_offsets)


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
        _table([["MEMBER", "EPOCH", "CLIENT-ID", "HOST", "SUBSCRIBED", "ASSIGNMENT"]] + [
            [m.member_id, str(m.member_epoch), m.client_id or "-", m.host or "-", ",".join(m.subscribed_topics) or "-",
             ",".join(f"{tp.topic}-{tp.partition}" for tp in m.owned_partitions) or "-"]
            for m in description.members
        ])
    return 0


def _delete(args: argparse.Namespace) -> int:
    with Admin(server_of(args), **security_of(args)) as admin:
        deleted = admin.delete_group(args.group)
    print(f"deleted group {args.group} ({deleted} committed offsets)")
    return 0


def _reset_offsets(args: argparse.Namespace) -> int:
    target: dict[str, Any] = {}
    if args.to_earliest:
        target["to_earliest"] = True
    elif args.to_latest:
        target["to_latest"] = True
    elif args.to_offset is not None:
        target["to_offset"] = args.to_offset
    elif args.shift_by is not None:
        target["shift_by"] = args.shift_by
    else:
        target["to_datetime_ms"] = _epoch_ms(args.to_datetime)
    with Admin(server_of(args), **security_of(args)) as admin:
        state = admin.describe_group(args.group)
        if state.state not in ("Empty", "Dead"):
            raise CliError(f"offsets can only be reset if the group {args.group} is inactive, but its state is "
                           f"{state.state} ({len(state.members)} members): stop its consumers first")
        planned = admin.reset_offsets(args.group, args.topic, args.partition, execute=args.execute, **target)
    if args.format == "json":
        print(json.dumps({"executed": args.execute, "offsets": [
            {"topic": tp.topic, "partition": tp.partition, "offset": offset} for tp, offset in planned.items()]}))
        return 0
    _table([["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [
        [args.group, tp.topic, str(tp.partition), str(offset)] for tp, offset in planned.items()])
    if not args.execute:
        print("\ndry run: nothing committed (add --execute to commit these offsets)")
    return 0


def _epoch_ms(text: str) -> int:
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--to-datetime {text!r} is not an ISO 8601 time (e.g. 2024-05-01T12:00:00)") from None
    return int(moment.astimezone().timestamp() * 1000)  # naive: local time, as Kafka's tool


def _offset(value: int) -> str:
    return "-" if value < 0 else str(value)


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
