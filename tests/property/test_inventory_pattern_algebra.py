"""Property tests: --limit union, intersection and exclusion behave like Python sets."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.inventory.graph import InventoryData
from gpupoolctl.inventory.loader import build_inventory

HOSTS = [f"h{i:02d}" for i in range(12)]
GROUPS = ["ga", "gb", "gc", "gd"]


@st.composite
def inventories(draw):
    membership = {
        g: draw(st.lists(st.sampled_from(HOSTS), unique=True, max_size=len(HOSTS))) for g in GROUPS
    }
    data = InventoryData()
    for host in HOSTS:
        data.add_host(host)
    for group, members in membership.items():
        data.add_group(group)
        for host in members:
            data.add_host(host, group)
    data.reconcile()
    nowhere = Path("no-such-folder")
    return build_inventory(nowhere / "x", data, nowhere, nowhere), membership


names = st.sampled_from(GROUPS + HOSTS)


def resolve(membership, name):
    return set(membership[name]) if name in membership else {name}


@given(inventories(), st.lists(names, min_size=1, max_size=4), st.sampled_from([":", ","]))
@settings(max_examples=150)
def test_union(inv_membership, parts, sep):
    inv, membership = inv_membership
    expected = set().union(*(resolve(membership, p) for p in parts))
    assert set(inv.select(sep.join(parts)).names) == expected


@given(inventories(), names, st.lists(names, min_size=1, max_size=3))
@settings(max_examples=150)
def test_intersection_and_exclusion(inv_membership, first, others):
    inv, membership = inv_membership
    base = resolve(membership, first)
    inter = set(base)
    minus = set(base)
    for other in others:
        inter &= resolve(membership, other)
        minus -= resolve(membership, other)
    assert set(inv.select(first + "".join(f":&{o}" for o in others)).names) == inter
    assert set(inv.select(first + "".join(f",!{o}" for o in others)).names) == minus


@given(inventories(), st.lists(st.tuples(st.sampled_from(["", "&", "!"]), names), max_size=6))
@settings(max_examples=150)
def test_processing_order(inv_membership, parts):
    # Ansible: (union of plain parts, or all) AND every '&' part, minus every '!' part.
    inv, membership = inv_membership
    plain = [n for op, n in parts if op == ""]
    result = set().union(*(resolve(membership, n) for n in plain)) if plain else set(HOSTS)
    for op, n in parts:
        if op == "&":
            result &= resolve(membership, n)
    for op, n in parts:
        if op == "!":
            result -= resolve(membership, n)
    limit = ":".join(op + n for op, n in parts)
    selected = inv.select(limit or None).names
    assert set(selected) == result
    assert selected == [h for h in inv.hosts if h in result]  # inventory order, no duplicates
