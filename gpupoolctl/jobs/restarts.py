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

The rule (after_failure, end_reason, backoff_s) is policy.restarts, pure: the node-loss
decision (sched.health) asks it as the reaper does; this module records and launches.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from gpupoolctl.ledger.units import format_ts, parse_ts

# The rule itself is pure and sits below the decisions (sched.health asks it too, and the
# job list reads budgets without loading the scheduler); its names stay importable here.
from gpupoolctl.policy.restarts import BACKOFF_BASE_S as BACKOFF_BASE_S
from gpupoolctl.policy.restarts import BACKOFF_CAP_S as BACKOFF_CAP_S
from gpupoolctl.policy.restarts import CAUSES as CAUSES
from gpupoolctl.policy.restarts import Restart as Restart
from gpupoolctl.policy.restarts import after_failure as after_failure
from gpupoolctl.policy.restarts import backoff_s as backoff_s
from gpupoolctl.policy.restarts import budget as budget
from gpupoolctl.policy.restarts import describe as describe
from gpupoolctl.policy.restarts import end_reason as end_reason

if TYPE_CHECKING:
    from gpupoolctl.jobs.service import JobsCore
    from gpupoolctl.ledger import Transaction


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
