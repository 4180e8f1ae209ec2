"""Node set expansion against ClusterShell's own NodeSet, on generated node sets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.inventory import NodeSetError, expand_nodeset, fold_nodeset

NodeSet = pytest.importorskip(
    "ClusterShell.NodeSet", reason="clustershell is not installed: nothing to compare with"
).NodeSet
NodeSetParseError = pytest.importorskip("ClusterShell.NodeSet").NodeSetParseError


@st.composite
def range_items(draw):
    begin = draw(st.integers(0, 120))
    kind = draw(st.sampled_from(["one", "range", "step"]))
    pad = draw(st.sampled_from([0, 0, 2, 3]))
    width = max(pad, len(str(begin + 12))) if pad else 0

    def fmt(n):
        return f"{n:0{width}d}" if width else str(n)

    if kind == "one":
        return fmt(begin)
    end = begin + draw(st.integers(0, 12))
    if kind == "range":
        return f"{fmt(begin)}-{fmt(end)}"
    return f"{fmt(begin)}-{fmt(end)}/{draw(st.integers(1, 5))}"


@st.composite
def nodesets(draw):
    # One pattern: text, then 1-3 bracket axes separated by non-empty text.
    texts = draw(st.lists(st.sampled_from(["gpu", "rack", "-", "-ib", "n", ".a"]), min_size=1))
    axes = draw(st.integers(1, 3))
    out = draw(st.sampled_from(["gpu", "node", "rack", "c"]))
    for i in range(axes):
        # Few items per axis: ClusterShell is slow on large multi-axis sets.
        items = draw(st.lists(range_items(), min_size=1, max_size=3 if axes == 1 else 2))
        out += "[" + ",".join(items) + "]"
        if i < axes - 1:
            out += texts[i % len(texts)]
    return out + draw(st.sampled_from(["", "-ib0", ".site"]))


@given(nodesets())
@settings(max_examples=150, deadline=None)
def test_expansion_matches_clustershell(text):
    try:
        theirs = list(NodeSet(text))
    except NodeSetParseError:
        with pytest.raises(NodeSetError):
            expand_nodeset(text)
        return
    ours = expand_nodeset(text)
    assert ours == theirs  # same names, same order, no duplicates


@given(st.lists(nodesets(), min_size=2, max_size=4))
@settings(max_examples=100, deadline=None)
def test_union_of_patterns_has_the_same_members(texts):
    joined = ",".join(texts)
    try:
        theirs = list(NodeSet(joined))
    except NodeSetParseError:
        return
    ours = expand_nodeset(joined)
    # ClusterShell re-sorts a union by pattern; we keep first-seen order: compare as sets.
    assert sorted(ours) == sorted(theirs)
    assert len(ours) == len(theirs)


@given(nodesets())
@settings(max_examples=100, deadline=None)
def test_our_folding_is_read_back_by_clustershell(text):
    try:
        names = expand_nodeset(text)
    except NodeSetError:
        return
    assert sorted(NodeSet(fold_nodeset(names))) == sorted(names)


@pytest.mark.parametrize(
    "text",
    ["n[01-100]", "n[3-1]", "n[]", "n[1/2]", "n[1-2][3-4]", "n[1-2", "n1]", "n[1-3/0]", "n[a]"],
)
def test_both_reject_the_same_malformed_sets(text):
    with pytest.raises(NodeSetParseError):
        NodeSet(text)
    with pytest.raises(NodeSetError):
        expand_nodeset(text)
