"""`alloc`'s placement: of the free slices that satisfy a JobRequest, the smallest ones.

`alloc` and `submit` ask in one request type (JobRequest; alloc's count is `gpus`) and are
placed by one implementation, place(); alloc keeps its documented rule, least memory then
natural id (ALLOC_POLICY), and its own messages. The decision is made here; the ledger only
records the slices chosen, inside its transaction (Ledger.alloc, called with `choose` by
jobs.alloc). A request with a team is admitted against that team's quota as submit's work is
(sched.shares.place_for_team): its hold counts in `quota` and `usage` from then on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gpupoolctl.errors import NothingFits

# sched's public names, not its modules: those are being reworked behind them.
from gpupoolctl.sched import ALLOC_POLICY, JobRequest, NoFit, Placement, PoolView, explain, place
from gpupoolctl.sched.ids import natural
from gpupoolctl.sched.names import check_names
from gpupoolctl.sched.place import not_free
from gpupoolctl.sched.request import host_matches
from gpupoolctl.sched.shares import QuotaWait, Usage, place_for_team

if TYPE_CHECKING:
    from gpupoolctl.sched.recorded import RecordedState
    from gpupoolctl.sched.shares import ShareInputs

    # The teams' quotas and usage as of the ledger's state and time (sched.snapshot.share_inputs
    # with the policy in force); None where the policy has no teams.
    Shares = Callable[[RecordedState, str], ShareInputs | None]

# The fields alloc takes, in the order its journal records and messages have always had them.
_FIELDS = ("profile", "memory_mib", "gpus", "host", "vendor", "team")


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


def pick(
    state: RecordedState, request: JobRequest, now: str, shares: Shares | None = None
) -> list[dict[str, Any]]:
    """The free slices alloc takes for `request` as of `now`; NothingFits (exit 5) when there
    are not enough, or when its team's quota (`shares`) does not allow them; UsageError
    (exit 2) for a request that could never be understood."""
    # Same checks as submit (a mistyped vendor is a usage error, not "nothing fits"), except
    # that alloc has always taken --profile and --mem together, as two filters.
    checked = replace(request, memory_mib=None) if request.profile else request
    checked.validate()
    pool = PoolView.from_state(state, now)
    inputs = shares(state, now) if shares is not None and request.team is not None else None
    result = _place(request, pool, inputs)
    if not isinstance(result, Placement):
        if state.slices:
            check_names(request, state.slices.values())
        found = sum(1 for _ in pool.free_candidates(request))
        # With a team: its quota's reason, where the pool alone would have had room.
        quota = inputs is not None and (
            isinstance(result, QuotaWait) or result.never or found >= request.gpus
        )
        raise NothingFits(_why(pool, request, result.reason if quota else None))
    return [state.slices[s] for s in result.slices]


def _place(request: JobRequest, pool: PoolView, inputs: ShareInputs | None) -> Placement | NoFit:
    """alloc's rule; within the team's quota when the request has a team with one."""

    def place_any() -> Placement | NoFit:
        return place(request, pool, ALLOC_POLICY)

    if inputs is None or request.team is None:
        return place_any()
    usage = Usage.of_pool(pool, inputs)
    return place_for_team(request.team, request, pool, usage, place_any)


def choose(
    request: JobRequest, shares: Shares | None = None
) -> Callable[[RecordedState, str], list[str]]:
    """The ids alloc takes, as a function of the ledger's state and time: Ledger.alloc runs
    it under its lock, so two allocs at once never pick the same slice (nor, together, more
    than a team's quota)."""

    def chosen(state: RecordedState, now: str) -> list[str]:
        return [entry["id"] for entry in pick(state, request, now, shares)]

    return chosen


def _why(pool: PoolView, request: JobRequest, quota: str | None) -> str:
    if not pool.slices:
        return "nothing fits: the ledger knows no slices yet (run `gpupoolctl pool` first)"
    if quota is not None:
        return f"nothing fits {describe(request)}: {quota}"
    # What is free where the request may go (its --host), as placement sees it.
    shape = Counter(
        pool.slices[s].get("profile") or pool.slices[s].get("kind")
        for s in pool.free
        if host_matches(pool.slices[s]["host"], request)
    )
    free = ", ".join(f"{n} x {p}" for p, n in sorted(shape.items())) or "none"
    where = f" on {request.host}" if request.host is not None else ""
    # Which of the matching slices are not free, and why (held, drained, on a lost node...).
    free_now, taken = not_free(request, pool)
    matching = explain.counted(free_now, free_now + sum(n for _, n in taken), taken)
    return f"nothing fits {describe(request)}: {matching}; free now{where}: {free}"
