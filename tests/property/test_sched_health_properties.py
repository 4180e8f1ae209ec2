"""The node-loss decisions (sched.health) on random small fleets: random running jobs (on one
or two hosts, with random restart budgets), hosts recorded silent or lost, fences, a random
poll and clock. Whatever the input: a host that answers is never declared lost and none of
its jobs is ended for it; every job of a host declared lost gets exactly one end or requeue,
and no other job does; a loss needs node-dead-after of silence; recording the decisions and
deciding again on the same poll decides nothing more; a lost host returns only with no
fence left, once."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.policy.model import HealthPolicy
from gpupoolctl.sched import health
from gpupoolctl.sched.health import (
    DeclareLost,
    EndJob,
    FenceRun,
    Heartbeats,
    HostReturned,
    KillRun,
    LiftDrain,
    RequeueJob,
)
from gpupoolctl.timestamps import seconds_between
from tests.unit.test_sched_health import View, at, job

HOSTS = ("n0", "n1", "n2", "n3")
SETTINGS = settings(max_examples=200, deadline=None)


@st.composite
def fleets(draw: st.DrawFn) -> tuple[View, Heartbeats, HealthPolicy, str]:
    view = View()
    for index in range(draw(st.integers(0, 6))):
        hosts = draw(st.lists(st.sampled_from(HOSTS), min_size=1, max_size=2, unique=True))
        budget = draw(st.integers(0, 2))
        made = job(f"j{index}", *hosts, max_restarts=budget, restarts=draw(st.integers(0, 2)))
        made["state"] = draw(st.sampled_from(["running", "running", "queued"]))
        view.jobs[made["id"]] = made
    for host in HOSTS:
        status = draw(st.sampled_from(["ok", "ok", "silent", "lost"]))
        if status == "silent":
            view.silent[host] = at(draw(st.integers(0, 200)))
        elif status == "lost":
            view.lost[host] = {"host": host, "since": at(0)}
            view.drains[host] = {"health": {"reason": "node lost: no answer since ..."}}
        if draw(st.booleans()):
            view.answered[host] = at(draw(st.integers(0, 200)))
    for made in view.jobs.values():
        for node in made["nodes"]:
            if draw(st.integers(0, 4)) == 0:
                key = f"{node['host']}:{node['node_id']}"
                view.fences[key] = {**node, "job": made["id"]}
    answering = draw(st.lists(st.sampled_from(HOSTS), unique=True))
    run_state = st.sampled_from(["running", "exited", "absent"])
    answered = {
        h: {
            node["node_id"]: {"state": draw(run_state)}
            for made in view.jobs.values()
            for node in made["nodes"]
            if node["host"] == h
        }
        for h in answering
    }
    silent = {h: "unreachable: no route" for h in HOSTS if h not in answering}
    heard = {h: at(draw(st.integers(0, 200))) for h in HOSTS if draw(st.booleans())}
    policy = HealthPolicy(
        node_dead_after_s=draw(st.sampled_from([30, 90, 300])),
        return_to_service=draw(st.sampled_from(["auto", "manual"])),
    )
    now = at(draw(st.integers(200, 600)))
    return view, Heartbeats(answered, silent, heard), policy, now


def record(view: View, decisions: list[health.Decision], now: str) -> None:
    for decision in decisions:
        view.apply(decision, now)


@SETTINGS
@given(fleets())
def test_only_a_silent_host_is_lost_and_each_of_its_jobs_ends_once(
    fleet: tuple[View, Heartbeats, HealthPolicy, str],
) -> None:
    view, beats, policy, now = fleet
    decisions = health.observe(view, beats, policy, now)
    lost = {d.host: d for d in decisions if isinstance(d, DeclareLost)}
    assert not set(lost) & set(beats.answered), "a host that answers is never lost"
    assert not set(lost) & set(view.lost), "a lost host is not declared lost again"
    for declared in lost.values():
        assert seconds_between(declared.since, now) >= policy.node_dead_after_s
    ends = Counter(d.job for d in decisions if isinstance(d, EndJob | RequeueJob))
    assert set(ends.values()) <= {1}, "one end or requeue per job"
    of_lost = {
        j["id"]
        for j in view.jobs.values()
        if j["state"] == "running" and {n["host"] for n in j["nodes"]} & set(lost)
    }
    assert set(ends) == of_lost
    assert set(ends) == {j for d in lost.values() for j in d.jobs}
    for ended in ends:  # never for an answering host alone: it ran on a lost one
        assert {n["host"] for n in view.jobs[ended]["nodes"]} & set(lost)
    fenced = {(d.host, d.node_id) for d in decisions if isinstance(d, FenceRun)}
    runs = {(n["host"], n["node_id"]) for j in ends for n in view.jobs[j]["nodes"]}
    assert fenced == runs, "every run of an ended job is fenced, and no other"
    for decision in decisions:
        if isinstance(decision, RequeueJob):
            used = view.jobs[decision.job]["restarts"]
            assert used < view.jobs[decision.job]["max_restarts"]
            assert decision.restart.count == used + 1


@SETTINGS
@given(fleets())
def test_recorded_decisions_are_not_decided_again(
    fleet: tuple[View, Heartbeats, HealthPolicy, str],
) -> None:
    view, beats, policy, now = fleet
    record(view, health.observe(view, beats, policy, now), now)
    assert health.observe(view, beats, policy, now) == []


@SETTINGS
@given(fleets())
def test_a_lost_host_returns_once_with_no_fence_left(
    fleet: tuple[View, Heartbeats, HealthPolicy, str],
) -> None:
    view, beats, policy, now = fleet
    record(view, health.observe(view, beats, policy, now), now)
    settle = health.settle_fences(view.fences, beats)
    assert {(d.host, d.node_id) for d in settle} == {
        (f["host"], f["node_id"]) for f in view.fences.values() if f["host"] in beats.answered
    }
    fenced_before = {f["host"] for f in view.fences.values()}
    back = health.returns(view, beats, policy)
    returned = {d.host for d in back if isinstance(d, HostReturned)}
    assert returned == (set(view.lost) & set(beats.answered)) - fenced_before
    lifted = {d.host for d in back if isinstance(d, LiftDrain)}
    assert lifted <= returned and (policy.return_to_service == "auto" or not lifted)
    for decision in settle:  # every kill succeeds: every fence on an answering host is gone
        if isinstance(decision, KillRun):
            decision = health.ClearFence(decision.host, decision.node_id)
        view.apply(decision, now)
    back = health.returns(view, beats, policy)
    record(view, back, now)
    assert not set(view.lost) & set(beats.answered), "every answering host is back"
    assert health.returns(view, beats, policy) == [], "once"
