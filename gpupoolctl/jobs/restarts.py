"""Restarts: whether a job that ended badly runs again, after how long, and what it is told.

A job submitted with `--max-restarts N` runs again, up to N times, after a failure exit (any
exit code but 0, a death by signal) or the loss of its node; each try is a new run (its own
folder on the node, `job.N`) with the same job id and the same checkpoint folder. A
preemption (or a drain) never counts: a `--requeue` job preempted is queued again as before,
whatever its budget. A time limit ends the job (failed), as Slurm does.

Between tries the job waits in the queue for a back-off, as a Kubernetes Job's pods do:
BACKOFF_BASE_S x 2^(n-1) before try n+1, capped at BACKOFF_CAP_S. The wait is the queue
entry's `not_before`; the one scheduler (sched.schedule_pass) leaves such an entry waiting
("restarting in Ns (backoff)") until its time has come.

    restart = after_failure(job, "exit", "1")        # or ("node-lost", "gpu-a3 is silent")
    if restart is not None:
        requeue(jobs, tx, current, final, restart)     # job queued + enqueue with not_before
    else:
        tx.append("job", {**final, "state": "failed", "reason": end_reason(job, "exit", "1")})

Neither needs node statuses: jobs.lost (node loss) calls them as the reaper does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from gpupoolctl.ledger.units import format_ts, parse_ts

if TYPE_CHECKING:
    from gpupoolctl.jobs.service import JobsCore
    from gpupoolctl.ledger import Transaction

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


def budget(job: dict[str, Any]) -> tuple[int, int]:
    """(restarts used so far, restarts allowed)."""
    return int(job.get("restarts") or 0), int(job.get("max_restarts") or 0)


def after_failure(job: dict[str, Any], cause: str, detail: str = "") -> Restart | None:
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


def end_reason(job: dict[str, Any], cause: str, detail: str = "") -> str | None:
    """The reason a job that does not run again records: "exited 1 (no restarts left:
    3/3)"; None for a job that never asked for restarts (its record says what it did)."""
    used, allowed = budget(job)
    if allowed <= 0:
        return None
    return f"{describe(cause, detail)} (no restarts left: {used}/{allowed})"


def requeue(
    jobs: JobsCore,
    tx: Transaction,
    current: dict[str, Any],
    final: dict[str, Any],
    restart: Restart,
) -> None:
    """Record the restart in the caller's transaction: the job queued again with `final`'s
    fields (exit code, ended, nodes of the try that ended), its restart count and reason,
    and a queue entry that may not start before the back-off has passed. The caller has
    released the try's slices (tx.release) in the same transaction."""
    not_before = format_ts(parse_ts(tx.now) + timedelta(seconds=restart.backoff_s))
    fields = {k: v for k, v in final.items() if k not in ("id", "state")}
    jobs.enqueue(
        tx,
        current,
        not_before=not_before,
        **fields,
        restarts=restart.count,
        reason=restart.reason,
    )


def run_env(job: dict[str, Any]) -> dict[str, str]:
    """What every try is told, on every node: its job id (the same on every try), restart
    count and budget (also as torchrun's TORCHELASTIC_* names), its run number (preemptions
    included) and the checkpoint folder."""
    used, allowed = budget(job)
    env = {
        "GPUPOOL_JOB_ID": str(job["id"]),
        "GPUPOOL_RUN": str(int(job.get("run") or 1)),
        "GPUPOOL_RESTART_COUNT": str(used),
        "GPUPOOL_MAX_RESTARTS": str(allowed),
        "TORCHELASTIC_RESTART_COUNT": str(used),
        "TORCHELASTIC_MAX_RESTARTS": str(allowed),
    }
    if job.get("checkpoint_dir"):
        env["GPUPOOL_CHECKPOINT_DIR"] = str(job["checkpoint_dir"])
    if job.get("time_limit_s"):
        env["GPUPOOL_TIME_LIMIT_S"] = f"{float(job['time_limit_s']):g}"
    return env


def launch_args(job: dict[str, Any]) -> dict[str, Any]:
    """The time limit and warning signal for the agent's launch verb (the node enforces
    them itself: no workstation pass is needed for a job to end on time)."""
    args: dict[str, Any] = {"grace_s": float(job.get("grace_s") or 0)}
    if job.get("time_limit_s"):
        args["time_limit_s"] = float(job["time_limit_s"])
    if job.get("warn_signal"):
        args["signal"] = str(job["warn_signal"])
        args["signal_s"] = float(job.get("warn_signal_s") or 0)
    return args


def shown(job: dict[str, Any]) -> str | None:
    """RESTARTS as the job list shows it: "1/3", or None for a job without a budget."""
    used, allowed = budget(job)
    return f"{used}/{allowed}" if allowed > 0 else None
