import pytest

from seglog_server.security import (
    CallKind,
    PrincipalLimitError,
    PrincipalQuota,
    QuotaBook,
    QuotaExceededError,
    SecurityFileError,
)
from seglog_server.security.quotas import LIMIT_RETRY_AFTER_MS, ByteRate, parse_quota_file


class FakeClock:
    def __init__(self):
        self.now_s = 100.0

    def __call__(self):
        return self.now_s


def test_byte_rate_banks_one_window_of_credit_and_refills_at_its_rate():
    rate = ByteRate(1000, window_ms=1000, now_s=0.0)
    assert rate.charge(1000, 0.0) == 0  # the window's credit
    assert rate.charge(500, 0.0) == pytest.approx(500)  # 500 bytes of debt at 1000/s: 500 ms
    assert rate.throttle_ms(0.25) == pytest.approx(250)
    assert rate.throttle_ms(10.0) == 0
    assert rate.credit == rate.capacity  # never more than one window banked


def _book(clock, delay_ms_max=1000, **overrides):
    return QuotaBook(PrincipalQuota(), {"slow": PrincipalQuota(**overrides)} if overrides else {},
                     window_ms=1000, delay_ms_max=delay_ms_max, clock=clock)


def test_charges_delay_up_to_the_bound_then_refuse_with_the_time_to_pay():
    clock = FakeClock()
    book = _book(clock, produce_bytes_per_s=1000)
    book.admit_bytes("slow", "produce")
    assert book.charge_bytes("slow", "produce", 1000) == 0
    assert book.charge_bytes("slow", "produce", 3000) == pytest.approx(1.0)  # capped at 1 s
    with pytest.raises(QuotaExceededError) as info:
        book.admit_bytes("slow", "produce")  # 3 s of debt > the 1 s bound
    assert info.value.retry_after_ms == 3000
    clock.now_s += 2.5
    book.admit_bytes("slow", "produce")  # 0.5 s left: admitted, delayed
    book.admit_bytes("fast", "produce")  # another principal: no quota, never refused


def test_a_stream_waits_out_its_debt_in_full_and_is_never_refused():
    clock = FakeClock()
    book = _book(clock, fetch_bytes_per_s=1000)
    assert book.stream_delay("slow", 1000) == 0
    assert book.stream_delay("slow", 5000) == 0  # charged after the wait: this one goes now
    assert book.stream_delay("slow", 10) == pytest.approx(5.0)


def test_caps_per_principal_and_kind():
    book = _book(FakeClock(), streams_max=1)
    book.acquire("slow", CallKind.STREAM)
    with pytest.raises(PrincipalLimitError) as info:
        book.acquire("slow", CallKind.STREAM)
    assert info.value.retry_after_ms == LIMIT_RETRY_AFTER_MS
    book.acquire("slow", CallKind.REQUEST)  # other kinds are not capped
    book.acquire("other", CallKind.STREAM)  # other principals neither
    book.release("slow", CallKind.STREAM)
    book.acquire("slow", CallKind.STREAM)
    assert book.statistics().in_use_by_principal["slow"] == {"requests": 1, "waiters": 0, "streams": 1}


def test_reloaded_limits_keep_the_slots_in_use():
    book = _book(FakeClock(), streams_max=2)
    book.acquire("slow", CallKind.STREAM)
    book.replace_overrides({"slow": PrincipalQuota(streams_max=1)})
    with pytest.raises(PrincipalLimitError):
        book.acquire("slow", CallKind.STREAM)
    book.release("slow", CallKind.STREAM)


def test_quota_file_overrides_only_the_keys_it_sets():
    defaults = PrincipalQuota(produce_bytes_per_s=5, streams_max=3)
    overrides = parse_quota_file("[principals.alice]\nstreams_max = 1\n", defaults)
    assert overrides == {"alice": PrincipalQuota(produce_bytes_per_s=5, streams_max=1)}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[principals.alice]\nbytes = 1\n", "unknown keys"),
        ("[principals.alice]\nstreams_max = -1\n", "integer >= 0"),
        ("[principals.alice]\nstreams_max = true\n", "integer >= 0"),
        ("[users.alice]\n", "only"),
        ("[principals.'a b']\n", "bad principal"),
    ],
)
def test_malformed_quota_files_are_refused(text, reason):
    with pytest.raises(SecurityFileError, match=reason):
        parse_quota_file(text, PrincipalQuota())
