"""schedule --dry-run and the REASON a queued job waits: what a scheduling pass would
decide now, on the ledger as it is, writing nothing."""

from __future__ import annotations

from typing import Any

from gpupoolctl.jobs import scheduling
from gpupoolctl.jobs.service import JobsCore


def dry_pass(jobs: JobsCore, view: Any = None) -> list[dict[str, Any]]:
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
    events: list[dict[str, Any]] = []
    for entry, placement in result.placed:
        events.append(
            {
                "event": "would-start",
                "job": entry.job,
                "slices": list(placement.slices),
                "reason": f"fits now on {', '.join(placement.slices)}",
            }
        )
    if result.preempt is not None:
        entry, victims = result.preempt
        events.append(
            {
                "event": "would-preempt",
                "job": entry.job,
                "victims": victims,
                "reclaim": result.reclaim,
                "reason": f"would stop {', '.join(victims)} to make room"
                + (f" (reclaim for team {entry.request.team})" if result.reclaim else ""),
            }
        )
    for recut in result.recuts:
        events.append(
            {
                "event": "would-re-cut",
                "job": ",".join(recut.jobs),
                "gpu": recut.card.key,
                "before": recut.before,
                "after": recut.after,
                "reason": f"would {recut.describe()}: {recut.reason}",
            }
        )
    for entry, nofit in result.waiting:
        events.append(scheduling.waiting_event(result, entry, nofit, snap.now))
    for entry, nofit in result.never:
        events.append(
            {"event": "would-refuse", "job": entry.job, "reason": nofit.reason, "code": nofit.code}
        )
    return events


def waiting_reasons(jobs: JobsCore, view: Any = None) -> dict[str, str]:
    """Why each queued job waits, from the scheduler's own pass (dry_pass): what does not
    fit and why, the re-cut it waits for, or that it fits and waits its turn."""
    reasons: dict[str, str] = {}
    for event in dry_pass(jobs, view):
        job = str(event["job"])
        if event["event"] == "would-start":
            reasons[job] = "fits now: the next schedule pass starts it"
        elif event["event"] in ("waiting", "would-refuse"):
            reasons[job] = str(event["reason"])
        elif event["event"] == "would-preempt":
            reasons[job] = f"the next schedule pass {event['reason'].removeprefix('would ')}"
    return reasons
