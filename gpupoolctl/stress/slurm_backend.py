"""The backend that measures a real Slurm: every job goes through sbatch, as `gpupoolctl
submit --backend slurm` sends it, so one scenario can measure gpupoolctl's own path and
Slurm's side by side.

- submit: one `sbatch --parsable` (its time is the "launch" phase); the request shape maps
  as gpupoolctl.slurm.mapping says, its GRES type resolved once per shape.
- One reaper thread calls `squeue --json` once per poll interval for all outstanding jobs
  (never one call per job: Slurm warns that RPC storms slow slurmctld for everyone) and wakes
  the waiters whose jobs ended. A job squeue no longer lists is asked of sacct / scontrol.
- A job is ok when Slurm says COMPLETED; FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ... fail with
  Slurm's state, reason and exit code. Started = Slurm's StartTime, run = EndTime - StartTime:
  Slurm keeps whole seconds, so both are rounded down to the second (a start is never put
  before the sbatch call that made it). Reap (noticing the end) = the poll that saw it end
  less EndTime, measured here as the start may have been moved up to the sbatch call; with
  EndTime rounded down it reads up to 1 s more than the wait was.
- Built-in workloads (`gpupoolctl-workload sim ...`) run as `<python> -m
  gpupoolctl.agent.workloads ...` with this workstation's python, which works where
  gpupoolctl is importable on the compute node at the same path (a loopback cluster, a
  shared install). Each job gets GPUPOOL_JOB_DIR=<node temp>/gpupoolctl-slurm-<uid>/<job id>,
  so the sim workload's contention model counts the jobs sharing its node.
- close() scancels whatever is still pending or running.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from gpupoolctl.agent.workloads import workload_argv
from gpupoolctl.errors import GpupoolError
from gpupoolctl.jobs.spec import JobSpec
from gpupoolctl.slurm.client import SlurmClient
from gpupoolctl.slurm.jobs import cluster_types
from gpupoolctl.slurm.mapping import SbatchRequest, batch_script, sbatch_request
from gpupoolctl.slurm.parse import SlurmJob
from gpupoolctl.stress.backend import CLOCK_SKEW_S, Finished, SubmitRefused, Ticket, Work

JOB_DIR_SETUP = (
    # Per node (the node's own temp folder) and per user, so peers are this node's jobs.
    'GPUPOOL_JOB_DIR="${TMPDIR:-/tmp}/gpupoolctl-slurm-$(id -u)/${SLURM_JOB_ID:-$$}"',
    "export GPUPOOL_JOB_DIR",
)
CANCEL_BATCH = 200  # job ids per scancel call at close


def node_argv(argv: Sequence[str], python: str = sys.executable) -> list[str]:
    """A built-in workload's argv as the compute node runs it (there is no agent)."""
    return workload_argv(list(argv), python)


def finished_from_job(job: SlurmJob, *, submitted: float, now: float) -> Finished:
    """An ended Slurm job -> what the harness needs of it."""
    started = None if job.started is None else max(job.started, submitted)
    run_s = None
    if job.started is not None and job.ended is not None:
        run_s = max(0.0, job.ended - job.started)
    # From Slurm's EndTime, not started + run_s: `started` may be the sbatch call's time.
    # EndTime is rounded down, so an end after `now` means slurmctld's clock runs ahead of
    # this workstation's: then the wait is not known, and left out.
    phases: dict[str, float] = {}
    if run_s is not None and job.ended is not None and now - job.ended >= -CLOCK_SKEW_S:
        phases["reap"] = max(0.0, now - job.ended)
    return Finished(
        ok=job.ok,
        started=started,
        ended=now,
        error=None if job.ok else f"slurm job {job.job_id} {job.describe_end()}",
        run_s=run_s,
        phases=phases,
    )


@dataclass
class _Outstanding:
    submitted: float  # just before the sbatch call
    event: threading.Event = field(default_factory=threading.Event)
    finished: Finished | None = None


class SlurmBackend:
    name = "slurm"
    transport = "slurm"

    def __init__(
        self,
        client: SlurmClient,
        make_spec: Callable[[Work], JobSpec],
        *,
        poll_s: float = 0.2,
        python: str = sys.executable,
    ) -> None:
        self._client = client
        self._make_spec = make_spec
        self.poll_s = poll_s
        self._python = python
        self._types: Collection[str] | None = None
        self._requests: dict[Any, SbatchRequest] = {}
        self._lock = threading.Lock()
        self._jobs: dict[str, _Outstanding] = {}
        self._warnings: list[str] = []
        self._warned_kinds: set[str] = set()
        self._closed = threading.Event()
        self._reaper: threading.Thread | None = None

    # -- set-up ------------------------------------------------------------------------------

    def prepare(self, shapes: Sequence[Any]) -> None:
        """Ask the cluster for its GPU types once and map every shape now, so that a
        request Slurm cannot express stops the run before any clock starts."""
        self._types = cluster_types(self._client)
        for shape in shapes:
            self._request_for(Work(argv=["true"], name="prepare", shape=shape))

    def _request_for(self, work: Work) -> SbatchRequest:
        spec = self._make_spec(work)
        key = (spec.request, spec.requeue, spec.policy, spec.grace_s)
        with self._lock:
            cached = self._requests.get(key)
        if cached is None:
            if self._types is None:
                self._types = cluster_types(self._client)
            cached = sbatch_request(spec, self._types)
            with self._lock:
                self._requests[key] = cached
                for note in cached.notes:
                    self._warn(note)
        name = f"--job-name={work.name}"
        args = tuple(name if a.startswith("--job-name=") else a for a in cached.args)
        script = batch_script(node_argv(spec.argv, self._python), spec.env, JOB_DIR_SETUP)
        return SbatchRequest(args=args, script=script, gres=cached.gres, notes=cached.notes)

    def _warn(self, message: str) -> None:
        if message not in self._warnings:
            self._warnings.append(message)

    def _warn_once(self, kind: str, message: str) -> None:
        """A warning for the first failure of this kind only (its text may vary per poll)."""
        if kind not in self._warned_kinds:
            self._warned_kinds.add(kind)
            self._warn(message)

    # -- the Backend protocol ----------------------------------------------------------------

    def submit(self, work: Work) -> Ticket:
        request = self._request_for(work)
        submitted = time.time()
        begin = perf_counter()
        try:
            job_id = self._client.sbatch(request.args, request.script)
        except GpupoolError as exc:
            raise SubmitRefused(str(exc)) from None
        launch = perf_counter() - begin
        with self._lock:
            self._jobs[job_id] = _Outstanding(submitted=submitted)
            if self._reaper is None:
                self._reaper = threading.Thread(
                    target=self._reap_loop, name="slurm-reaper", daemon=True
                )
                self._reaper.start()
        return Ticket(job_id=job_id, accepted=time.time(), phases={"launch": launch})

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        if ticket.finished is not None:
            return ticket.finished
        with self._lock:
            entry = self._jobs.get(ticket.job_id)
        if entry is None:
            return None
        if entry.event.wait(timeout):
            with self._lock:
                self._jobs.pop(ticket.job_id, None)  # handed over: forget it
        return entry.finished

    def abandon(self, ticket: Ticket) -> None:
        try:
            self._client.scancel([ticket.job_id])
        except GpupoolError as exc:
            with self._lock:
                self._warn(f"{ticket.job_id}: could not cancel: {exc}")
        with self._lock:
            self._jobs.pop(ticket.job_id, None)

    def warnings(self) -> list[str]:
        with self._lock:
            return list(self._warnings)

    def events_between(self, start: float, end: float) -> list[dict[str, Any]]:
        return []  # Slurm's node states are not watched

    def close(self) -> None:
        """Stop the reaper and scancel what is still outstanding (bounded: each scancel
        call has the client's time-out)."""
        self._closed.set()
        if self._reaper is not None:
            self._reaper.join(timeout=self._client.timeout_s + 5)
        with self._lock:
            left = sorted(j for j, e in self._jobs.items() if e.finished is None)
            self._jobs.clear()
        for start in range(0, len(left), CANCEL_BATCH):
            try:
                self._client.scancel(left[start : start + CANCEL_BATCH])
            except GpupoolError as exc:
                with self._lock:
                    self._warn(f"clean-up: {exc}")

    # -- the reaper --------------------------------------------------------------------------

    def _reap_loop(self) -> None:
        while not self._closed.wait(self.poll_s):
            with self._lock:
                waiting = {j: e for j, e in self._jobs.items() if e.finished is None}
            if not waiting:
                continue
            try:
                self._reap(waiting)
            except GpupoolError as exc:
                with self._lock:
                    self._warn(f"squeue: {exc}")
            except Exception as exc:  # any kind: one bad poll must not end the reaping
                with self._lock:
                    self._warn_once(
                        type(exc).__name__,
                        f"reaper: a poll failed ({type(exc).__name__}: {exc}); polling on",
                    )

    def _reap(self, waiting: dict[str, _Outstanding]) -> None:
        known = {job.job_id: job for job in self._client.queue()}
        now = time.time()
        for job_id, entry in waiting.items():
            job = known.get(job_id)
            if job is None:
                # Not in squeue: ended longer ago than MinJobAge, or never registered.
                job = self._client.finished_job(job_id)
                if job is None:
                    entry.finished = Finished(
                        ok=False,
                        started=None,
                        ended=now,
                        error=f"Slurm no longer knows job {job_id}",
                    )
            if job is not None and job.finished:
                entry.finished = finished_from_job(job, submitted=entry.submitted, now=now)
                if entry.finished.run_s is not None and "reap" not in entry.finished.phases:
                    with self._lock:
                        self._warn_once(
                            "clock",
                            "slurmctld's clock is ahead of this workstation's (a job ended "
                            "after the poll that saw it end): those jobs' reap times are left "
                            "out; sync the clocks (NTP)",
                        )
            if entry.finished is not None:
                entry.event.set()  # wait() takes it out of _jobs
