"""The lookups of seglog.v1.LogService: OffsetsForTimes (and the answer LookupStream shares,
streams.py) and ExplainLookup.

Each target keeps its own outcome, as Kafka answers per partition. The targets of a partition are
searched in one storage call (one take of the log's lock); a handful run inline, more (or a log's
first lookup by time after a restart: ``StoragePort.timestamp_lookup_may_block``) on the pool.
"""

from __future__ import annotations

from typing import Any

from seglog.v1 import log_service_pb2 as pb
from seglog_server.metrics.page_residency import resident_pages
from seglog_server.storage.base.errors import LogDirOfflineError

from . import conversions, validation
from .boundary import unary_rpc
from .errors import InvalidRequestError, ResponseTooLargeError
from .service_core import BLOCKING, ServiceCore
from .status import status_for

__all__ = ["LookupRpcs"]

# The most time lookups of one partition answered on the event loop (about 8-20 us each): more
# than that hold it for a millisecond or more, and go to the storage pool.
_INLINE_LOOKUPS_MAX = 64


class LookupRpcs:
    def __init__(self, core: ServiceCore) -> None:
        self.core = core

    @unary_rpc
    async def OffsetsForTimes(self, request: pb.OffsetsForTimesRequest, context: Any) -> Any:
        return await self.offsets_for_times(request)

    async def offsets_for_times(
        self, request: pb.OffsetsForTimesRequest, response: pb.OffsetsForTimesResponse | None = None
    ) -> pb.OffsetsForTimesResponse:
        """OffsetsForTimes's answer, built in ``response`` when given (LookupStream's).

        The targets are grouped by partition: one ``get_log`` and one storage call a partition
        (``PartitionLog.lookup_timestamps``: one take of the log's lock), whose outcome per
        target (an answer, or the error that target's own search met) is converted, the answers
        in the request's order. Each target keeps its own outcome, as Kafka answers per
        partition: a bad partition or timestamp, an unknown partition, or a storage error
        answers only the targets it concerns. In cluster mode so does a partition another
        instance owns: its targets' errors carry the owner's hint (owner_id, owner_address,
        owner_epoch), as Kafka answers NOT_LEADER_OR_FOLLOWER per partition, and the other
        targets are answered; the client asks each owner for its own targets.
        """
        if response is None:
            response = pb.OffsetsForTimesResponse()
        # Each target's fields read once (a field read of a upb message costs about as much as a
        # dict look-up), grouped by partition.
        rows = [(target.topic, target.partition, target.timestamp_ms) for target in request.partitions]
        answers: list[Any] = [None] * len(rows)  # a storage TimestampAndOffset, None, or an error
        by_partition: dict[tuple[str, int], list[int]] = {}
        for number, (topic, partition, _) in enumerate(rows):
            by_partition.setdefault((topic, partition), []).append(number)
        for (topic, partition), numbers in by_partition.items():
            await self._partition_offsets_for_times(topic, partition, rows, numbers, answers)
        add = response.results.add  # filled in place (and field by field: quicker than keywords)
        for (topic, partition, timestamp_ms), answer in zip(rows, answers):
            if answer is None:
                result = add()
                result.topic, result.partition, result.offset, result.timestamp_ms = topic, partition, -1, -1
            elif isinstance(answer, Exception):
                status = status_for(answer)
                if not status.expected:
                    raise answer  # a bug: the boundary answers INTERNAL and logs it
                message = self.core.log_dir_names.redact(status.message)
                target = pb.PartitionTimestamp(topic=topic, partition=partition, timestamp_ms=timestamp_ms)
                response.results.append(conversions.partition_offset_error(target, status, message, answer))
            else:
                result = add()
                result.topic, result.partition = topic, partition
                result.offset, result.timestamp_ms = answer.offset, answer.timestamp_ms
        # Many targets (each answer may carry an error message) can make an answer larger than
        # gRPC may send: refused here with the limit named, not failed inside gRPC.
        if len(rows) > _INLINE_LOOKUPS_MAX and response.ByteSize() > self.core.limits.response_bytes_max:
            raise ResponseTooLargeError(
                f"the answer to {len(rows)} targets is {response.ByteSize()} bytes, above "
                f"response_bytes_max ({self.core.limits.response_bytes_max}): ask for fewer targets per request"
            )
        return response

    async def _partition_offsets_for_times(
        self, topic: str, partition: int, rows: list[tuple[str, int, int]], numbers: list[int],
        answers: list[Any],
    ) -> None:
        """Answers the targets ``rows[n]`` (topic, partition, timestamp) for each of ``numbers``
        (all of partition ``topic``-``partition``) into ``answers[n]``: a storage outcome (an
        answer or the error that target met), or the error the request's check or the whole call
        met."""
        try:
            validation.check_partition_ref(topic, partition)
        except InvalidRequestError as exc:
            for number in numbers:
                answers[number] = exc
            return
        searched = numbers
        timestamps_ms = [rows[number][2] for number in numbers]
        if min(timestamps_ms) < validation.MAX_TIMESTAMP:  # some target's timestamp is refused: those alone
            searched = []
            for number in numbers:
                try:
                    validation.check_target_timestamp(rows[number][2])
                    searched.append(number)
                except InvalidRequestError as exc:
                    answers[number] = exc
            if not searched:
                return
            timestamps_ms = [rows[number][2] for number in searched]
        cluster = self.core.cluster
        refusal = None if cluster is None else cluster.owner_error(topic, partition)
        if refusal is not None:  # owned elsewhere: each target's error names the owner
            for number in searched:
                answers[number] = refusal
            return
        try:
            log = self.core.storage.get_log(topic, partition)
            # A handful of lookups runs inline (microseconds each); more go to the pool, or one
            # request of a few MiB of targets would hold the event loop for seconds. So does a
            # log's first lookup by time after a restart: it checks every segment on first use.
            inline = len(searched) <= _INLINE_LOOKUPS_MAX and not self.core.storage.timestamp_lookup_may_block(
                log, timestamps_ms)
            found: list[Any] = await self.core.log_call(log, 0 if inline else BLOCKING, log.lookup_timestamps, timestamps_ms)
        except Exception as exc:  # noqa: BLE001 - the whole call's error is each target's
            found = [exc] * len(searched)
        else:
            for answer in found:
                if isinstance(answer, LogDirOfflineError):  # a target's search took the log offline
                    await self.core.calls.blocking(self.core.storage.handle_log_failure, log, answer)  # as log_call does
                    break
        for number, answer in zip(searched, found):
            answers[number] = answer

    @unary_rpc
    async def ExplainLookup(self, request: pb.ExplainLookupRequest, context: Any) -> Any:
        topic, partition = validation.check_partition_ref(request.topic, request.partition)
        target = request.WhichOneof("target")
        if target is None:
            raise InvalidRequestError("set offset or timestamp_ms")
        log = self.core.storage.get_log(topic, partition)
        if target == "offset":
            explanation = await self.core.log_call(
                log, BLOCKING, log.explain_offset, request.offset, resident_pages
            )
        else:
            if request.timestamp_ms < 0:
                raise InvalidRequestError(
                    f"timestamp_ms must be >= 0, found {request.timestamp_ms}"
                )
            explanation = await self.core.log_call(
                log, BLOCKING, log.explain_timestamp, request.timestamp_ms, resident_pages
            )
        response = conversions.explain_lookup_response(explanation)
        for search in response.searches:  # the file by its log dir's label: no server path
            search.path = self.core.log_dir_names.label(search.path)
        return response
