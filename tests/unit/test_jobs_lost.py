"""Node loss against in-memory nodes and a virtual clock: silence, the lost declaration (jobs
failed or requeued, slices released, an automatic drain), fences, and the node's return."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.jobs import Jobs, JobSpec, Nodes, submitting
from gpupoolctl.jobs.events import NodeLost
from gpupoolctl.jobs.refreshing import refresh
from gpupoolctl.ledger import Ledger, State
from gpupoolctl.ledger.drains import drain
from gpupoolctl.policy import HealthPolicy, PoolPolicy
from gpupoolctl.remote.results import HostResult
from gpupoolctl.remote.target import target_from_vars
from gpupoolctl.sched import JobRequest

HOSTS = ("n1", "n2")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Fleet:
    """Job folders per host in memory; a host in `down` does not answer (unreachable)."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, dict[str, Any]]] = {h: {} for h in HOSTS}
        self.down: set[str] = set()
        self.broken: set[str] = set()  # answers, with an agent error
        self.kills: list[tuple[str, str]] = []

    def __call__(self, requests: list[tuple[Any, dict[str, Any]]]) -> list[HostResult]:
        return [self.answer(target.name, request) for target, request in requests]

    def answer(self, host: str, request: dict[str, Any]) -> HostResult:
        if host in self.down:
            return HostResult(host, "unreachable", error="connection refused")
        if host in self.broken:
            return HostResult(host, "failed", error="AgentError: disk full", error_type="Agent")
        verb, args = request["verb"], request["args"]
        folders = self.jobs[host]
        if verb == "launch":
            folders[args["job_id"]] = {"state": "running", "pid": 100 + len(folders)}
            return HostResult(host, "ok", data={"pid": folders[args["job_id"]]["pid"]})
        if verb == "poll":
            out = {j: folders.get(j, {"state": "absent"}) for j in args["job_ids"]}
            return HostResult(host, "ok", data={"jobs": out})
        if verb == "signal":
            if args["signal"] == "KILL" and folders.get(args["job_id"], {}).get("state") == (
                "running"
            ):
                self.kills.append((host, args["job_id"]))
            folders[args["job_id"]] = {"state": "exited", "exit_code": None, "signal": "KILL"}
            return HostResult(host, "ok", data={"sent": True, "state": "exited"})
        raise AssertionError(verb)


def slices(host: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{host}/gpu{i}",
            "host": host,
            "gpu": i,
            "kind": "gpu",
            "profile": None,
            "memory_mib": 81920,
            "uuid": f"GPU-{host}-{i}",
            "devices": [f"GPU-{host}-{i}"],
            "vendor": "nvidia",
            "model": "H100",
            "island": f"{host}/island0",
        }
        for i in range(2)
    ]


@pytest.fixture
def pool(tmp_path: Path) -> tuple[Jobs, Fleet, Clock]:
    clock = Clock()
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, clock=clock)
    for host in HOSTS:
        ledger.refresh_slices([host], slices(host))
    fleet = Fleet()
    nodes = Nodes([target_from_vars(h, {"transport": "local"}) for h in HOSTS], fleet)
    policy = PoolPolicy(health=HealthPolicy(node_dead_after_s=90))
    return Jobs(ledger, nodes, owner="alice", policy=policy), fleet, clock


def submit(jobs: Jobs, gpus: int = 1, **fields: Any) -> str:
    spec = JobSpec(argv=["train"], request=JobRequest(gpus=gpus, **fields.pop("req", {})), **fields)
    outcome = submitting.submit(jobs, spec)
    assert outcome.state == "running", outcome
    return str(outcome.job_id)


def records(jobs: Jobs) -> list[dict[str, Any]]:
    return [json.loads(line) for line in jobs.ledger.paths.journal.read_text().splitlines()]


def state_of(jobs: Jobs) -> Any:
    return jobs.read().state


def job(jobs: Jobs, job_id: str) -> dict[str, Any]:
    state = state_of(jobs)
    return state.jobs.get(job_id) or state.finished[job_id]


def host_of(jobs: Jobs, job_id: str) -> str:
    return str(job(jobs, job_id)["nodes"][0]["host"])


def test_a_silent_host_is_lost_only_after_node_dead_after(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs)
    host = host_of(jobs, job_id)
    fleet.down.add(host)
    refresh(jobs)
    assert state_of(jobs).silent == {host: state_of(jobs).silent[host]}
    clock.advance(89)
    refresh(jobs)
    assert job(jobs, job_id)["state"] == "running"  # 89 s silent: not yet
    assert host not in state_of(jobs).lost and state_of(jobs).allocations
    clock.advance(1)
    events = [e.to_dict() for e in refresh(jobs).events]
    state = state_of(jobs)
    assert host in state.lost and host not in state.silent
    lost_job = state.finished[job_id]
    assert lost_job["state"] == "failed"
    assert lost_job["error"] == f"node lost: {host} did not answer for 1m30s"
    assert not state.allocations, "a lost node's job holds no slice"
    assert list(state.drains[host]) == ["health"]
    assert state.drains[host]["health"]["reason"].startswith("node lost: no answer since")
    assert {"event": "node-lost", "host": host, "jobs": [job_id]}.items() <= events[0].items()
    assert jobs.ledger.verify().ok, jobs.ledger.verify().problems


def test_an_answer_before_the_limit_ends_the_silence(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs)
    host = host_of(jobs, job_id)
    fleet.down.add(host)
    refresh(jobs)
    clock.advance(60)
    fleet.down.clear()
    refresh(jobs)
    assert host not in state_of(jobs).silent
    fleet.down.add(host)
    clock.advance(30)
    refresh(jobs)  # silent again: counted from its last answer, not from the first silence
    clock.advance(50)
    refresh(jobs)
    assert job(jobs, job_id)["state"] == "running" and not state_of(jobs).lost


def test_a_host_that_answers_with_an_error_is_not_silent(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs)
    fleet.broken.add(host_of(jobs, job_id))
    for _ in range(3):
        refresh(jobs)
        clock.advance(60)
    assert not state_of(jobs).silent and not state_of(jobs).lost
    assert job(jobs, job_id)["state"] == "running"
    assert jobs.hosts_failed  # reported, not ignored


def test_a_job_that_may_restart_runs_again_elsewhere_without_back_off(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs, gpus=2, max_restarts=2)
    first = host_of(jobs, job_id)
    fleet.down.add(first)
    refresh(jobs)
    clock.advance(90)
    events = refresh(jobs).events
    again = job(jobs, job_id)
    assert again["state"] == "running", again
    assert again["restarts"] == 1 and again["run"] == 2
    assert again["nodes"][0]["host"] != first  # its old place is drained
    assert again["nodes"][0]["node_id"] == f"{job_id}.2"
    requeued = [r for r in records(jobs) if r["op"] == "job" and r["data"].get("restarts")]
    assert requeued[0]["data"]["state"] == "queued"
    entry = next(r for r in records(jobs) if r["op"] == "enqueue" and r["seq"] > requeued[0]["seq"])
    assert entry["data"]["not_before"] == entry["ts"]  # the node failed, not the job: no back-off
    assert requeued[0]["data"]["reason"].startswith(f"node lost ({first} did not answer for 1m30s)")
    assert requeued[0]["data"]["reason"].endswith("requeued (1/2)")
    assert [e.kind for e in events][:1] == ["node-lost"]
    assert any(e.kind == "started" and getattr(e, "job", None) == job_id for e in events)


def test_the_returning_node_has_its_stale_run_killed_then_returns(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs, max_restarts=1)
    first = host_of(jobs, job_id)
    fleet.down.add(first)
    refresh(jobs)
    clock.advance(90)
    refresh(jobs)
    assert state_of(jobs).fences  # the old run is still out there
    fleet.down.clear()
    clock.advance(30)
    events = refresh(jobs).events
    assert fleet.kills == [(first, job_id)]
    state = state_of(jobs)
    assert not state.fences and first not in state.lost and first not in state.drains
    kinds = [e.kind for e in events]
    assert kinds.index("stale-run-killed") < kinds.index("node-returned")
    assert job(jobs, job_id)["nodes"][0]["node_id"] == f"{job_id}.2"  # the new run goes on
    assert jobs.ledger.verify().ok, jobs.ledger.verify().problems


def test_manual_return_to_service_keeps_the_node_drained(pool: Any) -> None:
    jobs, fleet, clock = pool
    jobs.policy = PoolPolicy(health=HealthPolicy(node_dead_after_s=90, return_to_service="manual"))
    job_id = submit(jobs)
    host = host_of(jobs, job_id)
    fleet.down.add(host)
    refresh(jobs)
    clock.advance(90)
    refresh(jobs)
    fleet.down.clear()
    refresh(jobs)
    state = state_of(jobs)
    assert host not in state.lost and list(state.drains[host]) == ["health"]


def test_an_admin_drain_is_kept_through_loss_and_return(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs)
    host = host_of(jobs, job_id)
    drain(jobs.ledger, [host], "PSU swap")
    fleet.down.add(host)
    refresh(jobs)
    clock.advance(90)
    refresh(jobs)
    # The loss's own drain is recorded beside the admin's, and only it is lifted on return.
    assert state_of(jobs).drains[host]["admin"]["reason"] == "PSU swap"
    assert state_of(jobs).drains[host]["health"]["reason"].startswith("node lost")
    fleet.down.clear()
    refresh(jobs)
    assert list(state_of(jobs).drains[host]) == ["admin"]


def test_a_multi_node_job_loses_every_run_when_one_node_is_lost(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs, gpus=4)
    assert {n["host"] for n in job(jobs, job_id)["nodes"]} == set(HOSTS)
    fleet.down.add("n1")
    refresh(jobs)
    clock.advance(90)
    refresh(jobs)
    assert fleet.kills == [("n2", job_id)]  # the half that still answers, in the same pass
    state = state_of(jobs)
    assert state.finished[job_id]["state"] == "failed" and not state.allocations
    assert [f["host"] for f in state.fences.values()] == ["n1"]


def test_a_long_running_loop_counts_the_silence_from_the_last_answer(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs)
    host = host_of(jobs, job_id)
    clock.advance(30)
    refresh(jobs)  # answered at 09:00:30
    clock.advance(30)
    fleet.down.add(host)
    refresh(jobs)  # silent at 09:01:00, since its last answer
    assert state_of(jobs).silent[host].startswith("2026-12-01T09:00:30")
    clock.advance(60)
    refresh(jobs)  # 90 s after the last answer, 60 s after the first silent poll
    assert job(jobs, job_id)["state"] == "failed"


def test_a_lost_host_taken_out_of_the_inventory_is_not_asked(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs)
    host = host_of(jobs, job_id)
    fleet.down.add(host)
    refresh(jobs)
    clock.advance(90)
    refresh(jobs)
    jobs.nodes.targets.pop(host)  # retired: the inventory no longer lists it
    jobs.warnings.clear()
    refresh(jobs)
    assert not jobs.warnings, jobs.warnings
    assert host in state_of(jobs).lost and state_of(jobs).fences  # kept for its return


def test_submit_does_not_wait_on_a_lost_node_the_loop_asks_it(pool: Any) -> None:
    jobs, fleet, clock = pool
    first = submit(jobs, req={"vendor": "nvidia"})
    host = host_of(jobs, first)
    fleet.down.add(host)
    refresh(jobs)
    clock.advance(90)
    refresh(jobs)
    assert host in state_of(jobs).lost
    asked: list[str] = []
    real = fleet.answer

    def counting(name: str, request: dict[str, Any]) -> HostResult:
        asked.append(name)
        return real(name, request)

    fleet.answer = counting  # type: ignore[method-assign]
    submit(jobs)
    assert host not in asked  # submit's reap leaves the lost node alone
    refresh(jobs)
    assert host in asked  # the scheduling loop's pass asks it


def another_process(jobs: Jobs) -> Jobs:
    """The same ledger and nodes, as a new command sees them: it remembers no poll."""
    return Jobs(jobs.ledger, jobs.nodes, owner="alice", policy=jobs.policy)


def test_a_node_lost_is_told_by_its_last_answer_whichever_process_heard_it(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs)
    host = host_of(jobs, job_id)
    clock.advance(30)
    refresh(another_process(jobs))  # cron's pass at 09:00:30: it answers
    clock.advance(30)
    fleet.down.add(host)
    refresh(another_process(jobs))  # 09:01:00: the first poll that fails
    state = state_of(jobs)
    assert state.silent[host].startswith("2026-12-01T09:01:00")  # the silence counted
    assert state.answered[host].startswith("2026-12-01T09:00:30")
    clock.advance(90)
    events = refresh(another_process(jobs)).events
    state = state_of(jobs)
    assert host in state.lost
    reason = state.drains[host]["health"]["reason"]
    assert reason.startswith("node lost: no answer since 2026-12-01T09:00:30"), reason
    assert state.finished[job_id]["error"] == f"node lost: {host} did not answer for 2m"
    lost = next(e for e in events if isinstance(e, NodeLost))
    assert str(lost.answered).startswith("2026-12-01T09:00:30")
    assert lost.since.startswith("2026-12-01T09:01:00")
    assert state.lost[host]["answered"] == state.answered[host]
    assert jobs.ledger.verify().ok, jobs.ledger.verify().problems


def test_answers_are_recorded_at_most_once_a_third_of_node_dead_after(pool: Any) -> None:
    jobs, _fleet, clock = pool
    submit(jobs)
    for _ in range(7):  # a pass every 10 s for a minute
        refresh(another_process(jobs))
        clock.advance(10)
    heard = [r for r in records(jobs) if r["op"] == "host" and r["data"]["state"] == "heard"]
    # 09:00:00, 09:00:30 and 09:01:00: node-dead-after is 90 s.
    assert [r["ts"][11:19] for r in heard] == ["09:00:00", "09:00:30", "09:01:00"]


def test_a_ledger_from_before_answers_were_recorded_says_what_it_knows(pool: Any) -> None:
    jobs, fleet, clock = pool
    job_id = submit(jobs)
    host = host_of(jobs, job_id)
    fleet.down.add(host)
    refresh(another_process(jobs))  # no answer recorded: the first poll fails
    clock.advance(90)
    refresh(another_process(jobs))
    reason = state_of(jobs).drains[host]["health"]["reason"]
    assert reason.startswith("node lost: no answer since 2026-12-01T09:00:00.000Z or earlier")
    # A snapshot written before `answered` existed loads without it.
    raw = state_of(jobs).to_dict()
    del raw["answered"]
    assert State.from_dict(raw).answered == {}
