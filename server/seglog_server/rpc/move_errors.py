"""The errors of partition moves and takeovers (move_rpcs.py), apart so status.py can map them."""

from __future__ import annotations

from .cluster_routing import OWNER_ADDRESS_METADATA_KEY, OWNER_ID_METADATA_KEY
from .errors import ServiceError

__all__ = ["MoveFailedError", "MoveRefusedError", "NotMoveTargetError", "UnknownInstanceError"]


class MoveRefusedError(ServiceError):
    """The move or takeover cannot be done as asked (FAILED_PRECONDITION): the message says why."""


class UnknownInstanceError(ServiceError):
    """The instance named is not known to the cluster (NOT_FOUND)."""


class MoveFailedError(ServiceError):
    """The move began but did not commit (ABORTED): the source still owns the partition."""


class NotMoveTargetError(ServiceError):
    """MovePartition asked of an instance other than the target: ask the target (its address in
    trailing metadata, as an owner hint)."""

    def __init__(self, message: str, target: str, address: str) -> None:
        super().__init__(message)
        self.status_metadata = ((OWNER_ID_METADATA_KEY, target), (OWNER_ADDRESS_METADATA_KEY, address))
