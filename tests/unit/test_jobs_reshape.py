"""jobs.reshape against a simulated DGX reached by the real agent (local transport): a
re-cut whose node cannot be read afterwards stays reserved, and the same thread's next
pass closes it once the node answers again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.jobs import Jobs, Nodes, reshape, scheduling
from gpupoolctl.ledger import Ledger, slices_from_facts
from gpupoolctl.policy import ElasticPolicy, ElasticRule, PoolPolicy
from gpupoolctl.remote import HostResult, run_agent_each, target_from_vars


class FlakyFacts:
    """The real agent, except that while `down` every facts call fails as unreachable."""

    def __init__(self) -> None:
        self.down = False
        self.verbs: list[str] = []

    def __call__(self, requests: list[tuple[Any, dict[str, Any]]]) -> list[HostResult]:
        self.verbs.extend(r["verb"] for _, r in requests)
        answers = run_agent_each(requests)
        if self.down:
            answers = [
                HostResult(a.name, "unreachable", error="gone") if r["verb"] == "facts" else a
                for a, (_, r) in zip(answers, requests, strict=True)
            ]
        return answers


@pytest.fixture
def dgx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Jobs, FlakyFacts]:
    monkeypatch.setenv("GPUPOOL_SIM_DIR", str(tmp_path / "sim"))
    target = target_from_vars("dgx", {"transport": "local", "sim": "dgx-h100"})
    facts = run_agent_each([(target, {"verb": "facts", "args": {}})])[0]
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    ledger.refresh_slices(["dgx"], slices_from_facts("dgx", facts.data))
    runner = FlakyFacts()
    rule = ElasticRule(line=1, profiles=("1g.10gb",))
    policy = PoolPolicy(
        elastic=ElasticPolicy(enabled=True, rules=(rule,), min_idle_s=0, batch_window_s=0)
    )
    return Jobs(ledger, Nodes([target], runner), owner="alice", policy=policy), runner


def test_a_recut_whose_node_is_not_read_again_stays_reserved_until_it_is(dgx) -> None:
    jobs, runner = dgx
    state = jobs.read().state
    inputs = jobs.elastic_inputs(state, jobs.read().now)
    assert inputs is not None
    card = inputs.cards["dgx/gpu0"]
    from gpupoolctl.sched.elastic import Recut

    recut = Recut(card, tuple(("1g.10gb", n) for n in range(7)), "test", ("j-1",), None)
    reserved = jobs.ledger.write(lambda tx: reshape.reserve(tx, recut)).value
    assert reserved is not None

    runner.down = False
    original = runner.__call__

    def down_after_partition(requests: list[tuple[Any, dict[str, Any]]]) -> list[HostResult]:
        answers = original(requests)
        if any(r["verb"] == "partition" for _, r in requests):
            runner.down = True  # the node re-cut the card, then the network went
        return answers

    jobs.nodes = Nodes(list(jobs.nodes.targets.values()), down_after_partition)
    events = reshape.execute(jobs, [reserved])
    assert events == []  # nothing closed
    assert any("kept reserved" in w for w in jobs.warnings)
    assert list(jobs.read().state.reshapes) == [reserved.id]
    # Still held back from placement: the ledger's slices of the card are the old ones.
    assert jobs.read().state.slice_state("dgx/gpu0", jobs.read().now) == "re-cutting"

    # The node answers again; the same thread's next pass closes the reshape (interrupted)
    # and records the slices the node really has now: the new layout.
    runner.down = False
    jobs.nodes = Nodes(list(jobs.nodes.targets.values()), runner)
    outcome = scheduling.schedule(jobs)
    closed = [e for e in outcome.events if e["event"] == "reshape-failed"]
    assert [e["gpu"] for e in closed] == ["dgx/gpu0"] and "interrupted" in closed[0]["error"]
    state = jobs.read().state
    assert state.reshapes == {}
    cut = sorted(s for s in state.slices if s.startswith("dgx/gpu0/"))
    assert cut == [f"dgx/gpu0/mig-1g.10gb@{n}" for n in range(7)]
