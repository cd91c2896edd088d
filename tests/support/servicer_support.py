"""A LogServicer over a real LogManager, called directly (no gRPC server): the servicer with the
limits the rpc unit tests use, and a call context whose abort raises Aborted (an AssertionError, so
a call not meant to abort fails the test; a test that means one catches it and reads the code);
and a servicer of one slot over no topics behind a gate, for the stream admission tests."""

from __future__ import annotations

from seglog_server.rpc.admission import AdmissionLimits
from seglog_server.rpc.call_gate import CallGate
from seglog_server.rpc.log_service import LogServicer, LogServicerLimits
from seglog_server.rpc.storage_calls import StorageCalls
from seglog_server.storage.manager.log_manager import LogManager

# One pool thread and a 1 KiB inline threshold: the placement tests tell pool from inline by them.
POOL_THREADS = 1
INLINE_IO_BYTES_MAX = 1024


class Aborted(AssertionError):
    """What Context.abort raises: the status code and message the handler aborted with."""

    def __init__(self, code, message) -> None:
        super().__init__(f"aborted {code}: {message}")
        self.code = code


class Context:
    """The part of grpc.aio's ServicerContext a handler touches; abort keeps the code it was
    given (``code``) and raises Aborted."""

    code = None

    def invocation_metadata(self):
        return ()

    def set_trailing_metadata(self, metadata):
        pass

    async def abort(self, code, message, trailing_metadata=()):
        self.code = code
        raise Aborted(code, message)


def _limits() -> LogServicerLimits:
    return LogServicerLimits(fetch_bytes_max=1 << 20, fetch_wait_ms_max=1000,
                             response_bytes_max=4 << 20, message_bytes_max=1 << 20)


def servicer_over(manager: LogManager) -> tuple[LogServicer, StorageCalls]:
    """A servicer over ``manager`` and its storage pool; the caller shuts the pool down."""
    calls = StorageCalls(thread_count=POOL_THREADS, inline_io_bytes_max=INLINE_IO_BYTES_MAX)
    return LogServicer(manager, calls, _limits()), calls


class NoTopics:
    """A manager without topics: every log asked for is unknown; nothing here ever changes."""

    def set_change_listener(self, listener):
        pass

    def get_log(self, topic, partition):
        from seglog_server.storage.base.errors import UnknownTopicOrPartitionError

        raise UnknownTopicOrPartitionError(f"unknown topic {topic!r}")


def one_slot_servicer(gate: CallGate) -> tuple[LogServicer, StorageCalls]:
    """A servicer over NoTopics with one request slot (and one of each other admission bound),
    behind ``gate``, and its storage pool; the caller shuts the pool down."""
    calls = StorageCalls(thread_count=POOL_THREADS, inline_io_bytes_max=INLINE_IO_BYTES_MAX)
    admission = AdmissionLimits(request_max=1, waiter_max=1, waiter_per_client_max=1, stream_max=1,
                                stream_per_client_max=1)
    return LogServicer(NoTopics(), calls, _limits(), admission, gate=gate), calls
