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
from ..base.json_document import INT64_MAX, Fields, checked_int, read_json_document
from ..base.topic_partition import TOPIC_NAME_LENGTH_MAX, TopicIdPartition

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
INT32_MAX = 2**31 - 1


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
        raw = read_json_document(data, f"state record {key!r}", CorruptRemoteObjectError,
                                 bytes_max=METADATA_BYTES_MAX)
        doc = Fields(raw, f"state record {key!r}", CorruptRemoteObjectError)
        version = doc.get("version", int)
        if version != METADATA_VERSION:
            doc.fail("version", f"{version}, expected {METADATA_VERSION}")
        return _from_fields(doc)


def _from_fields(doc: Fields) -> RemoteLogSegmentMetadata:
    files = doc.object("files")
    if ".log" not in files or not set(files.data) <= set(FILE_KINDS):
        doc.fail("files", f"expected .log and only {FILE_KINDS}, found {sorted(files.data)[:8]}")
    topic_id, segment_id = doc.str("topic_id", 32), doc.str("segment_id", 32)
    # The dataclass asserts these too; data from the store is checked here, where -O keeps it.
    if not TopicIdPartition.is_topic_id(topic_id):
        doc.fail("topic_id", f"expected 32 hex digits, found {topic_id!r}")
    if not _SEGMENT_ID.fullmatch(segment_id):
        doc.fail("segment_id", f"expected 32 hex digits, found {segment_id!r}")
    base_offset = doc.int("base_offset", 0, INT64_MAX)
    state_name = doc.str("state", 64)
    if state_name not in RemoteLogSegmentState.__members__:
        doc.fail("state", f"expected one of {list(RemoteLogSegmentState.__members__)}, found {state_name!r}")
    return RemoteLogSegmentMetadata(
        topic=doc.str("topic", TOPIC_NAME_LENGTH_MAX), partition=doc.int("partition", 0, INT32_MAX),
        topic_id=topic_id, segment_id=segment_id,
        base_offset=base_offset, end_offset=doc.int("end_offset", base_offset, INT64_MAX),
        max_timestamp_ms=doc.int("max_timestamp_ms", -INT64_MAX - 1, INT64_MAX),
        files={kind: files.int(kind, 0, INT64_MAX) for kind in files.data},
        state=RemoteLogSegmentState[state_name],
        event_timestamp_ms=doc.int("event_timestamp_ms", -INT64_MAX - 1, INT64_MAX),
        leader_epochs=tuple(_leader_epoch(item, f"{doc.location} leader_epochs[{slot}]")
                            for slot, item in enumerate(doc.list("leader_epochs"))),
    )


def _leader_epoch(item: object, where: str) -> tuple[int, int]:
    """One ``[epoch, start_offset]`` pair: an int32 epoch (Kafka's) and an int64 offset."""
    if not isinstance(item, list) or len(item) != 2:
        raise CorruptRemoteObjectError(f"{where}: expected [epoch, start_offset], found {str(item)[:60]}")
    return (checked_int(item[0], where, 0, INT32_MAX, CorruptRemoteObjectError),
            checked_int(item[1], where, 0, INT64_MAX, CorruptRemoteObjectError))
