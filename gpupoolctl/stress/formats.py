"""Numbers for people: rates, percentages, durations and levels as the reports print them.

Shared by the text report, the HTML report and the bottleneck sentence (stress.bottleneck),
which report_text also shows: one module below both, so that neither imports the other.
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "-"


def _fixed(x: float, significant: int) -> str:
    """`x` in fixed notation (never 1e-05) with `significant` digits; 9.996 -> '10.0'."""
    if x == 0:
        return "0"
    exponent = math.floor(math.log10(abs(x)))
    decimals = max(0, significant - 1 - exponent)
    text = f"{x:.{decimals}f}"
    # Rounding can carry into the next decade (9.996 -> 10.00): one digit too many.
    if decimals > 0 and abs(float(text)) >= 10 ** (exponent + 1):
        text = f"{x:.{decimals - 1}f}"
    return text


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and not math.isnan(x)


def format_rate(x: float | None) -> str:
    """Jobs per second with 3 significant digits, whole numbers from 100 up: 41.2, 0.123, 152.

    The unit is left to the caller (a column header or ' jobs/s'). None or NaN -> '-'."""
    if not _is_number(x):
        return MISSING
    assert x is not None
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return _fixed(x, 3)


def format_percent(fraction: float | None) -> str:
    """A fraction as a percentage: 0.123 -> '12%', 0.015 -> '1.5%', 0.0004 -> '0.04%'."""
    if not _is_number(fraction) or fraction is None or math.isinf(fraction):
        return MISSING
    percent = fraction * 100
    if percent == 0:
        return "0%"
    if abs(percent) >= 9.95:
        return f"{percent:.0f}%"
    if abs(percent) >= 0.095:
        return f"{percent:.1f}%"
    return f"{_fixed(percent, 1)}%"


def format_duration(seconds: float | None) -> str:
    """Seconds for people, 2-3 significant digits below a minute:
    '850 us', '4.2 ms', '12 ms', '1.4 s', '42 s', then '2m05s', '1h02m', '2d03h'.
    None or NaN -> '-'; negative values keep their sign."""
    if not _is_number(seconds) or seconds is None:
        return MISSING
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if math.isinf(seconds):
        return "inf"
    if seconds == 0:
        return "0 s"
    if seconds < 0.05e-6:
        return "<0.1 us"  # below what the histograms resolve (1 us)
    # Below a minute: pick the unit from the value once rounded, so 0.9996 s reads '1.0 s'
    # and not '1000 ms'.
    for scale, unit in ((1e6, "us"), (1e3, "ms"), (1.0, "s")):
        value = seconds * scale
        text = f"{value:.1f}" if value < 9.95 else f"{value:.0f}"
        if float(text) < (60 if unit == "s" else 1000):
            return f"{text} {unit}"
    whole = round(seconds)
    if whole < 3600:
        minutes, secs = divmod(whole, 60)
        return f"{minutes}m{secs:02d}s"
    whole_minutes = round(seconds / 60)
    if whole_minutes < 24 * 60:
        hours, minutes = divmod(whole_minutes, 60)
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(round(seconds / 3600), 24)
    return f"{days}d{hours:02d}h"


def format_level(level: float) -> str:
    """Concurrency levels are whole numbers ('16'); arrival rates may not be ('2.5')."""
    if float(level).is_integer():
        return str(int(level))
    return f"{level:g}"
