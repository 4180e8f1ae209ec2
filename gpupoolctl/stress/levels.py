"""Ramp levels and durations: the text forms a scenario is written in, read and checked.

    levels     '1,2,4,8' (a list), '1..64x2' (geometric), '1..33+8' (linear); closed-model
               levels are concurrent submitters, open-model levels arrivals per second
    durations  '500ms', '250us', '30s', '2m', '1h30m', or a number of seconds

Errors are UsageErrors; a file parser turns them into SourceErrors at the value's line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.hw.shown import shown
from gpupoolctl.ledger.units import parse_duration

__all__ = [
    "LEVEL_FORMS",
    "MAX_CONCURRENCY",
    "MAX_LEVELS",
    "MAX_RATE",
    "MODELS",
    "bounded_seconds",
    "check_levels",
    "format_levels",
    "level_range",
    "number_text",
    "parse_levels",
    "parse_seconds",
]

MODELS = ("closed", "open")
MAX_LEVELS = 64
MAX_CONCURRENCY = 1024  # closed model: submitter threads on the workstation
MAX_RATE = 10000.0  # open model: arrivals per second (the harness keeps 4,000/s on 2 cores)

# --- numbers and durations ---------------------------------------------------------------

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_SUBSECOND = re.compile(rf"^({_NUMBER})\s*(ms|us)$")
_SUBSECOND_SCALE = {"ms": 1e-3, "us": 1e-6}
_ZERO = re.compile(r"^0+(?:\.0*)?\s*(?:ms|us|[smhdw])?$")


def number_text(value: float) -> str:
    """1.0 -> '1', 0.5 -> '0.5': the shortest text that reads back as the same float."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


def parse_seconds(value: str | float, what: str = "duration", *, allow_zero: bool = False) -> float:
    """'500ms', '30s', '2m', '1h30m', '250us', or a number of seconds -> seconds.
    Everything but ms/us goes through ledger.units.parse_duration."""
    if isinstance(value, bool):
        raise UsageError(f"{what}: expected a duration such as 30s, got {shown(value)}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        sub = _SUBSECOND.match(text)
        if re.fullmatch(_NUMBER, text):
            seconds = float(text)
        elif sub:
            seconds = float(sub.group(1)) * _SUBSECOND_SCALE[sub.group(2)]
        elif _ZERO.match(text):
            seconds = 0.0
        else:
            try:
                seconds = parse_duration(text).total_seconds()
            except UsageError as exc:
                raise UsageError(f"{what}: {exc} (or 500ms)") from None
    else:
        raise UsageError(f"{what}: expected a duration such as 30s, got {shown(value)}")
    if not math.isfinite(seconds) or seconds < 0:
        raise UsageError(f"{what}: expected a duration such as 30s, got {shown(value)}")
    if seconds == 0 and not allow_zero:
        raise UsageError(f"{what}: must be more than zero")
    return seconds


def bounded_seconds(value: Any, what: str, *, allow_zero: bool, most: float) -> float:
    """parse_seconds, and no more than `most` seconds."""
    seconds = parse_seconds(value, what, allow_zero=allow_zero)
    if seconds > most:
        raise UsageError(f"{what}: at most {number_text(most)}s (got {number_text(seconds)}s)")
    return seconds


# --- levels ------------------------------------------------------------------------------

LEVEL_FORMS = (
    "'1,2,4,8' (a list), '1..64x2' (start..stop x factor: 1,2,4,...,64) "
    "or '1..33+8' (start..stop + step: 1,9,17,25,33)"
)
_RANGE = re.compile(rf"^({_NUMBER})\s*\.\.\s*({_NUMBER})\s*([x+])\s*({_NUMBER})$")
_SIGNIFICANT = 12  # drops float noise: 0.1 + 2 * 0.1 is 0.3, not 0.30000000000000004


def _clean(value: float) -> float:
    return float(f"{value:.{_SIGNIFICANT}g}")


def _level_number(text: str) -> float:
    text = text.strip()
    if not re.fullmatch(_NUMBER, text):
        raise UsageError(f"bad level {shown(text)}: expected a number > 0; use {LEVEL_FORMS}")
    return float(text)


def level_range(
    start: float, stop: float, *, factor: float | None = None, step: float | None = None
) -> tuple[float, ...]:
    """Geometric (factor) or linear (step) levels from start up to stop; a stop that is
    not on the grid ends the range at the last value below it."""
    if (factor is None) == (step is None):
        raise UsageError("a level range needs either a factor (1..64x2) or a step (1..33+8)")
    for name, value in (("start", start), ("stop", stop), ("factor", factor), ("step", step)):
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise UsageError(f"bad level range: {name} must be a number > 0 (got {shown(value)})")
    if start > stop:
        raise UsageError(
            f"bad level range {number_text(start)}..{number_text(stop)}: start is above stop"
        )
    if factor is not None and factor <= 1:
        raise UsageError(f"bad level range: the factor must be more than 1 (got {shown(factor)})")
    limit = stop * (1 + 1e-9)
    out: list[float] = [start]  # exactly as written
    grown = start
    for k in range(1, MAX_LEVELS + 1):
        grown = grown * factor if factor is not None else start + k * (step or 0)
        if grown > limit:
            return _increasing(out)
        # Float noise off (0.1 + 2 * 0.1 is 0.3); a value at stop is stop as written.
        value = stop if math.isclose(grown, stop, rel_tol=1e-9) else _clean(grown)
        if value <= out[-1]:
            raise UsageError(
                "bad level range: the factor or step is too small for levels to differ"
            )
        out.append(value)
    raise UsageError(f"too many levels: at most {MAX_LEVELS}; use a bigger factor or step")


def _increasing(levels: Sequence[float]) -> tuple[float, ...]:
    if not levels:
        raise UsageError(f"no levels given; use {LEVEL_FORMS}")
    if len(levels) > MAX_LEVELS:
        raise UsageError(f"too many levels ({len(levels)}): at most {MAX_LEVELS}")
    for before, after in pairwise(levels):
        if after == before:
            raise UsageError(f"level {number_text(after)} is given twice; levels must increase")
        if after < before:
            raise UsageError(
                f"levels must increase: {number_text(after)} comes after {number_text(before)}"
            )
    for value in levels:
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"bad level {shown(value)}: levels are numbers > 0")
    return tuple(float(v) for v in levels)


def parse_levels(text: str) -> tuple[float, ...]:
    """'1,2,4,8', '1..64x2' or '1..33+8' -> strictly increasing levels (at most 64).
    Whether they suit the model (whole numbers for closed, bounds) is check_levels' job."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"no levels given; use {LEVEL_FORMS}")
    compact = text.strip()
    ranged = _RANGE.match(compact)
    if ranged:
        start, stop, kind, by = ranged.groups()
        numbers = float(start), float(stop), float(by)
        if kind == "x":
            return level_range(numbers[0], numbers[1], factor=numbers[2])
        return level_range(numbers[0], numbers[1], step=numbers[2])
    if ".." in compact:
        raise UsageError(f"bad level range {shown(compact)}: use {LEVEL_FORMS}")
    parts = compact.split(",")
    if len(parts) > MAX_LEVELS:
        raise UsageError(f"too many levels ({len(parts)}): at most {MAX_LEVELS}")
    return _increasing([_level_number(p) for p in parts])


def format_levels(levels: Sequence[float]) -> str:
    """The list form, '1,2,4,8', that parse_levels reads back to the same values."""
    return ",".join(number_text(v) for v in levels)


def check_levels(
    levels: Sequence[float], model: str, *, max_rate: float | None = None
) -> tuple[float, ...]:
    """Levels that suit the model: closed -> whole submitters 1..1024; open -> arrival
    rates per second in (0, max_rate], MAX_RATE (10,000) by default. Also strictly
    increasing, at most 64."""
    most_rate = MAX_RATE if max_rate is None else max_rate
    if model not in MODELS:
        raise UsageError(f"unknown load model {shown(model)}: use {' or '.join(MODELS)}")
    values = []
    for value in levels:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError(f"bad level {shown(value)}: levels are numbers")
        values.append(float(value))
    result = _increasing(values)
    for value in result:
        if model == "closed":
            if not value.is_integer() or not 1 <= value <= MAX_CONCURRENCY:
                raise UsageError(
                    f"bad level {number_text(value)}: closed-model levels are whole numbers of "
                    f"concurrent submitters, 1..{MAX_CONCURRENCY}"
                )
        elif value > most_rate:
            raise UsageError(
                f"bad level {number_text(value)}: open-model levels are arrivals per second, "
                f"at most {number_text(most_rate)}"
            )
    return result
