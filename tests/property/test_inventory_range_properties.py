"""Property tests: host range expansion (count, padding, order) and node set fold/expand."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.inventory import expand_host_range, expand_nodeset, fold_nodeset
from gpupoolctl.inventory.nodeset import split_outside_brackets

prefixes = st.text(alphabet="abcxyz-", min_size=1, max_size=5)
suffixes = st.text(alphabet="abc.-", max_size=4)


@st.composite
def numeric_ranges(draw):
    begin = draw(st.integers(0, 300))
    end = draw(st.integers(begin, begin + 60))
    step = draw(st.integers(1, 7))
    width = draw(st.integers(len(str(end)), len(str(end)) + 2))
    padded = draw(st.booleans()) and width > 1
    return begin, end, step, (width if padded else 0)


@given(prefixes, suffixes, numeric_ranges())
def test_numeric_range_count_padding_order(prefix, suffix, spec):
    begin, end, step, width = spec
    if width:
        text = f"{prefix}[{begin:0{width}d}:{end:0{width}d}:{step}]{suffix}"
    else:
        text = f"{prefix}[{begin}:{end}:{step}]{suffix}"
    names = expand_host_range(text)
    numbers = list(range(begin, end + 1, step))
    assert len(names) == len(numbers)
    digits = [n[len(prefix) : len(n) - len(suffix) or None] for n in names]
    assert [int(d) for d in digits] == numbers  # ascending, stride respected
    assert all(n.startswith(prefix) and n.endswith(suffix) for n in names)
    if width:
        assert {len(d) for d in digits} == {width}
    else:
        assert digits == [str(i) for i in numbers]


@given(st.integers(0, 25), st.integers(0, 25), st.integers(1, 5))
def test_letter_ranges(a, b, step):
    lo, hi = min(a, b), max(a, b)
    letters = "abcdefghijklmnopqrstuvwxyz"
    names = expand_host_range(f"db-[{letters[lo]}:{letters[hi]}:{step}]")
    assert names == [f"db-{c}" for c in letters[lo : hi + 1 : step]]


@given(st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_several_ranges_multiply(sizes):
    text = "-".join(f"r{i}[1:{n}]" for i, n in enumerate(sizes))
    names = expand_host_range(text)
    total = 1
    for n in sizes:
        total *= n
    assert len(names) == total == len(set(names))
    assert names == sorted(names, key=lambda s: [int(p.split("r")[0] or 0) for p in s.split("-")])


node_names = st.builds(
    lambda p, d, s: f"{p}{d}{s}",
    st.sampled_from(["gpu", "node", "rack1-gpu", "x"]),
    st.one_of(st.integers(0, 400).map(str), st.integers(0, 400).map(lambda i: f"{i:03d}")),
    st.sampled_from(["", "-ib", ".site"]),
)


@given(st.lists(node_names | st.sampled_from(["login", "admin-a"]), min_size=1, max_size=40))
@settings(max_examples=200)
def test_fold_then_expand_round_trips(names):
    folded = fold_nodeset(names)
    expanded = expand_nodeset(folded)
    assert sorted(expanded) == sorted(set(names))
    assert len(expanded) == len(set(names))
    assert len(split_outside_brackets(folded, ",")) <= len(set(names))


@given(st.integers(0, 500), st.integers(0, 60), st.integers(1, 6), st.booleans())
def test_nodeset_count_and_padding(begin, span, step, pad):
    end = begin + span
    width = len(str(end)) + 1 if pad else 0
    text = f"n[{begin:0{width}d}-{end:0{width}d}/{step}]" if pad else f"n[{begin}-{end}/{step}]"
    names = expand_nodeset(text)
    assert [int(n[1:]) for n in names] == list(range(begin, end + 1, step))
    if pad:
        assert {len(n) - 1 for n in names} == {width}
