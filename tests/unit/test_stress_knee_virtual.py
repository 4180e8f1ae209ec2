"""The harness finds the knee the contention model puts there: the ramp runner, metrics,
knee fits and verdict as `stress ramp` runs them, over the `sim` workload's own contention
code, in virtual time. No wall clock is read, so the numbers are the same on an idle
machine and on a busy one (the wall-clock ramp on the sim pool is bench/stress-knee)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from gpupoolctl.agent.workloads.sim import slowdown
from gpupoolctl.stress import result as results
from gpupoolctl.stress.clock import VirtualClock
from gpupoolctl.stress.contention_backend import ContentionBackend
from gpupoolctl.stress.model import RunResult
from gpupoolctl.stress.runner import Ramp
from gpupoolctl.stress.scenario import Scenario, parse_scenario
from gpupoolctl.stress.verdict import judge

SIGMA, KAPPA = 0.05, 0.04
MODEL_PEAK = math.sqrt((1 - SIGMA) / KAPPA)  # about 4.9 jobs at once on the node

# The scenario the wall-clock test used on one DGX node of the sim pool.
KNEE_SCENARIO = f"""\
name: knee-check
levels: 1..8+1
warmup: 1s
hold: 6s
drain: 15s
job-timeout: 60s
workload:
  kind: sim
  work: 1s
  sigma: {SIGMA}
  kappa: {KAPPA}
requests:
  - mem: 10G
"""


def virtual_ramp(scenario: Scenario, launch_s: float = 0.0) -> tuple[RunResult, int]:
    clock = VirtualClock()
    backend = ContentionBackend(clock, scenario.workload, launch_s=launch_s)
    outcome = Ramp(scenario, backend, clock=clock).run()
    return outcome, backend.most_running


@pytest.fixture(scope="module")
def knee_run() -> tuple[RunResult, int]:
    return virtual_ramp(parse_scenario(KNEE_SCENARIO, "knee.yaml"))


def test_a_ramp_finds_the_capacity_peak_the_contention_model_puts_there(knee_run) -> None:
    outcome, most_running = knee_run
    levels = outcome.levels
    assert [lv.level for lv in levels] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert all(lv.failed == 0 and lv.completed > 0 for lv in levels)
    assert judge(outcome).ok and outcome.thresholds_ok
    assert most_running == 8  # closed model: all eight submitters' jobs ran at once
    # The jobs shared the node as the model says: at n at once each runs slowdown(n) times
    # longer than alone (within one 50 ms tick of the workload's own stepping).
    for level in levels:
        expected_run = slowdown(int(level.level), SIGMA, KAPPA)
        assert level.phases["run"] == pytest.approx(expected_run, rel=0.03), level.level
    knees = outcome.knees
    assert knees is not None
    usl = knees.usl
    assert usl.level is not None, usl
    assert usl.level == pytest.approx(MODEL_PEAK, rel=0.05), usl
    assert usl.extra["kappa"] == pytest.approx(KAPPA, rel=0.1), usl
    assert usl.extra["sigma"] == pytest.approx(SIGMA, rel=0.25), usl
    assert usl.extra["r2"] > 0.99
    kneedle = knees.kneedle
    assert kneedle.level is not None and kneedle.level <= usl.level + 1, kneedle


def test_a_fixed_submit_cost_moves_the_peak_where_the_model_says() -> None:
    # Each job also spends `o` outside the node (submit, launch), so a job cycle is
    # o + T1 (1 + sigma (n-1) + kappa n (n-1)), whose throughput peaks at
    # sqrt((T1 + o - sigma T1) / (kappa T1)).
    outside, alone = 0.25, 1.0
    outcome, _ = virtual_ramp(parse_scenario(KNEE_SCENARIO, "knee.yaml"), launch_s=outside)
    expected = math.sqrt((alone + outside - SIGMA * alone) / (KAPPA * alone))
    first = outcome.levels[0]
    assert first.launch.mean == pytest.approx(outside)
    assert first.turnaround.mean - first.phases["run"] == pytest.approx(outside, abs=0.01)
    usl = outcome.knees.usl if outcome.knees else None
    assert usl is not None and usl.level is not None
    assert expected > MODEL_PEAK * 1.1  # the shift is larger than the band below
    assert usl.level == pytest.approx(expected, rel=0.08), (usl, expected)


def _numbers(outcome: RunResult) -> list[dict[str, Any]]:
    # harness_s is the harness's own bookkeeping in real CPU time: the one figure that may
    # differ; everything the ramp measured comes from the virtual clock.
    return [
        {k: v for k, v in level.items() if k != "harness_s"}
        for level in results.to_dict(outcome)["levels"]
    ]


def test_the_same_ramp_gives_the_same_numbers_every_time(knee_run) -> None:
    again, _ = virtual_ramp(parse_scenario(KNEE_SCENARIO, "knee.yaml"))
    first, _ = knee_run
    assert _numbers(again) == _numbers(first)
    assert results.to_dict(again)["knees"] == results.to_dict(first)["knees"]


def test_an_open_model_below_capacity_completes_every_arrival_at_its_rate() -> None:
    scenario = parse_scenario(
        "levels: [1, 2]\nmodel: open\nwarmup: 2s\nhold: 10s\ndrain: 10s\n"
        "workload: {kind: sim, work: 500ms, sigma: 0, kappa: 0}\n",
        "open.yaml",
    )
    outcome, _ = virtual_ramp(scenario)
    for level in outcome.levels:
        assert level.dropped == 0 and level.failed == 0
        assert level.submitted == 10 * level.level  # one arrival per 1/rate s of hold
        assert level.throughput == pytest.approx(level.level, rel=0.02)
        assert level.queue_wait.max == pytest.approx(0.0, abs=1e-6)


def test_jobs_past_their_time_out_are_abandoned_and_leave_the_node() -> None:
    # Four at once on a node with kappa 0.5 run 7x slower than alone: 7 s, past 2 s.
    scenario = parse_scenario(
        "levels: [4]\nwarmup: 0s\nhold: 4s\ndrain: 5s\njob-timeout: 2s\n"
        "workload: {kind: sim, work: 1s, sigma: 0, kappa: 0.5}\n",
        "slow.yaml",
    )
    clock = VirtualClock()
    backend = ContentionBackend(clock, scenario.workload)
    outcome = Ramp(scenario, backend, clock=clock).run()
    [level] = outcome.levels
    assert level.completed == 0 and level.failed == level.submitted > 0
    assert list(level.errors) == ["timed out after <n>s"]
    assert backend.peers.running == 0  # every abandoned job left the node
    assert "no job succeeded at any level" in (judge(outcome).error or "")
