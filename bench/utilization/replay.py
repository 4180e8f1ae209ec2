"""Replay a trace in virtual time through the real queue and placement code.

Event loop: at each arrival, completion or re-cut end, completions free their slices
(view.unhold), re-cuts whose cost has elapsed add their new slices, arrivals join the queue
(QueueEntry, enqueued at their arrival), then one `gpupoolctl.sched.schedule_pass` runs:
`order_queue` (priority, FIFO, aging) and `place` for each entry on the PoolView; every
placement starts at once and runs its duration. With `until`, no event at or after that
time is processed (the contended day stops at the end of its window); without it the
replay runs until every job has run or can never run (the reference day). With
`pass_interval`, passes run on that cadence (every tick while work waits or a hook is
given, else the first tick after the next event) instead of at every event: events still
happen at their own times (a completion frees its slices then), placements at the next
tick, as with `gpupoolctl schedule` from cron (every minute) or `schedule --watch 60s`.

Extension point (elastic): `replay(..., hook=...)`. After each pass's placements the hook
gets a PassContext and may return re-cuts: `Recut(gpu="host/gpuN", slices=[slice dicts])`.
The replay then, for each re-cut, asserts that every slice of that GPU is free, holds
them for the re-cut for `recut_cost` seconds as production's reshape record does (nothing
is placed on them, the card stays in the pool's view and in the elastic inputs as
`blocked`; jobs elsewhere, and jobs on other GPUs, are never disturbed), and replaces them
with the new slices when the cost has elapsed (an event of its own, so a pass follows at
once). The bench makes no decision of its own: the
hook is where gpupoolctl.sched's elastic decision plugs in; without a hook nothing is re-cut.

A PoolView's slice set is fixed when it is built (a Skeleton), so every change of the slice
set builds a new PoolView from the current slices with the current holds re-applied; the
time that takes is counted in Run.rebuild_s / Run.rebuilds.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from jobtrace import Job  # type: ignore[import-not-found]  # bench/utilization/jobtrace.py

from gpupoolctl.sched import Holder, JobRequest, PassResult, PoolView, QueueEntry, schedule_pass
from gpupoolctl.sched.pool import RESHAPE_OWNER

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
    rebuilds: int = 0  # PoolViews built because the slice set changed
    rebuild_s: float = 0.0  # wall-clock seconds those builds took
    pass_s: float = 0.0  # wall-clock seconds in schedule_pass
    # Per pass: (virtual seconds, entries queued when it began, wall-clock seconds it took)
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
# The elastic inputs of a pass (gpupoolctl.sched.elastic.ElasticInputs), built from the
# pool's slices now and when each GPU last changed (GPU key -> time).
ElasticOf = Callable[[dict[str, dict[str, Any]], dict[str, datetime]], Any]


def gpu_key(entry: dict[str, Any]) -> str:
    """The GPU a slice is on, as PoolView keys it ("host/gpuN")."""
    if entry.get("gpu") is not None:
        return f"{entry['host']}/gpu{entry['gpu']}"
    return str(entry.get("gpu_uuid") or entry["id"])


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


def recut_old(
    recut: Recut, current: dict[str, dict[str, Any]], view: PoolView, recutting: dict[str, float]
) -> list[str]:
    """The slice ids a re-cut removes, checked: the GPU is not being re-cut already, every
    one of its slices is free, its new slices are on it. The caller removes them from
    `current`, keeps the GPU out for the re-cut's cost, then calls finish_recut."""
    assert recut.gpu not in recutting, f"re-cut {recut.gpu}: already being re-cut"
    old = (
        list(recut.old)
        if recut.old is not None
        else [sid for sid, s in current.items() if gpu_key(s) == recut.gpu]
    )
    busy = [sid for sid in old if not view.is_free(sid)]
    assert not busy, f"re-cut {recut.gpu}: slices held: {busy}"
    assert recut.old is not None or all(gpu_key(s) == recut.gpu for s in recut.slices), (
        f"re-cut {recut.gpu}: a new slice is on another GPU"
    )
    return old


def reshape_holder(recut: Recut, old: Sequence[str]) -> Holder:
    """What holds a card's old slices while it is re-cut, as production's reshape record
    does (sched.pool's reshape holders): nothing is placed on them, the card is still the
    pool's (placement and elastic still know what it can become), and it is not idle."""
    return Holder(alloc=f"reshape:{recut.gpu}", owner=RESHAPE_OWNER, slices=tuple(old))


def begin_recut(
    recut: Recut,
    current: dict[str, dict[str, Any]],
    view: PoolView,
    recutting: dict[str, float],
    pending: list[tuple[float, int, Recut]],
    made: list[tuple[float, str]],
    now: float,
    cost: float,
    touch: Callable[[Iterable[str], float], None],
) -> None:
    """Start a re-cut: its old slices are touched (their card changed now) and held by the
    re-cut (reshape_holder) until now + cost (an event in `pending`), and it is counted in
    `made`."""
    old = recut_old(recut, current, view, recutting)
    touch(old, now)
    view.hold(old, reshape_holder(recut, old))
    recutting[recut.gpu] = now + cost
    heapq.heappush(pending, (now + cost, len(made), replace(recut, old=tuple(old))))
    made.append((now, recut.gpu))


def finish_recut(
    recut: Recut, current: dict[str, dict[str, Any]], view: PoolView, recutting: dict[str, float]
) -> list[str]:
    """A re-cut whose cost has elapsed: its old slices leave `current` and its new slices
    join (ids: returned). The caller rebuilds the view (the slice set changed)."""
    del recutting[recut.gpu]
    view.unhold(f"reshape:{recut.gpu}")
    for sid in recut.old or ():
        del current[sid]
    for entry in recut.slices:
        assert entry["id"] not in current, f"re-cut {recut.gpu}: {entry['id']} exists"
        current[entry["id"]] = entry
    return [e["id"] for e in recut.slices]


def blocked_cards(recutting: Mapping[str, float]) -> dict[str, str]:
    """ElasticInputs.blocked for the cards being re-cut (production: its reshape records)."""
    return {gpu: "being re-cut" for gpu in recutting}


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
    elastic: ElasticOf | None = None,
) -> Run:
    """`elastic`: the pass runs with elastic re-cuts (schedule_pass(..., elastic=...), the
    one scheduler) and the re-cuts it decides are made as a hook's are."""
    current: dict[str, dict[str, Any]] = {s["id"]: s for s in slices}
    view = PoolView(slices)
    run = Run(name, total_mib)
    by_id = {j.id: j for j in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.arrival, j.id))
    running: list[tuple[float, str]] = []  # (end, job id)
    pending: list[tuple[float, int, Recut]] = []  # (ready, order, re-cut) mid-cost
    recutting: dict[str, float] = {}
    queue: dict[str, QueueEntry] = {}
    groups: dict[tuple[JobRequest, int], int] = {}  # (shape, priority) -> group number
    shapes: list[JobRequest] = []  # group number -> shape
    keys: dict[str, int] = {}  # entry id -> group number
    index = 0
    tick = 0
    changed: dict[str, datetime] = {}  # GPU key -> when a hold began or ended, or a re-cut
    inputs = None  # the elastic inputs; rebuilt when the slice set changes

    def touch(slice_ids: Iterable[str], at: float) -> None:
        moment = T0 + timedelta(seconds=at)
        for sid in slice_ids:
            entry = current.get(sid)
            if entry is not None:
                changed[gpu_key(entry)] = moment

    def rebuild() -> None:
        nonlocal view
        began = time.perf_counter()
        holders = list(view.holds.values())
        view = PoolView(list(current.values()), holders)
        run.rebuild_s += time.perf_counter() - began
        run.rebuilds += 1

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
            touch(view.unhold(job_id).slices, end)
        changed_set = False
        while pending and pending[0][0] <= now:
            _, _, recut = heapq.heappop(pending)
            touch(finish_recut(recut, current, view, recutting), now)
            changed_set = True
        if changed_set:
            rebuild()
            inputs = None
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
        entries = trimmed(queue, view, keys, shapes) if trim else list(queue.values())
        if elastic is not None and inputs is None:
            inputs = elastic(current, changed)
        if inputs is not None:
            inputs = replace(inputs, changed=changed, blocked=blocked_cards(recutting))
        result = schedule_pass(entries, view, clock, policy, elastic=inputs)
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
            touch(placement.slices, now)
        never = {shapes[keys[entry.id]] for entry, _ in result.never}
        for entry_id in [i for i in queue if never and shapes[keys[i]] in never]:
            del queue[entry_id]  # every entry of a shape that can never fit, trimmed or not
            run.refused.append(entry_id)
        decided = [Recut(r.card.key, r.slices(), tuple(r.card.slices)) for r in result.recuts]
        if hook is not None:
            context = PassContext(
                now, clock, view, list(queue.values()), result, dict(current), dict(recutting)
            )
            decided += list(hook(context))
        for recut in decided:  # the slice set stays as it is until the re-cut is done
            begin_recut(
                recut, current, view, recutting, pending, run.recuts, now, recut_cost, touch
            )
    return run
