"""Best fit: of the free slices that satisfy a request, take the smallest ones."""

from __future__ import annotations

import fnmatch
import functools
import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from gpupoolctl.ledger.errors import NothingFits
from gpupoolctl.ledger.state import State


@dataclass(frozen=True)
class Request:
    profile: str | None = None  # "1g.10gb", "gpu", "vf", "cpx": profile, its mode, or kind
    memory_mib: int | None = None  # at least this much
    count: int = 1
    host: str | None = None  # glob on the host name
    vendor: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.to_dict().items() if k != "count"]
        return (", ".join(parts) or "any slice") + (f" x{self.count}" if self.count > 1 else "")


def matches(entry: dict[str, Any], request: Request) -> bool:
    if request.profile is not None:
        wanted = request.profile.lower()
        profile = (entry.get("profile") or "").lower()
        names = {entry.get("kind", ""), profile, profile.split("/")[0]}
        if wanted not in names:
            return False
    if request.memory_mib is not None and (entry.get("memory_mib") or 0) < request.memory_mib:
        return False
    if request.host is not None and not fnmatch.fnmatchcase(entry["host"], request.host):
        return False
    return request.vendor is None or entry.get("vendor") == request.vendor


@functools.lru_cache(maxsize=65536)  # ids repeat on every alloc; parse each once
def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def fit_key(entry: dict[str, Any]) -> tuple[Any, ...]:
    """Least memory first (least waste), then the id in natural order: deterministic."""
    return (entry.get("memory_mib") or 0, _natural(entry["id"]))


def pick(state: State, request: Request, now: str) -> list[dict[str, Any]]:
    if request.count < 1:
        raise ValueError("count must be at least 1")
    free = [s for s in state.free_slices(now) if matches(s, request)]
    if len(free) < request.count:
        raise NothingFits(_why(state, request, now, len(free)))
    return sorted(free, key=fit_key)[: request.count]


def _why(state: State, request: Request, now: str, found: int) -> str:
    if not state.slices:
        return "nothing fits: the ledger knows no slices yet (run `gpupoolctl pool` first)"
    shape = Counter(s.get("profile") or s.get("kind") for s in state.free_slices(now))
    free = ", ".join(f"{n} x {p}" for p, n in sorted(shape.items())) or "none"
    return f"nothing fits {request.describe()}: {found} matching slice(s) free; free now: {free}"
