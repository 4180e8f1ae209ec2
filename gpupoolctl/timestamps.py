"""The pool's times: what the ledger records, and what the scheduler decides by.

Times are fixed-width UTC text, so comparing them as text is comparing times. Below both
ledger/ and sched/: the ledger writes them, the scheduler reads them.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

from gpupoolctl.errors import UsageError

NOW_ENV = "GPUPOOL_NOW"


def utc_now() -> datetime:
    """The current time. GPUPOOL_NOW (an ISO-8601 time) fixes it, for the ledger's records
    and the scheduling pass's decisions: tests and benchmarks cross a time window's boundary
    by setting it, never by waiting."""
    fixed = os.environ.get(NOW_ENV)
    if fixed:
        try:
            return parse_ts(fixed)
        except UsageError:
            raise UsageError(
                f"{NOW_ENV}={fixed[:40]!r} is not a time; use ISO-8601, e.g. 2026-12-07T08:00:00Z"
            ) from None
    return datetime.now(UTC)


def format_ts(moment: datetime) -> str:
    """Fixed-width UTC ISO-8601 with milliseconds and 'Z': sorts and compares as text."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def parse_ts(text: str) -> datetime:
    """An ISO-8601 time; a time without zone is taken as UTC."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError:
        raise UsageError(f"bad time {text!r}: use ISO-8601, e.g. 2025-06-01T12:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def seconds_between(start: str, end: str) -> float:
    """Seconds from one recorded time to another (negative when `end` is earlier)."""
    return (parse_ts(end) - parse_ts(start)).total_seconds()
