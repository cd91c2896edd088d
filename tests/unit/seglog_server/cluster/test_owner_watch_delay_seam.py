"""The metadata watch's test seam (SEGLOG_TEST_FAULT_OWNER_WATCH_DELAY_MS): unset it costs
nothing; a value that is not a whole number of milliseconds above 0 is refused by name when the
cache is built, not taken (a negative delay ended the watch thread at its first owner change,
and a malformed one raised a bare ValueError naming nothing)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seglog_server.cluster.metadata_cache import WATCH_OWNER_DELAY_ENV, owner_watch_delay_s


@pytest.mark.parametrize("spec", [None, ""])
def test_unset_is_no_delay(spec):
    assert owner_watch_delay_s(spec) == 0.0


@given(st.integers(1, 10**6))
def test_a_whole_number_of_milliseconds_is_the_delay(delay_ms):
    assert owner_watch_delay_s(str(delay_ms)) == delay_ms / 1000


@pytest.mark.parametrize("spec", ["-5", "0", "1.5", "abc", "1500ms", " "])
def test_anything_else_is_refused_naming_the_variable(spec):
    with pytest.raises(ValueError, match=WATCH_OWNER_DELAY_ENV):
        owner_watch_delay_s(spec)
