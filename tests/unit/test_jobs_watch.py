"""The `schedule --watch` loop as the library runs it (jobs.watch), in virtual time: in-memory
nodes, a virtual clock for the ledger, and a sleep that moves that clock on."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.jobs import Jobs, Nodes
from gpupoolctl.jobs.watch import watch
from gpupoolctl.ledger import Ledger
from gpupoolctl.ledger.units import format_ts
from gpupoolctl.policy import HealthPolicy, PoolPolicy
from gpupoolctl.remote.target import target_from_vars
from tests.unit.test_jobs_lost import HOSTS, Clock, Fleet, host_of, slices, submit


class Pool:
    """Two in-memory nodes whose every answer takes `answer_s` of the virtual clock."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock, self.fleet, self.answer_s = Clock(), Fleet(), 0.0
        ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, clock=self.clock)
        for host in HOSTS:
            ledger.refresh_slices([host], slices(host))
        nodes = Nodes([target_from_vars(h, {"transport": "local"}) for h in HOSTS], self.answer)
        policy = PoolPolicy(health=HealthPolicy(node_dead_after_s=90))
        self.jobs = Jobs(ledger, nodes, owner="alice", policy=policy)

    def answer(self, requests: list[tuple[Any, dict[str, Any]]]) -> Any:
        self.clock.advance(self.answer_s)
        return self.fleet(requests)


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    return Pool(tmp_path)


def loop(pool: Pool, interval_s: float, passes: int) -> tuple[list[Any], list[float]]:
    clock, slept = pool.clock, []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    def monotonic() -> float:
        return clock().timestamp()

    rounds = list(watch(pool.jobs, interval_s, passes, sleep=sleep, monotonic=monotonic, now=clock))
    return rounds, slept


def test_each_round_waits_what_is_left_of_the_interval_and_a_lost_node_shows_in_its_round(
    pool: Pool,
) -> None:
    job_id = submit(pool.jobs)
    pool.fleet.down.add(host_of(pool.jobs, job_id))
    pool.answer_s = 5.0
    start = pool.clock()
    rounds, slept = loop(pool, interval_s=30.0, passes=5)
    assert [r.number for r in rounds] == [1, 2, 3, 4, 5]
    assert slept == [25.0, 25.0, 25.0, 25.0], "the pass's own time counts; none after the last"
    assert [r.at for r in rounds] == [
        format_ts(start + timedelta(seconds=30 * i + 5)) for i in range(5)
    ]
    lost = [r.number for r in rounds if any(e.kind == "node-lost" for e in r.events)]
    assert lost == [4], "silent from round 1 (5 s), lost at round 4 (95 s): once"


def test_a_pass_longer_than_the_interval_is_followed_at_once(pool: Pool) -> None:
    submit(pool.jobs)
    pool.answer_s = 20.0
    _, slept = loop(pool, interval_s=15.0, passes=3)
    assert slept == [0.0, 0.0]


def test_each_rounds_warnings_come_with_it_and_leave_the_service(pool: Pool) -> None:
    job_id = submit(pool.jobs)
    pool.fleet.broken.add(host_of(pool.jobs, job_id))
    pool.jobs.warnings.clear()
    rounds, _ = loop(pool, interval_s=10.0, passes=2)
    assert all(any("disk full" in w for w in r.warnings) for r in rounds), rounds
    assert pool.jobs.warnings == []


def test_the_loop_runs_until_the_caller_stops(pool: Pool) -> None:
    submit(pool.jobs)
    rounds = watch(pool.jobs, 1.0, sleep=pool.clock.advance, now=pool.clock)
    assert [next(rounds).number for _ in range(4)] == [1, 2, 3, 4]
