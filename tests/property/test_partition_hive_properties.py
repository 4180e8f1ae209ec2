"""AMD labels on one xGMI hive (a simulated MI300X node): a label the planner accepts holds
after one apply and needs nothing more; a label it refuses could never hold."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpupoolctl import sim as simulation
from gpupoolctl.hw import amd_modes
from gpupoolctl.partition import parse_spec, plan_host
from gpupoolctl.sim import amdsmi as fake_amd
from tests.unit.test_agent_partition import Node

MI300X = amd_modes.find_product("AMD Instinct MI300X", 0x74A1)
assert MI300X is not None
COMPUTE = sorted(MI300X.compute_modes)
MEMORY = sorted(MI300X.memory_modes)
PAIRS = sorted(MI300X.allowed)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[tuple[str, str]], list[Any]]:
    memory = draw(st.sampled_from(sorted({m for _, m in PAIRS})))
    pairs = [c for c, m in PAIRS if m == memory]
    start = [(draw(st.sampled_from(pairs)), memory) for _ in range(8)]
    asks = []
    for card in draw(st.lists(st.integers(0, 7), min_size=1, max_size=4, unique=True)):
        compute = draw(st.none() | st.sampled_from(COMPUTE))
        memory_ask = draw(
            st.sampled_from(MEMORY) if compute is None else st.none() | st.sampled_from(MEMORY)
        )
        asks.append((card, compute, memory_ask))
    return start, asks


def spec_text(asks: list[Any]) -> str:
    lines = ["version: v1", "mig-configs:", "  x:"]
    for card, compute, memory in asks:
        lines.append(f"    - devices: [{card}]")
        if compute:
            lines.append(f"      compute-partition: {compute}")
        if memory:
            lines.append(f"      memory-partition: {memory}")
    return "\n".join(lines) + "\n"


def suits(asks: list[Any], memory: str) -> bool:
    """Whether one hive memory mode can hold every card's ask (brute force over the pairs)."""
    for _, compute, wanted in asks:
        if wanted is not None and wanted != memory:
            return False
        if compute is not None and (compute, memory) not in MI300X.allowed:
            return False
    return True


def cards(facts: dict[str, Any]) -> list[tuple[int, str, str]]:
    """Per physical card, in PCI order: its first logical GPU's index and its modes. The
    facts number logical GPUs, so a card's index moves when an earlier card changes its
    compute partition."""
    first: dict[str, dict[str, Any]] = {}
    for gpu in facts["gpus"]:
        first.setdefault(gpu["pci_bus_id"].rsplit(".", 1)[0], gpu)
    return [
        (g["index"], g["partition"]["compute"], g["partition"]["memory"])
        for _, g in sorted(first.items())
    ]


def plan_for(n: Node, asks: list[Any]) -> Any:
    facts = n.facts()
    index = [i for i, _, _ in cards(facts)]
    text = spec_text([(index[card], compute, memory) for card, compute, memory in asks])
    return plan_host(parse_spec(text), "x", n.host, [], facts)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
# Found by this test: a compute-only ask (CPX on card 1) took its memory mode from its own
# card (NPS2 is not allowed with CPX, so NPS4) instead of the hive's (NPS1, asked by card 0),
# and its memory change, applied last, moved the whole hive to CPX/NPS4.
@example(scenario=([("DPX", "NPS2")] * 8, [(0, None, "NPS1"), (1, "CPX", None)]))
def test_accepted_hive_labels_hold_after_one_apply(scenario: Any) -> None:
    start, asks = scenario
    with tempfile.TemporaryDirectory() as folder:
        n = Node(Path(folder), "mi300x-8")
        try:
            with n.state.mutate() as data:
                for gpu, (compute, memory) in zip(data["amd"]["gpus"], start, strict=True):
                    gpu["compute_partition"], gpu["memory_partition"] = compute, memory
            plan = plan_for(n, asks)
            if any(c and m and (c, m) not in MI300X.allowed for _, c, m in asks):
                assert plan.errors  # a pair no card can take: its own error
                return
            feasible = any(suits(asks, m) for m in MEMORY)
            hive_errors = [e for e in plan.errors if "xGMI hive" in e]
            assert bool(hive_errors) == (not feasible), (plan.errors, asks, start)
            if plan.errors:
                return
            answer = n.ask("partition", dict(plan.agent_args(force=False)))
            assert answer["ok"] and all(g["ok"] for g in answer["data"]["gpus"]), answer
            after = cards(n.facts())
            for card, compute, memory in asks:
                _, now_compute, now_memory = after[card]
                assert compute in (None, now_compute) and memory in (None, now_memory), (
                    asks,
                    start,
                    after,
                )
            again = plan_for(n, asks)
            assert again.errors == [] and not again.changed, (asks, start, again.gpus)
        finally:
            simulation.deactivate()
            fake_amd.bind(None)
