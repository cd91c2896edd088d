"""``seglog cluster status`` and ``seglog cluster rebalance``: the cluster as an operator reads it,
and moves that even out the partitions over the live instances (docs/cluster.md)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seglog import Admin
from seglog_cli._common import CliError, epilog, security_of, server_of

__all__ = ["PlannedMove", "add_parser", "plan_rebalance"]


@dataclass(frozen=True)
class PlannedMove:
    topic: str
    partition: int
    from_instance: str
    to_instance: str


def plan_rebalance(owners: Mapping[tuple[str, int], str], live: Sequence[str],
                   pinned: frozenset[tuple[str, int]] = frozenset()) -> list[PlannedMove]:
    """Moves that leave the live instances' partition counts at most one apart: each step moves a
    partition from the instance with the most (ties: the greatest id) to the one with the fewest
    (ties: the least id), the greatest partition not moved yet and not ``pinned`` (a move in
    progress). Partitions of dead instances stay where they are (only an unclean takeover moves
    them) and count for nobody. Deterministic; each partition moves at most once."""
    load: dict[str, list[tuple[str, int]]] = {instance: [] for instance in sorted(set(live))}
    for tp, owner in sorted(owners.items()):
        if owner in load:
            load[owner].append(tp)
    plan: list[PlannedMove] = []
    moved: set[tuple[str, int]] = set()
    while len(load) > 1:
        most = max(load, key=lambda i: (len(load[i]), i))
        least = min(load, key=lambda i: (len(load[i]), i))
        if len(load[most]) - len(load[least]) <= 1:
            break
        movable = [tp for tp in load[most] if tp not in moved and tp not in pinned]
        if not movable:
            break  # the rest is pinned or already moved once: as even as this plan gets
        tp = movable[-1]
        load[most].remove(tp)
        load[least].append(tp)
        moved.add(tp)
        plan.append(PlannedMove(tp[0], tp[1], most, least))
    return plan


def add_parser(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser("cluster", help="the instances of a cluster: status, rebalance")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    status = actions.add_parser(
        "status", parents=parents, help="instances, partitions and bytes each, offline partitions, moves",
        description=("The cluster as the instance asked sees it in etcd: each instance (alive or since when "
                     "gone) with the partitions it owns and their bytes, the partitions whose owner is gone "
                     "(offline until it returns), and the moves in progress."),
        epilog=epilog("""
            examples:
              seglog cluster status --server a:50551
              seglog cluster status --format json
            """),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    status.add_argument("--format", choices=["text", "json"], default="text", help="output format (default: text)")
    status.set_defaults(run=_run_status)
    rebalance = actions.add_parser(
        "rebalance", parents=parents, help="move partitions so that the live instances own as many each",
        description=("Plan moves that leave the live instances' partition counts at most one apart (after an "
                     "instance is added, say) and run them one at a time, each as `seglog partition move` "
                     "would. Partitions of a dead instance and partitions being moved stay where they are. "
                     "--dry-run prints the plan only."),
        epilog=epilog("""
            examples:
              seglog cluster rebalance --dry-run
              seglog cluster rebalance
            """),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    rebalance.add_argument("--dry-run", action="store_true", help="print the planned moves, run none")
    rebalance.set_defaults(run=_run_rebalance)


def _run_status(args: argparse.Namespace) -> int:
    with Admin(server_of(args), **security_of(args)) as admin:
        status = admin.cluster_status()
    if args.format == "json":
        print(json.dumps({
            "cluster": status.cluster_name, "answered_by": status.instance_id, "current": status.current,
            "instances": [_fields(i) for i in status.instances],
            "offline_partitions": [_fields(o) for o in status.offline_partitions],
            "moves": [_fields(m) for m in status.moves]}))
        return 0
    view = "" if status.current else " (NOT CURRENT: it cannot reach etcd)"
    print(f"cluster {status.cluster_name}, as instance {status.instance_id} sees it{view}")
    rows = [("INSTANCE", "ADDRESS", "ALIVE", "PARTITIONS", "BYTES")]
    for i in status.instances:
        alive = "yes" if i.alive else "gone" + (f" since {_utc(i.gone_since_ms)}" if i.gone_since_ms else "")
        rows.append((i.instance_id, i.address or "-", alive, str(i.partition_count), str(i.bytes)))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    print(f"offline partitions: {len(status.offline_partitions) or 'none'}")
    for o in status.offline_partitions:
        print(f"  {o.topic}:{o.partition} owner {o.owner_id} gone" + (f" since {_utc(o.gone_since_ms)}"
                                                                         if o.gone_since_ms else ""))
    print(f"moves in progress: {len(status.moves) or 'none'}")
    for m in status.moves:
        print(f"  {m.topic}:{m.partition} {m.from_instance} -> {m.to_instance} ({m.state}, since {_utc(m.started_ms)})")
    return 0


def _run_rebalance(args: argparse.Namespace) -> int:
    with Admin(server_of(args), **security_of(args)) as admin:
        metadata = admin.metadata()
        if not metadata.cluster_mode:
            raise CliError("not a cluster (the service runs without --etcd): nothing to rebalance")
        status = admin.cluster_status()
        live = [i.instance_id for i in status.instances if i.alive]
        owners = {(p.topic, p.partition): p.owner_id for p in metadata.partitions}
        pinned = frozenset((m.topic, m.partition) for m in status.moves)
        plan = plan_rebalance(owners, live, pinned)
        if not plan:
            print("balanced: no move needed")
            return 0
        for step in plan:
            print(f"{'would move' if args.dry_run else 'moving'} {step.topic}:{step.partition} "
                  f"{step.from_instance} -> {step.to_instance}", flush=True)
            if args.dry_run:
                continue
            move = admin.move_partition(step.topic, step.partition, step.to_instance,
                                        from_instance=step.from_instance)
            print(f"  moved at epoch {move.epoch}: {move.bytes_copied} bytes in {move.elapsed_ms} ms", flush=True)
    print(f"{len(plan)} move(s) {'planned' if args.dry_run else 'done'}")
    return 0


def _fields(item: Any) -> dict[str, Any]:
    return dict(vars(item))


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
