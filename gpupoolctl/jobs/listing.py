"""The job list from the ledger alone: rows, reasons, what is recent, and whether a refresh
would have anything to do.

Light on purpose: `gpupoolctl jobs` on a pool with nothing running, pending or queued
lists the ledger's jobs without loading the job service, the scheduler or the inventory.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gpupoolctl.jobs import restarts
from gpupoolctl.ledger.units import parse_ts

if TYPE_CHECKING:
    from gpupoolctl.ledger.state import State

RECENT_S = 3600.0  # jobs that ended this long ago are still listed without --all


def age_s(ts: str | None, now: float) -> float | None:
    if not ts:
        return None
    return max(0.0, now - parse_ts(ts).timestamp())


def idle(state: State) -> bool:
    """Nothing for a refresh (settle, reap, schedule) to do: no job pending or running,
    nothing queued, no re-cut in flight, no lost host or fenced run to ask about."""
    busy = any(j.get("state") in ("pending", "running") for j in state.jobs.values())
    return not (busy or state.queue or state.reshapes or state.lost or state.fences)


def recent(
    state: State, *, everything: bool = False, now: float | None = None, recent_s: float = RECENT_S
) -> list[dict[str, Any]]:
    """Active jobs, and those that ended within `recent_s` (all since the last compaction
    with `everything`), oldest first."""
    now = time.time() if now is None else now
    chosen = list(state.jobs.values())
    for job in state.finished.values():
        age = age_s(job.get("updated"), now)
        if everything or (age is not None and age <= recent_s):
            chosen.append(job)
    return sorted(chosen, key=lambda j: int(str(j["id"]).removeprefix("j-") or 0))


def reason_text(job: dict[str, Any], waiting: str | None = None) -> str | None:
    """Why the job is where it is, for people: why it waits (and that it was preempted
    before, when it was), why it failed or was cancelled. A running job has none, unless it
    runs again after a preemption."""
    recorded = job.get("error") or job.get("reason")
    state = job.get("state")
    if state == "queued":
        # Why it is in the queue again: preempted, reclaimed for another team's guaranteed
        # share, or a restart ("exited 1, requeued (1/3)").
        again = recorded and any(
            word in str(recorded) for word in ("preempted", "reclaimed", "requeued (")
        )
        earlier = str(recorded) if again else None
        parts = [p for p in (earlier, waiting) if p]
        return "; ".join(parts) or None
    if state in ("pending", "running"):
        preempt = job.get("preempt")
        if preempt and preempt.get("reclaim"):
            return f"being reclaimed for team {preempt['reclaim']} ({preempt.get('by')})"
        if preempt:
            return f"being preempted for {preempt.get('by')}"
        if job.get("cancel"):
            return "being cancelled"
        return (
            f"run {job.get('run')}: {recorded}"
            if recorded and int(job.get("run") or 1) > 1
            else None
        )
    return str(recorded) if recorded else None


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
        "restarts": restarts.shown(job),  # "1/3": used of allowed; None without a budget
        "restart_count": restarts.budget(job)[0],
        "max_restarts": restarts.budget(job)[1],
        "argv": job.get("argv"),
        "reason": reason_text(job),
        "created": job.get("created"),
        "updated": job.get("updated"),
    }
