"""The lookups of seglog.v1.LogService: OffsetsForTimes (and the answer LookupStream shares,
streams.py) and ExplainLookup.

Each target keeps its own outcome, as Kafka answers per partition. The targets of a partition are
searched in one storage call (one take of the log's lock); a handful run inline, more (or a log's
first lookup by time after a restart: ``StoragePort.timestamp_lookup_may_block``, or a search that
refused, inline, to build or extend a table or directory, decompress a batch or read past the
inline bound: ``PartitionLog.lookup_timestamps_without_builds``) on the pool. A partition's
one target takes the single lookup's path (``_search_one``), which answers as that general path
and counts the same storage calls, but where the general path sends its bounded search to the
pool and that search declines: always on a tiered log, and behind a busy lock when it refuses a
step. There the general path counts two pool calls, the bounded search then the full one, and
``_search_one`` one, the full search.
"""

from __future__ import annotations

from typing import Any

from seglog.v1 import log_service_pb2 as pb
from seglog_server.metrics.page_residency import resident_pages
from seglog_server.storage import TimestampAndOffset
from seglog_server.storage.base.errors import LogDirOfflineError

from . import conversions, validation
from .boundary import unary_rpc
from .errors import InvalidRequestError, ResponseTooLargeError
from .service_core import BLOCKING, ServiceCore
from .status import status_for

__all__ = ["LookupRpcs"]

# The most time lookups of one partition answered on the event loop (a few us each with the
# time-step tables): more than that hold it for a millisecond or more, and go to the storage
# pool. At 256 against 64, calls of 100 targets cost 0.76x the service CPU on 3,436-record
# batches and 0.68x on 100-record ones (bench/bench_batched_lookup.py, A/B at load 6-8.6).
_INLINE_LOOKUPS_MAX = 256
_MAX_TIMESTAMP = validation.MAX_TIMESTAMP
# The storage's outcomes of a packed entry whose targets all found a record (no None, no error).
_ANSWERED = {TimestampAndOffset}


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
        targets = request.partitions
        if len(targets) == 1 and not request.packed:  # a single lookup: no rows, no grouping
            await self._answer_one(targets[0], response.results.add())
            return response
        count = 0
        if request.partitions:
            count += await self._answer_targets(request.partitions, response)
        if request.packed:
            count += await self._answer_packed(request.packed, response.packed)
        # Many targets (each answer may carry an error message) can make an answer larger than
        # gRPC may send: refused here with the limit named, not failed inside gRPC.
        if count > _INLINE_LOOKUPS_MAX and response.ByteSize() > self.core.limits.response_bytes_max:
            raise ResponseTooLargeError(
                f"the answer to {count} targets is {response.ByteSize()} bytes, above "
                f"response_bytes_max ({self.core.limits.response_bytes_max}): ask for fewer targets per request"
            )
        return response

    async def _answer_targets(self, targets: Any, response: pb.OffsetsForTimesResponse) -> int:
        """The old form: a PartitionTimestamp per target, a PartitionOffset per answer, into
        ``response.results`` in the request's order. Returns the number of targets."""
        # Each target's fields read once (a field read of a upb message costs about as much as a
        # dict look-up), grouped by partition.
        rows = [(target.topic, target.partition, target.timestamp_ms) for target in targets]
        answers: list[Any] = [None] * len(rows)  # a storage TimestampAndOffset, None, or an error
        by_partition: dict[tuple[str, int], list[int]] = {}
        for number, (topic, partition, _) in enumerate(rows):
            by_partition.setdefault((topic, partition), []).append(number)
        for (topic, partition), numbers in by_partition.items():
            found = await self._search(topic, partition, [rows[number][2] for number in numbers])
            for number, answer in zip(numbers, found):
                answers[number] = answer
        add = response.results.add  # filled in place (and field by field: quicker than keywords)
        for (topic, partition, timestamp_ms), answer in zip(rows, answers):
            if answer is None:
                result = add()
                result.topic, result.partition, result.offset, result.timestamp_ms = topic, partition, -1, -1
            elif isinstance(answer, Exception):
                status, message = self._error_status(answer)
                target = pb.PartitionTimestamp(topic=topic, partition=partition, timestamp_ms=timestamp_ms)
                response.results.append(conversions.partition_offset_error(target, status, message, answer))
            else:
                result = add()
                result.topic, result.partition = topic, partition
                result.offset, result.timestamp_ms = answer.offset, answer.timestamp_ms
        return len(rows)

    async def _answer_one(self, target: Any, result: Any) -> None:
        """``_answer_targets`` for a request of one target, into ``result`` (its answer, added
        already): the same outcome, message and owner hint, with no per-target lists, grouping
        or second pass. A target every check accepts, on a log served here whose lock is free,
        is searched inline in this call; anything else goes through ``_search``."""
        topic, partition, timestamp_ms = target.topic, target.partition, target.timestamp_ms
        result.topic, result.partition = topic, partition
        core = self.core
        answer: Any
        cluster = core.cluster
        if topic and partition >= 0 and timestamp_ms >= _MAX_TIMESTAMP and (
                cluster is None or cluster.owner_error(topic, partition) is None):  # served here
            answer = await self._search_one(topic, partition, timestamp_ms)
        else:
            answer = (await self._search(topic, partition, [timestamp_ms]))[0]
        if answer.__class__ is TimestampAndOffset:  # found (the common case: no isinstance call)
            result.offset, result.timestamp_ms = answer.offset, answer.timestamp_ms
        elif answer is None:
            result.offset = result.timestamp_ms = -1
        elif isinstance(answer, Exception):
            status, message = self._error_status(answer)
            result.offset = result.timestamp_ms = -1
            conversions.fill_partition_error(result.error, status, message, answer)
        else:
            result.offset, result.timestamp_ms = answer.offset, answer.timestamp_ms

    async def _lookup(self, log: Any, searched: list[int], pooled: bool) -> list[Any]:
        """``log.lookup_timestamps(searched)`` on the pool, or inline when not ``pooled`` and the
        search bounded by the inline bound answers (``lookup_timestamps_without_builds``: it
        builds nothing, decompresses nothing and reads at most the bound; None when it refused
        a step past that, and the lookup goes to the pool)."""
        if not pooled:
            found = await self.core.log_call(log, 0, log.lookup_timestamps_without_builds, searched,
                                             self.core.calls.inline_io_bytes_max)
            if found is not None:
                return found
        return await self.core.log_call(log, BLOCKING, log.lookup_timestamps, searched)

    async def _search_one(self, topic: str, partition: int, timestamp_ms: int) -> Any:
        """``_search`` of one valid target (>= 0, or LATEST, EARLIEST, MAX_TIMESTAMP) of a
        partition this process serves (no cluster, or this instance owns it): its outcome. The inline attempt is one call
        of the log (``lookup_timestamp_inline``: the lock taken without waiting, the search
        bounded by the inline bound), not ``log_call`` -> ``StorageCalls.sized`` ->
        ``lookup_timestamps_without_builds`` -> ``lookup_timestamps``; what it does not answer
        goes to the pool, and the storage calls' counts (inline, busy fallback, pooled) move as
        there, but for a tiered log or a busy lock: there ``_lookup`` sends the bounded search to
        the pool first, and when it declines (a tiered log's always does), the full one (one
        busy fallback, two pooled calls), where this sends the full search at once (one busy
        fallback, one pooled call). The hop saved is the point; no answer differs."""
        core = self.core
        storage = core.storage
        calls = core.calls
        try:
            log = storage.get_log(topic, partition)
        except Exception as exc:  # noqa: BLE001 - an unknown partition: the target's error
            return exc
        try:
            answer = log.lookup_timestamp_inline(timestamp_ms, calls.inline_io_bytes_max)
        except Exception as exc:  # noqa: BLE001 - the whole call's error is the target's
            calls.count_inline()  # it raised under the lock: an inline call, as ``sized`` counts it
            if isinstance(exc, LogDirOfflineError):  # the log offline: as log_call does
                await calls.blocking(storage.handle_log_failure, log, exc)
            return exc
        try:
            if answer.__class__ is str:  # not answered inline: why (unified_log.INLINE_*)
                if answer == "busy":
                    calls.count_busy_fallback()
                elif answer == "refused":
                    calls.count_inline()  # (the inline attempt was made, as ``sized`` counts it)
                answer = (await calls.blocking(log.lookup_timestamps, [timestamp_ms]))[0]
            else:
                calls.count_inline()
        except LogDirOfflineError as exc:  # the pool's call took the log offline: as log_call does
            await calls.blocking(storage.handle_log_failure, log, exc)
            return exc
        except Exception as exc:  # noqa: BLE001 - the whole call's error is the target's
            return exc
        if answer.__class__ is not TimestampAndOffset and isinstance(answer, LogDirOfflineError):
            # Its search took the log offline (a found answer skips the isinstance call).
            await calls.blocking(storage.handle_log_failure, log, answer)  # as log_call does
        return answer

    async def _answer_packed(self, entries: Any, answers: Any) -> int:
        """The packed form: per PartitionTimestamps entry a PartitionOffsets into ``answers``,
        in the entries' order, its lists read and written whole (no message per target: upb's
        cost is per field). Returns the number of targets."""
        count = 0
        for entry in entries:
            topic, partition = entry.topic, entry.partition
            timestamps_ms = entry.timestamps_ms[:]  # a list (slicing is quicker than list())
            count += len(timestamps_ms)
            found = await self._search(topic, partition, timestamps_ms) if timestamps_ms else []
            answer = answers.add()
            answer.topic, answer.partition = topic, partition
            if set(map(type, found)) == _ANSWERED:  # every target answered: both lists in C
                found_ms, offsets = zip(*found)  # TimestampAndOffset is (timestamp_ms, offset)
                answer.offsets.extend(offsets)
                answer.timestamps_ms.extend(found_ms)
                continue
            offsets = [-1] * len(found)
            found_ms = [-1] * len(found)
            for index, outcome in enumerate(found):
                if outcome is None:
                    continue
                if isinstance(outcome, Exception):
                    status, message = self._error_status(outcome)
                    failed = answer.errors.add()
                    failed.index = index
                    conversions.fill_partition_error(failed.error, status, message, outcome)
                else:
                    offsets[index], found_ms[index] = outcome.offset, outcome.timestamp_ms
            answer.offsets.extend(offsets)
            answer.timestamps_ms.extend(found_ms)
        return count

    def _error_status(self, error: Exception) -> tuple[Any, str]:
        """A target's error as its status and (redacted) message; a bug raised (the boundary
        answers INTERNAL and logs it)."""
        status = status_for(error)
        if not status.expected:
            raise error
        return status, self.core.log_dir_names.redact(status.message)

    async def _search(self, topic: str, partition: int, timestamps_ms: list[int]) -> list[Any]:
        """The outcome of each of ``timestamps_ms`` (targets of partition ``topic``-``partition``),
        in their order: a storage outcome (an answer, None, or the error that target met), or
        the error the request's check or the whole call met."""
        try:
            validation.check_partition_ref(topic, partition)
        except InvalidRequestError as exc:
            return [exc] * len(timestamps_ms)
        outcomes: list[Any] | None = None
        searched_at: list[int] = []
        searched = timestamps_ms
        if min(timestamps_ms) < validation.MAX_TIMESTAMP:  # some target's timestamp is refused: those alone
            outcomes = [None] * len(timestamps_ms)
            for index, timestamp_ms in enumerate(timestamps_ms):
                try:
                    validation.check_target_timestamp(timestamp_ms)
                    searched_at.append(index)
                except InvalidRequestError as exc:
                    outcomes[index] = exc
            if not searched_at:
                return outcomes
            searched = [timestamps_ms[index] for index in searched_at]
        cluster = self.core.cluster
        refusal = None if cluster is None else cluster.owner_error(topic, partition)
        if refusal is not None:  # owned elsewhere: each target's error names the owner
            found: list[Any] = [refusal] * len(searched)
        elif len(searched) == 1:
            # One target of the partition (a call over many partitions, one time each, as a
            # group seeking to a time asks): the single lookup's path, not the shared search's
            # set-up (sorting, runs, a budget) for one target.
            found = [await self._search_one(topic, partition, searched[0])]
        else:
            try:
                log = self.core.storage.get_log(topic, partition)
                # A handful of lookups runs inline (microseconds each); more go to the pool, or one
                # request of a few MiB of targets would hold the event loop for seconds. So does a
                # log's first lookup by time after a restart: it checks every segment on first use.
                pooled = len(searched) > _INLINE_LOOKUPS_MAX or self.core.storage.timestamp_lookup_may_block(
                    log, searched)
                found = await self._lookup(log, searched, pooled)
            except Exception as exc:  # noqa: BLE001 - the whole call's error is each target's
                found = [exc] * len(searched)
            else:
                for answer in found:
                    if isinstance(answer, LogDirOfflineError):  # a target's search took the log offline
                        await self.core.calls.blocking(self.core.storage.handle_log_failure, log, answer)  # as log_call does
                        break
        if outcomes is None:
            return found
        for index, answer in zip(searched_at, found):
            outcomes[index] = answer
        return outcomes

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
