"""Scalar values of a policy file: durations and bounded whole numbers.

Each parser raises UsageError with what was wrong and what was expected; the section
parsers turn it into a SourceError at the value's line (YamlSource.at).
"""

from __future__ import annotations

import math
import re
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.hw.shown import shown

DURATION_FORMS = "30s, 5m, 1h, 1h30m, 2d or a number of seconds"
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_MAX_TEXT = 64  # no duration is longer; a long one is a mistake, shown cut short


def duration_s(value: Any, what: str, *, most_s: float) -> float:
    """A duration in seconds, 0 <= d <= most_s: a number of seconds or '1h30m' style text."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise UsageError(f"{what}: expected a duration ({DURATION_FORMS}), got {shown(value)}")
    if isinstance(value, int) and value > most_s:  # compare before float(): 10**400 overflows
        seconds = math.inf
    elif isinstance(value, int | float):
        seconds = float(value)
    else:
        seconds = _duration_text(value, what)
    if math.isnan(seconds) or seconds < 0:
        raise UsageError(f"{what}: {shown(value)} is not a duration; expected {DURATION_FORMS}")
    if seconds > most_s:
        raise UsageError(
            f"{what}: {shown(value)} is too long; expected at most {duration_text(most_s)}"
        )
    return seconds


def _duration_text(text: str, what: str) -> float:
    compact = text.strip().lower()
    if len(compact) <= _MAX_TEXT:
        if _NUMBER.fullmatch(compact):
            return float(compact)
        parts = _PART.findall(compact)
        units = [unit for _, unit in parts]
        # Each unit once, largest first: '1h30m' is clear, '30m1h' or '1m1m' is a typo.
        ordered = units == sorted(set(units), key=lambda u: -_UNIT_S[u])
        if parts and ordered and "".join(n + u for n, u in parts) == compact:
            return sum(float(n) * _UNIT_S[u] for n, u in parts)
    raise UsageError(f"{what}: bad duration {shown(text)}; expected {DURATION_FORMS}")


def whole(value: Any, what: str, *, least: int, most: int) -> int:
    """A whole number least <= n <= most (a YAML int, never a bool or a float)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(
            f"{what}: expected a whole number from {least} to {most}, got {shown(value)}"
        )
    if not least <= value <= most:
        raise UsageError(f"{what}: {shown(value)} is out of range; expected {least} to {most}")
    return value


def duration_text(seconds: float) -> str:
    """300 -> '5m', 5400 -> '1h30m', 0.5 -> '0.5s': how the summary shows a duration."""
    if seconds == 0:
        return "0s"
    if not float(seconds).is_integer():
        return f"{seconds:g}s"
    rest = int(seconds)
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out
