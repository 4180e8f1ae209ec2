"""Replay a trace of teams' jobs in virtual time through the one scheduler, with reclaim.

Every pass is `gpupoolctl.sched.snapshot.run_pass(snapshot, preempt=True, no_preempt=...)`
on the snapshot `gpupoolctl.sched.snapshot.snapshot` builds from the replay's state
(bench/utilization's `Recorded`) and the pool policy, the calls production's scheduling
loop makes (gpupoolctl/jobs/scheduling.py); this module only executes what it returns, as
production's jobs side does:

- placed: the job starts at once and runs its remaining work; the hold is recorded with
  the time it began (as the ledger's allocation has it) and whether it borrowed
  (`result.borrowed`, as record_placed keeps it);
- preempt (a reclaim, `result.reclaim`, or priority preemption inside a team): each victim
  is signalled now and its slices are free GRACE_S later (they stay held meanwhile); the
  entry it was chosen for is not given victims again while they stop (`no_preempt`, as
  jobs.scheduling's `stopping`). A victim that ends on its own during the grace period is
  done. Otherwise it is requeued as production requeues it (jobs.enqueue: a new queue
  entry, enqueued when it stopped, next in arrival order) with its remaining work:
  training checkpoints every CHECKPOINT_S of its run, so the run since the last
  checkpoint is lost; inference restarts whole (all of the try's run is lost);
- never: every queued entry of that shape is refused (as bench/utilization's replay does).

The quotas in force (windows applied) and the fair-share history (ShareInputs) are the
snapshot's, as production's: per team, GiB-seconds of holds that ended, each added at its
end and decayed with gpupoolctl.ledger.state.decayed (the replay's State.team_history, as
ledger State._count_usage keeps it), plus what each team holds now times how long it has
held it (added by the snapshot).

Reclaim honours guarantees: at every reclaim the replay recomputes, from its own record of
who holds what (not from the scheduler's Usage), each victim team's GPU memory per scope of
its quota in force once the victims are gone, and counts a violation wherever that is
below the scope's nominal (`guarantee_violations`; must stay 0).

Elastic re-cuts (a policy with an elastic section, the `+e` columns): every pass's
snapshot has the elastic section in force at the pass's time (a window's override
applies), and the re-cuts it returns (PassResult.recuts) are made exactly as
bench/utilization's replay makes them (its begin_recut / finish_recut): every slice of the
card must be free, the card is reserved for `recut_cost` seconds, then its slices are
replaced (at the first pass at or after that). The state keeps when each card last changed
(a hold began or ended, a re-cut), for min-idle. The queue is not trimmed then (trimming is
exact only without re-cuts: plan_recuts packs a card for the whole waiting queue), as
bench/utilization's elastic column.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from jobtrace import Job  # type: ignore[import-not-found]  # bench/utilization/jobtrace.py
from replay import (  # type: ignore[import-not-found]  # bench/utilization
    RECUT_COST_S,
    T0,
    Recorded,
    Recut,
    _shape,
    begin_recut,
    finish_recut,
    pass_snapshot,
    placed_hold,
    trimmed,
)
from window import overlap, percentile  # type: ignore[import-not-found]  # bench/utilization

from gpupoolctl.ledger.state import decayed
from gpupoolctl.ledger.units import format_ts
from gpupoolctl.policy.model import GPU_MEMORY, PoolPolicy, QuotaScope
from gpupoolctl.sched import JobRequest, QueueEntry
from gpupoolctl.sched.elastic import InHosts
from gpupoolctl.sched.modes import run_pass
from gpupoolctl.sched.shares import slice_amounts

CHECKPOINT_S = 1800.0  # training writes a checkpoint every 30 min of its run (assumption)
GRACE_S = 30.0  # a victim's slices are free this long after it is signalled


@dataclass
class Try:
    """One run of a job: from start to end (planned, or when it was stopped)."""

    start: float
    end: float
    held_mib: int  # memory of the slices it held
    slices: tuple[str, ...]
    stopped: bool = False  # preempted (reclaimed or by priority), requeued
    useful_s: float = 0.0  # seconds of its run that count as work done (kept)


@dataclass
class Reclaim:
    at: float
    by: str  # the entry (job id) the victims were chosen for
    team: str | None  # its team
    victims: tuple[str, ...]
    reclaim: bool  # a reclaim (else priority preemption inside a team)


@dataclass
class TeamRun:
    name: str
    total_mib: int
    tries: dict[str, list[Try]] = field(default_factory=dict)
    queued: dict[str, list[list[float | None]]] = field(default_factory=dict)  # [[enq, start]]
    finished: dict[str, float] = field(default_factory=dict)  # job id -> when it ended
    refused: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # queued when `until` came
    reclaims: list[Reclaim] = field(default_factory=list)
    violations: list[dict[str, Any]] = field(default_factory=list)
    passes: int = 0
    pass_s: float = 0.0
    recuts: list[tuple[float, str]] = field(default_factory=list)  # (time decided, GPU key)
    rebuilds: int = 0  # passes that saw a new slice set


def requeued_remaining(job: Job, ran: float, remaining: float) -> tuple[float, float]:
    """(work kept, work left) of a try of `job` that ran `ran` seconds of its `remaining`
    work before it was stopped: training keeps what its last checkpoint saved (every
    CHECKPOINT_S of this run), inference nothing."""
    ran = max(0.0, min(ran, remaining))
    kept = math.floor(ran / CHECKPOINT_S) * CHECKPOINT_S if job.kind == "training" else 0.0
    return kept, remaining - kept


def guarantee_violations(
    victims: Sequence[str],
    holds: Mapping[str, tuple[str | None, tuple[str, ...]]],
    quotas: Mapping[str, tuple[QuotaScope, ...]],
    slices: Mapping[str, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Where stopping `victims` takes their team below its nominal: per team and scope of
    its quota in force that the victims' slices count in, GPU memory held once they are
    gone < nominal. `holds`: job id -> (team, slice ids) of every job holding now (jobs
    already being stopped left out); computed here from scratch, not from sched.shares."""
    gone = set(victims)
    out: list[dict[str, Any]] = []
    for team in sorted({str(holds[v][0]) for v in gone if v in holds and holds[v][0]}):
        for scope in quotas.get(team, ()):
            nominal = scope.nominal.get(GPU_MEMORY)
            if nominal is None:
                continue
            before = taken = 0
            for job_id, (owner, ids) in holds.items():
                if owner != team:
                    continue
                amount = sum(slice_amounts(slices[s], scope).get(GPU_MEMORY, 0) for s in ids)
                before += amount
                if job_id in gone:
                    taken += amount
            if taken and before - taken < nominal:
                out.append(
                    {
                        "team": team,
                        "scope": scope.describe(),
                        "held_after_mib": before - taken,
                        "nominal_mib": nominal,
                    }
                )
    return out


def replay(
    name: str,
    jobs: list[Job],
    slices: list[dict[str, Any]],
    total_mib: int,
    request_of: Callable[[Job], JobRequest],
    pool_policy: PoolPolicy,
    *,
    until: float | None = None,
    pass_interval: float = 60.0,
    grace_s: float = GRACE_S,
    trim: bool = True,
    policy: str = "best-fit",
    in_hosts: InHosts | None = None,
    recut_cost: float = RECUT_COST_S,
) -> TeamRun:
    """Replay `jobs` (each of team request_of(job).team) on `slices`; see the module doc.

    `pool_policy`: the teams and their quotas, the windows, and the elastic section (the
    one in force at each pass, windows applied, as production's snapshot reads it);
    `in_hosts` resolves its host patterns. With an elastic section the queue is never
    trimmed."""
    state = Recorded(slices)
    by_slice = state.slices  # every slice held now is in the pool now (re-cut cards are idle)
    elastic = pool_policy.elastic.enabled or any(w.elastic for w in pool_policy.windows)
    trim = trim and not elastic
    pending: list[tuple[float, int, Recut]] = []  # (ready, order, re-cut) mid-cost
    run = TeamRun(name, total_mib)
    by_id = {j.id: j for j in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.arrival, j.id))
    requests = {j.id: request_of(j) for j in jobs}
    remaining = {j.id: j.duration for j in jobs}
    events: list[tuple[float, int, str, str, int]] = []  # (time, order, kind, job, try no)
    order = 0
    queue: dict[str, QueueEntry] = {}
    entry_of_job: dict[str, str] = {}
    holding: dict[str, tuple[str | None, tuple[str, ...]]] = {}  # job -> (team, slices)
    stopping: dict[str, str] = {}  # victim job -> the entry id it is stopped for
    ended: dict[str, list[Any]] = {}  # team -> [GiB-seconds decayed to ts, ts]
    groups: dict[tuple[JobRequest, int], int] = {}
    shapes: list[JobRequest] = []
    keys: dict[str, int] = {}
    seq = 0
    index = 0
    tick = 0
    known = state.slices  # the slice set the last pass saw

    def push(at: float, kind: str, job_id: str) -> None:
        nonlocal order
        heapq.heappush(events, (at, order, kind, job_id, len(run.tries[job_id]) - 1))
        order += 1

    def enqueue(job: Job, at: float) -> None:
        nonlocal seq
        request = requests[job.id]
        tries = len(run.tries.get(job.id, ()))
        entry_id = job.id if tries == 0 else f"{job.id}#{tries + 1}"
        entry = QueueEntry(
            id=entry_id,
            priority=job.priority,
            seq=seq,
            enqueued=T0 + timedelta(seconds=at),
            request=replace(request, priority=job.priority),
            job=job.id,
        )
        seq += 1
        queue[entry_id] = entry
        entry_of_job[job.id] = entry_id
        run.queued.setdefault(job.id, []).append([at, None])
        group = (_shape(entry), entry.priority)
        if group not in groups:
            groups[group] = len(shapes)
            shapes.append(group[0])
        keys[entry_id] = groups[group]

    def count_usage(team: str | None, held_mib: int, start: float, end: float) -> None:
        """ledger State._count_usage: a hold that ended adds to its team's decayed usage."""
        if not team:
            return
        ts = format_ts(T0 + timedelta(seconds=end))
        before = ended.get(team)
        value = decayed(float(before[0]), str(before[1]), ts) if before else 0.0
        ended[team] = [value + held_mib / 1024 * max(0.0, end - start), ts]

    def history(ts: str) -> dict[str, float]:
        """ledger State.team_history: ended holds decayed to `ts` (the snapshot adds the
        holds now, as production's)."""
        return {team: decayed(float(v), str(at), ts) for team, (v, at) in ended.items()}

    state.history = history

    def end_try(job_id: str, at: float, stopped: bool, requeue: bool = True) -> None:
        job = by_id[job_id]
        last = run.tries[job_id][-1]
        team, _ids = holding.pop(job_id)
        state.touch(state.release(entry_key[job_id]).slices, at)
        del entry_key[job_id]
        count_usage(team, last.held_mib, last.start, at)
        stopping.pop(job_id, None)
        if not stopped:
            last.useful_s = remaining[job_id]
            remaining[job_id] = 0.0
            run.finished[job_id] = at
            return
        kept, left = requeued_remaining(job, at - last.start, remaining[job_id])
        last.end, last.stopped, last.useful_s = at, True, kept
        remaining[job_id] = left
        if requeue:
            enqueue(job, at)

    entry_key: dict[str, str] = {}  # job -> the alloc id of its hold

    while index < len(arrivals) or events or queue or pending:
        times = []
        if index < len(arrivals):
            times.append(arrivals[index].arrival)
        if events:
            times.append(events[0][0])
        if pending:
            times.append(pending[0][0])
        if queue and (times or (elastic and until is not None)):
            # cron runs the pass while work waits (with re-cuts, work may wait for one: its
            # batch window, a card's min-idle; the window's end stops the replay)
            times.append(tick * pass_interval)
        if not times:  # queued work that can never start
            run.refused.extend(entry_of_job_id(queue))
            break
        now = min(times)
        tick = max(tick, math.ceil(now / pass_interval))
        now = tick * pass_interval
        tick += 1
        if until is not None and now >= until:
            break
        while events and events[0][0] <= now:
            at, _, kind, job_id, try_no = heapq.heappop(events)
            if job_id not in holding or try_no != len(run.tries[job_id]) - 1:
                continue  # stale: that try already ended
            if kind == "free" and job_id not in stopping:
                continue
            end_try(job_id, at, stopped=(kind == "free"))
        while pending and pending[0][0] <= now:  # re-cuts whose cost has elapsed
            _, _, recut = heapq.heappop(pending)
            state.touch(finish_recut(recut, state), now)
        by_slice = state.slices
        if state.slices is not known:
            known = state.slices
            run.rebuilds += 1
        while index < len(arrivals) and arrivals[index].arrival <= now:
            enqueue(arrivals[index], arrivals[index].arrival)
            index += 1
        clock = T0 + timedelta(seconds=now)
        began = time.perf_counter()
        snap = pass_snapshot(state, pool_policy, clock, in_hosts)
        assert snap.shares is not None, "a shares replay needs a policy with teams"
        quotas = snap.shares.quotas
        view = snap.pool()
        entries = trimmed(queue, view, keys, shapes) if trim else list(queue.values())
        no_preempt = frozenset(stopping.values())
        result = run_pass(
            snap.with_queue(entries), policy, preempt=True, no_preempt=no_preempt, pool=view
        )
        run.pass_s += time.perf_counter() - began
        run.passes += 1
        for entry, placement in result.placed:
            job_id = str(entry.job)
            del queue[entry.id]
            assert job_id not in holding, f"{job_id}: placed while it holds slices"
            # The hold as the ledger keeps it: when it began (reclaim takes the newest first),
            # whether it borrowed.
            borrowed = {"borrowed": True} if entry.id in result.borrowed else {}
            state.hold(placed_hold(entry, placement.slices, clock, **borrowed))
            entry_key[job_id] = entry.id
            holding[job_id] = (entry.request.team, tuple(placement.slices))
            run.queued[job_id][-1][1] = now
            held = sum(by_slice[s]["memory_mib"] for s in placement.slices)
            run.tries.setdefault(job_id, []).append(
                Try(now, now + remaining[job_id], held, tuple(placement.slices))
            )
            push(now + remaining[job_id], "end", job_id)
            state.touch(placement.slices, now)
        never = {shapes[keys[entry.id]] for entry, _ in result.never}
        for entry_id in [i for i in queue if never and shapes[keys[i]] in never]:
            run.refused.append(str(queue[entry_id].job))
            del queue[entry_id]
        if result.preempt is not None:
            entry, victims = result.preempt
            fresh = [v for v in victims if v in holding and v not in stopping]
            if result.reclaim:
                others = {j: h for j, h in holding.items() if j not in stopping}
                bad = guarantee_violations(fresh, others, quotas, by_slice)
                for item in bad:
                    run.violations.append({**item, "at": now, "by": entry.job})
            run.reclaims.append(
                Reclaim(now, str(entry.job), entry.request.team, tuple(fresh), result.reclaim)
            )
            for victim in fresh:
                stopping[victim] = entry.id
                push(now + grace_s, "free", victim)
        decided = [Recut(r.card.key, r.slices(), tuple(r.card.slices)) for r in result.recuts]
        for recut in decided:  # as bench/utilization's replay makes them
            begin_recut(recut, state, view, pending, run.recuts, now, recut_cost)
    if until is not None:
        run.waiting.extend(entry_of_job_id(queue))
        # What happens by the end of the window without another pass: completions and
        # stops; a victim still in its grace period at the end stops when it is over.
        while events and (events[0][0] <= until or stopping):
            at, _, kind, job_id, try_no = heapq.heappop(events)
            if job_id not in holding or try_no != len(run.tries[job_id]) - 1:
                continue
            if kind == "free" and job_id not in stopping:
                continue
            if kind == "end" and at > until:
                continue  # runs past the window (its try keeps its planned end)
            end_try(job_id, at, stopped=(kind == "free"), requeue=False)
    return run


def entry_of_job_id(queue: Mapping[str, QueueEntry]) -> list[str]:
    return [str(e.job) for e in queue.values()]


# -- measures over the window ------------------------------------------------------------------

DAY_HOURS = (8, 20)  # a site's day, local time: 08:00-20:00 (the windows' hours)


def merge(name: str, runs: Sequence[TeamRun]) -> TeamRun:
    """Runs of disjoint jobs (the static split's sub-pools) as one."""
    out = TeamRun(name, runs[0].total_mib)
    for run in runs:
        out.tries.update(run.tries)
        out.queued.update(run.queued)
        out.finished.update(run.finished)
        out.refused += run.refused
        out.waiting += run.waiting
        out.reclaims += run.reclaims
        out.violations += run.violations
        out.passes += run.passes
        out.pass_s += run.pass_s
        out.recuts += run.recuts
        out.rebuilds += run.rebuilds
    return out


def is_day(job: Job, utc_offset_h: Mapping[str, int]) -> bool:
    hour = int((job.arrival / 3600 + utc_offset_h[str(job.site)]) % 24)
    return DAY_HOURS[0] <= hour < DAY_HOURS[1]


def team_metrics(
    run: TeamRun,
    jobs: list[Job],
    team_of: Callable[[Job], str],
    nominal_mib_s: Mapping[str, float],
    utc_offset_h: Mapping[str, int],
    window: float,
) -> dict[str, Any]:
    """Per team and for the pool, over the window [0, window) of arrivals; see README."""
    inside = [j for j in jobs if 0 <= j.arrival < window]
    refused = set(run.refused)
    capacity = run.total_mib * window
    teams: dict[str, Any] = {}
    pool = {"used": 0.0, "useful": 0.0, "held": 0.0}
    for team in sorted({team_of(j) for j in inside}):
        mine = [j for j in inside if team_of(j) == team]
        held = work = lost = 0.0
        stops = {"reclaimed": 0, "preempted": 0}
        waits: dict[str, list[tuple[float, bool]]] = {"day": [], "night": [], "all": []}
        for job in mine:
            memory = job.memory_mib * job.gpus
            for attempt in run.tries.get(job.id, ()):
                ran = overlap(attempt.start, attempt.end, window)
                held += attempt.held_mib * ran
                pool["used"] += memory * ran
                if attempt.stopped:
                    kept = overlap(attempt.start, attempt.start + attempt.useful_s, window)
                    work += memory * kept
                    lost += memory * (ran - kept)
                else:
                    work += memory * ran
            if job.id in refused:
                continue
            waited, censored = 0.0, False
            for enqueued, started in run.queued.get(job.id, ()):
                assert enqueued is not None
                if enqueued >= window:
                    continue
                if started is None or started >= window:
                    waited += window - enqueued  # still queued at the end: at least this
                    censored = True
                else:
                    waited += started - enqueued
            if job.id not in run.queued:  # arrived after the window's last pass
                waited, censored = window - job.arrival, True
            pair = (waited, censored)
            waits["all"].append(pair)
            waits["day" if is_day(job, utc_offset_h) else "night"].append(pair)
        ids = {j.id for j in mine}
        for stop in run.reclaims:
            for victim in stop.victims:
                if victim in ids:
                    stops["reclaimed" if stop.reclaim else "preempted"] += 1
        pool["useful"] += work
        pool["held"] += held
        row: dict[str, Any] = {
            "jobs": len(mine),
            "nominal_gib_avg": nominal_mib_s.get(team, 0.0) / window / 1024,
            "share_utilization": held / nominal_mib_s[team] if nominal_mib_s.get(team) else 0.0,
            "held_gib_h": held / 1024 / 3600,
            "work_gib_h": work / 1024 / 3600,
            "lost_gib_h": lost / 1024 / 3600,
            "finished": sum(1 for j in mine if run.finished.get(j.id, window + 1) <= window),
            "refused": sum(1 for j in mine if j.id in refused),
            "queued_at_end": sum(1 for _, censored in waits["all"] if censored),
            "reclaims_made": sum(1 for r in run.reclaims if r.reclaim and r.by in ids),
            "reclaims_suffered": stops["reclaimed"],
            "preempted_in_team": stops["preempted"],
        }
        for part, values in waits.items():
            for q in (0.50, 0.95):
                value, censored = percentile(values, q)
                label = f"p{round(q * 100)}"
                row[f"{part}_{label}_wait_min"] = value / 60
                row[f"{part}_{label}_censored"] = censored
            row[f"{part}_jobs"] = len(values)
        teams[team] = row
    return {
        "teams": teams,
        "utilization": pool["used"] / capacity,
        "useful_utilization": pool["useful"] / capacity,
        "held_utilization": pool["held"] / capacity,
        "reclaims": sum(1 for r in run.reclaims if r.reclaim),
        "victims": sum(len(r.victims) for r in run.reclaims),
        "violations": len(run.violations),
        # the most reclaims made for one job (the same job reclaiming again and again)
        "most_reclaims_one_job": max(
            Counter(r.by for r in run.reclaims if r.reclaim).values(), default=0
        ),
        "passes": run.passes,
        "pass_s": run.pass_s,
        "recuts": len(run.recuts),
    }
