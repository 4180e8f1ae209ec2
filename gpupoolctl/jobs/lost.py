"""Node loss, carried out: the poll's answers in, sched.health's decisions recorded in the
ledger's transaction, fenced runs killed on their nodes.

What to decide is sched.health's (pure, over the ledger's state, this poll, the health
policy and the clock): which hosts are silent, answering, lost; which jobs end or restart;
which runs are fenced, killed, cleared; which hosts have returned. This module reads the
poll (a host that did not answer for the transport's reasons is silent; one that answered
with an error is alive), records each decision in order in one transaction per step, and
makes the agent calls (SIGKILL a fenced run that still runs). The poll is the reaper's
(jobs.reaping); a launch that could not reach a host marks it silent (jobs.launching);
`cancel --forget` fences the runs of the job it forgets (jobs.cancelling).
"""

from __future__ import annotations

from typing import Any

from gpupoolctl.jobs import restarts
from gpupoolctl.jobs.events import Event, NodeLost, NodeReturned, StaleRunKilled
from gpupoolctl.jobs.nodes import Call
from gpupoolctl.jobs.service import KILL_WAIT_S, JobsCore
from gpupoolctl.ledger import State, Transaction
from gpupoolctl.ledger.state import fence_key
from gpupoolctl.policy.model import HealthPolicy
from gpupoolctl.remote.results import TIMED_OUT, UNREACHABLE
from gpupoolctl.sched import health
from gpupoolctl.sched.health import (
    ClearFence,
    Decision,
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

# Outcomes that say nothing reached the node. A host that answered with an error (a broken
# agent, a full disk) is alive: its jobs are not lost, the error is reported instead.
SILENT_OUTCOMES = frozenset({UNREACHABLE, TIMED_OUT})


def heard(answers: dict[str, Any], last_heard: dict[str, str] | None = None) -> Heartbeats:
    """Split a poll's answers (Nodes.poll) into answering and silent hosts."""
    answered: dict[str, dict[str, Any]] = {}
    silent: dict[str, str] = {}
    for host, answer in answers.items():
        if isinstance(answer, dict):
            answered[host] = answer
        elif getattr(answer, "outcome", None) in SILENT_OUTCOMES:
            silent[host] = f"{answer.outcome}: {answer.error}"
    return Heartbeats(answered, silent, dict(last_heard or {}))


def health_of(jobs: JobsCore) -> HealthPolicy:
    return jobs.policy.health if jobs.policy is not None else HealthPolicy()


def observe(jobs: JobsCore, answers: dict[str, Any], state: State) -> list[Event]:
    """Record what this pass's poll says about hosts; declare the ones silent too long lost;
    kill fenced runs on hosts that answer; return lost hosts that answer with nothing
    fenced. `state` is the ledger as the poll's caller read it: when it shows nothing to do
    (sched.health.quiet) no ledger write is made. Returns events for the CLI (lost,
    returned, stale runs killed)."""
    now = format_ts(jobs.ledger.clock())
    for host, answer in answers.items():
        if isinstance(answer, dict):
            jobs.last_heard[host] = now
    beats = heard(answers, jobs.last_heard)
    policy = health_of(jobs)
    if health.quiet(state, beats, policy, now):
        return []  # the usual pass: everyone answered, nothing to record (no lock taken)

    def record(tx: Transaction) -> list[Event]:
        decisions = health.observe(tx.state, beats, policy, tx.now)
        return [e for d in decisions if (e := apply(jobs, tx, d)) is not None]

    done = jobs.ledger.write(record)
    jobs.warnings.extend(done.warnings)
    events: list[Event] = list(done.value)
    events.extend(_kill_fenced(jobs, beats))
    if set(beats.answered) & set(jobs.read().state.lost):

        def returned(tx: Transaction) -> list[Event]:
            decisions = health.returns(tx.state, beats, policy)
            return [e for d in decisions if (e := apply(jobs, tx, d)) is not None]

        back = jobs.ledger.write(returned)
        jobs.warnings.extend(back.warnings)
        events.extend(back.value)
    return events


def apply(jobs: JobsCore, tx: Transaction, decision: Decision) -> Event | None:
    """Record one of sched.health's decisions in the caller's transaction; returns the
    event the CLI shows for it, if any."""
    match decision:
        case MarkAnswering(host):
            tx.append("host", {"host": host, "state": "answering"})
        case MarkHeard(host):
            tx.append("host", {"host": host, "state": "heard"})
        case MarkSilent(host, since, why, answered):
            silent = {"host": host, "state": "silent", "since": since, "why": why}
            tx.append("host", {**silent, **({"answered": answered} if answered else {})})
        case DeclareLost(host, since, why, answered, _, ended):
            tx.append("host", {"host": host, "state": "lost", "since": since, "why": why})
            return NodeLost(host, since, answered, tuple(ended))
        case DrainHost(host, reason):
            drained = {"target": host, "state": "drained", "reason": reason}
            tx.append("drain", {**drained, "source": "health"})
        case FenceRun():
            _fence(tx, decision)
        case EndJob() | RequeueJob():
            _end(jobs, tx, decision)
        case ClearFence(host, node_id):
            fence = tx.state.fences.get(fence_key(host, node_id))
            if fence is not None:  # another process may have cleared it meanwhile
                tx.append("fence", {**fence, "state": "cleared"})
        case HostReturned(host, undrained):
            tx.append("host", {"host": host, "state": "returned"})
            return NodeReturned(host, undrained)
        case LiftDrain(host):  # the loss's own drain only: an admin's stays
            tx.append("drain", {"target": host, "state": "undrained", "source": "health"})
        case KillRun():
            raise ValueError("a kill is an agent call, not a record: see _kill_fenced")
    return None


def mark_silent(jobs: JobsCore, tx: Transaction, host: str, why: str) -> None:
    """Record in the caller's transaction that `host` did not answer (a poll or a launch)
    unless it is lost or silent already. Placement leaves a silent host alone until it
    answers again (sched.unavailable)."""
    mark = health.mark_silent(tx.state, host, why, jobs.last_heard, tx.now)
    if mark is not None:
        apply(jobs, tx, mark)


def fence_runs(tx: Transaction, job: dict[str, Any]) -> None:
    """Fence every run of `job` (each of its nodes): killed when its host answers, its slices
    kept out of placement until then (sched.unavailable)."""
    for fence in health.fences_of(job):
        _fence(tx, fence)


def _fence(tx: Transaction, run: FenceRun) -> None:
    fence = {"host": run.host, "node_id": run.node_id, "job": run.job, "slices": list(run.slices)}
    tx.append("fence", {**fence, "state": "fenced"})


def _kill_fenced(jobs: JobsCore, beats: Heartbeats) -> list[Event]:
    """SIGKILL fenced runs still running on hosts that answered, then clear the fences of
    the runs that are gone there."""
    settle = health.settle_fences(jobs.read().state.fences, beats)
    if not settle:
        return []
    kills = [d for d in settle if isinstance(d, KillRun)]
    calls = [
        Call(k.host, "signal", {"job_id": k.node_id, "signal": "KILL", "wait_s": KILL_WAIT_S})
        for k in kills
    ]
    gone = [d for d in settle if isinstance(d, ClearFence)]
    killed = []
    for kill, result in zip(kills, jobs.nodes.call(calls), strict=True):
        if result.ok and (result.data or {}).get("state") != "running":
            gone.append(ClearFence(kill.host, kill.node_id))
            killed.append(kill)
        elif not result.ok:
            jobs.host_failed(kill.host, f"{result.outcome}: {result.error}")

    def clear(tx: Transaction) -> None:
        for decision in sorted(gone, key=lambda c: fence_key(c.host, c.node_id)):
            apply(jobs, tx, decision)

    done = jobs.ledger.write(clear)
    jobs.warnings.extend(done.warnings)
    return [StaleRunKilled(k.job, k.host, k.node_id) for k in killed]


def _end(jobs: JobsCore, tx: Transaction, decision: EndJob | RequeueJob) -> None:
    """Release the job's slices; queue it again or record it failed."""
    job = tx.state.jobs[decision.job]
    tx.release(job["alloc"])
    final = {"id": job["id"], "exit_code": None, "ended": jobs.clock(), "signal": None}
    if isinstance(decision, RequeueJob):
        restarts.requeue(jobs, tx, job, final, decision.restart)
        return
    fields = {"error": decision.error, "reason": decision.reason, "submitter": None}
    tx.append("job", {**final, "state": "failed", **fields})
