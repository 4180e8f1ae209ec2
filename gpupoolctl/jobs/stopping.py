"""Stopping jobs on their nodes: SIGTERM, the grace period, SIGKILL; and a cancelled job's
end (stopped, then reaped)."""

from __future__ import annotations

import time
from typing import Any

from gpupoolctl.jobs import reaping
from gpupoolctl.jobs.nodes import Call
from gpupoolctl.jobs.service import KILL_WAIT_S, JobsCore, find
from gpupoolctl.ledger import Transaction


def mark_preempted(
    tx: Transaction,
    job: dict[str, Any],
    by: str,
    grace_s: float | None = None,
    *,
    as_admin: bool = False,
    reclaim: str | None = None,
) -> dict[str, Any]:
    """Record that a running job is to be stopped for `by` (a job id, or "drain of HOST"),
    with its own grace unless one is given; reaping then requeues it (when it asked) or
    records it cancelled. `as_admin`: a pool admin stops another user's job (the mark says
    so). Returns the job as recorded."""
    grace = grace_s if grace_s is not None else float(job.get("grace_s") or 0)
    mark: dict[str, Any] = {"by": by, "at": time.time(), "grace_s": grace}
    if as_admin:
        mark["as_admin"] = True
    if reclaim is not None:  # for that team's guaranteed share: requeued whatever it asked
        mark["reclaim"] = reclaim
    if job.get("warn_signal"):  # its --signal first, for up to this long, then SIGTERM
        mark["warn_s"] = warning_s(job, grace)
    tx.append("job", {"id": job["id"], "state": "running", "preempt": mark})
    return tx.state.jobs[job["id"]]


def warning_s(job: dict[str, Any], grace: float) -> float:
    """How long a preempted job that asked for a --signal gets between it and SIGTERM:
    its seconds before the limit, at most its grace."""
    return max(0.0, min(float(job.get("warn_signal_s") or 0), grace))


def _warn(jobs: JobsCore, targets: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Send a preempted job's own --signal first and wait up to warning_s for it to end
    (it may save its work and leave). Returns the (host, node id) pairs that ended."""
    calls = []
    for job in targets:
        mark = job.get("preempt") or {}
        if not job.get("warn_signal") or "warn_s" not in mark:
            continue
        for node in job.get("nodes") or []:
            warn = {"signal": job["warn_signal"], "wait_s": mark["warn_s"]}
            args = {"job_id": node["node_id"], **warn}
            calls.append(Call(node["host"], "signal", args))
    ended = set()
    for call, result in zip(calls, jobs.nodes.call(calls), strict=True):
        if result.ok and result.data.get("state") not in ("running", "starting"):
            ended.add((call.host, str(call.args["job_id"])))
    return ended


def stop(jobs: JobsCore, targets: list[dict[str, Any]], grace_s: float | None = None) -> None:
    """SIGTERM every node of every job, wait up to its grace, then SIGKILL what is left.
    A preempted job that asked for a --signal gets it first (see `_warn`)."""
    if not targets:
        return
    ended = _warn(jobs, targets)
    calls = []
    for job in targets:
        grace = grace_s if grace_s is not None else float(job.get("grace_s") or 0)
        for node in job.get("nodes") or []:
            if (node["host"], node["node_id"]) in ended:
                continue
            calls.append(
                Call(
                    node["host"],
                    "signal",
                    {"job_id": node["node_id"], "signal": "TERM", "wait_s": grace},
                )
            )
    results = jobs.nodes.call(calls)
    again = []
    for call, result in zip(calls, results, strict=True):
        if not result.ok:
            jobs.host_failed(call.host, f"{result.outcome}: {result.error}")
        elif result.data.get("state") == "running":
            again.append(
                Call(
                    call.host,
                    "signal",
                    {"job_id": call.args["job_id"], "signal": "KILL", "wait_s": KILL_WAIT_S},
                )
            )
    for call, result in zip(again, jobs.nodes.call(again), strict=True):
        if not result.ok:
            jobs.host_failed(call.host, f"{result.outcome}: {result.error}")


def stop_cancelled(jobs: JobsCore, job: dict[str, Any]) -> dict[str, Any]:
    """SIGTERM a running job marked cancelled, wait its grace, SIGKILL, reap: its record."""
    grace = float((job.get("cancel") or {}).get("grace_s") or 0)
    stop(jobs, [job], grace_s=grace)
    reaping.reap(jobs, only={job["id"]})
    return find(jobs, job["id"])
