"""The restart rule: whether a job that ended badly runs again, after how long, and why.

Pure over the job's record as the ledger has it (its `restarts` used and `max_restarts`
allowed, from `submit --max-restarts`), so that the reaper, the node-loss decision
(sched.health) and a replay in virtual time all ask the same rule. It sits below sched/
(standard library only) so that the job list reads a budget without loading the
scheduler. Recording a restart (the job queued again with its back-off) is the
executor's: jobs.restarts.requeue.

A failure exit (any code but 0, a death by signal) or the loss of a node counts against
the budget; a preemption never does (the --requeue path decides). Between tries the job
waits BACKOFF_BASE_S x 2^(n-1) before try n+1, capped at BACKOFF_CAP_S, as a Kubernetes
Job's pods do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BACKOFF_BASE_S = 10.0  # before the first restart (Kubernetes Job: 10 s, 20 s, 40 s ...)
BACKOFF_CAP_S = 300.0  # never longer than 5 minutes
CAUSES = ("exit", "node-lost", "preempted")


@dataclass(frozen=True)
class Restart:
    """A decision to run the job again: its restart number (1 for the first), the budget,
    how long it waits first, and the reason recorded ("exited 1, requeued (1/3)")."""

    count: int
    limit: int
    backoff_s: float
    reason: str


def backoff_s(count: int) -> float:
    """How long restart number `count` (1, 2, ...) waits: 10 s, 20 s, 40 s ... <= 300 s."""
    if count < 1:
        return 0.0
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** min(count - 1, 32))


def describe(cause: str, detail: str = "") -> str:
    """What ended the try, in words: "exited 1", "killed by SIGSEGV", "node lost (...)"."""
    if cause == "exit":
        text = str(detail).strip()
        if text.upper().startswith("SIG"):
            return f"killed by {text.upper()}"
        return f"exited {text}" if text else "failed"
    if cause == "node-lost":
        return f"node lost ({detail})" if detail else "node lost"
    if cause == "preempted":
        return f"preempted ({detail})" if detail else "preempted"
    raise ValueError(f"unknown cause {cause!r}: one of {', '.join(CAUSES)}")


def budget(job: Mapping[str, Any]) -> tuple[int, int]:
    """(restarts used so far, restarts allowed)."""
    return int(job.get("restarts") or 0), int(job.get("max_restarts") or 0)


def after_failure(job: Mapping[str, Any], cause: str, detail: str = "") -> Restart | None:
    """Whether the job (its record as the ledger has it) runs again after `cause`:
    "exit" (detail: the exit code, or the signal name that killed it), "node-lost" (detail:
    what was seen, optional) or "preempted" (never counted: always None here; the --requeue
    path decides). None: it has no restarts left (or none allowed), it ends."""
    what = describe(cause, detail)
    if cause == "preempted":
        return None
    used, allowed = budget(job)
    if used >= allowed:
        return None
    count = used + 1
    return Restart(count, allowed, backoff_s(count), f"{what}, requeued ({count}/{allowed})")


def end_reason(job: Mapping[str, Any], cause: str, detail: str = "") -> str | None:
    """The reason a job that does not run again records: "exited 1 (no restarts left:
    3/3)"; None for a job that never asked for restarts (its record says what it did)."""
    used, allowed = budget(job)
    if allowed <= 0:
        return None
    return f"{describe(cause, detail)} (no restarts left: {used}/{allowed})"
