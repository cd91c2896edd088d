"""``seglog partition move``: move a partition to another instance of the cluster, or take a dead
owner's partition over uncleanly (docs/cluster.md, "Moving a partition")."""

from __future__ import annotations

import argparse
import json
from typing import Any

from seglog import Admin
from seglog_cli._common import CliError, epilog, non_negative_int, security_of, server_of

__all__ = ["add_parser"]


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("partition", help="move partitions between the instances of a cluster")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    move = actions.add_parser(
        "move",
        parents=parents,
        help="move a partition to another instance",
        description=(
            "Move TOPIC's PARTITION to instance --to: the target copies the owner's segments while "
            "produce goes on, then fences the owner for a short final catch-up and commits the new "
            "owner at the next epoch; nothing acknowledged is lost or duplicated. With --unclean, "
            "instance --to takes over a partition whose owner is DEAD (its lease gone): the "
            "partition starts empty past every offset the old owner could have acknowledged, and "
            "every record it held is lost to readers. --abort ends a move left in progress."
        ),
        epilog=epilog(
            """
            examples:
              seglog partition move events 3 --to b
              seglog partition move events 3 --to b --from a      # refused unless a owns it
              seglog partition move events 3 --to c --unclean     # its owner is dead: loses its records
              seglog partition move events 3 --abort
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    move.add_argument("topic", help="topic")
    move.add_argument("partition", type=non_negative_int, help="partition")
    target = move.add_mutually_exclusive_group(required=True)
    target.add_argument("--to", metavar="INSTANCE", help="the instance to move the partition to")
    target.add_argument("--abort", action="store_true", help="end a move in progress; the owner stays")
    move.add_argument("--from", dest="from_instance", metavar="INSTANCE",
                      help="refuse unless INSTANCE owns the partition now")
    move.add_argument("--unclean", action="store_true",
                      help="take over a dead owner's partition, losing its records (with --to)")
    move.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    move.set_defaults(run=_run_move)


def _run_move(args: argparse.Namespace) -> int:
    if args.unclean and args.from_instance:
        raise CliError("--unclean takes no --from: the takeover is of whichever dead instance owns it")
    if args.unclean and not args.to:
        raise CliError("--unclean needs --to INSTANCE: the instance that takes the partition over")
    with Admin(server_of(args), **security_of(args)) as admin:
        if args.abort:
            aborted = admin.abort_move(args.topic, args.partition)
            return _print(args, {"topic": args.topic, "partition": args.partition, "aborted": aborted},
                          f"{args.topic}:{args.partition} move " + ("aborted" if aborted else "not in progress"))
        if args.unclean:
            return _take_over(args, admin)
        move = admin.move_partition(args.topic, args.partition, args.to, from_instance=args.from_instance)
    fields = {"topic": move.topic, "partition": move.partition, "from": move.from_instance, "to": move.to_instance,
              "epoch": move.epoch, "log_start_offset": move.log_start_offset, "log_end_offset": move.log_end_offset,
              "bytes_copied": move.bytes_copied, "fenced_ms": move.fenced_ms, "elapsed_ms": move.elapsed_ms}
    return _print(args, fields, (
        f"{move.topic}:{move.partition} moved from {move.from_instance} to {move.to_instance} at epoch {move.epoch}: "
        f"offsets {move.log_start_offset}..{move.log_end_offset}, {move.bytes_copied} bytes copied in "
        f"{move.elapsed_ms} ms (produce fenced {move.fenced_ms} ms)"))


def _take_over(args: argparse.Namespace, admin: Admin) -> int:
    """Asked of the instance that takes the partition (its address from the cluster's metadata)."""
    instance = next((i for i in admin.metadata().instances if i.instance_id == args.to), None)
    if instance is None:
        raise CliError(f"instance {args.to!r} is not known to the cluster (`seglog cluster status` lists them)")
    with Admin(instance.address, **security_of(args)) as at_target:
        taken = at_target.take_over_partition(args.topic, args.partition, unclean=True)
    fields = {"topic": taken.topic, "partition": taken.partition, "from": taken.from_instance, "to": args.to,
              "epoch": taken.epoch, "start_offset": taken.start_offset}
    return _print(args, fields, (
        f"{taken.topic}:{taken.partition} taken over UNCLEANLY by {args.to} from {taken.from_instance} at epoch "
        f"{taken.epoch}: starts empty at offset {taken.start_offset}; the records {taken.from_instance} held are lost"))


def _print(args: argparse.Namespace, fields: dict[str, Any], text: str) -> int:
    print(json.dumps(fields) if args.format == "json" else text)
    return 0
