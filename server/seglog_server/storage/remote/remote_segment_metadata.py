"""One remote segment's state record (Kafka's ``RemoteLogSegmentMetadata`` and
``RemoteLogSegmentState``, KIP-405), and its JSON form in the store.

The states and the only moves between them (a state may be written again: a retry after a crash
rewrites the state it was in)::

    COPY_SEGMENT_STARTED ──> COPY_SEGMENT_FINISHED
             │                        │
             └──> DELETE_SEGMENT_STARTED <┘
                          │
                          v
                 DELETE_SEGMENT_FINISHED

Only COPY_SEGMENT_FINISHED is ever read. The record is written before the first object of a step
and after its last, so whatever a crash interrupts is a record in a non-readable state: an orphan
whose objects cleanup deletes.

The JSON layout, version 2 (one small object per segment, rewritten at each state change; version
1 had no topic id and is not read)::

    {"version": 2,
     "topic": "events", "partition": 0,
     "topic_id": "9c1e...",              32 hex digits: the topic's generation (partition.metadata)
     "segment_id": "5f0c...",            32 hex digits, random: the object keys' uniquifier
     "base_offset": 100, "end_offset": 199,   first and last offset the segment holds
     "max_timestamp_ms": 1700000000000,
     "files": {".log": 1048576, ".index": 1024, ...},   every uploaded object and its size
     "leader_epochs": [[epoch, start_offset], ...],
     "state": "COPY_SEGMENT_FINISHED",
     "event_timestamp_ms": 1700000000123}     when this state was written
"""

from __future__ import annotations

import enum
import json
import re
import uuid
from dataclasses import dataclass, field, replace

from ..base.errors import CorruptRemoteObjectError
from ..base.topic_partition import TopicIdPartition

__all__ = [
    "FILE_KINDS",
    "METADATA_BYTES_MAX",
    "METADATA_VERSION",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentState",
    "new_segment_id",
]

METADATA_VERSION = 2
# A record holds a few numbers and at most a few thousand leader epochs; 1 MiB bounds what a
# damaged or hostile object can make us allocate and parse.
METADATA_BYTES_MAX = 1024 * 1024

# The files a segment uploads, by suffix (Kafka's LogSegmentData: log, offset index, time index,
# producer snapshot, leader-epoch checkpoint; seglog writes no transaction index).
FILE_KINDS = (".log", ".index", ".timeindex", ".snapshot", ".leader-epoch-checkpoint")

_SEGMENT_ID = re.compile(r"[0-9a-f]{32}")


class RemoteLogSegmentState(enum.Enum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    def may_become(self, target: RemoteLogSegmentState) -> bool:
        """Kafka's ``isValidTransition``: the diagram's arrows, plus staying put."""
        return target is self or target in _NEXT[self]


_S = RemoteLogSegmentState
_NEXT = {
    _S.COPY_SEGMENT_STARTED: {_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED},
    _S.COPY_SEGMENT_FINISHED: {_S.DELETE_SEGMENT_STARTED},
    _S.DELETE_SEGMENT_STARTED: {_S.DELETE_SEGMENT_FINISHED},
    _S.DELETE_SEGMENT_FINISHED: set(),
}


def new_segment_id() -> str:
    """A random 128-bit id: two uploads of one segment never share a key."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    topic: str
    partition: int
    segment_id: str
    base_offset: int
    end_offset: int
    max_timestamp_ms: int
    files: dict[str, int]
    state: RemoteLogSegmentState
    event_timestamp_ms: int
    leader_epochs: tuple[tuple[int, int], ...] = field(default=())
    topic_id: str = field(kw_only=True)  # the topic's generation (TopicIdPartition)

    def __post_init__(self) -> None:
        assert _SEGMENT_ID.fullmatch(self.segment_id), self.segment_id
        assert TopicIdPartition.is_topic_id(self.topic_id), self.topic_id
        assert 0 <= self.base_offset <= self.end_offset, (self.base_offset, self.end_offset)
        assert set(self.files) <= set(FILE_KINDS), self.files
        assert ".log" in self.files

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return TopicIdPartition(self.topic, self.partition, self.topic_id)

    @property
    def segment_bytes(self) -> int:
        return self.files[".log"]

    def with_state(self, state: RemoteLogSegmentState, event_timestamp_ms: int) -> RemoteLogSegmentMetadata:
        assert self.state.may_become(state), f"{self.state.name} cannot become {state.name}"
        return replace(self, state=state, event_timestamp_ms=event_timestamp_ms)

    def to_json(self) -> bytes:
        return json.dumps({
            "version": METADATA_VERSION,
            "topic": self.topic, "partition": self.partition, "topic_id": self.topic_id,
            "segment_id": self.segment_id,
            "base_offset": self.base_offset, "end_offset": self.end_offset,
            "max_timestamp_ms": self.max_timestamp_ms,
            "files": self.files,
            "leader_epochs": [list(e) for e in self.leader_epochs],
            "state": self.state.name,
            "event_timestamp_ms": self.event_timestamp_ms,
        }, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, key: str) -> RemoteLogSegmentMetadata:
        """Parse a record; anything malformed is ``CorruptRemoteObjectError`` naming ``key``."""
        if len(data) > METADATA_BYTES_MAX:
            raise CorruptRemoteObjectError(
                f"state record {key!r} holds {len(data)} bytes, above {METADATA_BYTES_MAX}")
        try:
            raw = json.loads(data)
            if raw["version"] != METADATA_VERSION:
                raise CorruptRemoteObjectError(
                    f"state record {key!r}: version {raw['version']!r}, expected {METADATA_VERSION}")
            return _from_fields(raw)
        except CorruptRemoteObjectError:
            raise
        except (ValueError, KeyError, TypeError, AssertionError) as e:
            raise CorruptRemoteObjectError(f"state record {key!r} cannot be parsed: {e!r}") from e


def _from_fields(raw: dict) -> RemoteLogSegmentMetadata:
    files = raw["files"]
    if not isinstance(files, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in files.values()):
        raise ValueError(f"files must map kinds to sizes, found {files!r}")
    numbers = ("partition", "base_offset", "end_offset", "max_timestamp_ms", "event_timestamp_ms")
    for name in numbers:
        if not isinstance(raw[name], int) or isinstance(raw[name], bool):
            raise ValueError(f"{name} must be an integer, found {raw[name]!r}")
    if not all(isinstance(raw[name], str) for name in ("topic", "topic_id", "segment_id")):
        raise ValueError("topic, topic_id and segment_id must be strings")
    if not TopicIdPartition.is_topic_id(raw["topic_id"]):
        raise ValueError(f"topic_id must be 32 hex digits, found {raw['topic_id']!r}")
    # The dataclass asserts these too; data from the store is checked here, where -O keeps it.
    if not _SEGMENT_ID.fullmatch(raw["segment_id"]):
        raise ValueError(f"segment_id must be 32 hex digits, found {raw['segment_id']!r}")
    if not 0 <= raw["base_offset"] <= raw["end_offset"]:
        raise ValueError(f"offsets {raw['base_offset']}..{raw['end_offset']} are not a range")
    if ".log" not in files or not set(files) <= set(FILE_KINDS):
        raise ValueError(f"files must include .log and only {FILE_KINDS}, found {sorted(files)}")
    return RemoteLogSegmentMetadata(
        topic=raw["topic"], partition=raw["partition"], topic_id=raw["topic_id"],
        segment_id=raw["segment_id"],
        base_offset=raw["base_offset"], end_offset=raw["end_offset"],
        max_timestamp_ms=raw["max_timestamp_ms"], files=dict(files),
        state=RemoteLogSegmentState[raw["state"]],
        event_timestamp_ms=raw["event_timestamp_ms"],
        leader_epochs=tuple((int(e), int(o)) for e, o in raw["leader_epochs"]),
    )
