"""Placement policies: how candidate slices and groups of slices are ranked. Lower wins.

- best-fit (default): least memory beyond the request; ties go to slices on a GPU that is
  already partly used, then on a host already partly used (whole GPUs and hosts stay free
  for big jobs), then the lowest id in natural order.
- spread: the least-loaded host (held memory / host memory), then the least-loaded GPU on
  it, then least memory, then the lowest id.
- topology: best-fit, and a multi-GPU request stays in one NVLink/xGMI island when one can
  hold it (else one host, else one site, else anywhere; same_island / same_node make that
  a must).
- smallest (internal, `gpupoolctl alloc`): least memory, then the lowest id; no packing
  tie-breaks, the rule `alloc` has always documented.
"""

from __future__ import annotations

from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.sched.ids import natural
from gpupoolctl.sched.pool import PoolView, Slot
from gpupoolctl.sched.request import JobRequest, host_matches

POLICIES: tuple[str, ...] = ("best-fit", "spread", "topology")
ALLOC_POLICY = "smallest"
_KNOWN = (*POLICIES, ALLOC_POLICY)


def check_policy(policy: str) -> None:
    if policy not in _KNOWN:
        raise UsageError(f"unknown placement policy {policy!r}: use {', '.join(POLICIES)}")


def slot_key(pool: PoolView, slot: Slot, policy: str) -> tuple[Any, ...]:
    """The rank of one free slot for a single-slice pick (the reference definition)."""
    if policy == "spread":
        return (
            pool.host_load(slot.host),
            natural(slot.host),
            pool.gpu_load(slot.gpu),
            slot.memory,
            slot.nat,
        )
    if policy == ALLOC_POLICY:
        return (slot.memory, slot.nat)
    return (slot.memory, pool.tier(slot), slot.nat)


def pick_one(pool: PoolView, request: JobRequest, policy: str) -> Slot | None:
    """The best free slot for one slice of `request`, or None when none matches."""
    if policy == "spread":
        return _spread_one(pool, request)
    if request.host is not None:  # rare: a filtered scan is fine
        found = list(pool.free_candidates(request))
        return min(found, key=lambda s: slot_key(pool, s, policy)) if found else None
    # Indexed: shapes come smallest memory first; the head of a shape's tier lists is its
    # best slice, so only the shapes at the smallest free memory size are looked at.
    packing = policy != ALLOC_POLICY
    best: tuple[Any, ...] | None = None
    memory: int | None = None
    for shape in pool.shapes_for(request):
        if not pool.shape_free(shape):
            continue
        if memory is not None and shape.memory > memory:
            break
        memory = shape.memory
        if packing:
            head: tuple[Any, ...] | None = pool.heads(shape)
        else:
            head = (0, pool.smallest_id(shape))
        if head is not None and (best is None or head < best):
            best = head
    return pool.slot(pool.id_of(best[1])) if best is not None else None


def _spread_one(pool: PoolView, request: JobRequest) -> Slot | None:
    shapes = [s for s in pool.shapes_for(request) if pool.shape_free(s)]
    hosts = {h for s in shapes for h, n in pool.shape_hosts(s).items() if n}
    hosts = {h for h in hosts if host_matches(h, request)}
    if not hosts:
        return None
    host = min(hosts, key=lambda h: (pool.host_load(h), natural(h)))
    wanted = {id(s) for s in shapes}
    slots = [s for s in pool.host_slots(host) if pool.is_free(s.id) and id(s.shape) in wanted]
    return min(slots, key=lambda s: (pool.gpu_load(s.gpu), s.memory, s.nat))


def choose_in_group(pool: PoolView, slots: list[Slot], count: int, policy: str) -> list[Slot]:
    """`count` of a group's free candidates, one at a time, so that each pick sees the GPUs
    the earlier picks used (best-fit packs them onto one GPU, spread spreads them)."""
    extra: dict[str, int] = {}  # memory taken per GPU by earlier picks
    remaining = list(slots)
    chosen: list[Slot] = []

    def key(slot: Slot) -> tuple[Any, ...]:
        if policy == "spread":
            held, total = pool.gpu_memory(slot.gpu)
            return ((held + extra.get(slot.gpu, 0)) / (total or 1), slot.memory, slot.nat)
        if policy == ALLOC_POLICY:
            return (slot.memory, slot.nat)
        used = pool.gpu_used(slot.gpu) or slot.gpu in extra
        return (slot.memory, 0 if used else 1, slot.nat)

    for _ in range(count):
        best = min(remaining, key=key)
        remaining.remove(best)
        chosen.append(best)
        extra[best.gpu] = extra.get(best.gpu, 0) + best.memory
    return chosen


def group_key(
    pool: PoolView, level: str, group: str, free: int, memory: int, policy: str
) -> tuple[Any, ...]:
    """Rank of a host or island that can hold the whole request; `memory` is the sum of the
    smallest matching free slices it would give, `free` how many matching slices it has."""
    load = pool.group_load(level, group)
    if policy == "spread":
        return (load, memory, natural(group))
    if policy == ALLOC_POLICY:
        return (memory, natural(group))
    # Best fit over bins: least waste, then a group already in use, then the tightest.
    return (memory, 0 if load > 0 else 1, free, natural(group))
