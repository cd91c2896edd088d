import asyncio
import logging

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seglog_server.rpc.admission import Admission, AdmissionLimits
from seglog_server.rpc.log_dir_names import LogDirNames
from seglog_server.rpc.boundary import (
    DEBUG_TIMING_METADATA_KEY,
    MESSAGE_BYTES_MAX,
    SERVER_TIME_METADATA_KEY,
    RpcCounters,
    stream_rpc,
    _bounded,
    unary_rpc,
)
from seglog_server.storage.base.errors import OffsetOutOfRangeError


class Aborted(Exception):
    """What grpc.aio's context.abort raises (AbortError), for this stand-in context."""


class RecordingContext:
    """Stands in for grpc.aio.ServicerContext: records what the boundary tells it."""

    def __init__(self, metadata=()):
        self.metadata = tuple(metadata)
        self.aborted = None
        self.trailing = None

    def invocation_metadata(self):
        return self.metadata

    def set_trailing_metadata(self, metadata):
        self.trailing = dict(metadata)

    async def abort(self, code, details, trailing_metadata=()):
        self.aborted = (code, details, dict(trailing_metadata))
        raise Aborted()


class _AdmitEverything:
    """A call gate that lets every call through (the gate itself is tested in test_call_gate)."""

    class _Call:
        async def before_response(self, response):
            pass

        def release(self):
            pass

    async def admit(self, method, request, context):
        return self._Call()


class Core:
    """The parts of a ServiceCore the boundary reads (service_core.py)."""

    def __init__(self):
        self.counters = RpcCounters()
        self.gate = _AdmitEverything()
        self.admission = Admission(AdmissionLimits(10, 10, 10, 10, 10))
        self.log_dir_names = LogDirNames(["/srv/seglog/data0"])
        self.metrics = None
        self.cluster = None  # a single process: no owner check


class Servicer:
    """An RPC family: its methods wrapped by the boundary, which reads ``self.core``."""

    def __init__(self):
        self.core = Core()
        self.counters = self.core.counters
        self.admission = self.core.admission

    @unary_rpc
    async def Fine(self, request, context):
        return "response"

    @unary_rpc
    async def OutOfRange(self, request, context):
        raise OffsetOutOfRangeError("offset 9 is outside [0, 3]")

    @unary_rpc
    async def Broken(self, request, context):
        return {}["missing"]

    @stream_rpc
    async def Stream(self, request, context):
        raise OffsetOutOfRangeError("stream start outside the log")


async def test_expected_error_becomes_its_status_with_the_message_and_class():
    servicer, context = Servicer(), RecordingContext()
    with pytest.raises(Aborted):
        await servicer.OutOfRange(None, context)
    code, details, trailing = context.aborted
    assert code == grpc.StatusCode.OUT_OF_RANGE
    assert details == "offset 9 is outside [0, 3]"
    assert trailing == {"seglog-error": "OffsetOutOfRangeError"}
    assert servicer.counters.snapshot().errors_by_code == {"OUT_OF_RANGE": 1}


async def test_unexpected_error_is_internal_and_its_traceback_is_logged(caplog):
    servicer, context = Servicer(), RecordingContext()
    with caplog.at_level(logging.ERROR, logger="seglog_server.rpc"), pytest.raises(Aborted):
        await servicer.Broken(None, context)
    assert context.aborted[0] == grpc.StatusCode.INTERNAL
    assert "KeyError" in context.aborted[1]
    (record,) = caplog.records
    assert "Broken failed unexpectedly" in record.getMessage()
    assert record.exc_info is not None
    assert servicer.counters.snapshot().internal_error_count == 1


async def test_stream_errors_go_through_the_same_table():
    servicer, context = Servicer(), RecordingContext()
    with pytest.raises(Aborted):
        await servicer.Stream(None, context)
    assert context.aborted[0] == grpc.StatusCode.OUT_OF_RANGE


async def test_server_time_is_returned_only_when_asked_for():
    servicer = Servicer()
    plain = RecordingContext()
    assert await servicer.Fine(None, plain) == "response"
    assert plain.trailing is None
    asking = RecordingContext(metadata=[(DEBUG_TIMING_METADATA_KEY, "1")])
    await servicer.Fine(None, asking)
    assert int(asking.trailing[SERVER_TIME_METADATA_KEY]) >= 0
    assert servicer.counters.snapshot().calls_by_method == {"Fine": 2}


class SlowServicer(Servicer):
    def __init__(self):
        super().__init__()
        self.started = asyncio.Event()

    @unary_rpc
    async def Slow(self, request, context):
        self.started.set()
        await asyncio.sleep(3600)

    @stream_rpc
    async def SlowStream(self, request, context):
        self.started.set()
        await asyncio.sleep(3600)


@pytest.mark.parametrize("method", ["Slow", "SlowStream"])
async def test_a_call_still_running_after_the_grace_is_cut_with_unavailable(method):
    servicer = SlowServicer()
    context = RecordingContext()
    call = asyncio.ensure_future(getattr(servicer, method)(None, context))
    await servicer.started.wait()
    assert await servicer.admission.drain(grace_s=0.01) == 1
    with pytest.raises(Aborted):
        await call
    code, details, trailing = context.aborted
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "grace period ran out" in details
    assert trailing == {"seglog-error": "ServiceStoppingError"}


async def test_calls_arriving_during_the_drain_are_refused_unavailable_and_the_rest_finish():
    release = asyncio.Event()

    class Finishing(Servicer):
        @unary_rpc
        async def Wait(self, request, context):
            await release.wait()
            return "done"

    servicer = Finishing()
    first = asyncio.ensure_future(servicer.Wait(None, RecordingContext()))
    await asyncio.sleep(0)
    drain = asyncio.ensure_future(servicer.admission.drain(grace_s=30))
    await asyncio.sleep(0)
    late = RecordingContext()
    with pytest.raises(Aborted):
        await servicer.Fine(None, late)
    assert late.aborted[0] == grpc.StatusCode.UNAVAILABLE
    release.set()
    assert await first == "done"  # in flight before the drain: it finishes
    assert await drain == 0


async def test_a_client_cancellation_passes_through_untouched():
    servicer = SlowServicer()
    context = RecordingContext()
    call = asyncio.ensure_future(servicer.Slow(None, context))
    await servicer.started.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert context.aborted is None


class PathServicer(Servicer):
    @unary_rpc
    async def Corrupt(self, request, context):
        raise OffsetOutOfRangeError("/srv/seglog/data0/t-0/00000000000000000000.log: offset 9")


async def test_error_messages_name_the_log_dir_not_its_server_path():
    context = RecordingContext()
    with pytest.raises(Aborted):
        await PathServicer().Corrupt(None, context)
    assert context.aborted[1] == "log dir #0 (data0)/t-0/00000000000000000000.log: offset 9"


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=3000) | st.text(max_size=3000).map(lambda t: t * 4))
def test_a_message_is_cut_by_its_utf8_size_never_inside_a_character(message):
    """What the boundary sends is at most MESSAGE_BYTES_MAX UTF-8 bytes (at most three times that
    once percent-encoded: far below gRPC's 8 KiB soft limit on metadata), a whole message when it
    fits, else a prefix of whole characters and a note of the cut."""
    sent = _bounded(message)
    encoded = sent.encode("utf-8")  # strict: a lone surrogate has been escaped
    assert len(encoded) <= MESSAGE_BYTES_MAX
    plain = message.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(plain.encode()) <= MESSAGE_BYTES_MAX:
        assert sent == plain
    else:
        kept, _, note = sent.rpartition(" ... (message cut: ")
        assert plain.startswith(kept) and note == f"{len(plain.encode())} bytes)"
        assert len(kept.encode()) > MESSAGE_BYTES_MAX - 40 - 3  # at most one character short


def test_a_cut_message_of_four_byte_characters_stays_whole():
    sent = _bounded("\U0001f600" * 10_000)
    assert sent.startswith("\U0001f600" * 360) and sent.endswith("(message cut: 40000 bytes)")
    assert len(sent.encode()) <= MESSAGE_BYTES_MAX
