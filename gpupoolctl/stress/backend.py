"""What the ramp runner drives: a backend takes a job, says when it ended, and cleans up.

The runner knows nothing of ledgers, nodes or Slurm: it calls `submit` from many threads at
once, then `wait` for each ticket. `NoopBackend` is the scheduler that does nothing, so the
harness's own cost can be measured against it (bench/stress-harness).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gpupoolctl.errors import GpupoolError

if TYPE_CHECKING:
    from gpupoolctl.jobs.spec import JobSpec


class SubmitRefused(GpupoolError):
    """The backend refused this one job (it counts as a failure; the ramp goes on)."""


@dataclass(frozen=True)
class Work:
    """One job as the harness asks for it."""

    argv: list[str]
    name: str
    shape: object  # scenario.RequestShape; opaque to the runner


def job_spec(work: Work, policy: str) -> JobSpec:
    """What a backend submits for one piece of work: the shape's request, the workload's
    command, a name the ramp can find again."""
    from gpupoolctl.jobs.spec import JobSpec
    from gpupoolctl.sched import JobRequest

    shape: Any = work.shape
    return JobSpec(
        argv=list(work.argv),
        request=JobRequest(**shape.job_fields()),
        name=work.name,
        policy=policy,
        max_restarts=int(getattr(shape, "max_restarts", 0) or 0),
    )


# Readings of a node's clock (or slurmctld's) this far on the wrong side of the
# workstation's mean the clocks disagree: a start before its submit, an end after the poll
# that saw it. Queue and reap times from such readings are left out or flagged.
CLOCK_SKEW_S = 0.05


@dataclass
class Finished:
    ok: bool
    started: float | None  # when the job started on its node (None: it never did)
    # When the backend learned it ended, on the clock `started` is read on (time.time(), or
    # the ramp's virtual clock): the job's end on its node is started + run_s, and the wait
    # between the two is the "reap" phase, which the runner works out from these three.
    ended: float
    error: str | None = None
    run_s: float | None = None  # the job's own run time, when the node reported it
    # model.PHASES the backend measured over the job's life ("queue": waiting for a slice,
    # "launch": starting it, "reap": noticing its end, where started + run_s is not its end
    # on that clock); they replace what the runner would infer, and the ticket's.
    phases: dict[str, float] = field(default_factory=dict)
    restarts: int = 0  # times the job was run again (after a failure exit or a lost node)
    # What the job reported of itself (the train workload's report): work units done,
    # communication seconds per link class, and the link class that bounded it. Its compute
    # and communication seconds come as phases "compute" and "comm".
    work: float | None = None
    comm_links: dict[str, float] = field(default_factory=dict)
    bound_by: str | None = None


@dataclass
class Ticket:
    job_id: str
    accepted: float  # when submit returned
    phases: dict[str, float] = field(default_factory=dict)  # model.PHASES measured in submit
    finished: Finished | None = None  # already over when submit returned (failed launch)


class Backend(Protocol):
    name: str
    transport: str | None

    def submit(self, work: Work) -> Ticket:
        """Blocking; raises SubmitRefused for this job, GpupoolError for the whole run."""
        ...

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        """Block until the job ends; None when `timeout` seconds passed first."""
        ...

    def abandon(self, ticket: Ticket) -> None:
        """Stop a job the harness gave up waiting for."""
        ...

    def warnings(self) -> list[str]:
        """Distinct problems met so far (for the CLI's stderr)."""
        ...

    def close(self) -> None:
        """Stop background work and cancel whatever is still running."""
        ...

    def events_between(self, start: float, end: float) -> list[dict[str, Any]]:
        """What the backend saw happen to nodes in [start, end) (time.time() seconds, or the
        ramp's clock): {"event": "node-lost", "host": ..., "seen": t, ...}, oldest first.
        Optional: the runner treats a backend without it as one that saw nothing."""
        ...


class NoopBackend:
    """Accepts every job and ends it at once: the harness with nothing under it."""

    name = "noop"
    transport = None

    def __init__(self) -> None:
        self._count = 0

    def submit(self, work: Work) -> Ticket:
        self._count += 1  # not exact under threads; only an id
        now = time.time()
        return Ticket(job_id=f"noop-{self._count}", accepted=now)

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        now = time.time()
        return Finished(ok=True, started=ticket.accepted, ended=now, run_s=0.0)

    def abandon(self, ticket: Ticket) -> None:
        return None

    def warnings(self) -> list[str]:
        return []

    def close(self) -> None:
        return None

    def events_between(self, start: float, end: float) -> list[dict[str, Any]]:
        return []
