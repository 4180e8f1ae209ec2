"""submit: record the job queued, then run the scheduling pass (it starts at once when it
fits, or when preemption or an elastic re-cut makes room)."""

from __future__ import annotations

from gpupoolctl.jobs import hooks, reaping, scheduling, teams
from gpupoolctl.jobs.errors import NeverFits
from gpupoolctl.jobs.events import reasons_for
from gpupoolctl.jobs.service import JobsCore, Outcome
from gpupoolctl.jobs.spec import JobSpec, expand_checkpoint_dir
from gpupoolctl.ledger import Transaction
from gpupoolctl.sched.names import check_names


def submit(jobs: JobsCore, spec: JobSpec) -> Outcome:
    """Queue the job, then run a schedule pass: it starts now if it fits (or if
    preempting allows), else waits in the queue. NeverFits when it never could."""
    spec.validate()
    spec = teams.with_team(jobs, spec)
    reaping.recover(jobs)
    reaping.reap(jobs, probe_lost=False)  # a lost node is the loop's to ask, not submit's

    def build(tx: Transaction) -> str:
        never = jobs.never_fits(tx.state, spec.request, tx.now, spec.policy)
        if never is not None:
            check_names(spec.request, tx.state.slices.values())
            raise NeverFits(f"the pool can never satisfy this request: {never.reason}")
        job_id = f"j-{tx.next_seq}"
        job = {"id": job_id, "owner": jobs.owner, "run": 0, **spec.record()}
        if spec.checkpoint_dir is not None:  # the same folder on every try of this job
            job["checkpoint_dir"] = expand_checkpoint_dir(spec.checkpoint_dir, job_id)
        tx.append("job", {**job, "state": "queued"})
        jobs.enqueue(tx, job)
        return job_id

    done = jobs.ledger.write(build)
    jobs.warnings.extend(done.warnings)
    job_id: str = done.value
    hooks.crash_point("queued")
    outcome = scheduling.schedule(jobs)
    outcome.job_id = job_id
    state = jobs.read().state
    job = state.jobs.get(job_id) or state.finished.get(job_id) or {}
    outcome.state = job.get("state")
    outcome.placement = job.get("placement")
    outcome.reason = job.get("error") or job.get("reason")
    if outcome.state == "queued":
        waiting = reasons_for(outcome.events, job_id)
        outcome.reason = waiting[-1].reason if waiting else None
    return outcome
