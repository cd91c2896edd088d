"""The status -> exception table in seglog.errors, walked entry by entry."""

from __future__ import annotations

import grpc
import pytest

import seglog.errors as errors
from seglog.records import errors as codec_errors


class FakeRpcError(grpc.RpcError):
    """What grpc raises for a failed call: an RpcError with code() and details()."""

    def __init__(
        self, code: grpc.StatusCode, details: str, trailing: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailing


EXPECTED = {
    grpc.StatusCode.INVALID_ARGUMENT: errors.InvalidRequestError,
    grpc.StatusCode.NOT_FOUND: errors.TopicNotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: errors.TopicExistsError,
    grpc.StatusCode.OUT_OF_RANGE: errors.OffsetOutOfRangeError,
    grpc.StatusCode.DATA_LOSS: errors.CorruptRecordError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: errors.RecordTooLargeError,
    grpc.StatusCode.FAILED_PRECONDITION: errors.FailedPreconditionError,
    grpc.StatusCode.UNAUTHENTICATED: errors.AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: errors.AuthorizationError,
    grpc.StatusCode.UNAVAILABLE: errors.ServiceUnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: errors.RequestTimeoutError,
    # Only the service's side cancels with a status (the service stopping): retriable.
    grpc.StatusCode.CANCELLED: errors.ServiceUnavailableError,
}


# Every status a failed call can carry (OK never comes with an RpcError).
ERROR_CODES = [code for code in grpc.StatusCode if code is not grpc.StatusCode.OK]


# What a status without the service's ``seglog-error`` metadata becomes: RESOURCE_EXHAUSTED then
# comes from gRPC itself (overload, message size limit), not from the service's size checks.
EXPECTED_WITHOUT_METADATA = {
    **EXPECTED, grpc.StatusCode.RESOURCE_EXHAUSTED: errors.ServiceOverloadedError
}


@pytest.mark.parametrize("code", ERROR_CODES, ids=lambda c: c.name)
def test_every_status_code_translates_to_one_seglog_error_with_code_and_details(code):
    error = errors.error_from_rpc(FakeRpcError(code, "what went wrong"))
    assert type(error) is EXPECTED_WITHOUT_METADATA.get(code, errors.ServiceError)
    assert isinstance(error, errors.SeglogError)
    assert error.code is code
    assert error.message == "what went wrong"
    assert str(error) == f"what went wrong ({code.name})"


def test_the_table_maps_exactly_the_documented_codes():
    assert errors._STATUS_TO_ERROR == EXPECTED


@pytest.mark.parametrize(
    "service_error", ["RecordTooLargeError", "RecordBatchTooLargeError", "ResponseTooLargeError"]
)
def test_resource_exhausted_named_by_the_service_is_record_too_large(service_error):
    rpc_error = FakeRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED, "too big", (("seglog-error", service_error),)
    )
    error = errors.error_from_rpc(rpc_error)
    assert type(error) is errors.RecordTooLargeError and not error.retriable
    assert error.service_error == service_error


def test_resource_exhausted_from_grpc_itself_is_a_retriable_overload():
    error = errors.error_from_rpc(
        FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, "Concurrent RPC limit exceeded!")
    )
    assert type(error) is errors.ServiceOverloadedError
    assert isinstance(error, errors.ServiceUnavailableError) and error.retriable
    assert error.service_error is None


def test_translate_rpc_errors_chains_the_grpc_error_as_cause():
    original = FakeRpcError(grpc.StatusCode.NOT_FOUND, "unknown topic 'x'")
    with pytest.raises(errors.TopicNotFoundError) as caught:
        with errors.translate_rpc_errors():
            raise original
    assert caught.value.__cause__ is original


def test_translate_rpc_errors_lets_other_exceptions_through():
    with pytest.raises(KeyError):
        with errors.translate_rpc_errors():
            raise KeyError("x")


def test_status_without_details_gets_a_message_naming_the_code():
    error = errors.error_from_rpc(FakeRpcError(grpc.StatusCode.INTERNAL, ""))
    assert type(error) is errors.ServiceError
    assert "INTERNAL" in error.message


@pytest.mark.parametrize(
    "codec_error",
    [
        codec_errors.InvalidCrcError("crc"),
        codec_errors.CorruptRecordError("bad varint"),
        codec_errors.UnsupportedCompressionError("codec 7"),
        codec_errors.CodecError("other"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_codec_errors_become_corrupt_record_errors_with_the_cause_chained(codec_error):
    with pytest.raises(errors.CorruptRecordError) as caught:
        with errors.translate_codec_errors():
            raise codec_error
    assert caught.value.__cause__ is codec_error
    assert caught.value.code is None


def test_only_unavailable_and_timeouts_are_retriable():
    retriable = {cls for cls in EXPECTED_WITHOUT_METADATA.values() if cls.retriable}
    assert retriable == {
        errors.ServiceUnavailableError, errors.ServiceOverloadedError, errors.RequestTimeoutError
    }
    assert not errors.ServiceError.retriable and not errors.ClientClosedError.retriable


def test_request_timeout_is_also_a_builtin_timeout_error():
    assert issubclass(errors.RequestTimeoutError, TimeoutError)


def test_the_module_docstring_draws_every_error_class():
    classes = [name for name in errors.__all__ if name.endswith("Error")]
    for name in classes:
        assert name in errors.__doc__, name


@pytest.mark.parametrize("service_error", ["QuotaExceededError", "PrincipalLimitError", "AuthenticationBusyError"])
def test_quota_refusals_are_retriable_and_carry_the_retry_hint(service_error):
    error = errors.error_from_rpc(FakeRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED, "over quota",
        (("seglog-error", service_error), ("retry-after-ms", "250")),
    ))
    assert type(error) is errors.QuotaExceededError
    assert error.retriable and isinstance(error, errors.ServiceOverloadedError)
    assert error.retry_after_ms == 250


@pytest.mark.parametrize(("text", "expected"), [("-5", 0), ("abc", None), ("999999999", 60_000)])
def test_retry_hints_are_bounded_and_bad_ones_ignored(text, expected):
    error = errors.error_from_rpc(FakeRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED, "over quota",
        (("seglog-error", "QuotaExceededError"), ("retry-after-ms", text)),
    ))
    assert error.retry_after_ms == expected


def test_a_stream_ended_by_a_failed_write_is_a_retriable_break_but_the_services_internal_is_not():
    """grpc.aio replaces the status of a call whose write failed in the core with INTERNAL
    "Internal error from Core"; the stream's requests are then retried like any broken stream's.
    An INTERNAL the service sent (its own message) stays what it is."""
    from seglog._streams import _stream_ended

    def rpc_error(details: str) -> grpc.aio.AioRpcError:
        return grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, grpc.aio.Metadata(), grpc.aio.Metadata(), details)

    broken = _stream_ended(rpc_error("Internal error from Core"))
    assert isinstance(broken, errors.ServiceUnavailableError) and broken.retriable
    service = _stream_ended(rpc_error("seglog: an internal error; the service logged it"))
    assert not isinstance(service, errors.ServiceUnavailableError) and not service.retriable
    assert service.code is grpc.StatusCode.INTERNAL
