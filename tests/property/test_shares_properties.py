"""Teams' shares in the one scheduling pass (sched.schedule_pass with ShareInputs), on random
small pools (whole cards and MIG-like slices on 2-4 hosts over 1-2 sites), random teams with
quotas (the whole pool or per site; nominal, borrowing and lending limits on GPU memory and
cards), random holds within the limits and random queues:

(a) no team ever goes above nominal + borrowing limit in a scope, a limited team is placed
    only on slices its quota covers, and PassResult.borrowed names exactly the placements
    that took their team above its nominal;
(b) reclaim takes only borrowed or preemptible jobs of other teams above their nominal,
    never takes a team below its nominal, and the claimant then fits within its nominal;
(c) with every team unlimited, shares change only the order within a priority: the pass
    decides as the pass without shares on the queue in that order.

Usage is recomputed here from the holds, independently of sched.shares.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.policy.model import CARDS, GPU_MEMORY, QuotaScope
from gpupoolctl.sched import Holder, JobRequest, PoolView, QueueEntry, order_queue, schedule_pass
from gpupoolctl.sched import queue as queue_module
from gpupoolctl.sched.queue import effective_priority
from gpupoolctl.sched.shares import ShareInputs

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
GIB = 1024
TEAMS = ("A", "B", "C")
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILES = {10: "1g.10gb", 20: "2g.20gb", 40: "3g.40gb"}


# -- independent accounting ----------------------------------------------------------------


def covers(scope: QuotaScope, entry: dict[str, Any]) -> bool:
    """The scopes made here select by site only."""
    return scope.site is None or entry.get("site") == scope.site


def amounts(scope: QuotaScope, entries: list[dict[str, Any]]) -> dict[str, int]:
    out = {GPU_MEMORY: 0, CARDS: 0}
    for entry in entries:
        if covers(scope, entry):
            out[GPU_MEMORY] += entry["memory_mib"]
            out[CARDS] += 1 if entry["kind"] == "gpu" else 0
    return out


def held_by(pool: PoolView, team: str, scope: QuotaScope) -> dict[str, int]:
    entries = [pool.slices[s] for h in pool.holds.values() if h.team == team for s in h.slices]
    return amounts(scope, entries)


def limit(scope: QuotaScope, resource: str) -> int | None:
    if scope.borrowing_limit is None or resource not in scope.borrowing_limit:
        return None
    return scope.nominal.get(resource, 0) + scope.borrowing_limit[resource]


# -- strategies ----------------------------------------------------------------------------


@st.composite
def pools(draw: st.DrawFn) -> list[dict[str, Any]]:
    sites = ["s1", "s2"][: draw(st.integers(1, 2))]
    slices: list[dict[str, Any]] = []
    for h in range(draw(st.integers(2, 4))):
        host, site = f"h{h}", draw(st.sampled_from(sites))
        for g in range(draw(st.integers(1, 3))):
            base = {
                "host": host,
                "gpu": g,
                "site": site,
                "island": f"{host}/island0",
                "vendor": "nvidia",
                "model": "NVIDIA H100 80GB HBM3",
            }
            cut = draw(st.sampled_from([None, None, (40, 40), (20, 20, 40), (10, 10, 20, 40)]))
            if cut is None:
                gib = draw(st.sampled_from([40, 80]))
                slices.append(
                    {**base, "id": f"{host}/gpu{g}", "kind": "gpu", "memory_mib": gib * GIB}
                )
                continue
            for i, gib in enumerate(cut):
                slices.append(
                    {
                        **base,
                        "id": f"{host}/gpu{g}/mig{i}",
                        "kind": "mig",
                        "profile": PROFILES[gib],
                        "memory_mib": gib * GIB,
                    }
                )
    return slices


@st.composite
def vectors(draw: st.DrawFn, names: list[str], most: dict[str, int]) -> dict[str, int]:
    """Amounts up to `most`, small and large ones alike (GPU memory in steps of 20 GiB)."""
    out = {}
    for name in names:
        step = 20 * GIB if name == GPU_MEMORY else 1
        top = most[name] // step
        steps = draw(st.sampled_from([0, 1, 2, top // 4, top // 2, top]) | st.integers(0, top))
        out[name] = steps * step
    return out


@st.composite
def scopes(draw: st.DrawFn, site: str | None, line: int) -> QuotaScope:
    names = draw(st.sampled_from([[GPU_MEMORY], [GPU_MEMORY], [CARDS], [GPU_MEMORY, CARDS]]))
    nominal = draw(vectors(names, {GPU_MEMORY: 320 * GIB, CARDS: 4}))

    def optional() -> dict[str, int] | None:
        if not draw(st.booleans()):
            return None
        chosen = draw(st.lists(st.sampled_from(names), unique=True, min_size=1))
        return draw(vectors(chosen, {GPU_MEMORY: 160 * GIB, CARDS: 3}))

    return QuotaScope(
        line=line,
        site=site,
        nominal=nominal,
        borrowing_limit=optional(),
        lending_limit=optional(),
    )


@st.composite
def quotas(draw: st.DrawFn, sites: list[str], teams: list[str]) -> dict[str, tuple]:
    out: dict[str, tuple[QuotaScope, ...]] = {}
    for index, team in enumerate(teams):
        how = draw(st.sampled_from(["pool", "pool", "sites", "one-site", "unlimited"]))
        if how == "pool":
            out[team] = (draw(scopes(None, index)),)
        elif how == "sites":
            out[team] = tuple(draw(scopes(s, index)) for s in sites)
        elif how == "one-site":
            out[team] = (draw(scopes(draw(st.sampled_from(sites)), index)),)
        else:
            out[team] = ()
    return out


def within_limits(
    quota: tuple[QuotaScope, ...], held: list[dict[str, Any]], more: list[dict[str, Any]]
) -> bool:
    for entry in more:
        if quota and not any(covers(s, entry) for s in quota):
            return False
    for scope in quota:
        after = amounts(scope, held + more)
        for resource, amount in after.items():
            top = limit(scope, resource)
            if top is not None and amount > top:
                return False
    return True


def above_nominal(
    quota: tuple[QuotaScope, ...], held: list[dict[str, Any]], more: list[dict[str, Any]]
) -> bool:
    for scope in quota:
        before, after = amounts(scope, held), amounts(scope, held + more)
        for resource, nominal in scope.nominal.items():
            if after[resource] > before[resource] and after[resource] > nominal:
                return True
    return False


@st.composite
def holds(
    draw: st.DrawFn, slices: list[dict[str, Any]], quota_of: dict[str, tuple], crowded: bool
) -> list[Holder]:
    """Holds made one by one, each within its team's limits (and its scopes), borrowed when
    it took its team above nominal, as a pass would have placed them."""
    ids = [s["id"] for s in slices]
    by_id = {s["id"]: s for s in slices}
    order = draw(st.permutations(ids))
    least = len(ids) * 3 // 4 if crowded else 0
    taken = order[: draw(st.integers(least, len(ids)))]
    held: dict[str | None, list[dict[str, Any]]] = {}
    out: list[Holder] = []
    start = 0
    while start < len(taken):
        size = draw(st.integers(1, 2))
        group = [by_id[s] for s in taken[start : start + size]]
        start += size
        team = draw(
            st.sampled_from(["B", "B", "B", *quota_of, None] if crowded else [*quota_of, None])
        )
        quota = quota_of.get(team, ()) if team is not None else ()
        mine = held.setdefault(team, [])
        if not within_limits(quota, mine, group):
            continue
        n = len(out)
        out.append(
            Holder(
                alloc=f"a-{n}",
                slices=tuple(e["id"] for e in group),
                job=f"held-{n}",
                priority=draw(st.sampled_from([10, 50, 90])),
                preemptible=draw(st.booleans()),
                since=f"2025-06-01T{8 + n // 60:02d}:{n % 60:02d}:00.000Z",
                team=team,
                borrowed=above_nominal(quota, mine, group),
            )
        )
        mine.extend(group)
    return out


@st.composite
def queues(draw: st.DrawFn, teams: list[str]) -> list[QueueEntry]:
    entries = []
    for i in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["gpu", "memory", "memory", "profile", "any"]))
        gpus = draw(st.integers(1, 2))
        priority = draw(st.sampled_from([10, 50, 50, 90]))
        request = JobRequest(
            gpus=gpus,
            profile="gpu"
            if kind == "gpu"
            else draw(st.sampled_from(list(PROFILES.values())))
            if kind == "profile"
            else None,
            memory_mib=draw(st.sampled_from([10, 20, 40, 60])) * GIB if kind == "memory" else None,
            same_node=gpus > 1 and draw(st.booleans()),
            priority=priority,
            preemptible=draw(st.booleans()),
            team=draw(st.sampled_from([*teams, None])),
        )
        entries.append(
            QueueEntry(
                id=f"q-{i}",
                priority=priority,
                seq=i,
                enqueued=NOW - timedelta(minutes=draw(st.sampled_from([0, 5, 60, 400]))),
                request=request,
                job=f"j-{i}",
            )
        )
    return entries


@st.composite
def cases(draw: st.DrawFn, unlimited: bool = False, crowded: bool = False) -> dict[str, Any]:
    """crowded: most of the pool held (where reclaim has work to do)."""
    slices = draw(pools())
    sites = sorted({s["site"] for s in slices})
    teams = list(TEAMS[: draw(st.integers(2 if crowded else 1, 3))])
    quota_of = {t: () for t in teams} if unlimited else draw(quotas(sites, teams))
    if crowded:
        # A: a large nominal, and it waits; B: a small one, holding most of the pool
        def sized(scopes: tuple[QuotaScope, ...], size: dict[str, int]) -> tuple:
            return tuple(
                replace(s, nominal={r: size[r] for r in s.nominal}, lending_limit=None)
                for s in scopes
            )

        quota_of["A"] = sized(quota_of["A"], {GPU_MEMORY: 320 * GIB, CARDS: 8})
        small = draw(st.sampled_from([0, 20, 40, 80])) * GIB
        quota_of["B"] = sized(quota_of["B"], {GPU_MEMORY: small, CARDS: draw(st.integers(0, 2))})
    history = {t: float(draw(st.sampled_from([0, 10, 1000, 10**6]))) for t in teams}
    return {
        "slices": slices,
        "holds": draw(holds(slices, quota_of, crowded)),
        "entries": draw(queues(["A", "A", "A", *teams] if crowded else teams)),
        "shares": ShareInputs(quotas=quota_of, history=history),
        "preempt": draw(st.booleans()),
    }


def view(case: dict[str, Any]) -> PoolView:
    return PoolView(case["slices"], case["holds"])


# -- (a) limits ----------------------------------------------------------------------------


@SETTINGS
@given(cases())
def test_no_team_goes_above_its_limit_and_borrowing_is_marked(case: dict[str, Any]) -> None:
    shares: ShareInputs = case["shares"]
    pool = view(case)
    before = {
        t: [pool.slices[s] for h in pool.holds.values() if h.team == t for s in h.slices]
        for t in shares.quotas
    }
    result = schedule_pass(case["entries"], pool, NOW, preempt=case["preempt"], shares=shares)
    for team, quota in shares.quotas.items():
        for scope in quota:
            used = held_by(pool, team, scope)
            for resource, amount in used.items():
                top = limit(scope, resource)
                assert top is None or amount <= top, (team, scope, resource, amount, top)
    # limited teams only where their quota covers; borrowed: exactly what went above nominal
    held = {t: list(v) for t, v in before.items()}
    borrowed = set()
    for entry, placement in result.placed:
        team = entry.request.team
        taken = [pool.slices[s] for s in placement.slices]
        if team is None:
            continue
        quota = shares.quotas.get(team, ())
        if quota:
            assert all(any(covers(s, e) for s in quota) for e in taken), (team, placement)
        if above_nominal(quota, held.setdefault(team, []), taken):
            borrowed.add(entry.id)
        held[team].extend(taken)
        assert pool.holds[entry.id].borrowed == (entry.id in borrowed)
    assert result.borrowed == borrowed


# -- (b) reclaim ---------------------------------------------------------------------------


@SETTINGS
@given(cases(crowded=True))
def test_reclaim_takes_only_what_teams_above_nominal_borrowed(case: dict[str, Any]) -> None:
    shares: ShareInputs = case["shares"]
    pool = view(case)
    result = schedule_pass(case["entries"], pool, NOW, preempt=True, shares=shares)
    if not result.reclaim:
        return
    assert result.preempt is not None
    claimant, victim_ids = result.preempt
    team = claimant.request.team
    assert team is not None and shares.quotas.get(team)
    placed_now = {e.id for e, _ in result.placed}
    victims = [h for h in pool.holds.values() if h.victim_id in set(victim_ids)]
    assert {h.victim_id for h in victims} == set(victim_ids) and victims
    for holder in victims:
        assert holder.alloc not in placed_now  # never what this pass placed
        assert holder.team is not None and holder.team != team
        assert holder.borrowed or holder.preemptible
        assert shares.quotas.get(holder.team)
    before = {
        (t, i): held_by(pool, t, s)
        for t in {h.team for h in victims}
        for i, s in enumerate(shares.quotas[str(t)])
    }
    for holder in victims:
        pool.unhold(holder.alloc)
    for (other, index), was in before.items():
        scope = shares.quotas[str(other)][index]
        now = held_by(pool, str(other), scope)
        for resource, nominal in scope.nominal.items():
            # never below nominal; where it was not above, not touched at all
            assert now[resource] >= min(nominal, was[resource]), (other, scope, resource)
            if was[resource] <= nominal:
                assert now[resource] == was[resource], (other, scope, resource)
    # the claimant was within its nominal, and the next pass places it within its nominal
    quota = shares.quotas[team]
    mine = [pool.slices[s] for h in pool.holds.values() if h.team == team for s in h.slices]
    again = schedule_pass([claimant], pool, NOW, shares=shares)
    assert [e.id for e, _ in again.placed] == [claimant.id], again
    taken = [pool.slices[s] for s in again.placed[0][1].slices]
    for scope in quota:
        add, after = amounts(scope, taken), amounts(scope, mine + taken)
        for resource in scope.nominal:
            if add[resource]:
                assert after[resource] <= scope.nominal[resource], (team, scope, resource)


# -- (c) unlimited teams: only the order within a priority -------------------------------------


def _decided(result: Any) -> dict[str, Any]:
    """The decisions; not the reasons' text: a pass reuses the answer for an identical
    request (of the same team, with teams), so a count in a reason may be an earlier one."""
    return {
        "placed": [(e.id, p.slices) for e, p in result.placed],
        "waiting": [(e.id, nofit.never) for e, nofit in result.waiting],
        "never": [e.id for e, _ in result.never],
        "reserved_for": result.reserved_for,
    }


@SETTINGS
@given(cases(unlimited=True))
def test_unlimited_teams_change_only_the_order_within_a_priority(case: dict[str, Any]) -> None:
    entries: list[QueueEntry] = case["entries"]
    seen: list[QueueEntry] = []
    real = queue_module._in_order

    def spy(*args: Any, **kwargs: Any) -> Any:
        for entry in real(*args, **kwargs):
            seen.append(entry)
            yield entry

    queue_module._in_order = spy  # type: ignore[assignment]
    try:
        shared = schedule_pass(entries, view(case), NOW, shares=case["shares"])
    finally:
        queue_module._in_order = real  # type: ignore[assignment]
    assert sorted(e.id for e in seen) == sorted(e.id for e in entries)
    # priority first, and each team's own entries in queue order
    ranks = [effective_priority(e, NOW) for e in seen]
    assert ranks == sorted(ranks, reverse=True)
    plain = [e.id for e in order_queue(entries, NOW)]
    for team in {e.request.team for e in entries}:
        assert [e.id for e in seen if e.request.team == team] == [
            i for i in plain if next(e for e in entries if e.id == i).request.team == team
        ]
    # the pass without shares on the queue in that order decides the same
    resequenced = [replace(e, seq=n) for n, e in enumerate(seen)]
    alone = schedule_pass(resequenced, view(case), NOW)
    assert _decided(shared) == _decided(alone)
    assert not shared.borrowed and not shared.reclaim
