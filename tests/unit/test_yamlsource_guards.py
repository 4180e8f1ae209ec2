"""GuardedLoader: the nesting bound and the alias budget, at their edges."""

from __future__ import annotations

import pytest

from gpupoolctl.errors import SourceError
from gpupoolctl.yamlsource import ALIAS_FLOOR, MAX_DEPTH, safe_load


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_nesting_up_to_the_bound_loads_and_one_more_is_refused_with_its_line():
    value = safe_load(nested(MAX_DEPTH), "ok.yaml")
    for _ in range(MAX_DEPTH - 1):
        (value,) = value
    assert value == []
    with pytest.raises(SourceError, match=r"deep.yaml:1: .*nested deeper than 100 levels"):
        safe_load(nested(MAX_DEPTH + 1), "deep.yaml")


def test_aliases_within_the_budget_load_and_a_bomb_is_refused_before_it_expands():
    width = 10
    lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
    level = 0
    # Each level multiplies by ten: stay just under the floor, then one level over it.
    while width ** (level + 2) < ALIAS_FLOOR:
        level += 1
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    value = safe_load("\n".join(lines), "ok.yaml")
    assert len(value[f"a{level}"]) == width
    level += 1
    lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    with pytest.raises(SourceError, match=rf"bomb.yaml:{level + 1}: .*aliases expand"):
        safe_load("\n".join(lines), "bomb.yaml")


def test_a_large_document_may_reuse_anchors_in_proportion_to_its_size():
    shared = "common: &c {" + ", ".join(f"k{i}: {i}" for i in range(50)) + "}\n"
    users = "".join(f"h{i}: {{vars: *c}}\n" for i in range(3000))  # 3000 x 101 nodes
    value = safe_load(shared + users, "inventory.yaml")
    assert value["h2999"]["vars"]["k49"] == 49


def test_a_value_that_holds_itself_is_refused():
    with pytest.raises(SourceError, match="cannot merge itself or hold itself"):
        safe_load("a: &a [1, *a]\n", "self.yaml")


def test_depth_brought_by_aliases_counts_as_depth():
    """Twelve anchors of 95 levels, each holding the one before: each line is shallow, the
    value a reader walks is 1,140 levels deep (a RecursionError in json.dumps before)."""
    lines = [
        f"x{k}: &a{k} " + "[" * 95 + (f"*a{k - 1}" if k else "x") + "]" * 95 for k in range(12)
    ]
    with pytest.raises(SourceError, match=r"chain.yaml:2: .*deeper than 100 levels"):
        safe_load("\n".join(lines), "chain.yaml")


def test_sharing_a_value_is_linear_however_often_it_is_used(monkeypatch):
    """`<<: *defaults` on every host costs a node a use, so a large inventory never meets
    the budget, even one far below the floor; nested aliases still do."""
    import gpupoolctl.yamlsource as guards

    monkeypatch.setattr(guards, "ALIAS_FLOOR", 1000)
    shared = "d: &d {" + ", ".join(f"k{i}: {i}" for i in range(50)) + "}\n"
    hosts = "".join(f"h{i}: {{<<: *d, x: {i}}}\n" for i in range(2000))  # 2000 x 51 keys
    assert safe_load(shared + hosts, "inventory.yaml")["h1999"]["k49"] == 49
    nested = "a: &a [1, 2, 3, 4, 5, 6, 7, 8]\nb: &b [*a, *a, *a, *a]\n"
    nested += "c: [" + ", ".join(["*b"] * 400) + "]\n"  # 400 x 4 x 8 nodes through b
    with pytest.raises(SourceError, match="aliases expand"):
        safe_load(nested, "nested.yaml")
