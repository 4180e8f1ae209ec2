"""Teams' shares of the pool: quota limits at placement, fair-share order, reclaim.

Pure decisions on a PoolView, for sched.schedule_pass (production and the benchmarks alike).

- A team's quota in force (policy.PoolPolicy.quota_in_force: windows applied) is a list of
  scopes (the whole pool, or a site / vendor / model); a scope counts GPU memory, whole
  cards, slices and per-profile slices of what the team holds on the slices it selects.
  A team with scopes may only use slices some scope selects; a team with none is not
  limited (it is counted for fair share only). Work outside every team (no team given and
  none by default) is not limited either.
- Admission: a placement may take a team up to nominal + borrowing limit per resource. Above
  nominal it borrows: only from capacity that no other team keeps for itself (the part of
  another team's unused nominal beyond its lending limit stays free for it).
- Order: within one effective priority, the team with the least usage for its share goes
  first (usage = decayed history + what it holds now, share = its nominal GPU memory), and
  placements made in the pass count at once, so one team's burst interleaves with the
  others' work instead of going first whole.
- Reclaim (Kueue's reclaimWithinCohort, Volcano's deserved share): work of a team that is
  within its nominal and does not fit may stop jobs of teams above their nominal: only jobs
  that borrowed when placed, or that are preemptible; lowest priority first, newest first;
  never taking a team below its nominal. They are requeued (their checkpoint signal and
  grace first); reclaim does not count against restart budgets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpupoolctl.hw.units import MIB_PER_GIB
from gpupoolctl.policy.model import CARDS, GPU_MEMORY, SLICES, QuotaScope
from gpupoolctl.sched.place import NoFit, Placement, place
from gpupoolctl.sched.pool import Holder, PoolView
from gpupoolctl.sched.preempt import newer_first
from gpupoolctl.sched.request import JobRequest


@dataclass(frozen=True)
class ShareInputs:
    """What share decisions need, built by the caller from the policy and the ledger."""

    # Team -> its quota in force now; () for a team that is not limited.
    quotas: Mapping[str, tuple[QuotaScope, ...]]
    # Team -> usage history (GiB-seconds, decayed to now) for fair share.
    history: Mapping[str, float] = field(default_factory=dict)
    reclaim: bool = True
    # (team, slice) for what teams hold on slices outside the pass's view (a pass limited to
    # some hosts with -l): counted against the quotas, never placed on or reclaimed.
    elsewhere: Sequence[tuple[str, Mapping[str, Any]]] = ()

    def limited(self, team: str | None) -> bool:
        return team is not None and bool(self.quotas.get(team))

    def share(self, team: str) -> float:
        """The team's nominal GPU memory (GiB) over all scopes: its weight for fair share."""
        return sum(s.nominal.get(GPU_MEMORY, 0) for s in self.quotas.get(team, ())) / MIB_PER_GIB


def slice_amounts(entry: Mapping[str, Any], scope: QuotaScope) -> dict[str, int]:
    """What one slice counts for, in the resources `scope` names (empty when the scope does
    not select it)."""
    if not scope.selects(entry):
        return {}
    out: dict[str, int] = {}
    kind = str(entry.get("kind") or "").lower()
    profile = str(entry.get("profile") or "").lower().split("/")[0]
    for resource in scope.resources():
        if resource == GPU_MEMORY:
            out[resource] = int(entry.get("memory_mib") or 0)
        elif resource == CARDS:
            out[resource] = 1 if kind == "gpu" else 0
        elif resource == SLICES:
            out[resource] = 1
        else:
            out[resource] = 1 if resource in (kind, profile) else 0
    return out


def add(total: dict[str, int], amounts: Mapping[str, int], sign: int = 1) -> None:
    for resource, amount in amounts.items():
        total[resource] = total.get(resource, 0) + sign * amount


def amounts(entries: Iterable[Mapping[str, Any]], scope: QuotaScope) -> dict[str, int]:
    """What slices count for together in `scope` (slice_amounts summed)."""
    total: dict[str, int] = {}
    for entry in entries:
        add(total, slice_amounts(entry, scope))
    return total


@dataclass
class Usage:
    """What each team holds, per scope of its quota in force (index as in the quota), and
    in GPU memory overall (for fair share). Kept up to date through a pass."""

    inputs: ShareInputs
    held: dict[str, list[dict[str, int]]] = field(default_factory=dict)
    memory_mib: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of_pool(cls, pool: PoolView, inputs: ShareInputs) -> Usage:
        usage = cls(inputs)
        for holder in pool.holds.values():
            if holder.team is not None:
                usage.change(holder.team, [pool.slices[s] for s in holder.slices], +1)
        for team, entry in inputs.elsewhere:
            usage.change(team, [entry], +1)
        return usage

    def scopes(self, team: str) -> tuple[QuotaScope, ...]:
        return self.inputs.quotas.get(team, ())

    def of(self, team: str) -> list[dict[str, int]]:
        found = self.held.get(team)
        if found is None:
            found = self.held[team] = [{} for _ in self.scopes(team)]
        return found

    def change(self, team: str, entries: Sequence[Mapping[str, Any]], sign: int) -> None:
        self.memory_mib[team] = self.memory_mib.get(team, 0) + sign * sum(
            int(e.get("memory_mib") or 0) for e in entries
        )
        per_scope = self.of(team)
        for index, scope in enumerate(self.scopes(team)):
            for entry in entries:
                add(per_scope[index], slice_amounts(entry, scope), sign)

    def above_nominal(self, team: str, index: int, resource: str) -> int:
        """How far the team is above its nominal in a scope (0 when within it)."""
        scope = self.scopes(team)[index]
        return max(0, self.of(team)[index].get(resource, 0) - scope.nominal.get(resource, 0))

    def fair_share_key(self, team: str | None) -> float:
        """Usage over share, lower first: history plus what it holds now (GiB-seconds count
        one second of what it holds, so a team holding more goes later at equal history)."""
        if team is None:
            return 1.0
        share = self.inputs.share(team)
        used = self.inputs.history.get(team, 0.0) + self.memory_mib.get(team, 0) / MIB_PER_GIB
        if share <= 0:
            return float("inf") if used > 0 else 1.0
        return used / share


class QuotaWait(NoFit):
    """A request that waits for its team's quota, not for free slices: no preemption and
    no re-cut is made for it. Its code: "quota-limit", "quota-off-scope" or "quota-kept"."""

    __slots__ = ()


def refusal(
    team: str, entries: Sequence[Mapping[str, Any]], usage: Usage, pool: PoolView
) -> QuotaWait | None:
    """Why a placement of `entries` (slice dicts) would break the team's quota; None: it may
    take them. Checks the limits (nominal + borrowing) and, where it borrows, that no other
    team's kept capacity (nominal beyond its lending limit, unused) is taken."""
    scopes = usage.scopes(team)
    if not scopes:
        return None
    for entry in entries:
        if not any(scope.selects(entry) for scope in scopes):
            detail = {"team": team, "host": entry.get("host"), "model": entry.get("model")}
            return QuotaWait("quota-off-scope", False, detail)
    over = _over_limit(team, entries, usage)
    if over is not None:
        return over
    if borrows(team, entries, usage):
        return _kept_for_others(team, entries, usage, pool)
    return None


def _over_limit(team: str, entries: Sequence[Mapping[str, Any]], usage: Usage) -> QuotaWait | None:
    """Why taking `entries` would take the team above nominal + borrowing limit in a scope;
    None when it would not."""
    held = usage.of(team)
    for index, scope in enumerate(usage.scopes(team)):
        taking = amounts(entries, scope)
        for resource, amount in taking.items():
            limit = scope.limit(resource)
            used = held[index].get(resource, 0)
            if amount and limit is not None and used + amount > limit:
                where = None if scope.key == (None, None, None) else scope.describe()
                detail = {
                    "team": team,
                    "resource": resource,
                    "used": used,
                    "limit": limit,
                    "scope": where,
                }
                return QuotaWait("quota-limit", False, detail)
    return None


def _blocked(team: str, request: JobRequest, pool: PoolView, usage: Usage) -> QuotaWait | None:
    """The quota reason when the team could take no slice that could ever serve the request,
    free or not: each is on no scope of its quota, or on one already at its limit for what
    the slice counts. None when some slice is within its reach: then the request waits for
    slices (that preemption, reclaim or a re-cut may free), not for its quota."""
    scopes = usage.scopes(team)
    if not scopes:
        return None
    why: QuotaWait | None = None
    seen: set[tuple[int, str]] = set()
    for slot in pool.all_candidates(request):
        kind = (slot.shape.index, slot.site)  # what a slice counts for depends on no more
        if kind in seen:
            continue
        seen.add(kind)
        entry = pool.slices[slot.id]
        if not any(scope.selects(entry) for scope in scopes):
            continue
        over = _over_limit(team, [entry], usage)
        if over is None:
            return None
        why = why or over
    return why


def borrows(team: str, entries: Sequence[Mapping[str, Any]], usage: Usage) -> bool:
    """Whether taking `entries` takes the team above its nominal anywhere."""
    for index, scope in enumerate(usage.scopes(team)):
        taking = amounts(entries, scope)
        for resource, amount in taking.items():
            nominal = scope.nominal.get(resource)
            if (
                nominal is not None
                and amount > 0
                and usage.of(team)[index].get(resource, 0) + amount > nominal
            ):
                return True
    return False


def _kept_for_others(
    team: str, entries: Sequence[Mapping[str, Any]], usage: Usage, pool: PoolView
) -> QuotaWait | None:
    """A borrower may not take what another team keeps: for each scope with a lending limit,
    the free capacity it selects must stay at least its unused, unlendable nominal."""
    for other, scopes in usage.inputs.quotas.items():
        if other == team:
            continue
        for index, scope in enumerate(scopes):
            for resource in scope.nominal:
                lendable = scope.lendable(resource)
                if lendable is None:
                    continue
                kept = scope.nominal[resource] - lendable - usage.of(other)[index].get(resource, 0)
                if kept <= 0:
                    continue
                taking = sum(slice_amounts(e, scope).get(resource, 0) for e in entries)
                if taking == 0:
                    continue
                free = sum(
                    slice_amounts(pool.slices[sid], scope).get(resource, 0) for sid in pool.free
                )
                if free - taking < kept:
                    detail = {"team": team, "other": other, "resource": resource, "kept": kept}
                    return QuotaWait("quota-kept", False, detail)
    return None


def out_of_reach(team: str, usage: Usage, pool: PoolView) -> list[str]:
    """Free slices that the team may not take one by one: on no scope of its quota, or one
    that is already at its limit for what the slice counts. Hidden from its placement, so
    that place() picks among what the team may have."""
    scopes = usage.scopes(team)
    if not scopes:
        return []
    held = usage.of(team)
    hidden = []
    for sid in pool.free:
        entry = pool.slices[sid]
        allowed = False
        for index, scope in enumerate(scopes):
            amounts = slice_amounts(entry, scope)
            if not amounts:
                continue
            over = False
            for resource, amount in amounts.items():
                limit = scope.limit(resource)
                if amount and limit is not None and held[index].get(resource, 0) + amount > limit:
                    over = True
                    break
            if over:
                allowed = False
                break
            allowed = True
        if not allowed:
            hidden.append(sid)
    return hidden


def within_nominal(team: str, entries: Sequence[Mapping[str, Any]], usage: Usage) -> bool:
    """Whether the team, holding `entries` too, stays within its nominal in every scope
    that counts them: work that may reclaim what others borrowed."""
    scopes = usage.scopes(team)
    if not scopes:
        return False
    for index, scope in enumerate(scopes):
        taking = amounts(entries, scope)
        for resource, amount in taking.items():
            if amount and usage.of(team)[index].get(resource, 0) + amount > scope.nominal.get(
                resource, 0
            ):
                return False
    return True


def reclaimable(
    team: str,
    usage: Usage,
    pool: PoolView,
    spare: Iterable[str] = (),
    useful: Callable[[Holder], bool] | None = None,
) -> list[Holder]:
    """Holds that reclaim may stop for `team`'s work: jobs of other teams above their nominal
    that borrowed or are preemptible, cheapest first per team (lowest priority, newest), and
    per team only as many as keep it at or above its nominal in every scope they count in.
    Any subset of the result keeps every team at or above its nominal. `useful`: only holds
    it accepts (those whose end could help the request), so that holds that could not help
    do not use up what their team may give back."""
    skip = set(spare)
    by_team: dict[str, list[Holder]] = {}
    for holder in pool.holds.values():
        if holder.alloc in skip or holder.job is None or holder.team in (None, team):
            continue
        if useful is not None and not useful(holder):
            continue
        if not (holder.borrowed or holder.preemptible):
            continue
        if not usage.scopes(str(holder.team)):
            continue  # a team without a quota has no nominal to be above
        by_team.setdefault(str(holder.team), []).append(holder)
    chosen: list[Holder] = []
    for other, holders in sorted(by_team.items()):
        holders.sort(key=lambda h: (h.priority or 0, _newest_first(h.since), newer_first(h.alloc)))
        room = [
            {r: usage.above_nominal(other, i, r) for r in scope.nominal}
            for i, scope in enumerate(usage.scopes(other))
        ]
        for holder in holders:
            entries = [pool.slices[s] for s in holder.slices]
            takes = []
            fits = True
            for index, scope in enumerate(usage.scopes(other)):
                counted = amounts(entries, scope)
                for resource, amount in counted.items():
                    if resource in room[index] and amount > room[index][resource]:
                        fits = False
                takes.append(counted)
            if not fits:
                continue
            for index, counted in enumerate(takes):
                for resource, amount in counted.items():
                    if resource in room[index]:
                        room[index][resource] -= amount
            chosen.append(holder)
    return chosen


def _newest_first(since: str | None) -> tuple[int, ...]:
    return tuple(-ord(c) for c in since or "")


# Whether an elastic re-cut of some card that the predicate selects (it is given the card's
# slice fields: host, site, vendor, model) could hold one slice of the request.
RecutReach = Callable[[Callable[[Mapping[str, Any]], bool]], bool]


def place_for_team(
    team: str,
    request: JobRequest,
    pool: PoolView,
    usage: Usage,
    place_any: Callable[[], Placement | NoFit],
    recut_reach: RecutReach | None = None,
) -> Placement | NoFit:
    """The placement of a team's request (place_any places it on `pool` as it is), within
    its quota: first as placement would choose; when that breaks the quota, again with the
    slices the team may not take hidden; a QuotaWait with the quota's reason otherwise.
    `recut_reach` (with elastic re-cuts): a request no slice of the team's scopes could hold
    today but a re-cut of one of its cards could is waiting, not refused."""
    scopes = usage.scopes(team)

    def on_scopes(card: Mapping[str, Any]) -> bool:
        return any(scope.selects(card) for scope in scopes)

    if (
        scopes
        and not _reachable(team, request, pool, scopes)
        and (recut_reach is None or not recut_reach(on_scopes))
    ):
        return NoFit("team-no-quota", True, {"team": team, "want": request.describe()})
    first = place_any()
    if isinstance(first, NoFit):
        # No room now; but where the team is at its limit on every slice that could serve
        # the request it waits for its quota: no victims, no re-cut for it.
        blocked = None if first.never else _blocked(team, request, pool, usage)
        return first if blocked is None else blocked
    why = refusal(team, [pool.slices[s] for s in first.slices], usage, pool)
    if why is None:
        return first
    hidden = out_of_reach(team, usage, pool)
    for sid in hidden:
        pool.take(sid)
    try:
        second = place_any() if hidden else first
    finally:
        for sid in reversed(hidden):
            pool.give(sid)
    if isinstance(second, Placement) and (
        refusal(team, [pool.slices[s] for s in second.slices], usage, pool) is None
    ):
        return second
    if isinstance(second, NoFit) and _blocked(team, request, pool, usage) is None:
        # It does not fit where its quota lets it go (what placement chose first was on no
        # scope of it): it waits for slices there, and reclaim or preemption may free them.
        return second.wrap("where-quota", never=False, team=team)
    return why


def _reachable(
    team: str, request: JobRequest, pool: PoolView, scopes: tuple[QuotaScope, ...]
) -> bool:
    """Whether any slice that could ever serve the request is on one of the team's scopes."""

    def compute() -> bool:
        return any(
            any(scope.selects(pool.slices[slot.id]) for scope in scopes)
            for slot in pool.all_candidates(request)
        )

    # The scopes' selectors, not the scopes: a parsed scope's vectors are dicts (unhashable),
    # and only what the scopes select decides the answer.
    key = ("team-reach", request.static_key(), request.host, tuple(s.key for s in scopes))
    return pool.static_cache(key, compute)


def choose_reclaim(
    team: str,
    request: JobRequest,
    pool: PoolView,
    usage: Usage,
    now: datetime,
    policy: str,
    *,
    spare: Iterable[str] = (),
) -> list[str] | None:
    """Victims whose end lets the team's request fit within its nominal quota: among
    `reclaimable` holds on slices the team's quota covers, the fewest (preempt's rule).
    None when reclaim cannot make it fit, or the placement would take the team above its
    nominal (borrowing is only from idle capacity, never by stopping work)."""
    scopes = usage.scopes(team)
    spared = set(spare)
    serving = {slot.id for slot in pool.all_candidates(request)}

    def useful(holder: Holder) -> bool:
        on_scopes = all(any(sc.selects(pool.slices[s]) for sc in scopes) for s in holder.slices)
        return on_scopes and any(s in serving for s in holder.slices)

    candidates = reclaimable(team, usage, pool, spared, useful)
    if not candidates:
        return None
    # Free slices on no scope of the team's quota are hidden while victims are chosen and
    # checked: a placement there counts for no nominal, and is not one the team may make.
    off_scope = [s for s in pool.free if not any(sc.selects(pool.slices[s]) for sc in scopes)]
    for sid in off_scope:
        pool.take(sid)
    try:
        return _fitting_victims(team, request, pool, usage, now, policy, spared, candidates)
    finally:
        for sid in reversed(off_scope):
            pool.give(sid)


def _fitting_victims(
    team: str,
    request: JobRequest,
    pool: PoolView,
    usage: Usage,
    now: datetime,
    policy: str,
    spared: set[str],
    candidates: list[Holder],
) -> list[str] | None:
    from gpupoolctl.sched.preempt import choose_preemption

    victims = choose_preemption(request, pool, now, policy, spare=spared, candidates=candidates)
    if not victims:
        return None
    chosen = [h for h in candidates if h.victim_id in set(victims)]
    for holder in chosen:
        pool.unhold(holder.alloc)
    try:
        placed = place(request, pool, policy)
        ok = isinstance(placed, Placement) and within_nominal(
            team, [pool.slices[s] for s in placed.slices], usage
        )
    finally:
        for holder in chosen:
            pool.hold(holder.slices, holder)
    return victims if ok else None
