"""Natural order of ids ("n2/gpu10" after "n2/gpu9"): every tie in sched breaks on it."""

from __future__ import annotations

import functools
import re
from typing import Any

_DIGITS = re.compile(r"(\d+)")


@functools.lru_cache(maxsize=262144)  # ids repeat on every placement; parse each once
def natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(text))
