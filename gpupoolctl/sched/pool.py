"""PoolView: the slices of the pool, which are free, who holds the rest; indexed for placement.

Built from the ledger's state (as sched.recorded reads it), or from plain slice dicts, for
simulations and benches. The view never writes to the ledger. `hold` / `unhold` change the
view itself only; virtual-time simulations and `place` (tentatively, undone before it
returns) use them.

Index: slices of one *shape* (kind, profile, memory, vendor, model, bandwidth class) are
interchangeable for matching, so a request is matched against the few shapes, not against
every slice. Each shape keeps its free slices in four lists sorted by natural id, one per
packing tier: (GPU partly used?, host partly used?). Best-fit then needs only the head of a
list per shape; a hold or release moves the few free slices of that GPU/host between tiers.

The static part (slots, shapes, per-host/GPU lists, totals) is a Skeleton shared by every
view of the same slices (from_state reuses it while the ledger's slice map is unchanged);
a shape's tier lists are built on first use. So `gpupoolctl alloc`, which builds a view
per call, pays for the shapes it asks about and the holds, not for the whole pool.
"""

from __future__ import annotations

import fnmatch
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from gpupoolctl.hw.slice import card_key, within_capacity
from gpupoolctl.sched.ids import natural
from gpupoolctl.sched.request import JobRequest, host_matches, shape_matches
from gpupoolctl.sched.unavailable import LABELS, Block, blocks
from gpupoolctl.timestamps import format_ts, utc_now

if TYPE_CHECKING:
    from gpupoolctl.sched.recorded import RecordedHold, RecordedState

Nat = tuple[Any, ...]
T = TypeVar("T")


@dataclass(frozen=True)
class Holder:
    """Who holds a slice. A hold is a job's when its allocation's request names the job
    (`"job": id`; the jobs side writes JobRequest.to_dict() plus that) or a live job record
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
    team: str | None = None  # the team whose quota it counts against; None: no team
    borrowed: bool = False  # placed above its team's nominal quota: reclaim may take it
    # Not a hold: what keeps these slices out of placement (a kind of sched.unavailable).
    block: str | None = None

    @property
    def victim_id(self) -> str:
        """The id preemption names: the job's when the hold is a job's, else the allocation's."""
        return self.job or self.alloc


@dataclass(slots=True, eq=False)
class Slot:
    """One slice as placement sees it (static)."""

    id: str
    nat: Nat
    host: str
    gpu: str  # the physical GPU: slices that share it share this key
    island: str
    memory: int
    shape: Shape
    site: str = ""  # the inventory's site of the host; "" when unknown (no site grouping)


@dataclass(slots=True, eq=False)
class Shape:
    index: int
    key: tuple[Any, ...]
    entry: dict[str, Any]  # one slice of the shape: what requests are matched against
    memory: int
    members: list[Slot] = field(default_factory=list)  # natural order
    totals: dict[str, dict[str, int]] = field(
        default_factory=lambda: {"host": {}, "island": {}, "site": {}}
    )  # level -> group -> slices of this shape there (site: only slices with a site)


class Skeleton:
    """The static index of a set of slices."""

    def __init__(self, slices: Iterable[dict[str, Any]]) -> None:
        self.slices: dict[str, dict[str, Any]] = {}
        self.slots: dict[str, Slot] = {}
        self.by_nat: dict[Nat, str] = {}
        self.shapes: list[Shape] = []
        self.host_slots: dict[str, list[Slot]] = {}
        self.gpu_slots: dict[str, list[Slot]] = {}
        self.island_slots: dict[str, list[Slot]] = {}
        self.island_host: dict[str, str] = {}
        self.site_slots: dict[str, list[Slot]] = {}
        self.host_site: dict[str, str] = {}
        self.total_site: dict[str, int] = {}
        self.total_host: dict[str, int] = {}
        self.total_gpu: dict[str, int] = {}
        self.total_island: dict[str, int] = {}
        self.match_cache: dict[tuple[Any, ...], list[Shape]] = {}
        self.cache: dict[tuple[Any, ...], Any] = {}  # answers that depend on slices only
        shapes: dict[tuple[Any, ...], Shape] = {}
        for entry in sorted(slices, key=lambda s: natural(s["id"])):
            sid, host = entry["id"], entry["host"]
            memory = int(entry.get("memory_mib") or 0)
            key = (
                entry.get("kind"),
                entry.get("profile"),
                memory,
                entry.get("vendor"),
                entry.get("model"),
                entry.get("bandwidth_class"),
            )
            shape = shapes.get(key)
            if shape is None:
                shape = shapes[key] = Shape(len(self.shapes), key, entry, memory)
                self.shapes.append(shape)
            gpu = gpu_key(entry)
            island = island_key(entry)
            site = str(entry.get("site") or "")
            slot = Slot(sid, natural(sid), host, gpu, island, memory, shape, site)
            shape.members.append(slot)
            self.slices[sid] = entry
            self.slots[sid] = slot
            self.by_nat[slot.nat] = sid
            self.host_slots.setdefault(host, []).append(slot)
            self.gpu_slots.setdefault(gpu, []).append(slot)
            self.island_slots.setdefault(island, []).append(slot)
            self.island_host[island] = host
            if site:
                self.site_slots.setdefault(site, []).append(slot)
                self.host_site[host] = site
                shape.totals["site"][site] = shape.totals["site"].get(site, 0) + 1
                self.total_site[site] = self.total_site.get(site, 0) + memory
            shape.totals["host"][host] = shape.totals["host"].get(host, 0) + 1
            shape.totals["island"][island] = shape.totals["island"].get(island, 0) + 1
            self.total_host[host] = self.total_host.get(host, 0) + memory
            self.total_gpu[gpu] = self.total_gpu.get(gpu, 0) + memory
            self.total_island[island] = self.total_island.get(island, 0) + memory
        self.shape_order = sorted(self.shapes, key=lambda s: (s.memory, repr(s.key)))

    def shapes_for(self, request: JobRequest) -> list[Shape]:
        key = request.static_key()
        found = self.match_cache.get(key)
        if found is None:
            found = [s for s in self.shape_order if shape_matches(s.entry, request)]
            self.match_cache[key] = found
        return found


# The ledger replaces its slice map on every `slices` record and never edits it in place,
# so the map's identity says whether what was computed from it is still good. The map is
# kept referenced, so its id cannot be reused while cached.
_SKELETONS: list[tuple[Mapping[str, Any], int, Skeleton]] = []


def of_slice_map(
    cache: list[tuple[Mapping[str, Any], int, T]],
    slices: Mapping[str, Any],
    compute: Callable[[], T],
) -> T:
    """What `compute` makes of the slice map, kept for the last four maps by identity."""
    for known, size, value in cache:
        if known is slices and size == len(slices):
            return value
    value = compute()
    cache.insert(0, (slices, len(slices), value))
    del cache[4:]
    return value


def skeleton_of(slices: Mapping[str, dict[str, Any]]) -> Skeleton:
    return of_slice_map(_SKELETONS, slices, lambda: Skeleton(slices.values()))


class _FreeIds(AbstractSet[str]):
    """The free slice ids of a view, computed on demand."""

    def __init__(self, view: PoolView) -> None:
        self._view = view

    def __contains__(self, sid: object) -> bool:
        view = self._view
        return sid in view._sk.slots and sid not in view._taken

    def __iter__(self) -> Iterator[str]:
        taken = self._view._taken
        return (sid for sid in self._view._sk.slots if sid not in taken)

    def __len__(self) -> int:
        return len(self._view._sk.slots) - len(self._view._taken)


class PoolView:
    def __init__(
        self,
        slices: Iterable[dict[str, Any]] | Skeleton,
        holders: Iterable[Holder] = (),
    ) -> None:
        self._sk = slices if isinstance(slices, Skeleton) else Skeleton(slices)
        self.slices: Mapping[str, dict[str, Any]] = self._sk.slices
        self._taken: set[str] = set()  # held, or taken tentatively by place()
        self._holder_of: dict[str, Holder] = {}
        self._holds: dict[str, Holder] = {}
        self._held_gpu: dict[str, int] = {}
        self._held_host: dict[str, int] = {}
        self._held_mem_host: dict[str, int] = {}
        self._held_mem_gpu: dict[str, int] = {}
        self._held_mem_island: dict[str, int] = {}
        self._held_mem_site: dict[str, int] = {}
        # Per shape index, built on first use: four tier lists, free per host and island.
        self._tiers: dict[int, list[list[Nat]]] = {}
        self._by_host: dict[int, dict[str, int]] = {}
        self._by_island: dict[int, dict[str, int]] = {}
        self._tier_of: dict[str, int] = {}  # free slots of built shapes
        # Taken slices per shape index, kept for every shape: a shape's free count and its
        # lowest free id need no tier lists (alloc's rule asks only those).
        self._shape_taken: dict[int, int] = {}
        # Slices taken for a while without a holder, with why (keep): no-fit reasons count them.
        self._kept: dict[str, str] = {}
        # Per shape index, bumped by every take and give: whether a tally is still good.
        self._shape_version: dict[int, int] = {}
        # (shape index, host glob) -> (version, free, why -> count): see shape_tally.
        self._tallies: dict[tuple[int, str | None], tuple[int, int, dict[str, int]]] = {}
        for holder in holders:
            self.hold(holder.slices, holder)
        self._free_ids = _FreeIds(self)

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_state(cls, state: RecordedState, now: datetime | str | None = None) -> PoolView:
        """The pool as the ledger has it at `now` (default: the current time): expired holds
        are free."""
        stamp = now if isinstance(now, str) else format_ts(now or utc_now())
        jobs_by_alloc = {
            str(job["alloc"]): job for job in state.jobs.values() if job.get("alloc") is not None
        }
        holders = []
        known, owner_of = state.slices, state.holders
        for alloc in state.active(stamp).values():
            # A hold on a slice that is gone (orphan) or recorded twice keeps only what it
            # really holds: the view must never show one slice held twice.
            mine = tuple(s for s in alloc.slices if s in known and owner_of.get(s) == alloc.id)
            holders.append(_holder(alloc, mine, jobs_by_alloc.get(alloc.id)))
        held = {s for holder in holders for s in holder.slices}
        holders.extend(_block_holders(blocks(state), held))
        return cls(skeleton_of(state.slices), holders)

    # -- public queries -------------------------------------------------------------------

    @property
    def free(self) -> AbstractSet[str]:
        """Ids of the free slices (a live, read-only set)."""
        return self._free_ids

    def holder(self, slice_id: str) -> Holder | None:
        return self._holder_of.get(slice_id)

    @property
    def holds(self) -> Mapping[str, Holder]:
        """Every hold, by allocation id."""
        return self._holds

    def host_load(self, host: str) -> float:
        total = self._sk.total_host.get(host, 0)
        return self._held_mem_host.get(host, 0) / total if total else 0.0

    def gpu_memory(self, gpu: str) -> tuple[int, int]:
        """(held MiB, total MiB) of a GPU."""
        return self._held_mem_gpu.get(gpu, 0), self._sk.total_gpu.get(gpu, 0)

    def gpu_load(self, gpu: str) -> float:
        held, total = self.gpu_memory(gpu)
        return held / total if total else 0.0

    def island_load(self, island: str) -> float:
        total = self._sk.total_island.get(island, 0)
        return self._held_mem_island.get(island, 0) / total if total else 0.0

    def site_load(self, site: str) -> float:
        total = self._sk.total_site.get(site, 0)
        return self._held_mem_site.get(site, 0) / total if total else 0.0

    def group_load(self, level: str, group: str) -> float:
        if level == "island":
            return self.island_load(group)
        if level == "site":
            return self.site_load(group)
        return self.host_load(group)

    def host_site(self, host: str) -> str:
        """The host's site, "" when its slices name none."""
        return self._sk.host_site.get(host, "")

    def slot(self, slice_id: str) -> Slot:
        return self._sk.slots[slice_id]

    def hosts(self) -> list[str]:
        return list(self._sk.host_slots)

    def host_slots(self, host: str) -> list[Slot]:
        return self._sk.host_slots.get(host, [])

    def is_free(self, slice_id: str) -> bool:
        return slice_id not in self._taken

    def why_taken(self, slice_id: str) -> str:
        """Why a slice that is not free is not: "held", what blocks it (sched.unavailable's
        label), or why it is kept (keep); else it is reserved (an aging reservation)."""
        holder = self._holder_of.get(slice_id)
        if holder is None:
            return self._kept.get(slice_id, "reserved for work ahead in the queue")
        return LABELS[holder.block] if holder.block else "held"

    def keep(self, slice_ids: Iterable[str], why: str) -> list[str]:
        """Take the free ones of `slice_ids` for a while, saying why ("kept to be cut"): no
        holder, no record. Returns those taken, for unkeep."""
        kept = [s for s in slice_ids if self.is_free(s)]
        for slice_id in kept:
            self.take(slice_id)
            self._kept[slice_id] = why
        return kept

    def unkeep(self, slice_ids: Iterable[str]) -> None:
        """Give back what keep took (in the reverse order)."""
        for slice_id in reversed(list(slice_ids)):
            del self._kept[slice_id]
            self.give(slice_id)

    def gpu_used(self, gpu: str) -> bool:
        return self._held_gpu.get(gpu, 0) > 0

    def host_used(self, host: str) -> bool:
        return self._held_host.get(host, 0) > 0

    def tier(self, slot: Slot) -> int:
        """Packing tier of a slot: 0 best (GPU and host partly used) .. 3 (both untouched)."""
        gpu_used = self._held_gpu.get(slot.gpu, 0) > 0
        host_used = self._held_host.get(slot.host, 0) > 0
        return (0 if gpu_used else 2) + (0 if host_used else 1)

    # -- changing the view (simulation; never the ledger) ----------------------------------

    def has_room(self, slice_id: str) -> bool:
        """Whether one more holder may take the slice, by its capacity (hw.slice). A slice
        taken without a holder (kept, picked tentatively) counts as held."""
        occupied = 1 if slice_id in self._taken else 0
        return within_capacity(self._sk.slices[slice_id], occupied + 1)

    def hold(self, slice_ids: Iterable[str], holder: Holder) -> None:
        """Mark slices held by `holder`. A slice without room for it (has_room) is a
        ValueError: never beyond its capacity."""
        ids = list(slice_ids)
        unknown = [s for s in ids if s not in self._sk.slots]
        full = [s for s in ids if s in self._sk.slots and not self.has_room(s)]
        if unknown or full or len(set(ids)) != len(ids) or holder.alloc in self._holds:
            what = ", ".join(unknown + full) or "twice"
            raise ValueError(f"{holder.alloc}: cannot hold {what}")
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
        if slice_id in self._taken:
            raise ValueError(f"{slice_id} is not free")
        slot = self._sk.slots[slice_id]
        self._taken.add(slice_id)
        index = slot.shape.index
        self._shape_taken[index] = self._shape_taken.get(index, 0) + 1
        self._shape_version[index] = self._shape_version.get(index, 0) + 1
        tier = self._tier_of.pop(slice_id, None)
        if tier is not None:
            tier_list = self._tiers[index][tier]
            del tier_list[bisect_left(tier_list, slot.nat)]
            self._by_host[index][slot.host] -= 1
            self._by_island[index][slot.island] -= 1
        self._count(slot, +1)
        if self._held_gpu[slot.gpu] == 1:
            self._retier(self._sk.gpu_slots[slot.gpu])
        if self._held_host[slot.host] == 1:
            self._retier(self._sk.host_slots[slot.host])

    def give(self, slice_id: str) -> None:
        """Low level: the inverse of take."""
        if slice_id not in self._taken:
            raise ValueError(f"{slice_id} is free already")
        slot = self._sk.slots[slice_id]
        self._taken.discard(slice_id)
        self._count(slot, -1)
        index = slot.shape.index
        self._shape_taken[index] -= 1
        self._shape_version[index] += 1
        if index in self._tiers:
            tier = self.tier(slot)
            insort(self._tiers[index][tier], slot.nat)
            self._tier_of[slice_id] = tier
            self._by_host[index][slot.host] = self._by_host[index].get(slot.host, 0) + 1
            self._by_island[index][slot.island] = self._by_island[index].get(slot.island, 0) + 1
        if self._held_gpu[slot.gpu] == 0:
            self._retier(self._sk.gpu_slots[slot.gpu])
        if self._held_host[slot.host] == 0:
            self._retier(self._sk.host_slots[slot.host])

    def _count(self, slot: Slot, step: int) -> None:
        memory = step * slot.memory
        self._held_mem_host[slot.host] = self._held_mem_host.get(slot.host, 0) + memory
        self._held_mem_gpu[slot.gpu] = self._held_mem_gpu.get(slot.gpu, 0) + memory
        self._held_mem_island[slot.island] = self._held_mem_island.get(slot.island, 0) + memory
        if slot.site:
            self._held_mem_site[slot.site] = self._held_mem_site.get(slot.site, 0) + memory
        self._held_gpu[slot.gpu] = self._held_gpu.get(slot.gpu, 0) + step
        self._held_host[slot.host] = self._held_host.get(slot.host, 0) + step

    def _retier(self, slots: list[Slot]) -> None:
        for slot in slots:
            old = self._tier_of.get(slot.id)
            if old is None:
                continue
            tier = self.tier(slot)
            if tier != old:
                tiers = self._tiers[slot.shape.index]
                del tiers[old][bisect_left(tiers[old], slot.nat)]
                insort(tiers[tier], slot.nat)
                self._tier_of[slot.id] = tier

    def _build(self, shape: Shape) -> list[list[Nat]]:
        tiers: list[list[Nat]] = [[], [], [], []]
        by_host: dict[str, int] = {}
        by_island: dict[str, int] = {}
        taken, tier_of = self._taken, self._tier_of
        held_gpu, held_host = self._held_gpu, self._held_host
        for slot in shape.members:  # natural order: appending keeps the lists sorted
            if slot.id in taken:
                continue
            # self.tier(), inlined: this loop is most of what a view of a big pool costs
            tier = (0 if held_gpu.get(slot.gpu) else 2) + (0 if held_host.get(slot.host) else 1)
            tiers[tier].append(slot.nat)
            tier_of[slot.id] = tier
            by_host[slot.host] = by_host.get(slot.host, 0) + 1
            by_island[slot.island] = by_island.get(slot.island, 0) + 1
        self._tiers[shape.index] = tiers
        self._by_host[shape.index] = by_host
        self._by_island[shape.index] = by_island
        return tiers

    # -- matching -------------------------------------------------------------------------

    def shapes_for(self, request: JobRequest) -> list[Shape]:
        """Shapes that satisfy the request (host aside), smallest memory first."""
        return self._sk.shapes_for(request)

    def shape_free(self, shape: Shape) -> int:
        return len(shape.members) - self._shape_taken.get(shape.index, 0)

    def shape_hosts(self, shape: Shape) -> dict[str, int]:
        """Free slices of the shape per host (hosts with none may appear with 0)."""
        if shape.index not in self._tiers:
            self._build(shape)
        return self._by_host[shape.index]

    def shape_groups(self, shape: Shape, level: str, *, free: bool = True) -> dict[str, int]:
        """Slices of the shape per host or island: free ones, or all (free=False). Groups
        with none may appear with 0."""
        if not free:
            return shape.totals[level]
        if shape.index not in self._tiers:
            self._build(shape)
        return (self._by_island if level == "island" else self._by_host)[shape.index]

    def shape_tally(self, shape: Shape, host: str | None) -> tuple[int, dict[str, int]]:
        """The shape's slices on hosts matching the glob `host` (None: every host): how
        many are free, and how many are not per why_taken. Kept until a slice of the shape
        is taken or given: a full pool's waiting jobs all ask it, and walking thousands of
        slices for each of them was most of a pass (bench/scale)."""
        version = self._shape_version.get(shape.index, 0)
        found = self._tallies.get((shape.index, host))
        if found is not None and found[0] == version:
            return found[1], found[2]
        free, counts = 0, {}
        taken = self._taken
        for slot in shape.members:
            if host is not None and not fnmatch.fnmatchcase(slot.host, host):
                continue
            if slot.id not in taken:
                free += 1
            else:
                why = self.why_taken(slot.id)
                counts[why] = counts.get(why, 0) + 1
        self._tallies[(shape.index, host)] = (version, free, counts)
        return free, counts

    def static_cache(self, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
        """An answer that depends only on the slices (not on holds), computed once."""
        cache = self._sk.cache
        if key not in cache:
            cache[key] = compute()
        return cast(T, cache[key])

    def group_host(self, level: str, group: str) -> str:
        return self._sk.island_host[group] if level == "island" else group

    def group_slots(self, level: str, group: str) -> list[Slot]:
        if level == "site":
            return self._sk.site_slots.get(group, [])
        return (self._sk.island_slots if level == "island" else self._sk.host_slots).get(group, [])

    def heads(self, shape: Shape) -> tuple[int, Nat] | None:
        """The best free slice of a shape for packing: (tier, natural id)."""
        tiers = self._tiers.get(shape.index) or self._build(shape)
        for tier, tier_list in enumerate(tiers):
            if tier_list:
                return tier, tier_list[0]
        return None

    def smallest_id(self, shape: Shape) -> Nat | None:
        tiers = self._tiers.get(shape.index)
        if tiers is None:  # members are in natural order: the first free one
            taken = self._taken
            return next((slot.nat for slot in shape.members if slot.id not in taken), None)
        heads = [t[0] for t in tiers if t]
        return min(heads) if heads else None

    def id_of(self, nat: Nat) -> str:
        return self._sk.by_nat[nat]

    def free_candidates(self, request: JobRequest) -> Iterator[Slot]:
        """Free slots that satisfy the request, host glob included, in natural order per
        shape."""
        taken = self._taken
        for shape in self.shapes_for(request):
            for slot in shape.members:
                if slot.id not in taken and host_matches(slot.host, request):
                    yield slot

    def all_candidates(self, request: JobRequest) -> Iterator[Slot]:
        """Every slot that would satisfy the request if the pool were empty."""
        for shape in self.shapes_for(request):
            for slot in shape.members:
                if host_matches(slot.host, request):
                    yield slot


def island_key(entry: Mapping[str, Any]) -> str:
    """The NVLink/xGMI island a slice is in; a GPU in none is an island of its own."""
    return str(entry.get("island") or gpu_key(entry))


def gpu_key(entry: Mapping[str, Any]) -> str:
    """Slices of one physical GPU share this; a slice that names no GPU is its own."""
    return card_key(entry) or str(entry.get("gpu_uuid") or entry["id"])


RESHAPE_OWNER = "gpupoolctl (re-cut)"
DRAIN_OWNER = "gpupoolctl (drained)"
BLOCK_OWNER = "gpupoolctl (out of placement)"
# How a block's holder is named: a reshape and a drain as they always were.
_BLOCK_HOLDS = {
    "re-cutting": ("reshape", RESHAPE_OWNER),
    "failed": ("drain", DRAIN_OWNER),
    "drained": ("drain", DRAIN_OWNER),
}


def _block_holders(found: Mapping[str, Block], held: AbstractSet[str]) -> list[Holder]:
    """The free slices that something keeps out of placement (sched.unavailable) are held by
    it: nothing is placed there, nothing is re-cut there, and such a holder is never a
    preemption victim (it is no job's). One holder per kind and source."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for sid in sorted(found):
        if sid not in held:
            block = found[sid]
            grouped.setdefault((block.kind, block.source), []).append(sid)
    out = []
    for (kind, source), ids in grouped.items():
        prefix, owner = _BLOCK_HOLDS.get(kind, (kind, BLOCK_OWNER))
        out.append(Holder(alloc=f"{prefix}:{source}", owner=owner, slices=tuple(ids), block=kind))
    return out


def _holder(alloc: RecordedHold, slices: tuple[str, ...], job: dict[str, Any] | None) -> Holder:
    request = alloc.request or {}
    job_id = request.get("job") or (job.get("id") if job else None)
    if job_id is None:  # not a job's (alloc): only its team, which its quota counts
        team = request.get("team")
        return Holder(
            alloc.id,
            alloc.owner,
            slices,
            since=alloc.created,
            expires=alloc.expires,
            team=str(team) if team else None,
        )
    job = job or {}
    job_request = job.get("request") or {}

    def first(key: str) -> Any:
        for source in (request, job, job_request):
            if source.get(key) is not None:
                return source[key]
        return None

    priority = first("priority")
    team = first("team")
    return Holder(
        alloc=alloc.id,
        owner=alloc.owner,
        slices=slices,
        job=str(job_id) if job_id is not None else None,
        priority=int(priority) if isinstance(priority, int | float) else None,
        preemptible=bool(first("preemptible")),
        since=alloc.created,
        expires=alloc.expires,
        team=str(team) if team else None,
        borrowed=bool(request.get("borrowed")),
    )
