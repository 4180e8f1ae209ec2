"""Replay a trace in virtual time through the real queue and placement code.

Event loop: at each arrival, completion or re-cut end, completions release their holds,
re-cuts whose cost has elapsed replace their card's slices, arrivals join the queue
(QueueEntry, enqueued at their arrival), then one pass runs: its snapshot is built from the
replay's state (`Recorded`, an in-memory stand-in for the ledger's state) by
`gpupoolctl.sched.snapshot.snapshot`, the function production builds its snapshot with, and
`gpupoolctl.sched.snapshot.run_pass` decides on it (`order_queue`: priority, FIFO, aging;
`place` for each entry); every placement is recorded as a hold and runs its duration. With
`until`, no event at or after that time is processed (the contended day stops at the end of
its window); without it the replay runs until every job has run or can never run (the
reference day). With `pass_interval`, passes run on that cadence (every tick while work
waits or a hook is given, else the first tick after the next event) instead of at every
event: events still happen at their own times (a completion frees its slices then),
placements at the next tick, as with `gpupoolctl schedule` from cron (every minute) or
`schedule --watch 60s`.

Re-cuts: with `pool_policy` (a pool policy with an elastic section) the pass decides them,
with the section in force at the pass's time (a window may replace it), as production's
pass does. Extension point: `replay(..., hook=...)`. After each pass's placements the hook
gets a PassContext and may return more: `Recut(gpu="host/gpuN", slices=[slice dicts])`. For
each re-cut the replay asserts that every slice of that GPU is free and records a
reservation as production's reshape record does (for `recut_cost` seconds nothing is placed
on them, the card stays in the pool's view and in the elastic inputs as blocked; jobs
elsewhere, and jobs on other GPUs, are never disturbed), then replaces its slices with the
new ones when the cost has elapsed (an event of its own, so a pass follows at once). The
bench makes no decision of its own.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobtrace import Job  # type: ignore[import-not-found]  # bench/utilization/jobtrace.py

from gpupoolctl.sched import JobRequest, PassResult, PoolView, QueueEntry
from gpupoolctl.sched.modes import run_pass
from gpupoolctl.sched.pool import gpu_key  # the GPU a slice is on, as PoolView keys it
from gpupoolctl.sched.snapshot import Snapshot, snapshot
from gpupoolctl.timestamps import format_ts

if TYPE_CHECKING:
    from gpupoolctl.policy.model import PoolPolicy
    from gpupoolctl.sched.elastic import InHosts

T0 = datetime(2025, 6, 2, tzinfo=UTC)
RECUT_COST_S = 10.0  # default: the GPU is out of the pool this long per re-cut


@dataclass
class Run:
    name: str
    total_mib: int  # physical memory of the pool (whole cards), the denominator
    starts: dict[str, float] = field(default_factory=dict)
    ends: dict[str, float] = field(default_factory=dict)
    held_mib: dict[str, int] = field(default_factory=dict)  # memory of the slices it held
    refused: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # still queued when `until` came
    passes: int = 0
    recuts: list[tuple[float, str]] = field(default_factory=list)  # (time decided, GPU key)
    rebuilds: int = 0  # passes that saw a new slice set (its pool index built anew)
    pass_s: float = 0.0  # wall-clock seconds building the snapshot and in the pass
    # Per pass: (virtual seconds, entries queued when it began, wall-clock seconds of the
    # snapshot and the pass)
    pass_log: list[tuple[float, int, float]] = field(default_factory=list)


@dataclass(frozen=True)
class Recut:
    """A re-cut decision: GPU `gpu` ("host/gpuN", PoolView's GPU key) is to hold `slices`
    (slice dicts as ledger.slices_from_facts makes them) instead of its slices now. `old`:
    the slice ids it replaces, when not simply every slice of `gpu` (an AMD hive is the
    slices of several logical GPUs)."""

    gpu: str
    slices: list[dict[str, Any]]
    old: tuple[str, ...] | None = None


@dataclass
class PassContext:
    """What a hook sees after a pass: read it, do not change it."""

    now: float  # virtual seconds since the start of the trace
    clock: datetime  # the same instant as schedule_pass saw it
    view: PoolView  # the pool after this pass's placements (running jobs' holds)
    waiting: list[QueueEntry]  # the queue after this pass, in arrival order
    result: PassResult  # this pass's placed / waiting / never
    slices: dict[str, dict[str, Any]]  # the slices now, by id (a card mid-re-cut: its old ones)
    recutting: dict[str, float]  # GPU key -> virtual time its new slices appear


RecutHook = Callable[[PassContext], Iterable[Recut]]


def _shape(entry: QueueEntry) -> JobRequest:
    """What schedule_pass keys its answers on: the request, priority aside."""
    return replace(entry.request, priority=0, preemptible=False)


def trimmed(
    queue: dict[str, QueueEntry], view: PoolView, keys: dict[str, int], shapes: list[JobRequest]
) -> list[QueueEntry]:
    """The queue, less entries that cannot change what a pass decides (`trim=True`).

    schedule_pass goes through the queue in order_queue's order and remembers, per request
    shape (the request, priority aside), the first NoFit: every later entry of that shape
    gets the same answer, and its aging reservation (if it has aged to the cap) finds
    nothing left to reserve, since the earlier entry of the shape has aged at least as much
    and reserved every free slice the shape could use. Within one shape and one priority,
    order_queue's order is arrival order (earlier arrival, at least as much aging). A pass
    can place at most (free slices the shape matches, host glob aside) // gpus entries of a
    shape, so of each (shape, priority) group only that many + 1, the first in arrival
    order, can be placed or reserve; the rest only cost time (schedule_pass is O(queue),
    and the contended day queues thousands). The placements are the same: the tests check
    it against the untrimmed replay (tests/unit/test_bench_utilization.py). Entries of a
    shape that can never fit are refused all at once by the caller, as an untrimmed pass
    refuses them. `keys`: entry id -> its (shape, priority) group's number, computed once
    per entry; `shapes`: group number -> shape."""
    kept: list[QueueEntry] = []
    room: dict[int, int] = {}
    for entry in queue.values():  # insertion order = arrival order
        key = keys[entry.id]
        left = room.get(key)
        if left is None:
            shape = shapes[key]
            free = sum(view.shape_free(s) for s in view.shapes_for(shape))
            left = free // shape.gpus + 1
        if left > 0:
            kept.append(entry)
            room[key] = left - 1
        else:
            room[key] = 0
    return kept


@dataclass(eq=False)
class Hold:
    """An allocation as the replay records it (sched.recorded.RecordedHold)."""

    id: str
    owner: str
    slices: tuple[str, ...]
    created: str
    request: dict[str, Any]
    expires: str | None = None


class Recorded:
    """The ledger's state as a replay keeps it, in memory (sched.recorded.RecordedState):
    the slices, the holds, the cards being re-cut, when each card last changed. Every pass
    builds its snapshot from it with gpupoolctl.sched.snapshot, the function production
    builds its snapshot with. The slice map is replaced, never edited, when the slice set
    changes (as the ledger's is: the pool view and the elastic cards are kept by its
    identity)."""

    def __init__(self, slices: Iterable[dict[str, Any]]) -> None:
        self.slices: dict[str, dict[str, Any]] = {s["id"]: s for s in slices}
        self.holders: dict[str, str] = {}
        self.allocations: dict[str, Hold] = {}
        self.reshapes: dict[str, dict[str, Any]] = {}
        self.card_changed: dict[str, str] = {}
        self.card_failed: dict[str, str] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        self.queue: dict[str, dict[str, Any]] = {}
        self.drains: dict[str, dict[str, dict[str, Any]]] = {}
        self.lost: dict[str, dict[str, Any]] = {}
        self.silent: dict[str, str] = {}
        self.answered: dict[str, str] = {}
        self.fences: dict[str, dict[str, Any]] = {}
        self.quarantined: dict[str, dict[str, Any]] = {}
        # The teams' usage of holds that ended, decayed to a time (sharereplay sets it).
        self.history: Callable[[str], dict[str, float]] = lambda now: {}

    def active(self, now: str) -> dict[str, Hold]:
        return self.allocations  # a replay's holds never expire

    def holder(self, slice_id: str, now: str) -> Hold | None:
        alloc = self.holders.get(slice_id)
        return self.allocations.get(alloc) if alloc is not None else None

    def recutting_slices(self) -> dict[str, str]:
        return {sid: r["id"] for r in self.reshapes.values() for sid in r["slices"]}

    def team_history(self, now: str) -> dict[str, float]:
        return self.history(now)

    def hold(self, hold: Hold) -> None:
        busy = [sid for sid in hold.slices if sid in self.holders]
        assert not busy, f"{hold.id}: slices held already: {busy}"
        self.allocations[hold.id] = hold
        for sid in hold.slices:
            self.holders[sid] = hold.id

    def release(self, alloc_id: str) -> Hold:
        hold = self.allocations.pop(alloc_id)
        for sid in hold.slices:
            del self.holders[sid]
        return hold

    def touch(self, slice_ids: Iterable[str], at: float) -> None:
        """The cards of these slices changed at `at` (virtual seconds)."""
        stamp = exact_ts(T0 + timedelta(seconds=at))
        for sid in slice_ids:
            entry = self.slices.get(sid)
            if entry is not None:
                self.card_changed[gpu_key(entry)] = stamp


def exact_ts(moment: datetime) -> str:
    """A time as text to the microsecond the replay keeps (the ledger writes milliseconds;
    a replay's completions fall anywhere, and min-idle is decided on them)."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def placed_hold(entry: QueueEntry, slices: Sequence[str], clock: datetime, **more: Any) -> Hold:
    """The hold a placement records, as production's record_placed does: the job, its
    priority and whether it may be preempted, its team (`more`: borrowed)."""
    request: dict[str, Any] = {
        "job": entry.job,
        "priority": entry.request.priority,
        "preemptible": entry.request.preemptible,
    }
    if entry.request.team is not None:
        request["team"] = entry.request.team
    request.update(more)
    return Hold(entry.id, entry.owner, tuple(slices), format_ts(clock), request)


def pass_snapshot(
    state: Recorded, policy: PoolPolicy | None, clock: datetime, in_hosts: InHosts | None
) -> Snapshot:
    """The pass's snapshot of the replay's state (the queue is the replay's own)."""
    return snapshot(state, policy, clock, in_hosts=in_hosts, queue=())


def recut_old(recut: Recut, state: Recorded, view: PoolView) -> list[str]:
    """The slice ids a re-cut removes, checked: the GPU is not being re-cut already, every
    one of its slices is free, its new slices are on it. The caller keeps the GPU out for
    the re-cut's cost, then calls finish_recut."""
    assert recut.gpu not in state.reshapes, f"re-cut {recut.gpu}: already being re-cut"
    old = (
        list(recut.old)
        if recut.old is not None
        else [sid for sid, s in state.slices.items() if gpu_key(s) == recut.gpu]
    )
    busy = [sid for sid in old if not view.is_free(sid)]
    assert not busy, f"re-cut {recut.gpu}: slices held: {busy}"
    assert recut.old is not None or all(gpu_key(s) == recut.gpu for s in recut.slices), (
        f"re-cut {recut.gpu}: a new slice is on another GPU"
    )
    return old


def begin_recut(
    recut: Recut,
    state: Recorded,
    view: PoolView,
    pending: list[tuple[float, int, Recut]],
    made: list[tuple[float, str]],
    now: float,
    cost: float,
) -> None:
    """Start a re-cut: its old slices are touched (their card changed now) and reserved by
    a reshape record (as production's: nothing is placed on them, the card is still the
    pool's and not idle, elastic sees it blocked) until now + cost (an event in
    `pending`), and it is counted in `made`."""
    old = recut_old(recut, state, view)
    state.touch(old, now)
    # One reservation per card, named after it (production's are numbered records).
    state.reshapes[recut.gpu] = {
        "id": recut.gpu,
        "gpu": recut.gpu,
        "slices": list(old),
        "ready": now + cost,
    }
    heapq.heappush(pending, (now + cost, len(made), replace(recut, old=tuple(old))))
    made.append((now, recut.gpu))


def finish_recut(recut: Recut, state: Recorded) -> list[str]:
    """A re-cut whose cost has elapsed: its reservation is closed, its old slices leave the
    state and its new slices join (ids: returned), in a new slice map."""
    del state.reshapes[recut.gpu]
    gone = set(recut.old or ())
    slices = {sid: s for sid, s in state.slices.items() if sid not in gone}
    for entry in recut.slices:
        assert entry["id"] not in slices, f"re-cut {recut.gpu}: {entry['id']} exists"
        slices[entry["id"]] = entry
    state.slices = slices
    return [e["id"] for e in recut.slices]


def replay(
    name: str,
    jobs: list[Job],
    slices: list[dict[str, Any]],
    total_mib: int,
    request_of: Any,
    priority_of: Any,
    policy: str = "best-fit",
    *,
    until: float | None = None,
    hook: RecutHook | None = None,
    recut_cost: float = RECUT_COST_S,
    pass_interval: float | None = None,
    trim: bool = False,
    pool_policy: PoolPolicy | None = None,
    in_hosts: InHosts | None = None,
) -> Run:
    """`pool_policy`: the pool policy file's (its elastic section, or a window's in force
    at the pass's time): the pass runs with elastic re-cuts (the one scheduler) and the
    re-cuts it decides are made as a hook's are. `in_hosts` resolves its host patterns."""
    state = Recorded(slices)
    run = Run(name, total_mib)
    by_id = {j.id: j for j in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.arrival, j.id))
    running: list[tuple[float, str]] = []  # (end, job id)
    pending: list[tuple[float, int, Recut]] = []  # (ready, order, re-cut) mid-cost
    queue: dict[str, QueueEntry] = {}
    groups: dict[tuple[JobRequest, int], int] = {}  # (shape, priority) -> group number
    shapes: list[JobRequest] = []  # group number -> shape
    keys: dict[str, int] = {}  # entry id -> group number
    index = 0
    tick = 0
    known = state.slices  # the slice set the last pass saw

    while index < len(arrivals) or running or queue or pending:
        times = []
        if index < len(arrivals):
            times.append(arrivals[index].arrival)
        if running:
            times.append(running[0][0])
        if pending:
            times.append(pending[0][0])
        if pass_interval is not None and (queue or hook) and times:
            times.append(tick * pass_interval)  # cron runs the pass while work waits
        if not times:  # queued work that can never start
            run.refused.extend(queue)
            break
        now = min(times)
        if pass_interval is not None:  # passes on a cadence: the first tick at or after
            tick = max(tick, math.ceil(now / pass_interval))
            now = tick * pass_interval
            tick += 1
        if until is not None and now >= until:
            run.waiting.extend(queue)
            break
        while running and running[0][0] <= now:
            end, job_id = heapq.heappop(running)
            state.touch(state.release(job_id).slices, end)
        while pending and pending[0][0] <= now:
            _, _, recut = heapq.heappop(pending)
            state.touch(finish_recut(recut, state), now)
        while index < len(arrivals) and arrivals[index].arrival <= now:
            job = arrivals[index]
            request: JobRequest = request_of(job)
            queue[job.id] = QueueEntry(
                id=job.id,
                priority=priority_of(job),
                seq=index,
                enqueued=T0 + timedelta(seconds=job.arrival),
                request=replace(request, priority=priority_of(job)),
                job=job.id,
            )
            group = (_shape(queue[job.id]), queue[job.id].priority)
            if group not in groups:
                groups[group] = len(shapes)
                shapes.append(group[0])
            keys[job.id] = groups[group]
            index += 1
        clock = T0 + timedelta(seconds=now)
        began = time.perf_counter()
        if state.slices is not known:  # a new slice set: its pool index is built anew
            known = state.slices
            run.rebuilds += 1
        snap = pass_snapshot(state, pool_policy, clock, in_hosts)
        view = snap.pool()
        entries = trimmed(queue, view, keys, shapes) if trim else list(queue.values())
        result = run_pass(snap.with_queue(entries), policy, pool=view)
        took = time.perf_counter() - began
        run.pass_s += took
        run.pass_log.append((now, len(entries), took))
        run.passes += 1
        for entry, placement in result.placed:
            job = by_id[entry.id]
            del queue[entry.id]
            run.starts[job.id] = now
            run.ends[job.id] = now + job.duration
            run.held_mib[job.id] = sum(view.slices[s]["memory_mib"] for s in placement.slices)
            heapq.heappush(running, (now + job.duration, job.id))
            state.hold(placed_hold(entry, placement.slices, clock))
            state.touch(placement.slices, now)
        never = {shapes[keys[entry.id]] for entry, _ in result.never}
        for entry_id in [i for i in queue if never and shapes[keys[i]] in never]:
            del queue[entry_id]  # every entry of a shape that can never fit, trimmed or not
            run.refused.append(entry_id)
        decided = [Recut(r.card.key, r.slices(), tuple(r.card.slices)) for r in result.recuts]
        if hook is not None:
            recutting = {r["gpu"]: r["ready"] for r in state.reshapes.values()}
            context = PassContext(
                now, clock, view, list(queue.values()), result, dict(state.slices), recutting
            )
            decided += list(hook(context))
        for recut in decided:  # the slice set stays as it is until the re-cut is done
            begin_recut(recut, state, view, pending, run.recuts, now, recut_cost)
    return run
