"""Errors of the consumer groups' core.

    GroupError
    ├── CorruptGroupRecordError      bytes of a __consumer_offsets key or value do not parse
    │   └── UnknownGroupRecordError  a key type or value version this core does not read
    ├── FencedMemberError            a heartbeat or ack carries a member epoch that moved on
    │   └── UnknownMemberError       the member is not (or no longer) in the group
    ├── FencedInstanceIdError        a static member's instance id was taken over by another member id
    ├── UnreleasedInstanceIdError    a join with an instance id a live member holds
    ├── GroupNotEmptyError           a simple commit (no member id) or a deletion of a group with members
    ├── GroupNotFoundError           a deletion of a group the service does not know
    └── InvalidGroupRequestError     an empty group id, a negative offset, no such member epoch
"""

from __future__ import annotations

__all__ = [
    "CorruptGroupRecordError", "FencedInstanceIdError", "FencedMemberError", "UnreleasedInstanceIdError", "GroupError", "GroupNotEmptyError", "GroupNotFoundError",
    "InvalidGroupRequestError",
    "UnknownGroupRecordError", "UnknownMemberError",
]


class GroupError(Exception):
    """The root of the groups' errors."""


class CorruptGroupRecordError(GroupError):
    """A key or value of the offsets topic is truncated, too long or malformed."""


class UnknownGroupRecordError(CorruptGroupRecordError):
    """A key type (its int16 prefix) or value version this core cannot read. Replay skips such
    keys, as Kafka's loader skips record types it does not know (KIP-848's records, say)."""


class FencedMemberError(GroupError):
    """Kafka's FENCED_MEMBER_EPOCH: the member's epoch is not the coordinator's."""


class UnknownMemberError(FencedMemberError):
    """Kafka's UNKNOWN_MEMBER_ID: the member left, timed out or never joined."""


class FencedInstanceIdError(GroupError):
    """Kafka's FENCED_INSTANCE_ID: the instance id (group.instance.id) is now held by another member
    id, which took the static member over; this one is a zombie and must stop (not rejoin)."""


class UnreleasedInstanceIdError(GroupError):
    """Kafka's UNRELEASED_INSTANCE_ID: a join with an instance id that a live member holds (two
    consumers configured with one group.instance.id); the holder must leave with epoch -2 or time
    out first."""


class GroupNotEmptyError(GroupError):
    """Kafka's UNKNOWN_MEMBER_ID for a commit without a member id to a group with members: only
    its members commit while it has some."""


class GroupNotFoundError(GroupError):
    """Kafka's GROUP_ID_NOT_FOUND: a deletion of a group with neither members nor offsets."""


class InvalidGroupRequestError(GroupError):
    """Kafka's INVALID_GROUP_ID / INVALID_REQUEST: the request is wrong whatever the state."""
