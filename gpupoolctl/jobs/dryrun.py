"""schedule --dry-run and the REASON a queued job waits: what a scheduling pass would
decide now, on the ledger as it is, writing nothing."""

from __future__ import annotations

from typing import Any

from gpupoolctl.jobs import scheduling
from gpupoolctl.jobs.events import Event, Refused, Waiting, WouldPreempt, WouldRecut, WouldStart
from gpupoolctl.jobs.service import JobsCore


def dry_pass(jobs: JobsCore, view: Any = None) -> list[Event]:
    """What a scheduling pass would decide now (sched.schedule_pass, as `schedule` runs it,
    preemption and elastic re-cuts included), on the ledger as it is and a view that is
    thrown away: one event per decision, in the pass's order. Writes nothing and asks no
    node (so jobs that ended since the last pass still hold their slices here)."""
    from gpupoolctl.sched.modes import run_pass

    view = view or jobs.read()
    snap = jobs.snapshot(view.state, view.now)
    if not snap.queue:
        return []
    result = run_pass(snap, preempt=True, foresee=True)
    events: list[Event] = []
    for entry, placement in result.placed:
        fits = f"fits now on {', '.join(placement.slices)}"
        events.append(WouldStart(entry.job, tuple(placement.slices), fits))
    if result.preempt is not None:
        entry, victims = result.preempt
        why = f"would stop {', '.join(victims)} to make room" + (
            f" (reclaim for team {entry.request.team})" if result.reclaim else ""
        )
        events.append(WouldPreempt(entry.job, tuple(victims), result.reclaim, why))
    for recut in result.recuts:
        why = f"would {recut.describe()}: {recut.reason}"
        job = ",".join(recut.jobs)
        events.append(WouldRecut(job, recut.card.key, recut.before, recut.after, why))
    for entry, nofit in result.waiting:
        events.append(scheduling.waiting_event(result, entry, nofit, snap.now))
    for entry, nofit in result.never:
        events.append(Refused(entry.job, nofit.reason, nofit.code, kind="would-refuse"))
    return events


def waiting_reasons(jobs: JobsCore, view: Any = None) -> dict[str, str]:
    """Why each queued job waits, from the scheduler's own pass (dry_pass): what does not
    fit and why, the re-cut it waits for, or that it fits and waits its turn."""
    reasons: dict[str, str] = {}
    for event in dry_pass(jobs, view):
        match event:
            case WouldStart(job=job):
                reasons[str(job)] = "fits now: the next schedule pass starts it"
            case Waiting(job=job, reason=reason) | Refused(job=job, reason=reason):
                reasons[str(job)] = reason
            case WouldPreempt(job=job, reason=reason):
                reasons[str(job)] = f"the next schedule pass {reason.removeprefix('would ')}"
    return reasons
