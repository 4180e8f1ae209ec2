"""`--since` parsing: a seq, a duration back from now, or an ISO-8601 time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.errors import UsageError
from gpupoolctl.ledger.units import format_ts, parse_since


@given(st.integers(min_value=0, max_value=10**12))
def test_a_number_is_a_seq(seq: int) -> None:
    assert parse_since(str(seq)) == (seq, None)


def test_a_duration_counts_back_from_now() -> None:
    before = datetime.now(UTC)
    _, since = parse_since("2h")
    after = datetime.now(UTC)
    assert since is not None
    assert format_ts(before - timedelta(hours=2, seconds=1)) <= since
    assert since <= format_ts(after - timedelta(hours=2) + timedelta(seconds=1))


def test_an_iso_time_without_zone_is_utc() -> None:
    assert parse_since("2025-06-01T12:00:00") == (None, "2025-06-01T12:00:00.000Z")


@pytest.mark.parametrize("text", ["yesterday", "2h ago", "12:00 tomorrow", "-5"])
def test_anything_else_names_every_accepted_form(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_since(text)
    message = str(caught.value)
    assert "--since" in message and repr(text) in message
    assert "seq" in message and "2h" in message and "ISO-8601" in message
