"""Reap ended jobs and settle ones a crashed workstation left pending.

reap: one fan-out polls every running job's node(s); an ended job gets its final record
and its slices released in one transaction (a preempted one is requeued when it asked).
The same poll is the hosts' heartbeat: sched.health decides which hosts silent too long are
lost, jobs.lost records it.
recover: a pending job whose submitter is gone is settled by a *fencing* poll: a job id the
node never saw is claimed there, so a launch still in flight can no longer start it. `cancel`
settles a pending job the same way; a job it marked that had not started on all its nodes
is recorded cancelled (its started part killed) instead of queued again.
"""

from __future__ import annotations

import time
from typing import Any

from gpupoolctl.jobs import lost, restarts
from gpupoolctl.jobs.listing import age_s
from gpupoolctl.jobs.nodes import Call
from gpupoolctl.jobs.service import KILL_WAIT_S, JobsCore, node_id
from gpupoolctl.jobs.spec import duration_text
from gpupoolctl.ledger import Transaction
from gpupoolctl.sched import health

PENDING_STALE_S = 600.0  # a pending job of another workstation is settled after this long
_ENDED = ("exited", "lost", "absent")


def _wanted(jobs_list: list[dict[str, Any]]) -> dict[str, list[str]]:
    wanted: dict[str, list[str]] = {}
    for job in jobs_list:
        for node in job.get("nodes") or []:
            wanted.setdefault(node["host"], []).append(node["node_id"])
    return wanted


def _statuses(jobs: JobsCore, job: dict[str, Any], answers: dict[str, Any]) -> list[dict] | None:
    """Each node's status for this job, or None when some node could not be asked."""
    out = []
    for node in job.get("nodes") or []:
        answer = answers.get(node["host"])
        if not isinstance(answer, dict):
            if answer is not None:
                jobs.host_failed(node["host"], f"{answer.outcome}: {answer.error}")
            return None
        out.append(answer.get(node["node_id"]) or {"state": "absent"})
    return out


def reap(
    jobs: JobsCore, only: set[str] | None = None, *, probe_lost: bool = True
) -> list[dict[str, Any]]:
    """Poll running jobs (all, or the ids in `only`: then only their nodes are asked);
    record and release the ones that ended. Returns their records. Without `probe_lost`
    lost hosts and fenced runs are not asked this time (`submit` must not wait out a dead
    node's connect time-out; the scheduling loop asks them)."""
    state = jobs.read().state
    running = [
        j
        for j in state.jobs.values()
        if j.get("state") == "running" and (only is None or j["id"] in only)
    ]
    # The full pass is also the hosts' heartbeat: fenced runs and lost hosts are asked too.
    # Only hosts this run can reach (-i/-l): a host taken out of the inventory keeps its
    # fences until it is back, without a warning on every pass.
    extra = health.probes(state) if only is None and probe_lost else {}
    extra = {h: ids for h, ids in extra.items() if h in jobs.nodes.targets}
    if not running and not extra:
        return []
    wanted = _wanted(running)
    for host, node_ids in extra.items():
        wanted.setdefault(host, []).extend(node_ids)
    answers = jobs.nodes.poll(wanted)
    if only is None:
        jobs.node_events.extend(lost.observe(jobs, answers, state))
    ended: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    overdue: list[dict[str, Any]] = []
    for job in running:
        statuses = _statuses(jobs, job, answers)
        if statuses is None:
            continue
        if all(s["state"] in _ENDED for s in statuses):
            ended.append((job, statuses))
        elif _overdue(job):
            overdue.append(job)
    if overdue:  # preempted or cancelled past its grace (a crash in between): finish it
        _kill(jobs, overdue)
    if not ended:
        return []
    done = jobs.ledger.write(lambda tx: [_finish(jobs, tx, j, s) for j, s in ended])
    jobs.warnings.extend(done.warnings)
    return [r for r in done.value if r]


def _overdue(job: dict[str, Any]) -> bool:
    marker = job.get("preempt") or job.get("cancel")
    if not marker:
        return False
    # A preemption that warns first (--signal) gives the job that long before its SIGTERM.
    grace = float(marker.get("grace_s") or 0) + float(marker.get("warn_s") or 0)
    return time.time() > float(marker.get("at") or 0) + grace + 2


def _kill(jobs: JobsCore, targets: list[dict[str, Any]]) -> None:
    calls = [
        Call(n["host"], "signal", {"job_id": n["node_id"], "signal": "KILL", "wait_s": KILL_WAIT_S})
        for job in targets
        for n in job.get("nodes") or []
    ]
    jobs.nodes.call(calls)


def _finish(
    jobs: JobsCore, tx: Transaction, job: dict[str, Any], statuses: list[dict[str, Any]]
) -> dict[str, Any] | None:
    current = jobs.still(tx, job, "running")
    if current is None:
        return None
    codes = [s.get("exit_code") for s in statuses]
    lost = [s for s in statuses if s["state"] != "exited"]
    exit_code = next((c for c in codes if c not in (None, 0)), None)
    if exit_code is None and not lost:
        exit_code = 0
    ended = max((float(s.get("ended") or 0) for s in statuses), default=0.0) or time.time()
    nodes = [
        {**n, "exit_code": s.get("exit_code"), "signal": s.get("signal")}
        for n, s in zip(current.get("nodes") or [], statuses, strict=False)
    ]
    final: dict[str, Any] = {
        "id": job["id"],
        "exit_code": exit_code,
        "ended": ended,
        "nodes": nodes,
        "signal": next((s.get("signal") for s in statuses if s.get("signal")), None),
    }
    # The job's own account of its time (train's report.json), numbers only: no user text.
    from gpupoolctl.agent.workloads.report import merge

    summary = merge([s.get("report") for s in statuses])
    if summary is not None:
        final["report"] = summary
    tx.release(current["alloc"])
    preempt = current.get("preempt")
    mark = current.get("cancel") or preempt
    if mark and exit_code == 0 and final["signal"] is None and ended < float(mark.get("at") or 0):
        # It had finished on its own before anyone asked it to stop: done, not cancelled
        # (and a preempted job that had finished is not run again).
        what = "cancel" if current.get("cancel") else "preemption"
        tx.append("job", {**final, "state": "done", "reason": f"ended before the {what}"})
    elif current.get("cancel"):
        tx.append("job", {**final, "state": "cancelled", "reason": "cancelled"})
    elif preempt and preempt.get("reclaim"):
        jobs.enqueue(
            tx,
            current,
            **{k: v for k, v in final.items() if k != "id"},
            reason=f"reclaimed for team {preempt['reclaim']} ({preempt.get('by')}); requeued",
        )
    elif preempt and current.get("requeue"):
        jobs.enqueue(
            tx,
            current,
            **{k: v for k, v in final.items() if k != "id"},
            reason=f"preempted by {preempt.get('by')}; requeued",
        )
    elif preempt:
        tx.append(
            "job", {**final, "state": "cancelled", "reason": f"preempted by {preempt.get('by')}"}
        )
    elif any(s.get("reason") == "time-limit" for s in statuses):
        limit = duration_text(float(current.get("time_limit_s") or 0))
        tx.append("job", {**final, "state": "failed", "reason": f"time limit reached ({limit})"})
    elif lost:
        error = "; ".join(str(s.get("error") or s["state"]) for s in lost)
        _failed(jobs, tx, current, final, "node-lost", error, error=f"lost: {error}")
    elif exit_code == 0:
        tx.append("job", {**final, "state": "done"})
    else:
        detail = f"SIG{final['signal']}" if final["signal"] else str(exit_code)
        _failed(jobs, tx, current, final, "exit", detail)
    return tx.state.jobs.get(job["id"]) or tx.state.finished.get(job["id"])


def _failed(
    jobs: JobsCore,
    tx: Transaction,
    current: dict[str, Any],
    final: dict[str, Any],
    cause: str,
    detail: str,
    error: str | None = None,
) -> None:
    """A try that failed on its own: run again when its restart budget allows (after the
    back-off), else recorded failed."""
    restart = restarts.after_failure(current, cause, detail)
    if restart is not None:
        restarts.requeue(jobs, tx, current, final, restart)
        return
    record = {**final, "state": "failed"}
    reason = restarts.end_reason(current, cause, detail)
    if reason is not None:
        record["reason"] = reason
    if error is not None:
        record["error"] = error
    tx.append("job", record)


def _submitter_alive(job: dict[str, Any]) -> bool:
    import socket

    from gpupoolctl.agent.jobs.paths import alive

    who = job.get("submitter")
    if not who:
        return False
    if who.get("host") == socket.gethostname():
        return alive(int(who.get("pid") or 0), who.get("start"))
    age = age_s(job.get("updated"), time.time())
    return age is None or age < PENDING_STALE_S


def recover(jobs: JobsCore) -> list[dict[str, Any]]:
    """Settle pending jobs whose submitter is gone. Returns what became of them."""
    state = jobs.read().state
    stale = [
        j for j in state.jobs.values() if j.get("state") == "pending" and not _submitter_alive(j)
    ]
    return [settle_pending(jobs, job, submitter_gone=True) for job in stale]


def settle_pending(jobs: JobsCore, job: dict[str, Any], *, submitter_gone: bool) -> dict[str, Any]:
    """Ask the node(s), fencing: launched -> running; never launched -> released, queued
    (cancelled when it is marked cancel)."""
    answers = jobs.nodes.poll(_wanted([job]), fence=True)
    statuses = _statuses(jobs, job, answers)
    if statuses is None or any(s["state"] == "starting" for s in statuses):
        if submitter_gone:  # nobody is launching it now: the next recovery pass decides
            jobs.ledger.write(lambda tx: _unclaim(jobs, tx, job))
        return job
    launched = [s["state"] != "absent" for s in statuses]

    def build(tx: Transaction) -> dict[str, Any] | None:
        current = jobs.still(tx, job, "pending")
        if current is None:
            return None
        if all(launched):
            nodes = [
                {**n, "pid": s.get("pid"), "started": s.get("started")}
                for n, s in zip(current["nodes"], statuses, strict=True)
            ]
            tx.append(
                "job",
                {
                    "id": job["id"],
                    "state": "running",
                    "nodes": nodes,
                    "submitter": None,
                    "recovered": True,
                },
            )
        elif current.get("cancel"):  # cancelled while being launched: not started (fully)
            tx.release(current["alloc"])
            tx.append(
                "job",
                {"id": job["id"], "state": "cancelled", "reason": "cancelled", "submitter": None},
            )
        elif not any(launched):
            tx.release(current["alloc"])
            jobs.enqueue(tx, current, reason="never launched (its submitter stopped); requeued")
        else:
            tx.release(current["alloc"])
            tx.append(
                "job",
                {
                    "id": job["id"],
                    "state": "failed",
                    "submitter": None,
                    "error": "launched on only some of its nodes before its submitter stopped",
                },
            )
        return tx.state.jobs.get(job["id"]) or tx.state.finished.get(job["id"])

    done = jobs.ledger.write(build)
    if any(launched) and not all(launched):
        _kill(jobs, [job])
    return done.value or job


def _unclaim(jobs: JobsCore, tx: Transaction, job: dict[str, Any]) -> None:
    if jobs.still(tx, job, "pending") is not None and tx.state.jobs[job["id"]].get("submitter"):
        tx.append("job", {"id": job["id"], "state": "pending", "submitter": None})


__all__ = ["node_id", "reap", "recover", "settle_pending"]
