"""`alloc`'s request and its fit: of the free slices that satisfy it, the smallest ones.

The matching and the choice are gpupoolctl.sched's (place() with ALLOC_POLICY), so there is
one placement implementation; this module keeps the ledger's Request and its messages.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from gpupoolctl.ledger.errors import NothingFits
from gpupoolctl.ledger.state import State

if TYPE_CHECKING:
    from gpupoolctl.sched import JobRequest

# gpupoolctl.sched is imported where it is used: commands that only read the ledger
# (`ledger show`, `pool --no-refresh`) then start ~20 ms sooner.


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


def job_request(request: Request) -> JobRequest:
    """The same request in sched's terms (count -> gpus)."""
    from gpupoolctl.sched import JobRequest

    return JobRequest(
        gpus=request.count,
        profile=request.profile,
        memory_mib=request.memory_mib,
        vendor=request.vendor,
        host=request.host,
    )


def fit_key(entry: dict[str, Any]) -> tuple[Any, ...]:
    """Least memory first (least waste), then the id in natural order: deterministic."""
    from gpupoolctl.sched.ids import natural

    return (entry.get("memory_mib") or 0, natural(entry["id"]))


def pick(state: State, request: Request, now: str) -> list[dict[str, Any]]:
    """Placement is sched's (one implementation); `alloc` keeps its documented rule, least
    memory then natural id (sched's ALLOC_POLICY), without best-fit's packing tie-breaks."""
    from gpupoolctl.sched import ALLOC_POLICY, Placement, PoolView, place

    wanted = job_request(request)
    # Same checks as submit (a mistyped vendor is a usage error, not "nothing fits"), except
    # that alloc has always taken --profile and --mem together, as two filters.
    checked = replace(wanted, memory_mib=None) if wanted.profile else wanted
    checked.validate()
    pool = PoolView.from_state(state, now)
    result = place(wanted, pool, ALLOC_POLICY)
    if not isinstance(result, Placement):
        if state.slices:
            from gpupoolctl.sched.names import check_names

            check_names(wanted, state.slices.values())
        found = sum(1 for _ in pool.free_candidates(wanted))
        raise NothingFits(_why(state, request, now, found))
    return [state.slices[s] for s in result.slices]


def _why(state: State, request: Request, now: str, found: int) -> str:
    if not state.slices:
        return "nothing fits: the ledger knows no slices yet (run `gpupoolctl pool` first)"
    shape = Counter(s.get("profile") or s.get("kind") for s in state.free_slices(now))
    free = ", ".join(f"{n} x {p}" for p, n in sorted(shape.items())) or "none"
    return f"nothing fits {request.describe()}: {found} matching slice(s) free; free now: {free}"
