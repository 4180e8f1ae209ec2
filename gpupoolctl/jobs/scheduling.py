"""The scheduling loop's pass, executed against the ledger and the nodes.

The decision is sched.schedule_pass, the one scheduler (the benchmarks replay the same
function): in queue order it places what fits, may choose preemptible lower-priority
victims for an entry that does not, and with an elastic policy chooses idle cards to re-cut
for the work that waits. Each round runs it inside one ledger transaction, which records
what it decided (dequeue + alloc + job pending for each placement, refusals, victims'
preempt marks, `reshape` reservations); then, outside the lock, placed jobs are launched,
victims are sent SIGTERM, given their grace period, SIGKILLed if still there, and reaped
(released, and requeued when they asked), and reserved cards are re-cut (jobs.reshape).
After a preemption or a re-cut the next round places onto what was freed or made.

Two passes may run at once (two cron runs, `submit` next to `schedule`). Every decision is
made on the state inside the transaction that records it: victims are chosen and marked
in one step, after checking that no victim marked for the same entry is still running; a
card is reserved only if no other reshape holds it and its slices are still free. So the
second pass waits for the first one's victims and leaves its cards alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gpupoolctl.jobs import hooks, launching, reaping, repartition, reshape, stopping
from gpupoolctl.jobs.errors import JobError
from gpupoolctl.jobs.events import Event, Launched, Preempted, RecutDue, Refused, Waiting
from gpupoolctl.jobs.service import JobsCore, Outcome
from gpupoolctl.ledger import State, Transaction
from gpupoolctl.ledger.units import format_ts
from gpupoolctl.sched import NoFit, PassResult, QueueEntry
from gpupoolctl.sched.modes import run_pass

MAX_ROUNDS = 50  # bounded: a round places, preempts or re-cuts; the next sees the result


@dataclass
class _Round:
    placed: list[dict[str, Any]] = field(default_factory=list)  # jobs recorded pending
    events: list[Event] = field(default_factory=list)  # refused
    waiting: list[Event] = field(default_factory=list)
    victims: list[dict[str, Any]] = field(default_factory=list)
    victims_for: QueueEntry | None = None
    reshapes: list[repartition.Reserved] = field(default_factory=list)
    unplaced: bool = False  # a placement the pass made could not be recorded (JobError)


def schedule(jobs: JobsCore) -> Outcome:
    outcome = Outcome(events=repartition.recover(jobs))
    preempted_for: set[str] = set()  # entries this call has stopped victims for already
    recut_cards: set[str] = set()  # cards this call has re-cut: not again in later rounds
    waiting: list[Event] = []
    for _ in range(MAX_ROUNDS):
        decided = jobs.ledger.write(
            lambda tx: _decide(jobs, tx, frozenset(preempted_for), frozenset(recut_cards))
        )
        jobs.warnings.extend(decided.warnings)
        found: _Round = decided.value
        outcome.events.extend(found.events)
        waiting = found.waiting
        launch_failed = False
        for job in found.placed:
            hooks.crash_point("placed")
            launched = launching.launch(jobs, job)
            state = launched.get("state")
            launch_failed |= state != "running"
            # Requeued: its nodes did not launch it (no answer, a device gone); it goes on
            # where the next round places it.
            kind = {"running": "started", "queued": "requeued"}.get(str(state), "launch-failed")
            outcome.events.append(
                Launched(
                    job["id"],
                    tuple(n["host"] for n in job["nodes"]),
                    launched.get("error"),
                    launched.get("reason") if state == "queued" else None,
                    kind=kind,
                )
            )
        if found.victims_for is not None:
            preempted_for.add(found.victims_for.id)
            stopping.stop(jobs, found.victims)
            victims = tuple(v["id"] for v in found.victims)
            outcome.events.append(Preempted(found.victims_for.job, victims))
            reaping.reap(jobs)
            continue
        if found.reshapes:
            events = reshape.execute(jobs, found.reshapes)
            outcome.events.extend(events)
            recut_cards.update(r.gpu for r in found.reshapes)
            if any(e.kind == "reshape-failed" for e in events):
                # Fail closed: the next pass (after the card's back-off) tries again, not
                # this one, on whatever made the node refuse.
                break
            continue  # place the work the new slices were made for
        if not (launch_failed or found.unplaced):
            break  # the pass placed all it could; what failed freed slices: go again
    outcome.events.extend(waiting)
    return outcome


def _decide(
    jobs: JobsCore,
    tx: Transaction,
    preempted_for: frozenset[str],
    recut_cards: frozenset[str] = frozenset(),
) -> _Round:
    """One pass of the scheduler (sched.snapshot.run_pass) on the snapshot of the ledger as
    it is inside this transaction, and its records: placements (dequeue, alloc, job
    pending), refusals, preemption marks, re-cut reservations. Side effects on nodes come
    after, outside."""
    state = tx.state
    found = _Round()
    snap = jobs.snapshot(state, tx.now)
    for entry_id in snap.stale:
        tx.append("dequeue", {"id": entry_id, "reason": "its job is no longer queued"})
    if not snap.queue:
        return found
    now = snap.now
    marked = preempting(state)
    stopping = {e.id for e in snap.queue if e.job and e.job in marked}
    no_preempt = set(preempted_for) | stopping
    if snap.elastic is not None and recut_cards:
        # Whatever min-idle says, one call re-cuts a card once: its next round places on it.
        again = {card: "re-cut earlier in this pass" for card in recut_cards}
        elastic = dataclasses.replace(snap.elastic, blocked={**snap.elastic.blocked, **again})
        snap = dataclasses.replace(snap, elastic=elastic)
    for _ in range(len(snap.queue) + 1):  # bounded: each retry rules one more entry out
        result = run_pass(snap, preempt=True, no_preempt=frozenset(no_preempt), foresee=True)
        if result.preempt is None:
            break
        entry, chosen = result.preempt
        # Reclaim: the victims hold what this job's team is guaranteed; they are requeued
        # whatever they asked, and it does not count as a restart.
        reclaim = entry.request.team if result.reclaim else None
        marked = _mark_victims(tx, chosen, str(entry.job), reclaim=reclaim)
        if marked:
            _record(jobs, tx, found, result)
            found.victims, found.victims_for = marked, entry
            return found
        no_preempt.add(entry.id)  # its victims cannot be stopped cleanly now: it waits
    _record(jobs, tx, found, result)
    for entry, nofit in result.waiting:
        if entry.id in stopping and result.waiting_nofit(entry, nofit) is nofit:
            nofit = nofit.wrap("victims-stopping")
        found.waiting.append(waiting_event(result, entry, nofit, now))
    for recut in result.recuts:
        reserved = reshape.reserve(tx, recut)
        if reserved is not None:
            found.reshapes.append(reserved)
    return found


def waiting_event(result: PassResult, entry: QueueEntry, nofit: NoFit, now: datetime) -> Waiting:
    """A `waiting` event: the entry's job and why it waits (PassResult.waiting_nofit: its
    words, `reason`, and its `code`); when it waits for a re-cut, which one (`recut`: the
    card, its new layout, and `due`: the ledger time from which a pass may make it)."""
    why = result.waiting_nofit(entry, nofit)
    recut, wait_s = result.recut_for(entry), 0.0
    coming = result.upcoming.get(entry.id)
    if recut is None and coming is not None:
        recut, wait_s = coming.recut, coming.wait_s
    due = None
    if recut is not None:
        due = RecutDue(recut.card.key, recut.after, format_ts(now + timedelta(seconds=wait_s)))
    return Waiting(entry.job, why.reason, why.code, due)


def _record(jobs: JobsCore, tx: Transaction, found: _Round, result: PassResult) -> None:
    """Placements and refusals of a pass, in the pass's order."""
    for entry, placement in result.placed:
        job = tx.state.jobs[str(entry.job)]
        tx.append("dequeue", {"id": entry.id, "reason": "placed"})
        try:
            borrowed = entry.id in result.borrowed
            found.placed.append(jobs.record_placed(tx, job, placement, borrowed=borrowed))
        except JobError as exc:  # e.g. two vendors on one host: it would block the queue
            tx.append("job", {"id": job["id"], "state": "failed", "error": str(exc)})
            found.unplaced = True
            found.events.append(Refused(entry.job, str(exc)))
    for entry, nofit in result.never:
        job = tx.state.jobs[str(entry.job)]
        policy = entry.policy or "best-fit"
        # A pass limited to some hosts (-l) must not fail a job that other hosts could hold.
        if (
            jobs.hosts is not None
            and jobs.never_fits(tx.state, entry.request, tx.now, policy) is None
        ):
            why = nofit.wrap("hosts-limited", never=False)
            found.waiting.append(Waiting(entry.job, why.reason, why.code))
            continue
        tx.append("dequeue", {"id": entry.id, "reason": "can never fit"})
        tx.append(
            "job",
            {"id": job["id"], "state": "failed", "error": f"can never fit: {nofit.reason}"},
        )
        found.events.append(Refused(entry.job, nofit.reason, nofit.code))


def preempting(state: State) -> dict[str, list[str]]:
    """Job id -> the jobs marked to be preempted for it that are still running (a victim
    requeued after it ended is queued: its old mark no longer counts). One walk over the
    jobs for the whole queue: asked per queued job, it was most of a pass's time with
    thousands queued (bench/scale/production_day.py)."""
    marked: dict[str, list[str]] = {}
    for job_id, job in state.jobs.items():
        by = (job.get("preempt") or {}).get("by") if job.get("state") == "running" else None
        if by is not None:
            marked.setdefault(str(by), []).append(job_id)
    return marked


def _mark_victims(
    tx: Transaction, chosen: list[str], by: str, *, reclaim: str | None = None
) -> list[dict[str, Any]] | None:
    """Mark the chosen victims on the transaction's state, in one step: another pass's
    transaction then sees the marks (`reclaim`: for that team; they are queued again when
    stopped, whatever they asked). Returns the marked jobs, or None."""
    running = {k: j for k, j in tx.state.jobs.items() if j.get("state") == "running"}
    # A victim that is not a running job of ours cannot be stopped cleanly; one already being
    # stopped (cancelled, or preempted for another job) frees nothing this job can count on.
    if any(
        v not in running or running[v].get("cancel") or running[v].get("preempt") for v in chosen
    ):
        return None
    return [stopping.mark_preempted(tx, running[job_id], by, reclaim=reclaim) for job_id in chosen]
