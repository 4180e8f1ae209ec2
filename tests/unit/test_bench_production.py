"""bench/utilization/production.py: production's executor on virtual nodes, as the
benchmarks run it. An elastic re-cut goes through production's reshape to the real agent,
answering in-process on simulated cards; the card really changes."""

from __future__ import annotations

import sys
from pathlib import Path

import tests.benchpath  # noqa: F401  # bench/utilization's scripts on sys.path

# isort: split
import jobtrace
import production
import simpool
from replay import T0

from gpupoolctl.ledger import Ledger
from gpupoolctl.policy import parse_policy
from gpupoolctl.sched import JobRequest

_HERE = Path(__file__).resolve().parents[2] / "bench" / "utilization"
DGX = "sg-dgx01"  # eight whole H100 80GB cards as the elastic start leaves them
POLICY = """\
version: 1
elastic:
  min-idle: 0s
  batch-window: 0s
  rules:
    - hosts: "*"
      vendor: nvidia
      profiles: [1g.10gb, 3g.40gb]
"""


def test_small_work_gets_a_card_re_cut_by_the_agent_on_its_simulated_node(tmp_path) -> None:
    sim = tmp_path / "sim"
    slices = simpool.applied("elastic-start", sim, _HERE / "elastic-start.yaml")
    mine = [s for s in slices if s["host"] == DGX]
    assert mine and all(s["kind"] == "gpu" for s in mine)  # every card whole to begin with
    clock = production.Clock(T0)
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, clock=clock.now)
    ledger.refresh_slices([DGX], mine)
    nodes = production.VirtualNodes(clock, simpool.sim_specs(sim))
    policy = parse_policy(POLICY, "pool.yaml")
    jobs = production.virtual_pool(ledger, [DGX], nodes, policy=policy)
    # Five 8 GB jobs at once, half an hour each: elastic keeps whole cards to be cut.
    trace = [jobtrace.Job(f"s{n}", "inference", 0.0, 1800.0, 1, 8 * 1024, 50) for n in range(5)]
    day = production.run_day(
        jobs,
        clock,
        trace,
        lambda j: JobRequest(gpus=1, memory_mib=j.memory_mib),
        None,
        name="elastic",
        total_mib=sum(s["memory_mib"] for s in mine),
        nodes=nodes,
    )
    run = day.run
    assert len(run.recuts) == 1 and run.recuts[0][0] == 0.0  # one card, in the first tick
    card = run.recuts[0][1]
    # Every job started at once on a 1g.10gb slice of that card, and ran its half hour.
    assert run.starts == {j.id: 0.0 for j in trace}
    assert run.ends == {j.id: 1800.0 for j in trace}
    cut = {s["id"]: s for s in ledger.read().state.slices.values() if s["id"].startswith(card)}
    assert sorted(s["profile"] for s in cut.values()) == ["1g.10gb"] * 7
    assert set(run.held_mib.values()) == {next(iter(cut.values()))["memory_mib"]}
    # The simulated card itself changed: the agent reads seven MIG instances on it.
    index = int(card.rsplit("/gpu", 1)[1])
    facts = nodes.answer(DGX, {"verb": "facts", "args": {}})
    assert facts.ok, facts.error
    gpu = next(g for g in facts.data["gpus"] if int(g["index"]) == index)
    assert gpu["mig"]["mode"] == "enabled", gpu["mig"]
    assert [i["profile"] for i in gpu["mig"]["instances"]] == ["1g.10gb"] * 7
    assert (
        "pynvml" not in sys.modules
        or sys.modules["pynvml"] is None
        or not getattr(sys.modules["pynvml"], "__name__", "").startswith("gpupoolctl.sim")
    )  # the in-process agent left no fake behind
