"""Durations (`8h`, `1h30m`) and memory sizes (`10gb`, `40GiB`, `512mib`) as users type them."""

from __future__ import annotations

import re
from datetime import timedelta

from gpupoolctl.errors import UsageError

# Imported from here by much of the house; they live below the ledger and the scheduler.
from gpupoolctl.timestamps import NOW_ENV, format_ts, parse_ts, utc_now

__all__ = [
    "NOW_ENV",
    "format_ts",
    "parse_duration",
    "parse_memory_mib",
    "parse_since",
    "parse_ts",
    "utc_now",
]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

# gb/mb are decimal like MIG profile names ("1g.10gb" holds 9984 MiB, which is >= 10 GB);
# gib/mib binary. A bare number means GB, the unit people read off profile names.
_MEMORY_UNITS = {
    "": 10**9,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
}
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


MAX_DURATION_S = 100 * 365 * 86400
MAX_MEMORY_BYTES = 2**50  # no card, node or pool asks for more than a pebibyte


def parse_duration(text: str) -> timedelta:
    """'90s', '30m', '8h', '2d', '1h30m' -> timedelta (> 0)."""
    compact = text.strip().replace(" ", "")
    parts = _DURATION_PART.findall(compact)
    if not compact or "".join(n + u for n, u in parts).lower() != compact.lower():
        raise UsageError(f"bad duration {text!r}: use e.g. 90s, 30m, 8h, 2d or 1h30m")
    seconds = sum(float(n) * _SECONDS[u.lower()] for n, u in parts)
    if seconds <= 0:
        raise UsageError(f"bad duration {text!r}: must be more than zero")
    # A ttl or --since past this cannot mean anything, and datetime arithmetic overflows.
    if seconds > MAX_DURATION_S:
        raise UsageError(f"bad duration {text!r}: at most 100 years")
    return timedelta(seconds=seconds)


def parse_memory_mib(text: str) -> int:
    """'10gb' -> 9537 MiB (rounded up); '40GiB' -> 40960; '512mib' -> 512."""
    match = _MEMORY.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _MEMORY_UNITS:
        raise UsageError(f"bad memory size {text!r}: use e.g. 10gb, 40GiB or 512MiB")
    size = float(match.group(1)) * _MEMORY_UNITS[unit]
    if not size < MAX_MEMORY_BYTES:  # also inf, from "9" * 400
        raise UsageError(f"bad memory size {text[:40]!r}: at most 1 PiB")
    mib = -(-int(size) // 2**20)
    if mib <= 0:
        raise UsageError(f"bad memory size {text!r}: must be more than zero")
    return mib


def parse_since(text: str | None) -> tuple[int | None, str | None]:
    """`--since` as users type it: a seq (123), a duration back from now (2h), or a time
    (2025-06-01T12:00Z). Returns (since_seq, since_ts) for `Ledger.history`; at most one is
    set, both are None when `text` is None."""
    if text is None:
        return None, None
    text = text.strip()
    if text.isdigit():
        return int(text), None
    try:
        if text[-1:].lower() in "smhdw" and text[:1].isdigit() and "-" not in text:
            return None, format_ts(utc_now() - parse_duration(text))
        return None, format_ts(parse_ts(text))
    except UsageError:
        raise UsageError(
            f"bad --since {text!r}: use a seq (1234), a time back from now (2h, 1d) "
            "or an ISO-8601 time (2025-06-01T12:00:00Z)"
        ) from None
