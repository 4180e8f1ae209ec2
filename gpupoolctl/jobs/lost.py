"""Node loss: hosts that stop answering, their jobs, and the runs they leave behind.

The reaper's poll is the heartbeat: a host with running jobs whose poll is unreachable or
times out is recorded `silent` (since its last answer this process saw, else since this
poll), and so is a host that a launch could not reach (jobs.launching); one that answers
again (a poll, or its facts: Ledger.refresh_slices), `answering`. That a polled host
answered is recorded too (`heard`), at most once a third of node-dead-after (HEARD_EVERY),
so that the ledger knows when a host last answered whichever process polled it: a lost node
is told by that time ("no answer since T"), not by the first poll that failed. Placement
leaves silent and lost hosts alone (sched.unavailable), and every full pass polls them. A
host with running jobs silent for the health policy's node-dead-after is declared `lost`,
in one transaction: the host is drained (source `health`, beside an admin's drain if any;
only this loop lifts it), each of its jobs is
ended as failed "node lost" or requeued when it may restart (jobs.restarts), and only then
are its slices released. Every run such a job had (on the lost host, and on the other hosts
of a multi-node job) is *fenced*: polled on every pass until its host answers, then killed
there and cleared; its slices take no new work meanwhile. `cancel --forget` fences the runs
of the job it forgets the same way. A run is never recorded as finished after its job moved
on (the reaper looks only at a job's current run), so nothing runs twice and no output is
taken from a stale run. A lost host that answers with no fence left has `returned`; with
return-to-service auto its automatic drain is lifted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gpupoolctl.jobs import restarts
from gpupoolctl.jobs.nodes import Call
from gpupoolctl.jobs.service import KILL_WAIT_S, JobsCore
from gpupoolctl.ledger import State, Transaction
from gpupoolctl.ledger.state import fence_key
from gpupoolctl.ledger.units import format_ts, parse_ts
from gpupoolctl.policy.model import HealthPolicy
from gpupoolctl.remote.results import TIMED_OUT, UNREACHABLE

# Outcomes that say nothing reached the node. A host that answered with an error (a broken
# agent, a full disk) is alive: its jobs are not lost, the error is reported instead.
SILENT_OUTCOMES = frozenset({UNREACHABLE, TIMED_OUT})
LOST_REASON = "node lost"  # the automatic drain's reason starts so; only those are lifted
# A host's answer is recorded when the last one recorded is older than this part of
# node-dead-after (Slurm pings a node every SlurmdTimeout/3): passes that poll more often
# write nothing, and "no answer since T" is that much early at most.
HEARD_EVERY = 1 / 3


@dataclass(frozen=True)
class Heard:
    """Who answered this pass's poll, who did not, and what the answering ones said."""

    answered: dict[str, dict[str, Any]]  # host -> {node id: status}
    silent: dict[str, str]  # host -> why (the transport's outcome and error)


def heard(answers: dict[str, Any]) -> Heard:
    """Split a poll's answers (Nodes.poll) into answering and silent hosts."""
    answered: dict[str, dict[str, Any]] = {}
    silent: dict[str, str] = {}
    for host, answer in answers.items():
        if isinstance(answer, dict):
            answered[host] = answer
        elif getattr(answer, "outcome", None) in SILENT_OUTCOMES:
            silent[host] = f"{answer.outcome}: {answer.error}"
    return Heard(answered, silent)


def wanted(state: State) -> dict[str, list[str]]:
    """What the poll must also ask besides running jobs: the fenced runs, by host, and every
    lost or silent host (an empty poll: does it answer again?)."""
    out: dict[str, list[str]] = {host: [] for host in (*state.lost, *state.silent)}
    for fence in state.fences.values():
        out.setdefault(fence["host"], []).append(fence["node_id"])
    return out


def health_of(jobs: JobsCore) -> HealthPolicy:
    return jobs.policy.health if jobs.policy is not None else HealthPolicy()


def observe(jobs: JobsCore, answers: dict[str, Any], state: State) -> list[dict[str, Any]]:
    """Record what this pass's poll says about hosts; declare the ones silent too long lost;
    kill fenced runs on hosts that answer; return lost hosts that answer with nothing
    fenced. `state` is the ledger as the poll's caller read it: when it shows nothing to do
    (everyone answered, no silence, no loss, no fence, no answer due to be recorded) no
    ledger write is made. Returns events for the CLI (lost, returned, stale runs killed)."""
    found = heard(answers)
    now = jobs.ledger.clock()
    for host in found.answered:
        jobs.last_heard[host] = format_ts(now)
    health = health_of(jobs)
    changed = found.silent or set(found.answered) & (set(state.silent) | set(state.lost))
    due = [h for h in found.answered if _heard_due(state, h, format_ts(now), health)]
    if not changed and not due and not state.fences:
        return []  # the usual pass: everyone answered, nothing to record (no lock taken)
    done = jobs.ledger.write(lambda tx: _record(jobs, tx, found, health))
    jobs.warnings.extend(done.warnings)
    events: list[dict[str, Any]] = list(done.value)
    events.extend(_kill_fenced(jobs, found))
    if set(found.answered) & set(jobs.read().state.lost):
        back = jobs.ledger.write(lambda tx: _returned(tx, found, health))
        jobs.warnings.extend(back.warnings)
        events.extend(back.value)
    return events


def _record(
    jobs: JobsCore, tx: Transaction, found: Heard, health: HealthPolicy
) -> list[dict[str, Any]]:
    state = tx.state
    now = parse_ts(tx.now)
    events: list[dict[str, Any]] = []
    for host in sorted(found.answered):
        if host in state.silent:
            tx.append("host", {"host": host, "state": "answering"})
        elif host not in state.lost and _heard_due(state, host, tx.now, health):
            tx.append("host", {"host": host, "state": "heard"})
    for host, why in sorted(found.silent.items()):
        since = mark_silent(jobs, tx, host, why)
        if since is None:
            continue  # lost already
        silent_s = (now - parse_ts(since)).total_seconds()
        # A host with no running job is lost to nothing: it stays silent (and placement
        # leaves it alone) until it answers.
        if silent_s >= health.node_dead_after_s and _runs_on(state, host):
            events.append(_declare_lost(jobs, tx, host, since, silent_s, why))
    return events


def mark_silent(jobs: JobsCore, tx: Transaction, host: str, why: str) -> str | None:
    """Record in the caller's transaction that `host` did not answer (a poll or a launch)
    unless it is silent already; returns since when it is silent, None for a lost host
    (nothing recorded). Placement leaves a silent host alone until it answers again
    (sched.unavailable)."""
    state = tx.state
    if host in state.lost:
        return None
    since = state.silent.get(host)
    if since is None:
        since = jobs.last_heard.get(host, tx.now)
        silent = {"host": host, "state": "silent", "since": since, "why": why}
        answered = max(jobs.last_heard.get(host, ""), state.answered.get(host, ""))
        tx.append("host", {**silent, **({"answered": answered} if answered else {})})
    return since


def _runs_on(state: State, host: str) -> bool:
    return any(
        job.get("state") == "running" and any(n["host"] == host for n in job.get("nodes") or [])
        for job in state.jobs.values()
    )


def _heard_due(state: State, host: str, now: str, health: HealthPolicy) -> bool:
    """Whether the host's answer is to be recorded: none recorded yet, or the last one
    recorded is older than HEARD_EVERY of node-dead-after."""
    last = state.answered.get(host)
    if last is None:
        return True
    elapsed = (parse_ts(now) - parse_ts(last)).total_seconds()
    return elapsed >= health.node_dead_after_s * HEARD_EVERY


def _declare_lost(
    jobs: JobsCore, tx: Transaction, host: str, since: str, silent_s: float, why: str
) -> dict[str, Any]:
    from gpupoolctl.policy.values import duration_text

    tx.append("host", {"host": host, "state": "lost", "since": since, "why": why})
    # Told from its last answer when the ledger knows it (`since` is the first poll that
    # failed: the silence counted towards node-dead-after).
    answered = tx.state.answered.get(host)
    if answered is not None:
        silent_s = max(silent_s, (parse_ts(tx.now) - parse_ts(answered)).total_seconds())
        reason = f"{LOST_REASON}: no answer since {answered} ({why})"
    else:
        reason = f"{LOST_REASON}: no answer since {since} or earlier ({why})"
    # Beside an admin's drain, if any: each is lifted on its own.
    tx.append(
        "drain", {"target": host, "state": "drained", "reason": reason[:200], "source": "health"}
    )
    detail = f"{host} did not answer for {duration_text(round(silent_s))}"
    ended = []
    for job in list(tx.state.jobs.values()):
        if job.get("state") != "running":
            continue
        nodes = job.get("nodes") or []
        if not any(n["host"] == host for n in nodes):
            continue
        fence_runs(tx, job)  # the other hosts' runs too: the job goes on as a whole or not
        tx.release(job["alloc"])
        _end(jobs, tx, job, detail)
        ended.append(job["id"])
    return {"event": "node-lost", "host": host, "since": since, "answered": answered, "jobs": ended}


def fence_runs(tx: Transaction, job: dict[str, Any]) -> None:
    """Fence every run of `job` (each of its nodes): killed when its host answers, its slices
    kept out of placement until then (sched.unavailable)."""
    for node in job.get("nodes") or []:
        tx.append(
            "fence",
            {
                "host": node["host"],
                "node_id": node["node_id"],
                "job": job["id"],
                "slices": list(node.get("slices") or []),
                "state": "fenced",
            },
        )


def _kill_fenced(jobs: JobsCore, found: Heard) -> list[dict[str, Any]]:
    """SIGKILL fenced runs still running on hosts that answered, then clear the fences of
    the runs that are gone there."""
    state = jobs.read().state
    fences = [f for f in state.fences.values() if f["host"] in found.answered]
    if not fences:
        return []
    running = [
        f
        for f in fences
        if (found.answered[f["host"]].get(f["node_id"]) or {}).get("state") == "running"
    ]
    calls = [
        Call(f["host"], "signal", {"job_id": f["node_id"], "signal": "KILL", "wait_s": KILL_WAIT_S})
        for f in running
    ]
    gone = {fence_key(f["host"], f["node_id"]) for f in fences if f not in running}
    killed = []
    for fence, result in zip(running, jobs.nodes.call(calls), strict=True):
        if result.ok and (result.data or {}).get("state") != "running":
            gone.add(fence_key(fence["host"], fence["node_id"]))
            killed.append(fence)
        elif not result.ok:
            jobs.host_failed(fence["host"], f"{result.outcome}: {result.error}")

    def clear(tx: Transaction) -> None:
        for key in sorted(gone):
            fence = tx.state.fences.get(key)
            if fence is not None:
                tx.append("fence", {**fence, "state": "cleared"})

    done = jobs.ledger.write(clear)
    jobs.warnings.extend(done.warnings)
    return [
        {"event": "stale-run-killed", "job": f["job"], "host": f["host"], "run": f["node_id"]}
        for f in killed
    ]


def _returned(tx: Transaction, found: Heard, health: HealthPolicy) -> list[dict[str, Any]]:
    state = tx.state
    fenced_hosts = {f["host"] for f in state.fences.values()}
    events = []
    for host in sorted(set(state.lost) & set(found.answered) - fenced_hosts):
        tx.append("host", {"host": host, "state": "returned"})
        drain = state.drains.get(host, {}).get("health")
        lifted = (
            health.return_to_service == "auto"
            and drain is not None
            and str(drain.get("reason", "")).startswith(LOST_REASON)
        )
        if lifted:  # the loss's own drain only: an admin's stays
            tx.append("drain", {"target": host, "state": "undrained", "source": "health"})
        events.append({"event": "node-returned", "host": host, "undrained": lifted})
    return events


def _end(jobs: JobsCore, tx: Transaction, job: dict[str, Any], detail: str) -> None:
    """Requeue the job when it may restart (jobs.restarts), else record it failed."""
    final = {"id": job["id"], "exit_code": None, "ended": jobs.clock(), "signal": None}
    restart = restarts.after_failure(job, "node-lost", detail)
    if restart is not None:
        # No back-off: the node failed, not the job; back-off is for a job's crash loop.
        restarts.requeue(jobs, tx, job, final, dataclasses.replace(restart, backoff_s=0.0))
        return
    reason = restarts.end_reason(job, "node-lost", detail)
    error = f"{LOST_REASON}: {detail}"
    tx.append(
        "job", {**final, "state": "failed", "error": error, "reason": reason, "submitter": None}
    )
