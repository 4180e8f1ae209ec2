"""`drain --now`: stop the jobs running on drained hosts and cards, as a preemption stops
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


def stop_drained(
    jobs: JobsCore, targets: Sequence[str], grace_s: float | None = None
) -> list[dict[str, Any]]:
    """Mark and stop every running job with a slice on one of the drained `targets`; the
    jobs as they ended (requeued, cancelled, or done when they had finished first).

    Another user's job is stopped only by a pool admin (`jobs.admin`; its mark then says
    `"as_admin": true`): for anyone else the whole call is refused (NotOwner, naming the
    first few of those jobs) and nothing is marked; the drain itself stays recorded."""
    wanted = set(targets)
    user, admin = jobs.owner, jobs.admin

    def mark(tx: Transaction) -> list[dict[str, Any]]:
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
            raise NotOwner(f"{refused}; nothing was stopped (the drain stays recorded)")
        return [
            stopping.mark_preempted(
                tx,
                job,
                f"drain of {hit}",
                grace_s,
                as_admin=as_admin(job.get("owner"), user=user, admin=admin),
            )
            for job, hit in hits
        ]

    done = jobs.ledger.write(mark)
    jobs.warnings.extend(done.warnings)
    victims: list[dict[str, Any]] = done.value
    if not victims:
        return []
    stopping.stop(jobs, victims, grace_s)
    reaping.reap(jobs, only={v["id"] for v in victims})
    state = jobs.read().state
    return [state.jobs.get(v["id"]) or state.finished.get(v["id"]) or v for v in victims]


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
