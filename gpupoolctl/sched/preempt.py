"""Which preemptible, lower-priority holds to stop so that a request fits.

Placement is count based (a slice matches a request or not), so the fewest victims are found
exactly: in each group that could hold the request (or the whole pool when no grouping is
asked), taking the holders with the most matching slices there first tells how few are
needed; then that many are chosen cheapest first (lower priority, then the most recently
started: least work lost, then fewer slices, then id), each only if the rest can still make
up the difference. The group (or level) needing the fewest victims wins; the choice is
checked with place.fits() before it is returned.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import Any

from gpupoolctl.sched.ids import natural
from gpupoolctl.sched.place import fits, levels
from gpupoolctl.sched.pool import Holder, PoolView, Slot
from gpupoolctl.sched.request import JobRequest, host_matches
from gpupoolctl.timestamps import format_ts


def eligible(holder: Holder, request: JobRequest, now: datetime | None = None) -> bool:
    """A hold that may be preempted for `request`: a job's, preemptible, lower priority."""
    stamp = format_ts(now) if now is not None else None
    return _preemptible(holder, stamp) and holder.priority < request.priority


def _preemptible(holder: Holder, stamp: str | None) -> bool:
    if not holder.preemptible or holder.priority is None or holder.job is None:
        return False
    return stamp is None or holder.expires is None or holder.expires > stamp  # else frees itself


class Eligible:
    """The holds of a pool that some request could preempt at `now`, in the pool's order:
    `below(p)` are those a request of priority p may preempt (eligible()). Made once per
    pass rather than once per waiting job: on a full pool that walk over every hold was
    most of a pass (bench/scale). Valid while no hold is removed; holds added later (the
    pass's own placements) are never victims anyway."""

    def __init__(self, pool: PoolView, now: datetime) -> None:
        stamp = format_ts(now)
        self._pool = pool
        self._holds = [h for h in pool.holds.values() if _preemptible(h, stamp)]
        self._below: dict[tuple[int, tuple[int, ...] | None], list[Holder]] = {}

    def below(self, priority: int, request: JobRequest | None = None) -> list[Holder]:
        """With `request`: only the holds with a slice of a shape the request could use
        (host aside); the others free nothing it could take."""
        shapes = None
        if request is not None:
            shapes = tuple(shape.index for shape in self._pool.shapes_for(request))
        found = self._below.get((priority, shapes))
        if found is None:
            slot, wanted = self._pool.slot, set(shapes or ())
            found = self._below[(priority, shapes)] = [
                h
                for h in self._holds
                if h.priority is not None
                and h.priority < priority
                and (shapes is None or any(slot(s).shape.index in wanted for s in h.slices))
            ]
        return found


def choose_preemption(
    request: JobRequest,
    pool: PoolView,
    now: datetime,
    policy: str = "best-fit",
    *,
    spare: AbstractSet[str] = frozenset(),
    candidates: list[Holder] | None = None,
) -> list[str] | None:
    """Victim ids (job ids; allocation ids for holds not known as a job's), [] when the
    request fits already, None when no set of eligible victims makes it fit. Holds whose
    allocation id is in `spare` are never chosen (placements of the pass being decided).
    `candidates`: choose among these holds instead of every eligible one (reclaim, and
    priority preemption within a team)."""
    if fits(request, pool, policy):
        return []
    if candidates is not None:
        victims = [h for h in candidates if h.alloc not in spare]
    else:
        victims = [
            h for h in pool.holds.values() if h.alloc not in spare and eligible(h, request, now)
        ]
    if not victims:
        return None
    # Only the victims' slices and the free ones matter: a full pool has thousands of
    # matching slices, and this runs for every waiting job.
    shapes = {shape.index for shape in pool.shapes_for(request)}
    matching = {
        sid: slot
        for holder in victims
        for sid in holder.slices
        if (slot := pool.slot(sid)).shape.index in shapes and host_matches(slot.host, request)
    }
    if not matching:
        return None
    free = list(pool.free_candidates(request))
    best: tuple[tuple[Any, ...], list[Holder]] | None = None
    for rank, level in enumerate(levels(request, policy)):
        for chosen in _per_group(request, level, matching, free, victims, now):
            score = (len(chosen), rank, sum(_cost(h, now)[0] for h in chosen))
            if best is None or score < best[0]:
                best = (score, chosen)
    if best is None:
        return None
    chosen = best[1]
    if not _fits_without(request, pool, policy, chosen):
        return None
    return sorted({h.victim_id for h in chosen}, key=natural)


def _per_group(
    request: JobRequest,
    level: str | None,
    matching: dict[str, Slot],
    free: list[Slot],
    victims: list[Holder],
    now: datetime,
) -> list[list[Holder]]:
    def group_of(slot: Slot) -> str | None:
        if level is None:
            return ""
        if level == "site":
            return slot.site or None  # a host with no site is in no site group
        return slot.island if level == "island" else slot.host

    free_in: dict[str, int] = {}
    for slot in free:
        group = group_of(slot)
        if group is not None:
            free_in[group] = free_in.get(group, 0) + 1
    gains: dict[str, dict[str, int]] = {}  # group -> alloc -> matching slices it would free
    for holder in victims:
        for sid in holder.slices:
            slot = matching.get(sid)
            group = group_of(slot) if slot is not None else None
            if group is not None:
                per = gains.setdefault(group, {})
                per[holder.alloc] = per.get(holder.alloc, 0) + 1
    by_alloc = {h.alloc: h for h in victims}
    found = []
    for group, per in gains.items():
        need = request.gpus - free_in.get(group, 0)
        if need <= 0 or sum(per.values()) < need:
            continue
        found.append([by_alloc[a] for a in _fewest_cheapest(per, need, by_alloc, now)])
    return found


def _fewest_cheapest(
    gains: dict[str, int], need: int, by_alloc: dict[str, Holder], now: datetime
) -> list[str]:
    """The fewest allocations whose gains reach `need` (largest gains first tells how few),
    then, seat by seat, the cheapest one that still lets the rest reach it."""
    by_gain = sorted(gains, key=lambda a: -gains[a])
    fewest, total = 0, 0
    while total < need:
        total += gains[by_gain[fewest]]
        fewest += 1
    by_cost = sorted(gains, key=lambda a: _cost(by_alloc[a], now))
    chosen: list[str] = []
    left = need
    for seat in range(fewest):
        for alloc in by_cost:
            if alloc in chosen:
                continue
            others = [gains[a] for a in by_gain if a != alloc and a not in chosen]
            if gains[alloc] + sum(others[: fewest - seat - 1]) >= left:
                chosen.append(alloc)
                left -= gains[alloc]
                break
    return chosen


def _cost(holder: Holder, now: datetime) -> tuple[Any, ...]:
    since = holder.since or ""
    # Later start = less work lost: negate by sorting on the inverted string order.
    return (
        holder.priority if holder.priority is not None else 0,
        tuple(-ord(c) for c in since),
        len(holder.slices),
        newer_first(holder.alloc),
    )


def newer_first(alloc_id: str) -> tuple[Any, ...]:
    """Sorts allocation ids ("a-<seq>") newest first: of two holds begun in the same
    millisecond, the later one has lost less work."""
    return tuple(-part if isinstance(part, int) else part for part in natural(alloc_id))


def _fits_without(request: JobRequest, pool: PoolView, policy: str, victims: list[Holder]) -> bool:
    for holder in victims:
        pool.unhold(holder.alloc)
    try:
        return fits(request, pool, policy)
    finally:
        for holder in victims:
            pool.hold(holder.slices, holder)
