"""Slices carry their GPU's island, from the node's own link matrix."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpupoolctl import sim
from gpupoolctl.agent.main import handle
from gpupoolctl.ledger.slices import slices_from_facts


@pytest.fixture
def facts_of(tmp_path) -> Iterator[Any]:
    def facts(template: str) -> dict[str, Any]:
        request = {
            "v": 1,
            "verb": "facts",
            "host": "n1",
            "sim": {"template": template, "state_dir": str(tmp_path)},
        }
        answer = handle(request)
        assert answer["ok"], answer["error"]
        return answer["data"]

    yield facts
    sim.deactivate()


def test_islands_follow_the_fabric(facts_of):
    dgx = slices_from_facts("n1", facts_of("dgx-h100"))
    assert {s["island"] for s in dgx} == {"n1/island0"}
    mi300x = slices_from_facts("n1", facts_of("mi300x-8"))
    assert {s["island"] for s in mi300x} == {"n1/island0"}
    l40s = slices_from_facts("n1", facts_of("l40s-4"))  # PCIe only: every card alone
    assert [s["island"] for s in l40s] == [f"n1/island{i}" for i in range(4)]
