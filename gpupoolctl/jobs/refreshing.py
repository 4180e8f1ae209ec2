"""refresh: the loop's round as `submit`, `jobs` and `schedule` run it: settle, reap,
schedule."""

from __future__ import annotations

from gpupoolctl.jobs import reaping, scheduling
from gpupoolctl.jobs.service import JobsCore, Outcome


def refresh(jobs: JobsCore) -> Outcome:
    """Settle launches left half-done, record the jobs that ended (releasing their slices),
    then one schedule pass. Returns the pass's outcome (its events)."""
    reaping.recover(jobs)
    reaping.reap(jobs)
    outcome = scheduling.schedule(jobs)
    outcome.events[:0] = jobs.node_events  # a node lost before what was placed for its jobs
    jobs.node_events = []
    return outcome
