"""submit / status / wait / list / cancel for jobs that Slurm runs (`--backend slurm`).

Slurm is the single source of truth here: nothing goes in gpupoolctl's ledger. A job id is
Slurm's. Waiting polls squeue (one RPC per round, backing off from 0.5 s to 5 s: Slurm's
own advice is never to poll slurmctld in tight loops).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.jobs.spec import JobSpec
from gpupoolctl.slurm.client import SlurmClient, SlurmError
from gpupoolctl.slurm.mapping import SbatchRequest, sbatch_request
from gpupoolctl.slurm.parse import SlurmJob, is_job_id

WAIT_INTERVAL_S = (0.5, 5.0)  # first and longest pause between squeue calls
CANCEL_SETTLE_S = 15.0  # how long cancel waits for the job to leave RUNNING/COMPLETING


@dataclass(frozen=True)
class Submitted:
    job_id: str | None  # None for a dry run
    request: SbatchRequest
    test_only: str | None = None  # sbatch --test-only's answer, for a dry run


def cluster_types(client: SlurmClient) -> set[str]:
    """Every typed GPU GRES any node of the cluster has."""
    return {t for counts in client.node_gres().values() for t in counts}


def submit(
    client: SlurmClient,
    spec: JobSpec,
    *,
    dry_run: bool = False,
    types: Collection[str] | None = None,
) -> Submitted:
    """Submit a validated spec with sbatch (or, with dry_run, `sbatch --test-only`)."""
    spec.validate()
    request = sbatch_request(spec, cluster_types(client) if types is None else types)
    if dry_run:
        return Submitted(None, request, client.test_only(request.args, request.script))
    return Submitted(client.sbatch(request.args, request.script), request)


def check_job_id(job_id: str) -> str:
    text = job_id.strip()
    if not is_job_id(text):
        raise UsageError(f"not a Slurm job id: {job_id!r} (digits, or 123_4 for array tasks)")
    return text


def status(client: SlurmClient, job_id: str) -> SlurmJob:
    """A job as Slurm knows it now; SlurmError when no source knows it any more."""
    job_id = check_job_id(job_id)
    for job in client.queue():
        if job.job_id == job_id:
            return job
    found = client.finished_job(job_id)
    if found is None:
        raise SlurmError(
            f"Slurm does not know job {job_id} (never submitted, or ended longer ago than "
            "MinJobAge and accounting is off)"
        )
    return found


def wait(
    client: SlurmClient,
    job_id: str,
    *,
    timeout_s: float | None = None,
    on_change: Callable[[SlurmJob], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> SlurmJob:
    """Poll until the job ends; its last record. SlurmError after timeout_s (None: no limit
    but the job's own; Ctrl-C stops it)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pause = WAIT_INTERVAL_S[0]
    last_state = None
    while True:
        job = status(client, job_id)
        if job.state != last_state:
            last_state = job.state
            pause = WAIT_INTERVAL_S[0]
            if on_change is not None:
                on_change(job)
        if job.finished:
            return job
        if deadline is not None and time.monotonic() + pause > deadline:
            raise SlurmError(f"job {job_id} still {job.state} after {timeout_s:g}s")
        sleep(pause)
        pause = min(pause * 1.5, WAIT_INTERVAL_S[1])


def listing(client: SlurmClient, user: str) -> list[SlurmJob]:
    """This user's jobs: pending, running, and those ended within MinJobAge, oldest first."""
    jobs = client.queue(user=user)
    return sorted(jobs, key=lambda j: (j.submitted or 0.0, _id_key(j.job_id)))


def _id_key(job_id: str) -> tuple[int, int]:
    main, _, task = job_id.partition("_")
    return int(main), int(task or 0)


def cancel(
    client: SlurmClient,
    job_id: str,
    *,
    settle_s: float = CANCEL_SETTLE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> SlurmJob:
    """scancel, then the job's state once it settled (bounded by settle_s). scancel itself
    says nothing about unknown ids, so the job is looked up first."""
    job = status(client, job_id)
    if job.finished:
        return job
    client.scancel([job.job_id])
    deadline = time.monotonic() + settle_s
    while True:
        job = status(client, job.job_id)
        if job.finished or time.monotonic() >= deadline:
            return job
        sleep(0.2)


def row(job: SlurmJob, now: float | None = None) -> dict[str, Any]:
    """One job as `jobs --backend slurm` shows it."""
    now = time.time() if now is None else now
    return {
        "id": job.job_id,
        "name": job.name,
        "state": job.state,
        "owner": job.user,
        "host": job.nodes,
        "gres": job.gres,
        "age_s": None if job.submitted is None else max(0.0, round(now - job.submitted, 1)),
        "exit_code": job.shell_exit_code() if job.finished else None,
        "reason": job.reason if job.reason not in (None, "None") else None,
        "started": job.started,
        "ended": job.ended,
    }
