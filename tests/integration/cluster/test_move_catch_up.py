"""A move copies the active segment under produce, so the fenced final pass copies only its tail:
two in-process services in cluster mode against a real etcd (conftest.py; the harness of
test_move_abandon.py).

The first pass used to copy only the closed segments, so the whole active segment (up to
segment.bytes, 1 GiB by default) was copied from byte 0 while the source refused produce. Now
every pass copies each segment file as it is then, and the final one resumes each file from the
end of its copy while the file's identity (inode, CRC of its first batch header) holds.
"""

from __future__ import annotations

import pytest

from seglog.v1 import log_service_pb2 as pb
from seglog.v1 import moves_pb2 as mpb
from tests.integration.cluster.test_move_abandon import TOPIC, pair, until

__all__ = ["pair"]

pytestmark = pytest.mark.integration

# One segment only: the whole log is the active segment.
SEGMENT_BYTES = 64 << 20
BATCHES = 32
VALUE_BYTES = 128 << 10  # 32 batches of 128 KiB: a 4 MiB active segment
# What the fenced pass may copy when nothing was produced during the move: the producer
# snapshots (none here, or a few hundred bytes), far below one batch.
FENCED_BYTES_MAX = VALUE_BYTES // 2


async def _big_active_segment(a, b) -> int:
    await a.log.CreateTopic(pb.CreateTopicRequest(topic=TOPIC, partitions=1, configs={
        "segment.bytes": str(SEGMENT_BYTES), "max.message.bytes": str(2 * VALUE_BYTES)}), timeout=10)
    await until(lambda: b.holds(TOPIC), "b holding the topic")
    for n in range(BATCHES):
        await a.produce([bytes([n % 251]) * VALUE_BYTES])
    assert a.manager.get_log(TOPIC, 0).segment_count == 1
    return a.manager.get_log(TOPIC, 0).size_in_bytes


async def test_the_fenced_pass_of_a_move_copies_only_the_tail_of_a_big_active_segment(pair):
    a, b = pair
    size = await _big_active_segment(a, b)
    moved = await b.moves.MovePartition(mpb.MovePartitionRequest(topic=TOPIC, partition=0, to_instance="b"),
                                        timeout=60)
    assert (moved.from_instance, moved.to_instance, moved.log_end_offset) == ("a", "b", BATCHES)
    assert moved.bytes_copied >= size
    assert moved.bytes_copied_fenced <= FENCED_BYTES_MAX, (moved.bytes_copied_fenced, size)
    fetched = await b.log.Fetch(pb.FetchRequest(topic=TOPIC, partition=0, offset=BATCHES - 1), timeout=10)
    assert fetched.high_watermark == BATCHES


async def _first_positions(a, copied: list[mpb.CopiedFile]) -> dict[str, int]:
    """The position each file's stream starts at, from a's CopyPartition (a pass under produce)."""
    request = mpb.CopyPartitionRequest(topic=TOPIC, partition=0, epoch=0, copied=copied)
    first: dict[str, int] = {}
    async for chunk in a.moves.CopyPartition(request, timeout=30):
        first.setdefault(chunk.name, chunk.position)
        first[f"identity {chunk.name}"] = chunk.identity
    return first


async def test_a_copy_resumes_a_file_only_while_its_identity_holds(pair):
    a, b = pair
    size = await _big_active_segment(a, b)
    whole = await _first_positions(a, [])
    (name,) = [key for key in whole if not key.startswith("identity ")]
    assert whole[name] == 0
    identity = whole[f"identity {name}"]
    inode, _, crc = identity.partition(":")
    half = size // 2
    resumed = await _first_positions(a, [mpb.CopiedFile(name=name, size=half, identity=identity)])
    assert resumed[name] == half
    # Another file under that name: another inode, or the same inode (reused) with other records.
    for other in (f"{int(inode) + 1}:{crc}", f"{inode}:{int(crc, 16) ^ 1:08x}", ""):
        again = await _first_positions(a, [mpb.CopiedFile(name=name, size=half, identity=other)])
        assert again[name] == 0, other
    # A copy longer than the file (the file made again, shorter): from the start.
    longer = await _first_positions(a, [mpb.CopiedFile(name=name, size=size + 1, identity=identity)])
    assert longer[name] == 0
