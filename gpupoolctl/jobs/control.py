"""cancel, logs and the job list."""

from __future__ import annotations

import time
from typing import Any

from gpupoolctl.jobs import reaping, scheduling
from gpupoolctl.jobs.errors import JobError, NoSuchJob
from gpupoolctl.jobs.service import Jobs, age_s
from gpupoolctl.ledger import Transaction

ACTIVE = ("queued", "pending", "running")


def find(jobs: Jobs, job_id: str) -> dict[str, Any]:
    state = jobs.read().state
    job = state.jobs.get(job_id) or state.finished.get(job_id)
    if job is None:
        raise NoSuchJob(f"no job {job_id!r} (see `gpupoolctl jobs --all`)")
    return job


def cancel(jobs: Jobs, job_id: str, grace_s: float | None = None) -> dict[str, Any]:
    """Stop a job (SIGTERM, grace, SIGKILL), release its slices and record it cancelled."""
    job = find(jobs, job_id)
    if job.get("state") == "pending":
        reaping.recover(jobs)
        job = find(jobs, job_id)
    state = job.get("state")
    if state not in ACTIVE:
        raise JobError(f"{job_id} has already ended ({state})")
    if state == "pending":
        raise JobError(f"{job_id} is being launched right now; cancel it again in a moment")
    if state == "queued":

        def drop(tx: Transaction) -> dict[str, Any]:
            current = tx.state.jobs.get(job_id)
            if current is None or current.get("state") != "queued":
                raise JobError(f"{job_id} is no longer queued; cancel it again")
            for entry in list(tx.state.queue.values()):
                if entry.get("job") == job_id:
                    tx.append("dequeue", {"id": entry["id"], "reason": "cancelled"})
            tx.append("job", {"id": job_id, "state": "cancelled", "reason": "cancelled"})
            return tx.state.finished[job_id]

        return jobs.ledger.write(drop).value
    grace = grace_s if grace_s is not None else float(job.get("grace_s") or 0)

    def mark(tx: Transaction) -> dict[str, Any] | None:
        current = jobs.still(tx, job, "running")
        if current is None:
            return None
        tx.append(
            "job",
            {"id": job_id, "state": "running", "cancel": {"at": time.time(), "grace_s": grace}},
        )
        return tx.state.jobs[job_id]

    marked = jobs.ledger.write(mark).value
    if marked is None:
        raise JobError(f"{job_id} changed meanwhile; look at `gpupoolctl jobs` and try again")
    scheduling.stop(jobs, [marked], grace_s=grace)
    reaping.reap(jobs, only={job_id})
    job = find(jobs, job_id)
    if job.get("state") in ACTIVE:
        raise JobError(
            f"{job_id} was signalled but its node could not confirm it ended; "
            "`gpupoolctl jobs` records it when it does"
        )
    return job


def logs(
    jobs: Jobs,
    job_id: str,
    *,
    stream: str = "stdout",
    offset: int = 0,
    max_bytes: int = 65536,
    host: str | None = None,
) -> dict[str, Any]:
    """One chunk of the job's output from its node: {text, next_offset, state, ...}."""
    job = find(jobs, job_id)
    nodes = job.get("nodes") or []
    if host is not None:
        nodes = [n for n in nodes if n["host"] == host]
    if not nodes:
        raise JobError(f"{job_id} has not been launched yet ({job.get('state')}): no output")
    node = nodes[0]
    result = jobs.nodes.one(
        node["host"],
        "logs",
        {"job_id": node["node_id"], "stream": stream, "offset": offset, "max_bytes": max_bytes},
    )
    if not result.ok:
        raise JobError(f"{node['host']}: {result.outcome}: {result.error}")
    return {**result.data, "host": node["host"], "job": job_id}


def listing(jobs: Jobs, *, everything: bool = False, recent_s: float = 3600.0) -> list[dict]:
    """Active jobs, and those that ended within `recent_s` (all since the last compaction
    with `everything`), oldest first."""
    state = jobs.read().state
    now = time.time()
    chosen = list(state.jobs.values())
    for job in state.finished.values():
        age = age_s(job.get("updated"), now)
        if everything or (age is not None and age <= recent_s):
            chosen.append(job)
    return sorted(chosen, key=lambda j: int(str(j["id"]).removeprefix("j-") or 0))


def row(job: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """One job as the `jobs` table and JSON show it."""
    now = time.time() if now is None else now
    # A queued job (requeued after preemption) holds nothing: its old nodes are history.
    nodes = [] if job.get("state") == "queued" else job.get("nodes") or []
    slices = [s for n in nodes for s in n.get("slices", [])]
    return {
        "id": job["id"],
        "name": job.get("name"),
        "state": job.get("state"),
        "owner": job.get("owner"),
        "host": ",".join(n["host"] for n in nodes) or None,
        "slice": ",".join(slices) or None,
        "age_s": age_s(job.get("created"), now),
        "exit_code": None if job.get("state") == "queued" else job.get("exit_code"),
        "priority": (job.get("request") or {}).get("priority"),
        "preemptible": bool((job.get("request") or {}).get("preemptible")),
        "pids": [n.get("pid") for n in nodes],
        "run": job.get("run"),
        "argv": job.get("argv"),
        "reason": job.get("error") or job.get("reason"),
        "created": job.get("created"),
        "updated": job.get("updated"),
    }
