"""Jobs on top of the agent, the ledger and the scheduler: submit, reap, queue, cancel, logs.

Life of a job, as ledger records (op "job" unless said; every step is one all-or-nothing
transaction, so a crash between two steps leaves a state the next recovery pass settles):

    submit             job {state: queued, argv, env, request, ...} + enqueue {id: q-N, job,
                       priority, request} (refused, nothing written, when it can never fit);
                       then a schedule pass, so it starts at once when it fits
    schedule places    dequeue + alloc + job {state: pending, alloc, placement, nodes,
                       submitter}
    launched           job {state: running, nodes[].pid, started}
    launch failed      job {state: failed, error} + release
    ended (reaped)     job {state: done | failed, exit_code, ended} + release
    preempted          job {preempt: {by, at}} first, chosen and marked in the transaction
                       that found the entry does not fit (none while victims marked for the
                       same entry still run); when it ended: release and, when it was
                       submitted with requeue, job {state: queued, run+1} + enqueue; else
                       job {state: cancelled, reason}
    cancel             queued: dequeue + job {state: cancelled}; pending or running: job
                       {cancel: {at, grace_s}} first, then (pending) a fencing poll settles
                       the launch, and when it ended: job {state: cancelled, exit_code} +
                       release

Recovery (`jobs.reaping.recover`, run first by submit, jobs and schedule): a pending job whose
submitter is gone is settled on its node with a fencing poll (which claims the job id there
so a launch still in flight can no longer start it): launched -> running (then reaped as
usual); not launched -> slices released and the job queued again. A pending job never
holds its slices for longer than its submitter lives, and a running one is always recorded.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpupoolctl.jobs.errors import JobError, NeverFits, NoSuchJob
    from gpupoolctl.jobs.nodes import Nodes
    from gpupoolctl.jobs.service import Jobs, JobsCore, Outcome
    from gpupoolctl.jobs.spec import JobSpec

# Loaded on first use (PEP 562): a command that only lists jobs from the ledger
# (gpupoolctl.jobs.listing) does not pay for the job service, the scheduler and the agent.
_EXPORTS = {
    "JobError": "gpupoolctl.jobs.errors",
    "JobSpec": "gpupoolctl.jobs.spec",
    "Jobs": "gpupoolctl.jobs.service",
    "JobsCore": "gpupoolctl.jobs.service",
    "NeverFits": "gpupoolctl.jobs.errors",
    "NoSuchJob": "gpupoolctl.jobs.errors",
    "Nodes": "gpupoolctl.jobs.nodes",
    "Outcome": "gpupoolctl.jobs.service",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "JobError",
    "JobSpec",
    "Jobs",
    "JobsCore",
    "NeverFits",
    "NoSuchJob",
    "Nodes",
    "Outcome",
]
