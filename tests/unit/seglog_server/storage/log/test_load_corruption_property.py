"""Corruption on disk, chosen by Hypothesis (seeded): torn writes, appended garbage and bit flips
at random positions in ``.log``, ``.index``, ``.timeindex`` and the checkpoint files, after clean
and unclean stops. Whatever the damage, the log manager starts, every other partition serves in
full, the damaged partition serves everything stored before the damaged position and every
record of the segments after the damaged one (or is offline alone), never hands out an offset a valid batch in its files already holds, and keeps what is
acknowledged after the damage across the next restart.

A bit flip in an old closed segment's record bytes after a clean stop is not found at load (the
CRC is checked when the batch is read); the property then asks only that nothing before it is
lost and that the other partitions serve.

Every case replays from its drawn ``Damage``: the appended bytes are drawn (they came from
``os.urandom``), and so is whether the rolls' flushes were checkpointed before a kill (it was
left to the background flush thread's timing).

The fast run tries ``FAST_EXAMPLES`` cases; ``-m slow`` runs ``SLOW_EXAMPLES``.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, example, given, seed, settings
from hypothesis import strategies as st
from tests.support.fault_fs import NoSyncFs
from tests.support.load_fault_support import (
    append_bytes,
    batch_ranges,
    flip_bit,
    produce,
    read_values,
    segment_files,
    start,
    truncate_by,
    value,
)

from seglog.records import iter_batches
from seglog_server.storage.format.abstract_index import RELATIVE_OFFSET_MAX
from seglog_server.storage.base.errors import LogDirOfflineError

FAST_EXAMPLES = 30
SLOW_EXAMPLES = 200
RECORD_COUNT = 600
CONFIG = {"segment.bytes": "8192", "index.interval.bytes": "256"}
TARGETS = ("log", "index", "timeindex", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint")
DAMAGES = ("truncate", "garbage", "flip")
# (target, damage, stop, how the load handled it) -> cases; printed at the end with -s.
OUTCOMES: Counter[tuple[str, str, str, str]] = Counter()


@dataclass(frozen=True)
class Damage:
    target: str
    kind: str
    segment_pick: int  # which segment's file (modulo the segment count)
    amount: int  # bytes cut
    garbage: bytes  # bytes appended (drawn, so every case replays and shrinks)
    position_pick: int  # where a bit flips (modulo the file size)
    bit: int
    clean_stop: bool
    # After a kill: whether the rolls' flushes were done and checkpointed before it (recovery
    # from the active segment) or the last checkpoint predates every roll (recovery of every
    # segment). Drawn, not left to the background flush thread's timing, so the case replays.
    rolls_flushed: bool


damages = st.builds(
    Damage,
    target=st.sampled_from(TARGETS),
    kind=st.sampled_from(DAMAGES),
    segment_pick=st.integers(0, 1000),
    amount=st.integers(1, 3000),
    garbage=st.binary(min_size=1, max_size=3000),
    position_pick=st.integers(0, 10**9),
    bit=st.integers(0, 7),
    clean_stop=st.booleans(),
    rolls_flushed=st.booleans(),
)


def _damage(path: str, damage: Damage) -> int:
    """Damages ``path``; returns the first byte position whose contents changed."""
    size = os.path.getsize(path)
    if damage.kind == "truncate":
        truncate_by(path, damage.amount)
        return max(0, size - damage.amount)
    if damage.kind == "garbage":
        append_bytes(path, damage.garbage)
        return size
    if size == 0:
        return 0
    position = damage.position_pick % size
    flip_bit(path, position, damage.bit)
    return position


def _safe_offsets(path_of_log: str, logs: list[str], changed_at: int, ranges: dict) -> int:
    """How many offsets (from 0) were stored wholly before the damaged byte of ``path_of_log``.

    The batch holding the damaged byte, and the batches after it in the same segment, may
    legitimately go: recovery cuts a segment at its first torn, corrupt or out-of-order batch
    (Kafka's rule; what follows a bad length or base offset cannot be framed). The segments after
    the damaged one are not part of that allowance: the caller checks them separately."""
    safe = 0
    for log_path in logs:
        for _, end, last in ranges[log_path]:
            if log_path == path_of_log and end > changed_at:
                return safe
            safe = last + 1
    return safe


def _plausible_greatest_offset(partition_dir: str) -> int:
    """The greatest offset held by a CRC-valid batch whose offsets lie inside its segment's range:
    at or above its base offset, below the next segment's and representable relative to its base
    (an index entry holds a 31-bit relative offset). A base offset is not covered by the CRC, so a
    flipped high bit makes a batch claim, say, offset 2**56 + 581 in the segment at 581; no
    segment can hold that offset, recovery cuts such a batch and reads answer DATA_LOSS for it,
    so it names no offset the log could hand out again."""
    logs = segment_files(partition_dir, ".log")
    bases = [int(os.path.basename(p).split(".")[0]) for p in logs] + [2**63]
    greatest = -1
    for slot, path in enumerate(logs):
        data = open(path, "rb").read()
        try:
            for batch in iter_batches(data):
                if not batch.is_valid():
                    break
                limit = min(bases[slot + 1], bases[slot] + RELATIVE_OFFSET_MAX + 1)
                if bases[slot] <= batch.base_offset <= batch.last_offset < limit:
                    greatest = max(greatest, batch.last_offset)
        except Exception:  # noqa: BLE001 - a walk stopped by garbage has seen what it could
            pass
    return greatest


def _outcome(manager) -> str:
    stats = manager.statistics()
    if stats.recovery.logs_offline:
        return "partition offline alone"
    if stats.log_dirs[0].checkpoint_read_error_count:
        return "checkpoint read as empty"
    if stats.recovery.bytes_truncated:
        return "segment recovered, bytes cut"
    if stats.recovery.segments_recovered:
        return "segment recovered (indexes rebuilt)" if stats.recovery.marker_found else "crash recovery"
    return "nothing to repair at load (listed again if repaired on first use)"


def check_damage_is_contained(damage: Damage) -> None:
    started = []

    def start_one(dirs):
        # No syncs: a halt() is the kill here, and what it leaves is the files' contents, synced
        # or not (the page cache is the disk to a process that starts again); syncs were most of
        # a case's time.
        started.append(start(dirs, fs=NoSyncFs()))
        return started[-1]

    try:
        _check_damage_is_contained(damage, start_one)
    finally:
        # A failing case leaves its manager open; shrinking runs hundreds of failing cases, and
        # their leaked descriptors ended the search with EMFILE instead of the minimal case.
        for manager in started:
            manager.halt()  # no-op for one already shut down


def _check_damage_is_contained(damage: Damage, start) -> None:
    with tempfile.TemporaryDirectory() as root:
        dirs = [os.path.join(root, "d0")]
        manager = start(dirs)
        manager.create_topic("t", 3, CONFIG)
        if not damage.clean_stop and not damage.rolls_flushed:
            manager.run_maintenance()  # the last checkpoints before the kill: taken before any roll
        for partition in range(3):
            produce(manager.get_log("t", partition), 0, RECORD_COUNT)
        path = manager.get_log("t", 0).dir
        if damage.clean_stop:
            manager.shutdown()
        else:
            if damage.rolls_flushed:
                for partition in range(3):  # what each roll's background flush does, done now
                    log = manager.get_log("t", partition)
                    log.flush(log.segments_snapshot()[-1].base_offset)
                manager.run_maintenance()  # checkpoints, as the service writes them every minute
            manager.halt()
        logs = segment_files(path, ".log")
        ranges = {p: batch_ranges(p) for p in logs}
        later_base = RECORD_COUNT  # the first offset of the segments after the damaged one
        if damage.target.endswith("checkpoint"):
            victim = os.path.join(dirs[0], damage.target)
            _damage(victim, damage)
            safe = RECORD_COUNT
        else:
            slot = damage.segment_pick % len(logs)
            log_path = logs[slot]
            if slot + 1 < len(logs):
                later_base = int(os.path.basename(logs[slot + 1]).split(".")[0])
            victim = log_path[: -len("log")] + damage.target
            changed_at = _damage(victim, damage)
            safe = _safe_offsets(log_path, logs, changed_at, ranges) if damage.target == "log" else RECORD_COUNT

        manager = start(dirs)  # whatever the damage, the manager starts
        stop = "clean" if damage.clean_stop else "kill"
        OUTCOMES[(damage.target, damage.kind, stop, _outcome(manager))] += 1
        for partition in (1, 2):
            assert read_values(manager.get_log("t", partition)) == [(i, value(i)) for i in range(RECORD_COUNT)]
        try:
            log = manager.get_log("t", 0)
        except LogDirOfflineError:
            assert manager.statistics().recovery.logs_offline == 1  # offline alone, and said so
            manager.shutdown()
            return
        served = read_values(log)
        if any(segment.repaired_on_first_use for segment in log.segments_snapshot()):
            OUTCOMES[(damage.target, damage.kind, stop, "segment recovered on first use")] += 1
        assert served[:safe] == [(i, value(i)) for i in range(safe)], "lost a record stored before the damage"
        # The segments after the damaged one are untouched: a cut in the damaged segment (torn,
        # corrupt or out-of-range batch) takes that batch and the rest of its segment, never them.
        later = [(i, value(i)) for i in range(later_base, RECORD_COUNT)]
        assert read_values(log, later_base)[: len(later)] == later, "lost a record of an undamaged segment"
        greatest = _plausible_greatest_offset(path)
        new_offset = produce(log, RECORD_COUNT, 1)[0]
        assert new_offset > greatest, f"offset {new_offset} handed out again ({greatest} is in a file)"
        if damage.target == "log" and damage.kind == "garbage" and victim == logs[-1]:
            assert manager.statistics().recovery.bytes_truncated >= len(damage.garbage)  # cut, and reported
        manager.shutdown()
        manager = start(dirs)
        batches = list(iter_batches(manager.get_log("t", 0).read(new_offset, 4096).records))
        assert batches and batches[0].is_valid()
        assert [(r.offset, r.value) for r in batches[0]] == [(new_offset, value(RECORD_COUNT))]
        manager.shutdown()


@pytest.fixture(scope="module", autouse=True)
def _print_outcomes():
    yield
    print(f"\n{sum(OUTCOMES.values())} damaged-disk cases (target, damage, stop, handled as):")
    for key, count in sorted(OUTCOMES.items()):
        print(f"  {count:4d}  {' | '.join(key)}")


# A flipped high bit in the first base offset of the active segment after a clean stop: the
# batch claims offset 2**56 + 581 in the segment at 581, which no segment can hold.
ACTIVE_SEGMENT_BASE_OFFSET_FLIP = Damage(
    target="log", kind="flip", segment_pick=3, amount=1, garbage=b"\x00", position_pick=0, bit=0,
    clean_stop=True, rolls_flushed=False,
)
# The shrunk case of issue 7's flaky failure: one byte appended to a closed segment, then a kill
# before any roll's flush was checkpointed. Recovery cut the byte and deleted the segments after
# it (Kafka's rule), losing hundreds of acknowledged records and handing their offsets out again.
# It was flaky because the garbage came from os.urandom and the recovery point from the timing of
# the background roll flushes; both are drawn now.
CLOSED_SEGMENT_GARBAGE_AFTER_KILL = Damage(
    target="log", kind="garbage", segment_pick=0, amount=1, garbage=b"\x00", position_pick=0, bit=0,
    clean_stop=False, rolls_flushed=False,
)


@seed(20261123)
@settings(
    max_examples=FAST_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a failure prints its case unshrunk
)
@given(damages)
@example(CLOSED_SEGMENT_GARBAGE_AFTER_KILL)
@example(ACTIVE_SEGMENT_BASE_OFFSET_FLIP)
def test_damage_on_disk_is_repaired_or_isolated_and_loses_nothing_before_it(damage):
    check_damage_is_contained(damage)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@seed(7)
@settings(max_examples=SLOW_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damages)
@example(CLOSED_SEGMENT_GARBAGE_AFTER_KILL)
@example(ACTIVE_SEGMENT_BASE_OFFSET_FLIP)
def test_damage_on_disk_many_cases(damage):
    check_damage_is_contained(damage)
