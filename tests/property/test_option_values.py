"""Option values as people (and unset shell variables) type them: a value or a UsageError
(exit 2) in one line, never another exception, for any text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import ExitCode, UsageError
from gpupoolctl.jobs.spec import parse_env
from gpupoolctl.ledger.units import parse_duration, parse_memory_mib, parse_ts
from gpupoolctl.sched.request import parse_priority

ODD = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "1e999", "nan", "inf", "-1", "0", "9" * 400, "²", "１０G", "10 G",
                     "10GiBs", "1h30", "=", "A=", "=x", "a b=1", "\x00", "2025-13-01"]),
)  # fmt: skip

PARSERS: list[tuple[str, Callable[[str], Any]]] = [
    ("duration", parse_duration),
    ("memory", parse_memory_mib),
    ("time", parse_ts),
    ("priority", parse_priority),
    ("env", lambda text: parse_env([text])),
]


@pytest.mark.parametrize(("name", "parse"), PARSERS, ids=[n for n, _ in PARSERS])
@given(text=ODD)
@settings(max_examples=300, deadline=None)
def test_any_text_is_a_value_or_one_usage_error(name: str, parse, text: str) -> None:
    try:
        parse(text)
    except UsageError as exc:
        assert exc.exit_code == ExitCode.USAGE
        assert "\n" not in str(exc) or "\n" in text
