"""submit / status / wait / list / cancel for jobs that Slurm runs (`--backend slurm`).

Slurm is the single source of truth here: nothing goes in gpupoolctl's ledger. A job id is
Slurm's. Waiting (and cancel's wait for the job to settle) polls squeue: one RPC per round,
backing off from 0.5 s to 5 s (Slurm's own advice is never to poll slurmctld in tight
loops). A failed poll is retried on the same backoff; MAX_POLL_FAILURES in a row end it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from gpupoolctl.agent.jobs.control import whole_characters
from gpupoolctl.errors import ExitCode, UsageError
from gpupoolctl.jobs.spec import JobSpec
from gpupoolctl.slurm.client import SlurmClient, SlurmError
from gpupoolctl.slurm.mapping import SbatchRequest, refuse_unmappable, sbatch_request
from gpupoolctl.slurm.parse import SlurmJob, is_job_id

WAIT_INTERVAL_S = (0.5, 5.0)  # first and longest pause between squeue calls
CANCEL_SETTLE_S = 15.0  # how long cancel waits for the job to leave RUNNING/COMPLETING
# Failed polls in a row before waiting gives up, and why six: on the backoff above they span
# at least 6.6 s of pauses (25 s once the pause has grown to 5 s), plus the failed calls
# themselves (each up to the client's time-out). A slurmctld that is only busy (a burst of
# RPCs) or restarting answers again within that; one silent for longer is an outage to
# report, not to wait out without a word.
MAX_POLL_FAILURES = 6
_ID_HEAD = re.compile(r"([0-9]+)(?:_([0-9]+))?")


class SlurmUnknownJob(SlurmError):
    """No source (squeue, sacct, scontrol) knows the job: polling again cannot help."""


class SlurmJobEnded(SlurmError):
    """The job had already ended: there was nothing to cancel (exit 1, as for the pool)."""


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
    """Submit a validated spec with sbatch (or, with dry_run, `sbatch --test-only`). What
    Slurm cannot do is refused (exit 2) before Slurm is asked anything."""
    spec.validate()
    refuse_unmappable(spec)
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
        raise SlurmUnknownJob(
            f"Slurm does not know job {job_id} (never submitted, or ended longer ago than "
            "MinJobAge and accounting is off)"
        )
    return found


# slurmd creates a job's output file as the batch script starts, a moment after slurmctld
# records the job running: a missing file of a job that started this recently is not yet
# there, not on another machine.
OUTPUT_APPEARS_S = 10.0


def _output_not_yet_there(job: SlurmJob, now: float | None = None) -> bool:
    if job.state in ("PENDING", "CONFIGURING"):  # not started: no file yet
        return True
    if job.finished or job.started is None:
        return False
    moment = time.time() if now is None else now
    return moment - job.started < OUTPUT_APPEARS_S


def output(
    client: SlurmClient,
    job_id: str,
    *,
    stream: str = "stdout",
    offset: int = 0,
    max_bytes: int = 65536,
    known: SlurmJob | None = None,
) -> dict[str, Any]:
    """One chunk of a job's output file, read on this machine (Slurm writes it on the node
    that runs the batch script: readable here when that folder is shared, or local):
    {text, next_offset, size, active, path, job}. `known`: the job as an earlier chunk
    returned it, to read on without asking slurmctld again."""
    job_id = check_job_id(job_id)
    job = known if known is not None else client.show_job(job_id)
    if job is None:
        raise SlurmUnknownJob(
            f"Slurm no longer knows job {job_id} (ended longer ago than MinJobAge), so not "
            f"where its output went either: by default slurm-{job_id}.out in the folder it "
            "was submitted from"
        )
    path = job.stdout_path if stream == "stdout" else job.stderr_path
    if path is None:
        raise SlurmError(f"Slurm does not say where job {job_id}'s {stream} goes")
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(offset)
            data = handle.read(max_bytes)
    except FileNotFoundError:
        if _output_not_yet_there(job):
            return {
                "text": "",
                "next_offset": 0,
                "size": 0,
                "active": True,
                "path": path,
                "job": job,
            }
        where = f" (it ran on {job.nodes})" if job.nodes else ""
        raise SlurmError(
            f"{path}: not on this machine{where}; Slurm writes a job's output on its node, "
            "so read it there or submit from a shared folder"
        ) from None
    except OSError as exc:
        raise SlurmError(f"{path}: cannot read: {exc.strerror}") from None
    # Never split a character: the rest of it may follow in the file, or (while the job
    # runs) be written yet.
    data = whole_characters(data, more=offset + len(data) < size or not job.finished)
    return {
        "text": data.decode("utf-8", errors="replace"),
        "next_offset": offset + len(data),
        "size": size,
        "active": not job.finished,
        "path": path,
        "job": job,
    }


def _poll(
    client: SlurmClient,
    job_id: str,
    *,
    timeout_s: float | None,
    last: SlurmJob | None = None,
    on_change: Callable[[SlurmJob], None] | None = None,
    on_error: Callable[[SlurmError], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> SlurmJob | None:
    """Poll with the backoff until the job ends or timeout_s passes; its last known record.
    A failed poll is retried (on_error hears of it) until MAX_POLL_FAILURES in a row."""
    deadline = None if timeout_s is None else clock() + timeout_s
    pause = WAIT_INTERVAL_S[0]
    last_state = None if last is None else last.state
    failures = 0
    while True:
        try:
            job = status(client, job_id)
        except SlurmUnknownJob:
            raise
        except SlurmError as exc:
            failures += 1
            if failures >= MAX_POLL_FAILURES:
                raise SlurmError(
                    f"gave up on job {job_id} after {failures} failed polls in a row: {exc}"
                ) from None
            if on_error is not None:
                on_error(exc)
        else:
            failures = 0
            last = job
            if job.state != last_state:
                last_state = job.state
                pause = WAIT_INTERVAL_S[0]
                if on_change is not None:
                    on_change(job)
            if job.finished:
                return job
        if deadline is not None and clock() + pause > deadline:
            return last
        sleep(pause)
        pause = min(pause * 1.5, WAIT_INTERVAL_S[1])


def wait(
    client: SlurmClient,
    job_id: str,
    *,
    timeout_s: float | None = None,
    on_change: Callable[[SlurmJob], None] | None = None,
    on_error: Callable[[SlurmError], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> SlurmJob:
    """Poll until the job ends; its last record. SlurmError after timeout_s (None: no limit
    but the job's own; Ctrl-C stops it), or after MAX_POLL_FAILURES failed polls in a row."""
    job_id = check_job_id(job_id)
    job = _poll(
        client,
        job_id,
        timeout_s=timeout_s,
        on_change=on_change,
        on_error=on_error,
        sleep=sleep,
        clock=clock,
    )
    if job is None:
        raise SlurmError(f"job {job_id}: no answer from Slurm within {timeout_s:g}s")
    if not job.finished:
        raise SlurmError(f"job {job_id} still {job.state} after {timeout_s:g}s")
    return job


def exit_status(job: SlurmJob) -> int:
    """What `submit --wait` exits with: the job's own exit code (128 + signal), and never 0
    for a job that did not end ok. Slurm reports 0:0 for a job cancelled before it ran, and
    for NODE_FAIL, BOOT_FAIL, DEADLINE, ...: those exit 1."""
    code = job.shell_exit_code()
    if job.ok:
        return code or 0
    return code if code else int(ExitCode.ERROR)


def listing(client: SlurmClient, user: str) -> list[SlurmJob]:
    """This user's jobs: pending, running, and those ended within MinJobAge, oldest first."""
    jobs = client.queue(user=user)
    return sorted(jobs, key=lambda j: (j.submitted or 0.0, _id_key(j.job_id)))


def _id_key(job_id: str) -> tuple[int, int, str]:
    # 123, 123_4, and squeue's 123_[5-9] (pending array) or 123+0 (het job component).
    head = _ID_HEAD.match(job_id)
    if head is None:
        return 0, 0, job_id
    return int(head.group(1)), int(head.group(2) or 0), job_id[head.end() :]


def cancel(
    client: SlurmClient,
    job_id: str,
    *,
    settle_s: float | None = None,
    on_error: Callable[[SlurmError], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> SlurmJob:
    """scancel, then the job's state once Slurm settled it: polled with wait()'s backoff for
    at most settle_s (default CANCEL_SETTLE_S). The job returned is not finished when Slurm
    did not confirm the end in time: the caller says so. SlurmJobEnded when the job had
    already ended. scancel says nothing about unknown ids, so the job is looked up first."""
    job = status(client, job_id)
    if job.finished:
        raise SlurmJobEnded(
            f"job {job.job_id} had already ended ({job.describe_end()}): nothing was cancelled"
        )
    client.scancel([job.job_id])
    settled = _poll(
        client,
        job.job_id,
        timeout_s=CANCEL_SETTLE_S if settle_s is None else settle_s,
        last=job,
        on_error=on_error,
        sleep=sleep,
        clock=clock,
    )
    return job if settled is None else settled


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
