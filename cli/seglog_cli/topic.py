"""``seglog topic create|list|describe|alter-config|delete``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from seglog import Admin, TopicExistsError, TopicNotFoundError
from seglog_cli._common import epilog, parse_key_value, positive_int, security_of, server_of

__all__ = ["add_parser"]

Parents = list[argparse.ArgumentParser]


def add_parser(commands: Any, parents: Parents) -> None:
    parser = commands.add_parser(
        "topic",
        help="create, list, describe, reconfigure and delete topics",
        description="Manage topics.",
        epilog=epilog(
            """
            examples:
              seglog topic create events --partitions 3 --config retention.ms=86400000
              seglog topic list
              seglog topic describe events
              seglog topic alter-config events --set retention.ms=3600000 --delete segment.bytes
              seglog topic delete events
            """
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    _add_create(actions, parents)
    _add_list(actions, parents)
    _add_describe(actions, parents)
    _add_alter_config(actions, parents)
    _add_delete(actions, parents)


def _subparser(actions: Any, name: str, parents: Parents, help: str, examples: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = actions.add_parser(
        name,
        parents=parents,
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog=epilog(examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


def _add_create(actions: Any, parents: Parents) -> None:
    parser = _subparser(
        actions,
        "create",
        parents,
        "create a topic",
        """
        Configs use Kafka's topic config names; unset names take the service defaults and the
        reply lists every effective value.

        examples:
          seglog topic create events
          seglog topic create events --partitions 3 --config retention.ms=86400000
          seglog topic create compacted --config cleanup.policy=compact --config segment.bytes=1048576
          seglog topic create events --partitions 3 --validate-only     # check, create nothing
          seglog topic create events --if-not-exists                   # exit 0 if it exists
        """,
    )
    parser.add_argument("name", help="topic name: 1-249 characters from [a-zA-Z0-9._-]")
    parser.add_argument("--partitions", type=positive_int, default=1, metavar="N", help="partition count (default: 1)")
    parser.add_argument(
        "--config",
        type=parse_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config, e.g. retention.ms=86400000 (repeatable)",
    )
    parser.add_argument("--validate-only", action="store_true", help="check the request without creating the topic")
    parser.add_argument("--if-not-exists", action="store_true", help="succeed quietly when the topic exists")
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    parser.set_defaults(run=_create)


def _add_list(actions: Any, parents: Parents) -> None:
    parser = _subparser(
        actions,
        "list",
        parents,
        "list topics with their partition counts",
        """
        examples:
          seglog topic list
          seglog topic list --format json
          seglog --server 10.0.0.5:50551 topic list
        """,
    )
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    parser.set_defaults(run=_list)


def _add_describe(actions: Any, parents: Parents) -> None:
    parser = _subparser(
        actions,
        "describe",
        parents,
        "show a topic's configs and its partitions' offsets and sizes",
        """
        examples:
          seglog topic describe events
          seglog topic describe events --format json | jq '.partitions[].log_end_offset'
        """,
    )
    parser.add_argument("name", help="topic name")
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    parser.set_defaults(run=_describe)


def _add_alter_config(actions: Any, parents: Parents) -> None:
    parser = _subparser(
        actions,
        "alter-config",
        parents,
        "change a topic's configs after creation",
        """
        As Kafka's kafka-configs.sh --alter: --set gives a config a value, --delete returns it to
        the service default. Each rule takes the new value when it next runs (retention at its
        next pass, segment.bytes at the next roll, cleanup.policy at the next cleaner listing).

        examples:
          seglog topic alter-config events --set retention.ms=3600000
          seglog topic alter-config events --set cleanup.policy=compact --delete segment.bytes
          seglog topic alter-config events --set retention.ms=1000 --dry-run     # check, change nothing
        """,
    )
    parser.add_argument("name", help="topic name")
    parser.add_argument(
        "--set", dest="set_configs", type=parse_key_value, action="append", default=[], metavar="KEY=VALUE",
        help="give a config a value, e.g. retention.ms=3600000 (repeatable)",
    )
    parser.add_argument(
        "--delete", dest="delete_configs", action="append", default=[], metavar="KEY",
        help="return a config to the service default (repeatable)",
    )
    parser.add_argument("--dry-run", action="store_true", help="check the change and show its result, change nothing")
    parser.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    parser.set_defaults(run=_alter_config)


def _add_delete(actions: Any, parents: Parents) -> None:
    parser = _subparser(
        actions,
        "delete",
        parents,
        "delete a topic and all its data",
        """
        examples:
          seglog topic delete events
          seglog topic delete events --if-exists     # exit 0 if there is no such topic
        """,
    )
    parser.add_argument("name", help="topic name")
    parser.add_argument("--if-exists", action="store_true", help="succeed quietly when the topic does not exist")
    parser.set_defaults(run=_delete)


def _with_admin(args: argparse.Namespace, action: Callable[[Admin], int]) -> int:
    with Admin(server_of(args), **security_of(args)) as admin:
        return action(admin)


def _create(args: argparse.Namespace) -> int:
    def action(admin: Admin) -> int:
        try:
            info = admin.create_topic(args.name, args.partitions, dict(args.config), validate_only=args.validate_only)
        except TopicExistsError:
            if not args.if_not_exists:
                raise
            print(f"topic {args.name} already exists")
            return 0
        if args.format == "json":
            print(json.dumps(asdict(info), sort_keys=True))
        elif args.validate_only:
            print(f"topic {info.topic} with {info.partitions} partitions is valid (nothing created)")
        else:
            print(f"created topic {info.topic} with {info.partitions} partitions")
        return 0

    return _with_admin(args, action)


def _list(args: argparse.Namespace) -> int:
    def action(admin: Admin) -> int:
        topics = admin.list_topics()
        if args.format == "json":
            print(json.dumps([{"topic": t.topic, "partitions": t.partitions} for t in topics]))
        else:
            for t in topics:
                print(f"{t.topic}\t{t.partitions}")
        return 0

    return _with_admin(args, action)


def _describe(args: argparse.Namespace) -> int:
    def action(admin: Admin) -> int:
        description = admin.describe_topic(args.name)
        if args.format == "json":
            print(json.dumps(asdict(description), sort_keys=True, default=dict))
            return 0
        print(f"topic: {description.topic}   partitions: {description.partition_count}")
        print("configs:")
        for key, value in sorted(description.configs.items()):
            print(f"  {key}={value}")
        rows = [["PARTITION", "LOG_START", "LOCAL_START", "LOG_END", "HIGH_WATERMARK", "LOCAL_SEGMENTS",
                 "LOCAL_BYTES", "REMOTE_SEGMENTS", "REMOTE_BYTES", "LOG_DIR"]]
        rows += [
            [str(p.partition), str(p.log_start_offset), str(p.local_log_start_offset), str(p.log_end_offset),
             str(p.high_watermark), str(p.segment_count), str(p.size_bytes), str(p.remote_segment_count),
             str(p.remote_size_bytes), p.log_dir]
            for p in description.partitions
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        return 0

    return _with_admin(args, action)


def _alter_config(args: argparse.Namespace) -> int:
    if not args.set_configs and not args.delete_configs:
        raise ValueError("topic alter-config: nothing to change: give --set KEY=VALUE or --delete KEY")

    def action(admin: Admin) -> int:
        before = admin.describe_topic(args.name).configs
        configs = admin.alter_topic_configs(
            args.name, dict(args.set_configs), args.delete_configs, validate_only=args.dry_run)
        if args.format == "json":
            print(json.dumps({"topic": args.name, "configs": configs, "dry_run": args.dry_run}, sort_keys=True))
            return 0
        changed = {key: value for key, value in sorted(configs.items()) if before.get(key) != value}
        verb = "would change" if args.dry_run else "changed"
        print(f"topic {args.name}: {verb} {len(changed)} configs" + (" (nothing changed)" if args.dry_run else ""))
        for key, value in changed.items():
            print(f"  {key}: {before.get(key, '')} -> {value}")
        return 0

    return _with_admin(args, action)


def _delete(args: argparse.Namespace) -> int:
    def action(admin: Admin) -> int:
        try:
            admin.delete_topic(args.name)
        except TopicNotFoundError:
            if not args.if_exists:
                raise
            print(f"topic {args.name} does not exist")
            return 0
        print(f"deleted topic {args.name}")
        return 0

    return _with_admin(args, action)
