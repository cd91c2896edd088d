"""One ``__consumer_offsets`` partition's state: committed offsets and group metadata, built only
by applying the partition's records in offset order, so the live map and a replay of the log are
the same computation (a commit changes the map after its append succeeded, through ``apply``).

Compaction keeps the last record of each key, and a later record of a key replaces an earlier one
here too, so replaying a cleaned log gives the same map as the live one; a tombstone (null value)
deletes its key in both. KIP-848's consumer group records (types 3 to 8: the group's epoch, its
topics, its members, their target and current assignments) are kept per group as they are, keyed
by (record type, member id), for the coordinator to rebuild the group's membership at load
(membership_records.py). Keys of record types this core does not read (9 and above) are skipped
and counted, as Kafka's loader skips unknown record types.

Expiry is Kafka's (GroupMetadata.removeExpiredOffsets, offsets.retention.minutes): an offset of a
group without members expires ``retention_ms`` after the group became empty (its metadata's
currentStateTimestamp) or, without that, after its commit; a commit that carries an expire
timestamp (value version 1) expires then instead. An empty group left with no offsets is dead:
its metadata is deleted too. Groups with live members (as the coordinator knows them) never
expire here, nor do offsets with a record not yet durable (offsets_log.py: the map holds durable
records only; Kafka skips partitions with pending commits the same way).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from typing import Any

from .errors import CorruptGroupRecordError, UnknownGroupRecordError
from .records import (
    CONSUMER_GROUP_KEYS,
    NO_TIMESTAMP,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
    encode_key,
)

__all__ = ["OFFSETS_RETENTION_MS", "OffsetsState", "OffsetsStateStatistics"]

# Kafka's offsets.retention.minutes default, 7 days (KIP-186: long enough to survive a weekend
# and a holiday without a consumer losing its place).
OFFSETS_RETENTION_MS = 7 * 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class OffsetsStateStatistics:
    group_count: int
    offset_count: int
    records_applied: int
    unknown_records_skipped: int


class OffsetsState:
    def __init__(self) -> None:
        self._offsets: dict[str, dict[tuple[str, int], OffsetCommitValue]] = {}
        self._groups: dict[str, GroupMetadataValue] = {}
        # group -> (record type, member id or "") -> the record's value (KIP-848's records)
        self._consumer_groups: dict[str, dict[tuple[int, str], Any]] = {}
        self._records_applied = 0
        self._unknown_skipped = 0

    # -- the one way in ----------------------------------------------------------------------
    def apply(self, key: bytes | memoryview | None, value: bytes | memoryview | None, *, offset: int = -1) -> None:
        """Applies one record of the partition. Raises CorruptGroupRecordError (naming ``offset``)
        for a null or malformed key or value; skips a key type it does not know."""
        if key is None:
            raise CorruptGroupRecordError(f"__consumer_offsets record at offset {offset} has a null key")
        try:
            decoded = decode_key(key)
        except UnknownGroupRecordError:
            self._unknown_skipped += 1
            return
        self._records_applied += 1
        if isinstance(decoded, OffsetCommitKey):
            self._apply_offset(decoded, None if value is None else decode_value(decoded, value))
        elif type(decoded) in CONSUMER_GROUP_KEYS.values():
            self._apply_consumer_group(decoded, None if value is None else decode_value(decoded, value))
        else:
            self._apply_group(decoded, None if value is None else decode_value(decoded, value))

    def _apply_offset(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        offsets = self._offsets.setdefault(key.group, {})
        if value is not None:
            offsets[key.topic, key.partition] = value
            return
        offsets.pop((key.topic, key.partition), None)
        if not offsets:
            del self._offsets[key.group]

    def _apply_group(self, key: GroupMetadataKey, value: GroupMetadataValue | None) -> None:
        if value is None:
            self._groups.pop(key.group, None)
        else:
            self._groups[key.group] = value

    def _apply_consumer_group(self, key: Any, value: Any) -> None:
        records = self._consumer_groups.setdefault(key.group, {})
        slot = (key.KEY_TYPE, getattr(key, "member_id", ""))
        if value is not None:
            records[slot] = value
            return
        records.pop(slot, None)
        if not records:
            del self._consumer_groups[key.group]

    def replace_consumer_group_records(self, group: str, records: dict[tuple[int, str], Any]) -> None:
        """Sets the group's KIP-848 records to ``records`` (the coordinator reverting records
        whose write failed to become durable, once the log takes no more writes)."""
        if records:
            self._consumer_groups[group] = dict(records)
        else:
            self._consumer_groups.pop(group, None)

    # -- reads -------------------------------------------------------------------------------
    def consumer_group_records(self, group: str) -> dict[tuple[int, str], Any]:
        """The group's KIP-848 records: (record type, member id or "") -> value."""
        return dict(self._consumer_groups.get(group, {}))

    def consumer_group_records_at(self, group: str, slots: Iterable[tuple[int, str]]) -> dict[tuple[int, str], Any]:
        """The group's records in ``slots`` only (the ones it has)."""
        held = self._consumer_groups.get(group, {})
        return {slot: held[slot] for slot in slots if slot in held}

    def consumer_groups(self) -> list[str]:
        return sorted(self._consumer_groups)

    def committed(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        return self._offsets.get(group, {}).get((topic, partition))

    def group_offsets(self, group: str) -> dict[tuple[str, int], OffsetCommitValue]:
        return dict(self._offsets.get(group, {}))

    def group_metadata(self, group: str) -> GroupMetadataValue | None:
        return self._groups.get(group)

    def groups(self) -> list[str]:
        return sorted(self._offsets.keys() | self._groups.keys())

    def as_dict(self) -> dict:
        """Everything the state holds, for comparing two states."""
        return {"offsets": {g: dict(o) for g, o in self._offsets.items()}, "groups": dict(self._groups),
                "consumer_groups": {g: dict(r) for g, r in self._consumer_groups.items()}}

    def statistics(self) -> OffsetsStateStatistics:
        return OffsetsStateStatistics(
            group_count=len(self.groups()),
            offset_count=sum(len(o) for o in self._offsets.values()),
            records_applied=self._records_applied,
            unknown_records_skipped=self._unknown_skipped,
        )

    # -- expiry ------------------------------------------------------------------------------
    def expired_keys(self, now_ms: int, retention_ms: int = OFFSETS_RETENTION_MS,
                     live_groups: Set[str] = frozenset(),
                     pending: Mapping[str, Set[tuple[str, int]]] | None = None) -> list[bytes]:
        """The keys to tombstone now: expired offsets of groups without members, then the
        metadata of empty groups left with no offsets. ``pending``: group -> the (topic,
        partition) of its offset records appended and not yet applied (not durable): those
        offsets are not expired, and a group with any is not left without offsets. Pure: the
        caller appends the tombstones and applies them as records."""
        assert retention_ms > 0, retention_ms
        keys: list[bytes] = []
        for group in self.groups():
            if group in live_groups or not self._is_empty(group):
                continue
            offsets = self._offsets.get(group, {})
            waiting = pending.get(group, frozenset()) if pending else frozenset()
            expired = [tp for tp in _expired(offsets.items(), self._empty_since(group), now_ms, retention_ms)
                       if tp not in waiting]
            keys += [encode_key(OffsetCommitKey(group, topic, partition)) for topic, partition in expired]
            if group in self._groups and not waiting and len(expired) == len(offsets):
                keys.append(encode_key(GroupMetadataKey(group)))
        return keys

    def _is_empty(self, group: str) -> bool:
        metadata = self._groups.get(group)
        return metadata is None or not metadata.members

    def _empty_since(self, group: str) -> int:
        metadata = self._groups.get(group)
        return NO_TIMESTAMP if metadata is None else metadata.current_state_timestamp_ms


def _expired(offsets: Iterable[tuple[tuple[str, int], OffsetCommitValue]], empty_since_ms: int,
             now_ms: int, retention_ms: int) -> Iterable[tuple[str, int]]:
    for topic_partition, value in offsets:
        if value.expire_timestamp_ms != NO_TIMESTAMP:
            if now_ms >= value.expire_timestamp_ms:
                yield topic_partition
            continue
        base_ms = empty_since_ms if empty_since_ms != NO_TIMESTAMP else value.commit_timestamp_ms
        if now_ms - base_ms >= retention_ms:
            yield topic_partition
