"""place(): a pure function of (request, pool view, policy) -> Placement or NoFit.

A request for N GPUs takes N slices, each matching the request (sched.request). Without a
grouping constraint the N slices are picked one at a time by the policy's rank, each pick
seeing the earlier ones (best-fit packs a job onto the GPU/host it started on; spread
spreads it). With a grouping level (same_island: an island; same_node: a host; topology
with N > 1: an island if any can hold it, else a host, else one site, else anywhere) every
group that can hold all N is scored and the best one wins. A site is the inventory's `site`
of the hosts (slices carry it); hosts without one are in no site. Inside a site the slices
come from as few hosts as can hold them, the hosts with the most free matching slices
first. Nothing is ever held twice: only free slices
are candidates and each is picked once. The view is changed tentatively and restored.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.sched import explain
from gpupoolctl.sched.ids import natural
from gpupoolctl.sched.policies import (
    ALLOC_POLICY,
    check_policy,
    choose_in_group,
    group_key,
    pick_one,
)
from gpupoolctl.sched.pool import PoolView, Slot
from gpupoolctl.sched.request import JobRequest, host_matches
from gpupoolctl.sched.unavailable import KINDS, LABELS


@dataclass
class Placement:
    slices: list[str]
    hosts: list[str]  # distinct, natural order
    policy: str
    waste_mib: int  # memory beyond the request (0 when it asked a profile or any slice)
    why: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NoFit:
    """Why a request does not run now, typed: `code` (one of sched.explain.CODES) says
    which situation it is, `detail` holds the names and numbers its words are made from
    (read only; each code's keys are listed in sched.explain), `never` whether not even
    every slice free could satisfy it (exit 5), and `inner` the reason this one adds to
    (clearing, re-cut reach, team quota...). Its words (`reason`) are made by
    sched.explain.render, on first use: a pass makes one per waiting request shape and
    most are never read. Equal NoFits are the same answer: same code, details and inner."""

    code: str
    never: bool
    detail: Mapping[str, Any] = field(default_factory=dict)
    inner: NoFit | None = None
    _text: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.code not in explain.CODES:
            raise ValueError(f"unknown no-fit code {self.code!r}")

    @property
    def reason(self) -> str:
        text = self._text
        if text is None:
            text = explain.render(self)
            object.__setattr__(self, "_text", text)
        return text

    def wrap(self, code: str, never: bool | None = None, **detail: Any) -> NoFit:
        """A reason of `code` that adds to this one (its `inner`); `never` as this one's
        unless given."""
        return NoFit(code, self.never if never is None else never, detail, self)


def levels(request: JobRequest, policy: str) -> list[str | None]:
    """Grouping levels to try in order; None = no grouping (one slice is always grouped)."""
    if request.gpus == 1:
        return [None]
    if request.same_island:
        return ["island"]
    if policy == "topology" and request.gpus > 1:
        return ["island", "host"] if request.same_node else ["island", "host", "site", None]
    if request.same_node:
        return ["host"]
    return [None]


def place(request: JobRequest, pool: PoolView, policy: str = "best-fit") -> Placement | NoFit:
    found = _find(request, pool, policy)
    return found if found is not None else _no_fit(request, pool, levels(request, policy))


def fits(request: JobRequest, pool: PoolView, policy: str = "best-fit") -> bool:
    """Whether `place` would place the request, without saying why not when it would not:
    that reason walks every matching slice of the pool, which preemption's what-ifs (one
    per waiting job) never read."""
    return _find(request, pool, policy) is not None


def _find(request: JobRequest, pool: PoolView, policy: str) -> Placement | None:
    check_policy(policy)
    if request.gpus < 1:
        raise UsageError(f"gpus must be at least 1 (got {request.gpus})")
    tried = levels(request, policy)
    for index, level in enumerate(tried):
        if level is None:
            chosen, lines = _sequential(request, pool, policy)
        else:
            chosen, lines = _grouped(request, pool, policy, level)
        if chosen is not None:
            why = [explain.header(request, policy), *lines]
            if index:
                why.insert(1, _fallback(tried[:index], request.gpus))
            return _placement(request, chosen, policy, why)
    return None


def _fallback(failed: list[str | None], count: int) -> str:
    return f"no single {' or '.join(str(f) for f in failed)} can hold {count} free matching slices"


def _placement(request: JobRequest, chosen: list[Slot], policy: str, why: list[str]) -> Placement:
    hosts = sorted({s.host for s in chosen}, key=natural)
    waste = sum(s.memory - request.memory_mib for s in chosen) if request.memory_mib else 0
    ids = [s.id for s in chosen]
    why.append(explain.picked(ids, hosts, waste))
    return Placement(slices=ids, hosts=hosts, policy=policy, waste_mib=waste, why=why)


def _counts(request: JobRequest, pool: PoolView) -> tuple[int, int, int]:
    shapes = pool.shapes_for(request)
    return sum(pool.shape_free(s) for s in shapes), sum(len(s.members) for s in shapes), len(shapes)


def _sequential(
    request: JobRequest, pool: PoolView, policy: str
) -> tuple[list[Slot] | None, list[str]]:
    lines: list[str] = []
    if request.host is None:
        free, total, shapes = _counts(request, pool)
        if free < request.gpus:
            return None, lines
        lines.append(explain.candidates(free, total, shapes))
    taken: list[Slot] = []
    try:
        for _ in range(request.gpus):
            slot = pick_one(pool, request, policy)
            if slot is None:
                return None, lines
            if not taken:
                lines.append(_why_first(request, pool, slot, policy))
            pool.take(slot.id)
            taken.append(slot)
    finally:
        for slot in reversed(taken):
            pool.give(slot.id)
    return taken, lines


def _why_first(request: JobRequest, pool: PoolView, slot: Slot, policy: str) -> str:
    """Why the first slice won (computed before it is taken, so tiers are current)."""
    if request.host is not None:
        found = list(pool.free_candidates(request))
        same = sum(1 for s in found if s.memory == slot.memory)
        head = explain.candidates(len(found), len(list(pool.all_candidates(request))), 0)
        head = head.rsplit(", in", 1)[0] + f" on hosts matching {request.host}; "
    else:
        same = sum(pool.shape_free(s) for s in pool.shapes_for(request) if s.memory == slot.memory)
        head = ""
    waste = slot.memory - request.memory_mib if request.memory_mib else None
    tier = pool.tier(slot) if policy in ("best-fit", "topology") else None
    return head + explain.single(slot.id, slot.memory, waste, same, tier, policy)


def group_counts(
    request: JobRequest, pool: PoolView, level: str, *, free: bool = True
) -> dict[str, list[tuple[int, int]]]:
    """Per host or island: (memory, count) of its matching slices, smallest memory first,
    from the per-shape counts (no slice is looked at). free=False: as if all were free.
    A site's counts are its hosts' (the host glob applies to each host)."""
    if level == "site":
        return _site_counts(request, pool, free=free)
    counts: dict[str, list[tuple[int, int]]] = {}
    for shape in pool.shapes_for(request):  # smallest memory first
        for group, number in pool.shape_groups(shape, level, free=free).items():
            if number:
                counts.setdefault(group, []).append((shape.memory, number))
    if request.host is not None:
        counts = {
            g: c for g, c in counts.items() if host_matches(pool.group_host(level, g), request)
        }
    return counts


def _site_counts(
    request: JobRequest, pool: PoolView, *, free: bool
) -> dict[str, list[tuple[int, int]]]:
    merged: dict[str, dict[int, int]] = {}
    for host, parts in group_counts(request, pool, "host", free=free).items():
        site = pool.host_site(host)
        if not site:
            continue
        per = merged.setdefault(site, {})
        for memory, number in parts:
            per[memory] = per.get(memory, 0) + number
    return {site: sorted(per.items()) for site, per in merged.items()}


def _smallest(parts: list[tuple[int, int]], count: int) -> int:
    """Sum of the `count` smallest memories of (memory, number) parts in memory order."""
    total = 0
    for memory, number in parts:
        take = min(number, count)
        total += take * memory
        count -= take
        if not count:
            break
    return total


def _grouped(
    request: JobRequest, pool: PoolView, policy: str, level: str
) -> tuple[list[Slot] | None, list[str]]:
    rule = policy if policy != "topology" else "best-fit"
    counts = group_counts(request, pool, level)
    scored = []
    for name, parts in counts.items():
        free = sum(n for _, n in parts)
        if free >= request.gpus:
            memory = _smallest(parts, request.gpus)
            scored.append((group_key(pool, level, name, free, memory, rule), name))
    if not scored:
        return None, []
    best = heapq.nsmallest(2, scored)
    name = best[0][1]
    wanted = {id(s) for s in pool.shapes_for(request)}
    slots = [
        s for s in pool.group_slots(level, name) if id(s.shape) in wanted and pool.is_free(s.id)
    ]
    if level == "site":
        chosen = _fewest_hosts(pool, request, slots, rule)
    else:
        chosen = choose_in_group(pool, slots, request.gpus, rule)
    line = explain.group(
        level,
        request.gpus,
        len(scored),
        len(counts),
        name,
        sum(s.memory for s in chosen),
        best[1][1] if len(best) > 1 else None,
        rule,
    )
    free_total = sum(n for parts in counts.values() for _, n in parts)
    return chosen, [
        f"considered {free_total} free matching slice(s) in {len(counts)} {level}(s)",
        line,
    ]


def _fewest_hosts(pool: PoolView, request: JobRequest, slots: list[Slot], rule: str) -> list[Slot]:
    """The request's slices from a site's free candidates, on as few hosts as can hold them:
    hosts with the most candidates first (ties: natural order), each host's share picked by
    the policy's rule."""
    by_host: dict[str, list[Slot]] = {}
    for slot in slots:
        if request.host is None or host_matches(slot.host, request):
            by_host.setdefault(slot.host, []).append(slot)
    chosen: list[Slot] = []
    for host in sorted(by_host, key=lambda h: (-len(by_host[h]), natural(h))):
        left = request.gpus - len(chosen)
        if left <= 0:
            break
        chosen.extend(choose_in_group(pool, by_host[host], min(left, len(by_host[host])), rule))
    return chosen


def not_free(request: JobRequest, pool: PoolView) -> tuple[int, list[tuple[str, int]]]:
    """The slices matching the request (host glob included): how many are free, and why the
    others are not, as (reason, count) pairs: held first, then what keeps them out of
    placement in sched.unavailable's order, then what this pass keeps aside. The counts and
    the free ones add up to every matching slice."""
    free = 0
    counts: dict[str, int] = {}
    for shape in pool.shapes_for(request):
        shape_free, shape_counts = pool.shape_tally(shape, request.host)
        free += shape_free
        for why, count in shape_counts.items():
            counts[why] = counts.get(why, 0) + count
    order = {label: n for n, label in enumerate(("held", *(LABELS[k] for k in KINDS)))}
    ranked = sorted(counts.items(), key=lambda item: (order.get(item[0], len(order)), item[0]))
    return free, ranked


def _no_fit(request: JobRequest, pool: PoolView, tried: list[str | None]) -> NoFit:
    want = request.describe()
    if None in tried:
        free_now, taken = not_free(request, pool)
        total = free_now + sum(n for _, n in taken)
        if total == 0:
            return NoFit("no-match", True, {"want": want})
        if total < request.gpus:
            return NoFit("too-few-ever", True, {"want": want, "total": total})
        detail = {"want": want, "free": free_now, "total": total, "taken": tuple(taken)}
        return NoFit("nothing-free", False, detail)
    level = tried[-1]
    assert level is not None
    best_ever = pool.static_cache(
        ("largest", request.static_key(), request.host, level),
        lambda: _largest(group_counts(request, pool, level, free=False)),
    )
    best_now = _largest(group_counts(request, pool, level))
    if best_ever[1] == 0:
        return NoFit("no-match", True, {"want": want})
    if best_ever[1] < request.gpus:
        detail = {
            "want": want,
            "level": level,
            "gpus": request.gpus,
            "most": best_ever[1],
            "group": best_ever[0],
        }
        return NoFit("group-too-small", True, detail)
    free_now, taken = not_free(request, pool)
    total = free_now + sum(n for _, n in taken)
    detail = {
        "want": want,
        "level": level,
        "most": best_now[1],
        "group": best_now[0],
        "free": free_now,
        "total": total,
        "taken": tuple(taken),
    }
    return NoFit("no-group-free", False, detail)


def _largest(counts: dict[str, list[tuple[int, int]]]) -> tuple[str, int]:
    totals = {g: sum(n for _, n in parts) for g, parts in counts.items()}
    if not totals:
        return "", 0
    name = min(totals, key=lambda g: (-totals[g], natural(g)))
    return name, totals[name]


__all__ = ["ALLOC_POLICY", "NoFit", "Placement", "levels", "not_free", "place"]
