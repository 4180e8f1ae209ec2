"""`drain --now`: drain hosts and cards and stop the jobs running there, as a preemption stops
its victims (SIGTERM, the job's grace or the one given, SIGKILL, reaped), so that a job
submitted with --requeue is queued again (elsewhere: its old place is drained) and any
other is recorded cancelled, "preempted by drain of HOST"."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpupoolctl.jobs import reaping, stopping
from gpupoolctl.jobs.service import JobsCore
from gpupoolctl.ledger import Transaction
from gpupoolctl.policy.ownership import NotOwner, as_admin, refusal_of_many


def drain_now(
    jobs: JobsCore, targets: Sequence[str], reason: str, grace_s: float | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Drain `targets` and stop every running job with a slice on one of them: (the drains
    as recorded, the jobs as they ended: requeued, cancelled, or done when they had finished
    first).

    The drains and the jobs' stop marks are one transaction: another user's job is stopped
    only by a pool admin (`jobs.admin`; its mark then says `"as_admin": true`), and for
    anyone else the whole call is refused (NotOwner, naming the first few of those jobs)
    with nothing recorded, the drain included."""
    from gpupoolctl.ledger.drains import reason_text, record_drains

    text = reason_text(reason)
    wanted = set(targets)
    user, admin = jobs.owner, jobs.admin

    def build(tx: Transaction) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        drained = record_drains(tx, targets, text)
        state = tx.state
        hits = []
        for job in list(state.jobs.values()):
            if job.get("state") != "running" or job.get("cancel") or job.get("preempt"):
                continue  # not running, or already being stopped by someone else
            hit = _drain_of(state, job, wanted)
            if hit is not None:
                hits.append((job, hit))
        works = [(str(job["id"]), job.get("owner")) for job, _ in hits]
        refused = refusal_of_many(
            f"drain --now {' '.join(targets)}", "stop", "job", works, user=user, admin=admin
        )
        if refused:
            raise NotOwner(f"{refused}; nothing was drained or stopped")
        victims = [
            stopping.mark_preempted(
                tx,
                job,
                f"drain of {hit}",
                grace_s,
                as_admin=as_admin(job.get("owner"), user=user, admin=admin),
            )
            for job, hit in hits
        ]
        return drained, victims

    done = jobs.ledger.write(build)
    jobs.warnings.extend(done.warnings)
    drained, victims = done.value
    if not victims:
        return drained, []
    stopping.stop(jobs, victims, grace_s)
    reaping.reap(jobs, only={v["id"] for v in victims})
    state = jobs.read().state
    return drained, [state.jobs.get(v["id"]) or state.finished.get(v["id"]) or v for v in victims]


def _drain_of(state: Any, job: dict[str, Any], wanted: set[str]) -> str | None:
    """The drained target of `wanted` (a card, or its host) one of the job's slices is on,
    or None. Both are looked at: a card drained before its host is still on the host."""
    from gpupoolctl.ledger.state import card_key

    for node in job.get("nodes") or []:
        for slice_id in node.get("slices") or []:
            entry = state.slices.get(slice_id)
            if entry is None:
                continue
            for target in (card_key(entry), entry["host"]):
                if target in wanted and target in state.drains:
                    return str(target)
    return None
