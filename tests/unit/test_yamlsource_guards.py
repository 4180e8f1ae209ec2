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
