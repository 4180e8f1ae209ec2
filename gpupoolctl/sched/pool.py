"""PoolView: the slices of the pool, which are free, who holds the rest; indexed for placement.

Built from the ledger's State (or from plain slice dicts, for simulations and benches). The
view never writes to the ledger. `hold` / `unhold` change the view itself only; virtual-time
simulations and `place` (tentatively, undone before it returns) use them.

Index: slices of one *shape* (kind, profile, memory, vendor, model, bandwidth class) are
interchangeable for matching, so a request is matched against the few shapes, not against
every slice. Each shape keeps its free slices in four lists sorted by natural id, one per
packing tier: (GPU partly used?, host partly used?). Best-fit then needs only the head of a
list per shape; a hold or release moves the few free slices of that GPU/host between tiers.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpupoolctl.sched.ids import natural
from gpupoolctl.sched.request import JobRequest, host_matches, shape_matches

if TYPE_CHECKING:
    from gpupoolctl.ledger.state import Allocation, State

Nat = tuple[Any, ...]
_SHAPE_FIELDS = ("kind", "profile", "memory_mib", "vendor", "model", "bandwidth_class")


@dataclass(frozen=True)
class Holder:
    """Who holds a slice. A hold is a job's when its allocation's request names the job
    (`"job": id`, the jobs side writes JobRequest.to_dict() plus that) or a live job record
    names the allocation (`"alloc": id`); priority and preemptible come from the same place.
    Holds that are not a job's have no priority and are never preemptible."""

    alloc: str
    owner: str = ""
    slices: tuple[str, ...] = ()
    job: str | None = None
    priority: int | None = None
    preemptible: bool = False
    since: str | None = None
    expires: str | None = None

    @property
    def victim_id(self) -> str:
        """The id preemption names: the job's when the hold is a job's, else the allocation's."""
        return self.job or self.alloc


@dataclass(slots=True, eq=False)
class Slot:
    """One slice as placement sees it (internal)."""

    id: str
    nat: Nat
    host: str
    gpu: str  # the physical GPU: slices that share it share this key
    island: str
    memory: int
    shape: Shape
    tier: int = -1  # -1 held; else 0..3 (see PoolView._tier)


@dataclass(slots=True, eq=False)
class Shape:
    key: tuple[Any, ...]
    entry: dict[str, Any]  # one slice of the shape: what requests are matched against
    memory: int
    total: int = 0
    free: int = 0
    tiers: list[list[Nat]] = field(default_factory=lambda: [[], [], [], []])
    by_host: dict[str, int] = field(default_factory=dict)  # free slices per host


class PoolView:
    def __init__(self, slices: Iterable[dict[str, Any]], holders: Iterable[Holder] = ()) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self._slots: dict[str, Slot] = {}
        self._by_nat: dict[Nat, str] = {}
        self._shapes: dict[tuple[Any, ...], Shape] = {}
        self._host_slots: dict[str, list[Slot]] = {}
        self._gpu_slots: dict[str, list[Slot]] = {}
        self._held_gpu: dict[str, int] = {}
        self._held_host: dict[str, int] = {}
        self._mem_host: dict[str, list[int]] = {}  # host -> [held MiB, total MiB]
        self._mem_gpu: dict[str, list[int]] = {}
        self._mem_island: dict[str, list[int]] = {}
        self._free: set[str] = set()
        self._holder_of: dict[str, Holder] = {}
        self._holds: dict[str, Holder] = {}
        self._match_cache: dict[tuple[Any, ...], list[Shape]] = {}
        for entry in sorted(slices, key=lambda s: natural(s["id"])):
            self._add(entry)
        self._shape_order = sorted(self._shapes.values(), key=lambda s: (s.memory, s.key))
        for holder in holders:
            self.hold(holder.slices, holder)

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_state(cls, state: State, now: datetime | str | None = None) -> PoolView:
        """The pool as the ledger has it at `now` (default: the current time): expired holds
        are free."""
        from gpupoolctl.ledger.units import format_ts, utc_now

        stamp = now if isinstance(now, str) else format_ts(now or utc_now())
        jobs_by_alloc = {
            str(job["alloc"]): job for job in state.jobs.values() if job.get("alloc") is not None
        }
        holders = []
        for alloc in state.active(stamp).values():
            holder = _holder(alloc, jobs_by_alloc.get(alloc.id))
            # A hold on a slice that is gone (orphan) or recorded twice keeps only what it
            # really holds: the view must never show one slice held twice.
            mine = tuple(
                s for s in holder.slices if s in state.slices and state.holders.get(s) == alloc.id
            )
            holders.append(replace(holder, slices=mine))
        return cls(state.slices.values(), holders)

    def _add(self, entry: dict[str, Any]) -> None:
        sid = entry["id"]
        host = entry["host"]
        key = tuple(entry.get(f) for f in _SHAPE_FIELDS)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = Shape(key, entry, int(entry.get("memory_mib") or 0))
        gpu = _gpu_key(entry)
        slot = Slot(
            id=sid,
            nat=natural(sid),
            host=host,
            gpu=gpu,
            island=str(entry.get("island") or gpu),
            memory=shape.memory,
            shape=shape,
        )
        self.slices[sid] = entry
        self._slots[sid] = slot
        self._by_nat[slot.nat] = sid
        self._host_slots.setdefault(host, []).append(slot)
        self._gpu_slots.setdefault(gpu, []).append(slot)
        self._mem_host.setdefault(host, [0, 0])[1] += slot.memory
        self._mem_gpu.setdefault(gpu, [0, 0])[1] += slot.memory
        self._mem_island.setdefault(slot.island, [0, 0])[1] += slot.memory
        shape.total += 1
        self._set_free(slot)

    # -- public queries -------------------------------------------------------------------

    @property
    def free(self) -> AbstractSet[str]:
        """Ids of the free slices (a live, read-only view)."""
        return self._free

    def holder(self, slice_id: str) -> Holder | None:
        return self._holder_of.get(slice_id)

    @property
    def holds(self) -> Mapping[str, Holder]:
        """Every hold, by allocation id."""
        return self._holds

    def host_load(self, host: str) -> float:
        held, total = self._mem_host.get(host, (0, 0))
        return held / total if total else 0.0

    def gpu_load(self, gpu: str) -> float:
        held, total = self._mem_gpu.get(gpu, (0, 0))
        return held / total if total else 0.0

    def gpu_memory(self, gpu: str) -> tuple[int, int]:
        """(held MiB, total MiB) of a GPU."""
        held, total = self._mem_gpu.get(gpu, (0, 0))
        return held, total

    def island_load(self, island: str) -> float:
        held, total = self._mem_island.get(island, (0, 0))
        return held / total if total else 0.0

    def slot(self, slice_id: str) -> Slot:
        return self._slots[slice_id]

    def hosts(self) -> list[str]:
        return list(self._host_slots)

    # -- changing the view (simulation; never the ledger) ----------------------------------

    def hold(self, slice_ids: Iterable[str], holder: Holder) -> None:
        """Mark slices held by `holder`. A slice held already is a ValueError: never two."""
        ids = list(slice_ids)
        taken = [s for s in ids if s not in self._free]
        if taken:
            raise ValueError(f"{holder.alloc}: {', '.join(taken)} not free")
        for sid in ids:
            self.take(sid)
            self._holder_of[sid] = holder
        self._holds[holder.alloc] = holder

    def unhold(self, alloc_id: str) -> Holder:
        """Free the slices of a hold; returns it."""
        holder = self._holds.pop(alloc_id)
        for sid in holder.slices:
            if self._holder_of.get(sid) is holder:
                del self._holder_of[sid]
                self.give(sid)
        return holder

    def take(self, slice_id: str) -> None:
        """Low level: the slice is no longer free (no holder recorded). For tentative picks."""
        slot = self._slots[slice_id]
        shape = slot.shape
        tier_list = shape.tiers[slot.tier]
        del tier_list[bisect_left(tier_list, slot.nat)]
        slot.tier = -1
        shape.free -= 1
        shape.by_host[slot.host] -= 1
        self._free.discard(slice_id)
        self._mem_host[slot.host][0] += slot.memory
        self._mem_gpu[slot.gpu][0] += slot.memory
        self._mem_island[slot.island][0] += slot.memory
        self._held_gpu[slot.gpu] = self._held_gpu.get(slot.gpu, 0) + 1
        self._held_host[slot.host] = self._held_host.get(slot.host, 0) + 1
        if self._held_gpu[slot.gpu] == 1:
            self._retier(self._gpu_slots[slot.gpu])
        if self._held_host[slot.host] == 1:
            self._retier(self._host_slots[slot.host])

    def give(self, slice_id: str) -> None:
        """Low level: the inverse of take."""
        slot = self._slots[slice_id]
        self._mem_host[slot.host][0] -= slot.memory
        self._mem_gpu[slot.gpu][0] -= slot.memory
        self._mem_island[slot.island][0] -= slot.memory
        self._held_gpu[slot.gpu] -= 1
        self._held_host[slot.host] -= 1
        self._set_free(slot)
        if self._held_gpu[slot.gpu] == 0:
            self._retier(self._gpu_slots[slot.gpu])
        if self._held_host[slot.host] == 0:
            self._retier(self._host_slots[slot.host])

    def _tier(self, slot: Slot) -> int:
        """0 best for packing: GPU partly used and host partly used; 3: both untouched."""
        gpu_used = self._held_gpu.get(slot.gpu, 0) > 0
        host_used = self._held_host.get(slot.host, 0) > 0
        return (0 if gpu_used else 2) + (0 if host_used else 1)

    def _set_free(self, slot: Slot) -> None:
        shape = slot.shape
        slot.tier = self._tier(slot)
        insort(shape.tiers[slot.tier], slot.nat)
        shape.free += 1
        shape.by_host[slot.host] = shape.by_host.get(slot.host, 0) + 1
        self._free.add(slot.id)

    def _retier(self, slots: list[Slot]) -> None:
        for slot in slots:
            if slot.tier < 0:
                continue
            tier = self._tier(slot)
            if tier != slot.tier:
                tiers = slot.shape.tiers
                old = tiers[slot.tier]
                del old[bisect_left(old, slot.nat)]
                insort(tiers[tier], slot.nat)
                slot.tier = tier

    # -- matching -------------------------------------------------------------------------

    def shapes_for(self, request: JobRequest) -> list[Shape]:
        """Shapes that satisfy the request (host aside), smallest memory first."""
        key = request.static_key()
        found = self._match_cache.get(key)
        if found is None:
            found = [s for s in self._shape_order if shape_matches(s.entry, request)]
            self._match_cache[key] = found
        return found

    def free_candidates(self, request: JobRequest) -> Iterator[Slot]:
        """Free slots that satisfy the request, host glob included (any order)."""
        for shape in self.shapes_for(request):
            for tier_list in shape.tiers:
                for nat in tier_list:
                    slot = self._slots[self._by_nat[nat]]
                    if host_matches(slot.host, request):
                        yield slot

    def all_candidates(self, request: JobRequest) -> Iterator[Slot]:
        """Every slot that would satisfy the request if the pool were empty."""
        wanted = {id(s) for s in self.shapes_for(request)}
        for slot in self._slots.values():
            if id(slot.shape) in wanted and host_matches(slot.host, request):
                yield slot

    def heads(self, shape: Shape) -> tuple[int, Nat] | None:
        """The best free slice of a shape for packing: (tier, natural id)."""
        for tier, tier_list in enumerate(shape.tiers):
            if tier_list:
                return tier, tier_list[0]
        return None

    def smallest_id(self, shape: Shape) -> Nat | None:
        heads = [t[0] for t in shape.tiers if t]
        return min(heads) if heads else None

    def id_of(self, nat: Nat) -> str:
        return self._by_nat[nat]

    def host_slots(self, host: str) -> list[Slot]:
        return self._host_slots.get(host, [])

    def group_used(self, hosts: Iterable[str]) -> bool:
        return any(self._held_host.get(h, 0) for h in hosts)

    def gpu_used(self, gpu: str) -> bool:
        return self._held_gpu.get(gpu, 0) > 0

    def host_used(self, host: str) -> bool:
        return self._held_host.get(host, 0) > 0


def _gpu_key(entry: dict[str, Any]) -> str:
    """Slices of one physical GPU share this; a slice that names no GPU is its own."""
    if entry.get("gpu") is not None:
        return f"{entry['host']}/gpu{entry['gpu']}"
    return str(entry.get("gpu_uuid") or entry["id"])


def _holder(alloc: Allocation, job: dict[str, Any] | None) -> Holder:
    request = alloc.request or {}
    job_request = (job or {}).get("request") or {}

    def first(key: str) -> Any:
        for source in (request, job or {}, job_request):
            if source.get(key) is not None:
                return source[key]
        return None

    job_id = request.get("job") or (job or {}).get("id")
    priority = first("priority")
    return Holder(
        alloc=alloc.id,
        owner=alloc.owner,
        slices=tuple(alloc.slices),
        job=str(job_id) if job_id is not None else None,
        priority=int(priority) if isinstance(priority, int | float) and job_id else None,
        preemptible=bool(first("preemptible")) and job_id is not None,
        since=alloc.created,
        expires=alloc.expires,
    )
