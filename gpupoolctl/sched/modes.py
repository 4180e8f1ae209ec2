"""The scheduler's three questions, one function each, every one on a snapshot (Slurm's
`job_test` answers the same three: run now, could it ever run, when would it run):

- `run_pass(snap, ...)`: **place now**. The pass as `schedule` and `submit` run it, and as
  `schedule --dry-run` and `jobs`' REASON column read it.
- `never_fits(snap, request, policy)`: **could it ever run**. No slice of the snapshot's
  pool, were every one free, and no elastic re-cut of its cards could hold the request.
  Only then is a job refused (submit) or failed from the queue (a pass).
- `what_if(snap, request, policy, seq=...)`: **what would happen** to the request if it
  were queued now behind the snapshot's queue: where it would start, the re-cut a pass
  makes for it and when, or why it would wait (`submit --dry-run`).

Callers build the snapshot (sched.snapshot) and render the answers; nothing here writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpupoolctl.sched.entry import QueueEntry
from gpupoolctl.sched.place import NoFit, Placement, place
from gpupoolctl.sched.request import JobRequest
from gpupoolctl.sched.snapshot import Snapshot

if TYPE_CHECKING:
    from gpupoolctl.sched.elastic import RecutReach, Upcoming
    from gpupoolctl.sched.pool import PoolView
    from gpupoolctl.sched.queue import PassResult

WHAT_IF_ID = "(this job)"  # the queue entry what_if adds for the request asked about


def run_pass(
    snap: Snapshot,
    policy: str = "best-fit",
    *,
    preempt: bool = False,
    no_preempt: frozenset[str] = frozenset(),
    foresee: bool = False,
    pool: PoolView | None = None,
) -> PassResult:
    """Place now: one scheduling pass (sched.queue.schedule_pass) on the snapshot. `pool`:
    the working view to hold the pass's placements on, when the caller wants to read it
    afterwards (default: a fresh one from snap.pool())."""
    from gpupoolctl.sched.queue import schedule_pass

    return schedule_pass(
        snap.queue,
        pool if pool is not None else snap.pool(),
        snap.now,
        policy,
        preempt=preempt,
        no_preempt=no_preempt,
        elastic=snap.elastic,
        shares=snap.shares,
        foresee=foresee,
    )


def never_fits(snap: Snapshot, request: JobRequest, policy: str = "best-fit") -> NoFit | None:
    """Could it ever run: None when some slice of the snapshot's pool (were it free) or an
    elastic re-cut of one of its cards could hold the request, else why not (placement's
    reason, with what re-cuts could give it added when some card could hold a slice of
    it). Pass a snapshot of the whole pool: a pass limited to some hosts (-l) must not
    refuse work that other hosts could hold."""
    result = place(request, snap.pool(), policy)
    if not (isinstance(result, NoFit) and result.never):
        return None
    reach = recut_reach(snap, request)
    if reach is None or not reach.reachable:
        return result
    return None if reach.serves(request) else reach.nofit(request, result)


def recut_reach(snap: Snapshot, request: JobRequest) -> RecutReach | None:
    """What elastic re-cuts of the snapshot's cards could give the request; None without
    an elastic section in force."""
    if snap.elastic is None:
        return None
    from gpupoolctl.sched.elastic import recut_reach as reach_of

    return reach_of(request, snap.elastic, slices=snap.slices.values())


def what_if(
    snap: Snapshot, request: JobRequest, policy: str | None = None, *, seq: int
) -> Placement | NoFit | Upcoming:
    """What would happen: the pass with the request queued now behind the snapshot's queue
    (`seq`: the arrival order it would get), foreseeing re-cuts: where it starts, the
    re-cut made for it now or by a later pass and when (Upcoming), or why it waits. The
    pass runs without preemption: it says where the request fits, not whom it would stop."""
    from gpupoolctl.sched.elastic import Upcoming

    mine = QueueEntry(
        id=WHAT_IF_ID,
        priority=request.priority,
        seq=seq,
        enqueued=snap.now,
        request=request,
        job=WHAT_IF_ID,
        policy=policy,
    )
    result = run_pass(snap.with_queue([*snap.queue, mine]), foresee=True)
    for entry, placement in result.placed:
        if entry is mine:
            return placement
    recut = result.recut_for(mine)
    if recut is not None:
        return Upcoming(recut)
    if mine.id in result.upcoming:
        return result.upcoming[mine.id]
    for entry, nofit in (*result.waiting, *result.never):
        if entry is mine:
            return nofit
    return NoFit("behind-queue", False)


__all__ = ["WHAT_IF_ID", "never_fits", "recut_reach", "run_pass", "what_if"]
