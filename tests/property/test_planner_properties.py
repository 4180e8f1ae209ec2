"""The planner against brute force over every placement combination, on real geometries."""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.hw import catalog
from gpupoolctl.hw.catalog import MigGeometry
from gpupoolctl.partition.planner import check_layout, largest_free_run, place

MODELS = ("A100-SXM4-40GB", "H100-SXM5-80GB", "A30-24GB", "RTX-PRO-6000-96GB", "B200-180GB")
GEOMETRIES = {key: catalog.nvidia_model(key).mig for key in MODELS}


def mask_of(geometry: MigGeometry, layout: list[tuple[str, int]]) -> int:
    mask = 0
    for name, start in layout:
        profile = geometry.by_name(name)
        assert profile is not None
        mask |= ((1 << profile.placement_size) - 1) << start
    return mask


def brute_force(
    geometry: MigGeometry, requested: dict[str, int], fixed: dict[str, list[int]]
) -> list[list[tuple[str, int]]]:
    """Every valid layout: all choices of allowed starts for the requested instances. The
    instances of one profile are interchangeable, so each profile's starts are taken as a
    multiset (combinations with replacement) rather than in every order: the same layouts,
    without the n! copies of each that made this the slowest property test."""
    pinned = [(name, s) for name, starts in fixed.items() for s in starts]
    per_profile = [
        [
            [(name, start) for start in starts]
            for starts in itertools.combinations_with_replacement(
                geometry.by_name(name).placement_starts,  # type: ignore[union-attr]
                n,
            )
        ]
        for name, n in sorted(requested.items())
    ]
    valid = []
    for parts in itertools.product(*per_profile):
        layout = pinned + [placed for part in parts for placed in part]
        if not check_layout(geometry, layout):
            valid.append(layout)
    return valid


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, dict[str, int], dict[str, list[int]]]:
    key = draw(st.sampled_from(MODELS))
    geometry = GEOMETRIES[key]
    assert geometry is not None
    names = [p.name for p in geometry.profiles]
    total = draw(st.integers(min_value=0, max_value=5))
    picked = draw(st.lists(st.sampled_from(names), min_size=total, max_size=total))
    requested = dict(Counter(picked))
    fixed: dict[str, list[int]] = {}
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        profile = draw(st.sampled_from(geometry.profiles))
        fixed.setdefault(profile.name, []).append(draw(st.sampled_from(profile.placement_starts)))
    return key, requested, fixed


@settings(max_examples=400, deadline=None)
@given(requests())
def test_planner_finds_a_layout_exactly_when_brute_force_does(
    case: tuple[str, dict[str, int], dict[str, list[int]]],
) -> None:
    key, requested, fixed = case
    geometry = GEOMETRIES[key]
    assert geometry is not None
    layout = place(geometry, requested, fixed)
    valid = brute_force(geometry, requested, fixed)
    if not valid:
        assert layout is None, (key, requested, fixed, layout)
        return
    assert layout is not None, (key, requested, fixed)
    # The rules hold: allowed starts, no overlap, compute slices, max instances.
    assert check_layout(geometry, layout) == []
    # Exactly what was asked: the requested instances plus the pinned ones where pinned.
    want = Counter(requested) + Counter({n: len(s) for n, s in fixed.items()})
    assert Counter(name for name, _ in layout) == want
    for name, starts in fixed.items():
        for start in starts:
            assert (name, start) in layout
    # Preference: no valid layout keeps a longer free contiguous run.
    best = max(largest_free_run(mask_of(geometry, v), geometry.memory_slots) for v in valid)
    assert largest_free_run(mask_of(geometry, layout), geometry.memory_slots) == best
    # Deterministic.
    assert place(geometry, dict(reversed(list(requested.items()))), fixed) == layout


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(MODELS), st.data())
def test_full_cards_of_one_profile(key: str, data: st.DataObject) -> None:
    """n instances of one profile fit iff n <= max instances and the compute slices allow."""
    geometry = GEOMETRIES[key]
    assert geometry is not None
    profile = data.draw(st.sampled_from(geometry.profiles))
    n = data.draw(st.integers(min_value=1, max_value=profile.max_instances + 1))
    layout = place(geometry, {profile.name: n})
    fits = (
        n <= profile.max_instances
        and n * profile.compute_slices <= geometry.compute_slices
        and bool(brute_force(geometry, {profile.name: n}, {}))
    )
    assert (layout is not None) == fits
