"""Placement search: where each requested GPU instance goes on one GPU's memory slots.

Rules (from the catalog geometry, never a hard-coded 8 slots): an instance of profile P sits
at one of P's allowed starts and covers P.placement_size memory slots; instances never
overlap; the compute slices of all instances fit the GPU's compute slices (7 on an 8-slot
H100: 4g+3g is fine, 1g.20gb takes 1 compute slice but 2 memory slots); no profile exceeds its
max instances.

Compute slices and instance counts do not depend on where instances go, so they are checked
once up front. What remains is exact cover-free packing on at most a few dozen starts, solved
by depth-first search:
  - largest profiles first (fewest choices, most constraining);
  - symmetry pruning: instances of one profile are interchangeable, so their starts are taken
    in increasing order (each set of starts is visited once, not once per permutation);
  - a slot-count bound: the remaining instances' slots must fit the free slots;
  - memoised dead states (instance position, occupied-slot mask, first allowed start).
The search is exhaustive up to those sound prunings, so None means no layout exists.

Among valid layouts the one kept maximises the largest free contiguous run of memory slots
(room for a later large instance); ties keep the first found, i.e. the lowest starts in the
search order (largest profiles first, starts ascending), which makes the result deterministic.
A branch-and-bound pass finds it: the largest free run of a partial layout bounds every
completion's.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from gpupoolctl.hw.catalog import GpuInstanceProfile, MigGeometry

Layout = list[tuple[str, int]]


def place(
    geometry: MigGeometry,
    requested: Mapping[str, int],
    fixed: Mapping[str, list[int]] | None = None,
) -> Layout | None:
    """A layout for `requested` (profile -> count, placed by the planner) plus `fixed`
    (profile -> starts, pinned there), as (profile, start) sorted by start; None when none
    exists. Counts in `requested` are in addition to the fixed instances.

    ValueError for a profile the geometry does not have.
    """
    req = tuple(sorted((name, int(n)) for name, n in requested.items() if int(n) > 0))
    fix = tuple(sorted((name, tuple(sorted(starts))) for name, starts in (fixed or {}).items()))
    for name, _ in (*req, *fix):
        if geometry.by_name(name) is None:
            known = ", ".join(p.name for p in geometry.profiles)
            raise ValueError(f"{name!r} is not a profile of this geometry; known: {known}")
    result = _place_cached(geometry, req, fix)
    return None if result is None else list(result)


@functools.lru_cache(maxsize=4096)
def _place_cached(
    geometry: MigGeometry,
    requested: tuple[tuple[str, int], ...],
    fixed: tuple[tuple[str, tuple[int, ...]], ...],
) -> tuple[tuple[str, int], ...] | None:
    profiles = {p.name: p for p in geometry.profiles}
    counts: dict[str, int] = {}
    for name, n in requested:
        counts[name] = counts.get(name, 0) + n
    for name, starts in fixed:
        counts[name] = counts.get(name, 0) + len(starts)
    if any(counts[name] > profiles[name].max_instances for name in counts):
        return None
    if sum(profiles[n].compute_slices * c for n, c in counts.items()) > geometry.compute_slices:
        return None

    mask = 0
    placed: list[tuple[str, int]] = []
    for name, starts in fixed:
        profile = profiles[name]
        for start in starts:
            if start not in profile.placement_starts:
                return None
            bits = _bits(start, profile.placement_size)
            if mask & bits or start + profile.placement_size > geometry.memory_slots:
                return None
            mask |= bits
            placed.append((name, start))

    items = sorted(
        (profiles[name] for name, n in requested for _ in range(n)),
        key=lambda p: (-p.placement_size, -p.compute_slices, p.name),
    )
    search = _Search(geometry.memory_slots, items)
    found = search.best(mask)
    if found is None:
        return None
    placed.extend((p.name, start) for p, start in zip(items, found, strict=True))
    return tuple(sorted(placed, key=lambda item: (item[1], item[0])))


def _bits(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def largest_free_run(mask: int, slots: int) -> int:
    """Longest run of free (0) slots in the mask."""
    best = run = 0
    for slot in range(slots):
        if mask >> slot & 1:
            run = 0
        else:
            run += 1
            best = max(best, run)
    return best


class _Search:
    def __init__(self, slots: int, items: list[GpuInstanceProfile]) -> None:
        self.slots = slots
        self.items = items
        self.need_after = [0] * (len(items) + 1)  # slots the items from i on need
        for i in range(len(items) - 1, -1, -1):
            self.need_after[i] = self.need_after[i + 1] + items[i].placement_size
        self.dead: set[tuple[int, int, int]] = set()

    def _choices(self, i: int, mask: int, first: int) -> list[tuple[int, int]]:
        profile = self.items[i]
        out = []
        for k in range(first, len(profile.placement_starts)):
            start = profile.placement_starts[k]
            bits = _bits(start, profile.placement_size)
            if not mask & bits and start + profile.placement_size <= self.slots:
                out.append((k, bits))
        return out

    def _first(self, i: int, k_prev: int) -> int:
        # Symmetry: the same profile as the previous item starts after its start index.
        if 0 < i < len(self.items) and self.items[i] is self.items[i - 1]:
            return k_prev + 1
        return 0

    def feasible(self, i: int, mask: int, first: int) -> bool:
        if i == len(self.items):
            return True
        key = (i, mask, first)
        if key in self.dead:
            return False
        free = self.slots - bin(mask).count("1")
        if self.need_after[i] <= free:
            for k, bits in self._choices(i, mask, first):
                if self.feasible(i + 1, mask | bits, self._first(i + 1, k)):
                    return True
        self.dead.add(key)
        return False

    def best(self, mask: int) -> list[int] | None:
        if not self.feasible(0, mask, 0):
            return None
        ceiling = self.slots - bin(mask).count("1") - self.need_after[0]
        best_score = -1
        best_starts: list[int] | None = None
        chosen: list[int] = []

        def walk(i: int, mask: int, first: int) -> bool:
            nonlocal best_score, best_starts
            if largest_free_run(mask, self.slots) <= best_score:
                return False  # no completion can beat (or tie earlier than) the best
            if i == len(self.items):
                best_score = largest_free_run(mask, self.slots)
                best_starts = list(chosen)
                return best_score >= ceiling  # optimal: stop
            if (i, mask, first) in self.dead:
                return False
            profile = self.items[i]
            for k, bits in self._choices(i, mask, first):
                nxt = self._first(i + 1, k)
                if not self.feasible(i + 1, mask | bits, nxt):
                    continue
                chosen.append(profile.placement_starts[k])
                done = walk(i + 1, mask | bits, nxt)
                chosen.pop()
                if done:
                    return True
            return False

        walk(0, mask, 0)
        return best_starts


def check_layout(geometry: MigGeometry, layout: list[tuple[str, int]]) -> list[str]:
    """Why a layout breaks the rules ([] when it is valid): used by tests and the diff."""
    problems = []
    profiles = {p.name: p for p in geometry.profiles}
    mask = 0
    counts: dict[str, int] = {}
    compute = 0
    for name, start in layout:
        profile = profiles.get(name)
        if profile is None:
            problems.append(f"{name} is not a profile of this GPU")
            continue
        if start not in profile.placement_starts:
            problems.append(f"{name} cannot start at {start}")
        bits = _bits(start, profile.placement_size)
        if mask & bits:
            problems.append(f"{name}@{start} overlaps another instance")
        if start + profile.placement_size > geometry.memory_slots:
            problems.append(f"{name}@{start} runs past slot {geometry.memory_slots - 1}")
        mask |= bits
        counts[name] = counts.get(name, 0) + 1
        compute += profile.compute_slices
    for name, n in counts.items():
        if n > profiles[name].max_instances:
            problems.append(f"{n} x {name} exceeds its maximum {profiles[name].max_instances}")
    if compute > geometry.compute_slices:
        problems.append(f"{compute} compute slices exceed {geometry.compute_slices}")
    return problems
