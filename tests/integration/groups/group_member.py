"""One member of a consumer group, run as its own process by the group tests: a ``GroupConsumer``
that reads its assignment and writes what it does to a journal the test reads afterwards.

Journal lines (one ``os.write`` of whole lines per step, so a kill -9 leaves only whole lines):

    M <member_id> <epoch>           after each poll, when the membership changed
    A <p,p,...>                     on_assign
    V <p,p,...>                     on_revoke
    R <p> <o>                       a record processed (written before the batch is committed)
    S <p> <o> [<p> <o> ...]         a commit about to be sent (the next offset per partition)
    K <p> <o> [<p> <o> ...]         that commit acknowledged
    E <ErrorClass>                  a poll or commit failed (the member carries on)
    Z <ErrorClass|ok> <p,p,...>     the commit after SIGCONT (--zombie): refused, or what it carried
    X                               closed gracefully (SIGTERM)

Processing commits explicitly after each poll's records (``--commit-every`` polls). Auto-commit
is on with an interval longer than any test, so the client's own commits are only the ones it
makes when a partition is revoked and on close: no record is handed over unprocessed or
processed twice except after a kill.
"""

from __future__ import annotations

import argparse
import os
import signal
import time

from seglog import GroupConsumer, TopicPartition

# Auto-commit on for the commit on revoke and close, but never on the clock within a test.
_NEVER_MS = 3_600_000


class Journal:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, *lines: str) -> None:
        if lines:
            os.write(self._fd, "".join(line + "\n" for line in lines).encode())


def _pairs(offsets: dict[TopicPartition, int]) -> str:
    return " ".join(f"{tp.partition} {o}" for tp, o in sorted(offsets.items()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--journal", required=True)
    parser.add_argument("--session-ms", type=int, required=True)
    parser.add_argument("--record-delay-ms", type=float, default=0.0, help="processing time per record")
    parser.add_argument("--max-records", type=int, default=20, help="records per poll")
    parser.add_argument("--commit-every", type=int, default=1, help="commit after every N polls with records")
    parser.add_argument("--zombie", action="store_true", help="commit at once after a SIGCONT, then go on")
    parser.add_argument("--instance-id", default=None, help="a static member's group.instance.id")
    args = parser.parse_args()
    journal = Journal(args.journal)
    stopping = []
    continued = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    if args.zombie:
        signal.signal(signal.SIGCONT, lambda *_: continued.append(True))

    def listing(partitions: list[TopicPartition]) -> str:
        return ",".join(str(tp.partition) for tp in partitions)

    consumer = GroupConsumer(
        args.server, group_id=args.group, topics=[args.topic], session_timeout_ms=args.session_ms,
        enable_auto_commit=True, auto_commit_interval_ms=_NEVER_MS, auto_offset_reset="earliest",
        group_instance_id=args.instance_id,
        on_assign=lambda tps: journal.write("A " + listing(tps)),
        on_revoke=lambda tps: journal.write("V " + listing(tps)),
    )
    membership = None
    polls = 0
    pending: dict[TopicPartition, int] = {}
    while not stopping:
        if continued:
            continued.clear()
            zombie_commit(consumer, journal)
        try:
            records = consumer.poll(100, args.max_records)
        except Exception as exc:  # noqa: BLE001 - a service restart, a fenced member: carry on
            journal.write(f"E {type(exc).__name__}")
            time.sleep(0.1)
            continue
        now = (consumer._async.member_id, consumer._async.member_epoch)
        if now != membership:
            membership = now
            journal.write(f"M {now[0]} {now[1]}")
        if not records:
            continue
        if args.record_delay_ms:
            time.sleep(args.record_delay_ms * len(records) / 1000)
        journal.write(*(f"R {r.partition} {r.offset}" for r in records))
        for record in records:
            pending[TopicPartition(record.topic, record.partition)] = record.offset + 1
        polls += 1
        if polls % args.commit_every == 0:
            commit(consumer, journal, pending)
    consumer.close()
    journal.write("X")


def commit(consumer: GroupConsumer, journal: Journal, pending: dict[TopicPartition, int]) -> None:
    # Only partitions still owned: one revoked meanwhile was committed on its revocation, and its
    # new owner may have committed past it since.
    owned = set(consumer.assignment())
    offsets = {tp: offset for tp, offset in pending.items() if tp in owned}
    pending.clear()
    if not offsets:
        return
    journal.write("S " + _pairs(offsets))
    try:
        consumer.commit(offsets)
    except Exception as exc:  # noqa: BLE001 - logged; the next commit carries the offsets again
        journal.write(f"E {type(exc).__name__}")
        pending.update(offsets)  # carried by the next commit
        return
    journal.write("K " + _pairs(offsets))


def zombie_commit(consumer: GroupConsumer, journal: Journal) -> None:
    """The first thing after a SIGCONT: commit the positions of what the member believes it owns."""
    owned = consumer.assignment()
    try:
        consumer.commit()
    except Exception as exc:  # noqa: BLE001 - the refusal is what the test looks for
        journal.write(f"Z {type(exc).__name__} " + ",".join(str(tp.partition) for tp in owned))
        return
    journal.write("Z ok " + ",".join(str(tp.partition) for tp in consumer.assignment()))


if __name__ == "__main__":
    main()
