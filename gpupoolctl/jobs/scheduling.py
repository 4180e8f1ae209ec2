"""One pass over the queue: place what fits (in the scheduler's order), preempt when allowed.

Each entry is decided in its own transaction (dequeue + alloc + job pending), then launched
outside the lock. An entry that does not fit may preempt preemptible, lower-priority
running jobs (sched.choose_preemption): they are chosen and marked in that same
transaction, then sent SIGTERM, given their grace period, SIGKILLed if still there, and
reaped (released, and requeued when they asked); then the entry is placed again. Later
entries may backfill around one that does not fit, except once an entry has aged to the
cap (sched.queue).

Two passes may run at once (two cron runs, `submit` next to `schedule`). Choosing and
marking victims in one transaction, after checking there that no victim marked for this
entry is still running, makes the second pass wait for the first one's victims instead of
stopping a second set for the same entry.
"""

from __future__ import annotations

import time
from typing import Any

from gpupoolctl.jobs import hooks
from gpupoolctl.jobs.errors import JobError
from gpupoolctl.jobs.nodes import Call
from gpupoolctl.jobs.service import KILL_WAIT_S, Jobs, Outcome
from gpupoolctl.ledger import State, Transaction
from gpupoolctl.ledger.units import parse_ts
from gpupoolctl.sched import (
    AGING_CAP,
    NoFit,
    Placement,
    QueueEntry,
    choose_preemption,
    effective_priority,
    order_queue,
)


def schedule(jobs: Jobs) -> Outcome:
    from gpupoolctl.jobs import reaping

    outcome = Outcome()
    done_with: set[str] = set()  # entries decided (or given up on) in this pass
    preempted_for: set[str] = set()
    # Slices kept back for entries that have aged to the cap and still do not fit: smaller
    # jobs may take other slices, never these (the rule of sched.schedule_pass).
    reserved: set[str] = set()
    for _ in range(1000):  # bounded: every round decides one entry or frees slices
        view = jobs.read()
        now = parse_ts(view.now)
        entries = [QueueEntry.from_record(r) for r in view.state.queue.values()]
        ordered = [e for e in order_queue(entries, now) if e.id not in done_with]
        if not ordered:
            break
        entry = ordered[0]
        done_with.add(entry.id)
        may_preempt = entry.id not in preempted_for
        decided = jobs.ledger.write(
            lambda tx, e=entry, p=may_preempt: _decide(jobs, tx, e, reserved, preempt=p)
        )
        jobs.warnings.extend(decided.warnings)
        kind, detail = decided.value
        if kind == "placed":
            hooks.crash_point("placed")
            job = jobs.launch(detail)
            outcome.events.append(
                {
                    "event": "started" if job.get("state") == "running" else "launch-failed",
                    "job": detail["id"],
                    "hosts": [n["host"] for n in detail["nodes"]],
                    "error": job.get("error"),
                }
            )
        elif kind == "never":
            outcome.events.append({"event": "refused", "job": entry.job, "reason": detail})
        elif kind == "preempting":
            preempted_for.add(entry.id)
            stop(jobs, detail)
            victims = [v["id"] for v in detail]
            outcome.events.append({"event": "preempted", "job": entry.job, "victims": victims})
            reaping.reap(jobs)
            done_with.discard(entry.id)  # try it again on the freed slices
        elif kind == "waiting":
            outcome.events.append({"event": "waiting", "job": entry.job, "reason": detail})
            if effective_priority(entry, now) >= AGING_CAP:
                pool = jobs.pool(view.state, view.now)
                reserved.update(slot.id for slot in pool.free_candidates(entry.request))
    return outcome


def _decide(
    jobs: Jobs, tx: Transaction, entry: QueueEntry, reserved: set[str], *, preempt: bool
) -> tuple[str, Any]:
    """Place the entry, or refuse it, or (when `preempt`) choose and mark victims for it:
    all against the ledger as it is inside this transaction."""
    queued = tx.state.queue.get(entry.id)
    job = tx.state.jobs.get(str(entry.job)) if entry.job else None
    if queued is None:
        return "gone", None
    if job is None or job.get("state") != "queued":
        tx.append("dequeue", {"id": entry.id, "reason": "its job is no longer queued"})
        return "gone", None
    policy = str(job.get("policy") or "best-fit")
    result = jobs.place(tx.state, entry.request, tx.now, policy, reserved)
    if isinstance(result, Placement):
        tx.append("dequeue", {"id": entry.id, "reason": "placed"})
        try:
            return "placed", jobs.record_placed(tx, job, result)
        except JobError as exc:  # e.g. two vendors on one host: it would block the queue
            tx.append("job", {"id": job["id"], "state": "failed", "error": str(exc)})
            return "never", str(exc)
    assert isinstance(result, NoFit)
    # A pass limited to some hosts (-l) must not fail a job that other hosts could hold.
    limited = result.never and jobs.hosts is not None
    if limited and not jobs.fits_nowhere(tx.state, entry.request, tx.now, policy):
        return "waiting", f"{result.reason} (this pass sees only the hosts given by -l)"
    if result.never:
        tx.append("dequeue", {"id": entry.id, "reason": "can never fit"})
        tx.append(
            "job",
            {"id": job["id"], "state": "failed", "error": f"can never fit: {result.reason}"},
        )
        return "never", result.reason
    if preempt:
        if preempting_for(tx.state, job["id"]):
            return "waiting", f"{result.reason}; the jobs preempted for it are still stopping"
        marked = _mark_victims(jobs, tx, entry, job["id"])
        if marked:
            return "preempting", marked
    return "waiting", result.reason


def preempting_for(state: State, job_id: str) -> list[str]:
    """Jobs marked to be preempted for `job_id` that are still running (a victim requeued
    after it ended is queued: its old mark no longer counts)."""
    return [
        k
        for k, j in state.jobs.items()
        if j.get("state") == "running" and (j.get("preempt") or {}).get("by") == job_id
    ]


def _mark_victims(
    jobs: Jobs, tx: Transaction, entry: QueueEntry, by: str
) -> list[dict[str, Any]] | None:
    """Choose the victims on the transaction's state and mark them, in one step: another
    pass's transaction then sees the marks. Returns the marked jobs, or None."""
    chosen = choose_preemption(entry.request, jobs.pool(tx.state, tx.now), tx.moment)
    if not chosen:
        return None
    running = {k: j for k, j in tx.state.jobs.items() if j.get("state") == "running"}
    # A victim that is not a running job of ours cannot be stopped cleanly; one already being
    # stopped (cancelled, or preempted for another job) frees nothing this job can count on.
    if any(
        v not in running or running[v].get("cancel") or running[v].get("preempt") for v in chosen
    ):
        return None
    marked = []
    for job_id in chosen:
        grace = float(running[job_id].get("grace_s") or 0)
        tx.append(
            "job",
            {
                "id": job_id,
                "state": "running",
                "preempt": {"by": by, "at": time.time(), "grace_s": grace},
            },
        )
        marked.append(tx.state.jobs[job_id])
    return marked


def stop(jobs: Jobs, targets: list[dict[str, Any]], grace_s: float | None = None) -> None:
    """SIGTERM every node of every job, wait up to its grace, then SIGKILL what is left."""
    if not targets:
        return
    calls = []
    for job in targets:
        grace = grace_s if grace_s is not None else float(job.get("grace_s") or 0)
        for node in job.get("nodes") or []:
            calls.append(
                Call(
                    node["host"],
                    "signal",
                    {"job_id": node["node_id"], "signal": "TERM", "wait_s": grace},
                )
            )
    results = jobs.nodes.call(calls)
    again = []
    for call, result in zip(calls, results, strict=True):
        if not result.ok:
            jobs.host_failed(call.host, f"{result.outcome}: {result.error}")
        elif result.data.get("state") == "running":
            again.append(
                Call(
                    call.host,
                    "signal",
                    {"job_id": call.args["job_id"], "signal": "KILL", "wait_s": KILL_WAIT_S},
                )
            )
    for call, result in zip(again, jobs.nodes.call(again), strict=True):
        if not result.ok:
            jobs.host_failed(call.host, f"{result.outcome}: {result.error}")
