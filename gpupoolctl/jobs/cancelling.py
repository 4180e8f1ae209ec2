"""cancel and cancel --forget: end a job in any state it can be in, whoever else is working
on it; or end it in the ledger only, its node not asked (a node gone for good)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpupoolctl.jobs import lost, reaping, stopping
from gpupoolctl.jobs.errors import JobError, NoSuchJob
from gpupoolctl.jobs.following import FOLLOW_INTERVAL_S
from gpupoolctl.jobs.service import JobsCore, find
from gpupoolctl.ledger import Transaction
from gpupoolctl.policy.ownership import NotOwner, as_admin, refusal

ACTIVE = ("queued", "pending", "running")
# How long cancel asks a pending job's node(s) whether its launch started (a launch in
# progress there answers "starting" for the moment it takes to start the process).
CANCEL_SETTLE_S = 10.0


def cancel(
    jobs: JobsCore,
    job_id: str,
    grace_s: float | None = None,
    *,
    settle_s: float = CANCEL_SETTLE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Cancel a job in any state it can be in, whoever else is working on it.

    One transaction decides on the job as the ledger has it then: a queued job leaves the
    queue, cancelled (a schedule pass that read it earlier finds it gone when it goes to
    claim slices for it); a pending or running one is marked `cancel`. A pending job is then
    settled on its node(s) with a fencing poll, so a launch still in flight can no longer
    start it: never started -> released, cancelled; started -> stopped like a running job
    (SIGTERM, grace, SIGKILL), released, cancelled. When its node cannot tell within
    `settle_s` seconds, JobError; the mark stays, and whoever records the launch stops it.

    Only the job's owner or a pool admin (`jobs.owner`, `jobs.admin`) may cancel it
    (NotOwner otherwise, nothing recorded); an admin's cancel of another user's job is
    recorded `"as_admin": true` (in the cancel mark of a pending or running job).
    """

    def ask(tx: Transaction) -> dict[str, Any]:
        current = _unended(tx, job_id)
        by_admin = _check_owner(jobs, "cancel", current)
        if current.get("state") == "queued":
            for entry in list(tx.state.queue.values()):
                if entry.get("job") == job_id:
                    tx.append("dequeue", {"id": entry["id"], "reason": "cancelled"})
            ended_now = {"id": job_id, "state": "cancelled", "reason": "cancelled", **by_admin}
            tx.append("job", ended_now)
            return tx.state.finished[job_id]
        grace = grace_s if grace_s is not None else float(current.get("grace_s") or 0)
        # In the mark, not beside it: a mark is cleared when the job is placed again.
        mark = {"at": time.time(), "grace_s": grace, **by_admin}
        tx.append("job", {"id": job_id, "state": current["state"], "cancel": mark})
        return tx.state.jobs[job_id]

    job = jobs.ledger.write(ask).value
    if job.get("state") == "pending":
        job = _settle_launch(jobs, job, settle_s, sleep)
    if job.get("state") not in ACTIVE:
        return job
    job = stopping.stop_cancelled(jobs, job)
    if job.get("state") == "done":  # it had exited 0 on its own before the cancel
        raise JobError(f"{job_id} has already ended (done, exit code {job.get('exit_code')})")
    if job.get("state") in ACTIVE:
        raise JobError(
            f"{job_id} was signalled but its node could not confirm it ended; "
            "`gpupoolctl jobs` records it when it does (a node gone for good: "
            f"`gpupoolctl cancel --forget {job_id}`)"
        )
    return job


def forget(jobs: JobsCore, job_id: str, *, who: str) -> dict[str, Any]:
    """End a job in the ledger without asking its node (one that is gone for good): it is
    recorded failed and its slices released in one transaction. What may still run on the
    node is fenced, as a lost node's runs are (jobs.lost): its slices take no new work until
    a pass finds its node answering and kills it there. Only its owner or a pool admin may
    (as for cancel)."""

    def build(tx: Transaction) -> dict[str, Any]:
        current = _unended(tx, job_id)
        by_admin = _check_owner(jobs, "cancel", current)
        for entry in list(tx.state.queue.values()):
            if entry.get("job") == job_id:
                tx.append("dequeue", {"id": entry["id"], "reason": "forgotten"})
        if current.get("state") in ("pending", "running"):
            lost.fence_runs(tx, current)
            if current.get("alloc"):
                tx.release(str(current["alloc"]))
        error = f"forgotten by {who} (its node was not asked)"
        ended_now = {"id": job_id, "state": "failed", "error": error, "submitter": None}
        tx.append("job", {**ended_now, **by_admin})
        return tx.state.finished[job_id]

    return jobs.ledger.write(build).value


def _unended(tx: Transaction, job_id: str) -> dict[str, Any]:
    """The job as the transaction's state has it, refused (NoSuchJob, JobError) when it is
    unknown or has ended."""
    current = tx.state.jobs.get(job_id)
    if current is None:
        ended = tx.state.finished.get(job_id)
        if ended is None:
            raise NoSuchJob(f"no job {job_id!r} (see `gpupoolctl jobs --all`)")
        raise JobError(f"{job_id} has already ended ({ended.get('state')})")
    return current


def _check_owner(jobs: JobsCore, action: str, job: dict[str, Any]) -> dict[str, bool]:
    """Refuse (NotOwner) unless who acts (`jobs.owner`) owns the job or is a pool admin
    (`jobs.admin`); what the record of the act adds: {"as_admin": True} when only being an
    admin allows it, else nothing."""
    owner = job.get("owner")
    refused = refusal(action, "job", str(job["id"]), owner, user=jobs.owner, admin=jobs.admin)
    if refused:
        raise NotOwner(refused)
    return {"as_admin": True} if as_admin(owner, user=jobs.owner, admin=jobs.admin) else {}


def _settle_launch(
    jobs: JobsCore, job: dict[str, Any], settle_s: float, sleep: Callable[[float], None]
) -> dict[str, Any]:
    """Fence and settle a pending job marked cancelled, until it is no longer pending."""
    deadline = time.monotonic() + settle_s
    delay = FOLLOW_INTERVAL_S[0]
    while True:
        reaping.settle_pending(jobs, job, submitter_gone=False)
        current = find(jobs, job["id"])
        if current.get("state") != "pending":
            return current
        if time.monotonic() >= deadline:
            raise JobError(
                f"{job['id']} is being launched and its node could not say whether it "
                "started; the cancel is recorded: it is stopped when its launch is recorded "
                "(`gpupoolctl jobs` shows it)"
            )
        sleep(delay)
        delay = min(delay * 1.5, FOLLOW_INTERVAL_S[1])
