"""The keys of one entry of a list-valued inventory var (gpupool_site_links, sim_nics).

Stdlib only: the agent checks what it is sent with the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpupoolctl.hw.shown import shown


def entry_problem(
    where: str, entry: Any, known: Sequence[str], required: Sequence[str]
) -> str | None:
    """What is wrong with `entry`'s keys, in one line starting with `where`; None when it is
    a mapping with only `known` keys and every `required` one set."""
    if not isinstance(entry, dict):
        *head, last = required
        names = f"{', '.join(head)} and {last}" if head else last
        return f"{where} must be a mapping with {names}"
    unknown = sorted((k for k in entry if k not in known), key=str)
    if unknown:
        keys = ", ".join(shown(k) for k in unknown)
        return f"{where}: unknown key(s) {keys} (known: {', '.join(known)})"
    missing = [k for k in required if entry.get(k) is None]
    if missing:
        return f"{where}: missing {', '.join(missing)}"
    return None
