"""`alloc`'s placement: of the free slices that satisfy a JobRequest, the smallest ones.

`alloc` and `submit` ask in one request type (JobRequest; alloc's count is `gpus`) and are
placed by one implementation, place(); alloc keeps its documented rule, least memory then
natural id (ALLOC_POLICY), and its own messages. The decision is made here; the ledger only
records the slices chosen, inside its transaction (see Ledger.alloc).

    from gpupoolctl.sched.alloc import alloc
    done = alloc(ledger, JobRequest(profile="1g.10gb"), owner="alice", ttl=timedelta(hours=8))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from gpupoolctl.ledger.errors import NothingFits

# sched's public names, not its modules: those are being reworked behind them.
from gpupoolctl.sched import ALLOC_POLICY, JobRequest, Placement, PoolView, place
from gpupoolctl.sched.ids import natural
from gpupoolctl.sched.names import check_names

if TYPE_CHECKING:
    from gpupoolctl.ledger.ledger import Done, Ledger
    from gpupoolctl.ledger.state import State

# The fields alloc takes, in the order its journal records and messages have always had them.
_FIELDS = ("profile", "memory_mib", "gpus", "host", "vendor")


def record(request: JobRequest) -> dict[str, Any]:
    """The request as alloc records it in the journal: its own fields, gpus as "count"."""
    out: dict[str, Any] = {}
    for name in _FIELDS:
        value = getattr(request, name)
        if value is not None:
            out["count" if name == "gpus" else name] = value
    return out


def describe(request: JobRequest) -> str:
    """'profile=gpu, vendor=amd x2' for alloc's no-fit message."""
    parts = [f"{k}={v}" for k, v in record(request).items() if k != "count"]
    return (", ".join(parts) or "any slice") + (f" x{request.gpus}" if request.gpus > 1 else "")


def fit_key(entry: dict[str, Any]) -> tuple[Any, ...]:
    """Least memory first (least waste), then the id in natural order: deterministic."""
    return (entry.get("memory_mib") or 0, natural(entry["id"]))


def pick(state: State, request: JobRequest, now: str) -> list[dict[str, Any]]:
    """The free slices alloc takes for `request` as of `now`; NothingFits (exit 5) when there
    are not enough, UsageError (exit 2) for a request that could never be understood."""
    # Same checks as submit (a mistyped vendor is a usage error, not "nothing fits"), except
    # that alloc has always taken --profile and --mem together, as two filters.
    checked = replace(request, memory_mib=None) if request.profile else request
    checked.validate()
    pool = PoolView.from_state(state, now)
    result = place(request, pool, ALLOC_POLICY)
    if not isinstance(result, Placement):
        if state.slices:
            check_names(request, state.slices.values())
        found = sum(1 for _ in pool.free_candidates(request))
        raise NothingFits(_why(state, request, pool, found))
    return [state.slices[s] for s in result.slices]


def choose(request: JobRequest) -> Callable[[State, str], list[str]]:
    """The ids alloc takes, as a function of the ledger's state and time: Ledger.alloc runs
    it under its lock, so two allocs at once never pick the same slice."""

    def chosen(state: State, now: str) -> list[str]:
        return [entry["id"] for entry in pick(state, request, now)]

    return chosen


def alloc(ledger: Ledger, request: JobRequest, *, owner: str, ttl: timedelta | None = None) -> Done:
    """Hold the slices alloc's rule picks for `request`, in one ledger transaction."""
    return ledger.alloc(choose(request), owner=owner, ttl=ttl, request=record(request))


def _why(state: State, request: JobRequest, pool: PoolView, found: int) -> str:
    if not state.slices:
        return "nothing fits: the ledger knows no slices yet (run `gpupoolctl pool` first)"
    # Free as placement sees it: a lost card or a drained host is not free.
    shape = Counter(s.get("profile") or s.get("kind") for s in map(pool.slices.get, pool.free) if s)
    free = ", ".join(f"{n} x {p}" for p, n in sorted(shape.items())) or "none"
    return f"nothing fits {describe(request)}: {found} matching slice(s) free; free now: {free}"
