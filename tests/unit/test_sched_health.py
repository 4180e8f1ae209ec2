"""Node loss through sched.health alone, in virtual time: no ledger, no agent, no SSH. A small
in-memory view takes the decisions as the ledger's records would (`View.apply`), and a
fleet of hosts answers each poll or does not; the clock is a number of seconds."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpupoolctl.policy.model import HealthPolicy
from gpupoolctl.sched import health
from gpupoolctl.sched.health import (
    ClearFence,
    DeclareLost,
    DrainHost,
    EndJob,
    FenceRun,
    Heartbeats,
    HostReturned,
    KillRun,
    LiftDrain,
    MarkAnswering,
    MarkHeard,
    MarkSilent,
    RequeueJob,
)
from gpupoolctl.timestamps import format_ts

START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
POLICY = HealthPolicy(node_dead_after_s=90)


def at(seconds: float) -> str:
    """Ledger time `seconds` after START (as the ledger writes it)."""
    return format_ts(START + timedelta(seconds=seconds))


def job(job_id: str, *hosts: str, max_restarts: int = 0, restarts: int = 0) -> dict[str, Any]:
    nodes = [{"host": h, "node_id": f"{job_id}.1", "slices": [f"{h}/gpu0"]} for h in hosts]
    return {
        "id": job_id,
        "state": "running",
        "nodes": nodes,
        "max_restarts": max_restarts,
        "restarts": restarts,
    }


@dataclass
class View:
    """What sched.health reads, kept as the ledger's state would keep it once the
    decisions are recorded (ledger.state's handlers, in miniature)."""

    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    silent: dict[str, str] = field(default_factory=dict)
    lost: dict[str, dict[str, Any]] = field(default_factory=dict)
    answered: dict[str, str] = field(default_factory=dict)
    fences: dict[str, dict[str, Any]] = field(default_factory=dict)
    drains: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def apply(self, decision: health.Decision, now: str) -> None:
        match decision:
            case MarkAnswering(host) | MarkHeard(host):
                self.silent.pop(host, None)
                self.answered[host] = max(self.answered.get(host, ""), now)
            case MarkSilent(host, since, _, answered):
                self.silent[host] = since
                if answered:
                    self.answered[host] = max(self.answered.get(host, ""), answered)
            case DeclareLost(host=host, since=since):
                self.silent.pop(host, None)
                self.lost[host] = {"host": host, "since": since}
            case DrainHost(host, reason):
                self.drains.setdefault(host, {})["health"] = {"reason": reason}
            case FenceRun(host, node_id, job_id, slices):
                self.fences[f"{host}:{node_id}"] = {
                    "host": host,
                    "node_id": node_id,
                    "job": job_id,
                    "slices": list(slices),
                }
            case EndJob(job_id):
                self.jobs[job_id]["state"] = "failed"
            case RequeueJob(job_id, restart):
                self.jobs[job_id].update(state="queued", nodes=[], restarts=restart.count)
            case ClearFence(host, node_id):
                self.fences.pop(f"{host}:{node_id}", None)
            case HostReturned(host):
                self.lost.pop(host)
                self.answered[host] = max(self.answered.get(host, ""), now)
            case LiftDrain(host):
                del self.drains[host]["health"]
                if not self.drains[host]:
                    del self.drains[host]
            case KillRun():
                raise AssertionError("a kill is carried out by the fleet, not recorded")


@dataclass
class Fleet:
    """Runs per host; a host in `down` does not answer."""

    runs: dict[str, dict[str, str]]  # host -> run -> state
    down: set[str] = field(default_factory=set)
    killed: list[tuple[str, str]] = field(default_factory=list)


class Loop:
    """One pass of the health step, as the executor runs it, on a View and a Fleet."""

    def __init__(self, view: View, fleet: Fleet) -> None:
        self.view, self.fleet = view, fleet
        self.last_heard: dict[str, str] = {}
        self.clock = 0.0

    def poll(self) -> Heartbeats:
        now = at(self.clock)
        answered, silent = {}, {}
        for host, runs in self.fleet.runs.items():
            if host in self.fleet.down:
                silent[host] = "unreachable: connection refused"
            else:
                answered[host] = {run: {"state": s} for run, s in runs.items()}
                self.last_heard[host] = now
        return Heartbeats(answered, silent, dict(self.last_heard))

    def step(self, seconds: float = 10.0) -> list[health.Decision]:
        self.clock += seconds
        now, beats = at(self.clock), self.poll()
        decisions: list[health.Decision] = []
        for decision in health.observe(self.view, beats, POLICY, now):
            self.view.apply(decision, now)
            decisions.append(decision)
        for settle in health.settle_fences(self.view.fences, beats):
            decisions.append(settle)
            if isinstance(settle, KillRun):  # the node kills it; then its fence is cleared
                self.fleet.runs[settle.host][settle.node_id] = "exited"
                self.fleet.killed.append((settle.host, settle.node_id))
                settle = ClearFence(settle.host, settle.node_id)
            self.view.apply(settle, now)
        for back in health.returns(self.view, beats, POLICY):
            self.view.apply(back, now)
            decisions.append(back)
        return decisions


def fleet_of(view: View) -> Fleet:
    runs: dict[str, dict[str, str]] = {}
    for j in view.jobs.values():
        for node in j["nodes"]:
            runs.setdefault(node["host"], {})[node["node_id"]] = "running"
    return Fleet(runs)


def of(kind: type, decisions: list[health.Decision]) -> list[Any]:
    return [d for d in decisions if isinstance(d, kind)]


def test_a_node_silent_for_node_dead_after_is_lost_its_jobs_ended_or_requeued() -> None:
    view = View(
        jobs={
            "a": job("a", "n1"),  # no restarts: ends failed
            "b": job("b", "n1", max_restarts=1),  # restarts elsewhere
            "c": job("c", "n1", "n2"),  # multi-node: its run on n2 is fenced too
            "d": job("d", "n2"),  # untouched
        }
    )
    loop = Loop(view, fleet_of(view))
    first = loop.step()
    assert of(MarkHeard, first) == [MarkHeard("n1"), MarkHeard("n2")]
    loop.fleet.down.add("n1")
    first_silent = loop.step()  # at 20 s; heard last at 10 s
    assert first_silent == [MarkSilent("n1", at(10), "unreachable: connection refused", at(10))]
    for _ in range(7):  # up to 90 s: 80 s silent, not yet
        assert not of(DeclareLost, loop.step())
    lost = [d for d in loop.step() if not isinstance(d, MarkHeard)]  # at 100 s: 90 s silent
    assert [type(d) for d in lost[:2]] == [DeclareLost, DrainHost]
    declared = lost[0]
    assert (declared.host, declared.since, declared.jobs) == ("n1", at(10), ("a", "b", "c"))
    assert lost[1].reason.startswith("node lost: no answer since " + at(10))
    assert {(f.host, f.job) for f in of(FenceRun, lost)} == {
        ("n1", "a"),
        ("n1", "b"),
        ("n1", "c"),
        ("n2", "c"),
    }
    assert of(EndJob, lost) == [
        EndJob("a", "node lost: n1 did not answer for 1m30s", None),
        EndJob("c", "node lost: n1 did not answer for 1m30s", None),
    ]
    (requeued,) = of(RequeueJob, lost)
    assert requeued.job == "b" and requeued.restart.backoff_s == 0.0
    assert requeued.restart.reason == "node lost (n1 did not answer for 1m30s), requeued (1/1)"
    # n2 answered the same poll: c's run there still ran, it is killed and cleared.
    assert of(KillRun, lost) == [KillRun("n2", "c.1", "c")]
    assert loop.fleet.killed == [("n2", "c.1")]
    assert view.jobs["d"]["state"] == "running"
    assert set(view.fences) == {"n1:a.1", "n1:b.1", "n1:c.1"}
    assert not of(DeclareLost, loop.step()), "a lost host is declared lost once"

    loop.fleet.down.discard("n1")  # it answers again; a's and b's runs still go on there
    loop.fleet.runs["n1"]["c.1"] = "absent"
    back = loop.step()
    assert of(KillRun, back) == [KillRun("n1", "a.1", "a"), KillRun("n1", "b.1", "b")]
    assert ClearFence("n1", "c.1") in back
    assert of(HostReturned, back) == [HostReturned("n1", undrained=True)]
    assert of(LiftDrain, back) == [LiftDrain("n1")]
    assert not view.lost and not view.fences and not view.drains
    assert not [d for d in loop.step() if not isinstance(d, MarkHeard)], "the usual pass"


def test_lost_at_node_dead_after_of_silence_not_a_second_before() -> None:
    view = View(jobs={"a": job("a", "n1")}, silent={"n1": at(0)})
    beats = Heartbeats({}, {"n1": "timed-out: 10s"})
    assert health.observe(view, beats, POLICY, at(89.999)) == []
    (lost,) = of(DeclareLost, health.observe(view, beats, POLICY, at(90)))
    assert (lost.host, lost.since, lost.answered, lost.jobs) == ("n1", at(0), None, ("a",))


def test_a_lost_host_with_a_fence_left_has_not_returned() -> None:
    view = View(
        jobs={"a": {**job("a", "n1"), "state": "failed"}},
        lost={"n1": {"host": "n1", "since": at(0)}},
        fences={"n1:a.1": {"host": "n1", "node_id": "a.1", "job": "a"}},
        drains={"n1": {"health": {"reason": "node lost: no answer since ..."}}},
    )
    beats = Heartbeats({"n1": {"a.1": {"state": "running"}}}, {})
    assert health.returns(view, beats, POLICY) == []
    view.fences.clear()
    manual = HealthPolicy(node_dead_after_s=90, return_to_service="manual")
    assert health.returns(view, beats, manual) == [HostReturned("n1", undrained=False)]


def test_an_admins_drain_is_never_lifted_by_a_return() -> None:
    view = View(
        lost={"n1": {"host": "n1", "since": at(0)}},
        drains={"n1": {"health": {"reason": "maintenance"}, "admin": {"reason": "x"}}},
    )
    beats = Heartbeats({"n1": {}}, {})
    assert health.returns(view, beats, POLICY) == [HostReturned("n1", undrained=False)]


def test_a_silent_host_with_no_running_job_stays_silent_however_long() -> None:
    view = View(jobs={"a": {**job("a", "n1"), "state": "queued"}}, silent={"n1": at(0)})
    beats = Heartbeats({}, {"n1": "timed-out: 10s"})
    assert health.observe(view, beats, POLICY, at(10_000)) == []


def test_restart_budget_spent_ends_the_job_with_its_reason() -> None:
    view = View(jobs={"a": job("a", "n1", max_restarts=2, restarts=2)}, silent={"n1": at(0)})
    decisions = health.observe(view, Heartbeats({}, {"n1": "unreachable"}), POLICY, at(95))
    (end,) = of(EndJob, decisions)
    assert end.reason == "node lost (n1 did not answer for 1m35s) (no restarts left: 2/2)"


def test_the_view_the_decisions_read_is_not_changed() -> None:
    view = View(jobs={"a": job("a", "n1")}, silent={"n1": at(0)})
    before = copy.deepcopy(view)
    health.observe(view, Heartbeats({}, {"n1": "unreachable"}), POLICY, at(100))
    assert view == before
