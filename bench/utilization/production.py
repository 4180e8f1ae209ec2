"""Production's executor on virtual nodes with a virtual clock: what the benchmarks run
instead of a replay of their own (issue 32, part 3), as Kueue's performance test runs the
real scheduler with the execution mimicked.

What runs is production's code: every job is recorded as `submit` records it (the job,
then its queue entry through `JobsCore.enqueue`) at its arrival, on the ledger's clock;
`jobs.refreshing.refresh` (what `gpupoolctl schedule` runs from cron, and `submit` after
recording) settles, reaps and schedules in rounds: placements launched, victims stopped,
elastic re-cuts reserved, carried out through the agent's `partition` verb and the host's
slices read again. The ledger is a real one (not durable: no fsync), its clock virtual.

The nodes are virtual (`VirtualNodes`). A launch starts no process but a run of the job's
duration (its `sleep` argument) on the virtual clock; a poll reports it exited once that
much time has passed; a signal ends it. `facts` and `partition` are answered by the real
agent, in this process, on the node's simulated cards (the sim driver, its state in a
folder of the caller's): a re-cut changes the simulated card as `partition apply` would,
and takes no virtual time (the replay charged `--recut-cost` seconds for it).

Ticks: every `pass_interval` virtual seconds (cron's cadence), or with None at every event
(an arrival, a run's end), as the replay without a pass interval runs its passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from jobtrace import Job  # type: ignore[import-not-found]  # bench/utilization/jobtrace.py
from replay import T0, Run  # type: ignore[import-not-found]

from gpupoolctl.jobs import Jobs, JobSpec, Nodes
from gpupoolctl.jobs.events import Launched, Refused, Reshaped
from gpupoolctl.jobs.refreshing import refresh
from gpupoolctl.ledger import Ledger
from gpupoolctl.remote.results import HostResult
from gpupoolctl.remote.target import target_from_vars


class Clock:
    """The day's virtual time: the ledger's clock (a datetime), the executor's (epoch s)."""

    def __init__(self, start: datetime) -> None:
        self.at = start

    def now(self) -> datetime:
        return self.at

    def epoch(self) -> float:
        return self.at.timestamp()

    def micros(self) -> int:
        """The time in whole microseconds since the epoch, exactly (the datetime's grid)."""
        return (self.at - EPOCH) // timedelta(microseconds=1)


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(seconds: float) -> int:
    """Seconds on the clock's grid: whole microseconds (a trace's times have more digits)."""
    return round(seconds * 1e6)


class VirtualNodes:
    """Agents that run no process (see the module's text). `sim`: host -> the node's sim
    spec ({"template": ..., "state_dir": ...}), for the hosts whose `facts` and `partition`
    the real agent answers; any other verb, or those on another host, is an error."""

    def __init__(self, clock: Clock, sim: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.clock = clock
        self.sim = dict(sim or {})
        # node job id -> (started: epoch s, ends: epoch µs, on the clock's grid)
        self.runs: dict[str, tuple[float, int]] = {}
        self.ended: dict[str, int] = {}  # node job id -> exit code, once signalled

    def __call__(self, requests: list[tuple[Any, dict[str, Any]]]) -> list[HostResult]:
        return [self.answer(target.name, request) for target, request in requests]

    def answer(self, host: str, request: dict[str, Any]) -> HostResult:
        verb, args, now = request["verb"], request["args"], self.clock.epoch()
        if verb == "launch":
            seconds = float(args["argv"][-1])
            self.runs[args["job_id"]] = (now, self.clock.micros() + micros(seconds))
            return HostResult(host, "ok", data={"pid": len(self.runs), "started": now})
        if verb == "poll":
            found = {job_id: self.status(job_id) for job_id in args["job_ids"]}
            return HostResult(host, "ok", data={"jobs": found})
        if verb == "signal":
            self.ended[args["job_id"]] = 143
            return HostResult(host, "ok", data={"sent": True, "state": "exited"})
        if verb in ("facts", "partition") and host in self.sim:
            return self.agent(host, request)
        raise ValueError(f"virtual node {host}: no verb {verb!r}")

    def agent(self, host: str, request: dict[str, Any]) -> HostResult:
        """The real agent's answer on the node's simulated cards, in this process (the fake
        vendor modules it installs are taken out again after)."""
        from gpupoolctl import sim
        from gpupoolctl.agent.main import handle
        from gpupoolctl.agent.protocol import PROTOCOL_VERSION

        try:
            envelope = handle(
                {**request, "v": PROTOCOL_VERSION, "host": host, "sim": self.sim[host]}
            )
        finally:
            sim.deactivate()
        if envelope["ok"]:
            return HostResult(host, "ok", data=envelope["data"])
        error = envelope["error"]
        return HostResult(host, "failed", error=error["message"], error_type=error["type"])

    def status(self, job_id: str) -> dict[str, Any]:
        run = self.runs.get(job_id)
        if run is None:
            return {"state": "absent"}
        started, ends = run
        if job_id in self.ended:
            return {"state": "exited", "exit_code": self.ended[job_id], "ended": self.clock.epoch()}
        if self.clock.micros() >= ends:
            return {"state": "exited", "exit_code": 0, "ended": ends / 1e6, "started": started}
        return {"state": "running", "pid": 1, "started": started}

    def next_end(self) -> int | None:
        """The epoch microsecond the next run still going ends at, or None."""
        now = self.clock.micros()
        ends = [e for k, (_, e) in self.runs.items() if e > now and k not in self.ended]
        return min(ends, default=None)


def virtual_pool(
    ledger: Ledger,
    hosts: Sequence[str],
    nodes: VirtualNodes,
    *,
    policy: Any = None,
    in_hosts: Any = None,
) -> Jobs:
    """Production's jobs library on `ledger`, its nodes `nodes`, its clock theirs; with
    `policy` (a pool policy) and `in_hosts` (its host patterns' resolver) as the CLI gives
    them."""
    targets = [target_from_vars(h, {"transport": "local"}) for h in hosts]
    clock = nodes.clock.epoch
    return Jobs(
        ledger, Nodes(targets, nodes), owner="bench", clock=clock, policy=policy, in_hosts=in_hosts
    )


def record_arrival(jobs: Jobs, job: Job, request: Any) -> str:
    """The job as `submit` records it (job, then queue entry), in one transaction, at the
    clock's time; returns its id."""

    def build(tx: Any) -> str:
        # repr: the exact float back (a replay of the same day ends the job at the same time)
        spec = JobSpec(argv=["sleep", repr(job.duration)], request=request)
        record = {"id": f"j-{tx.next_seq}", "owner": jobs.owner, "run": 0, **spec.record()}
        tx.append("job", {**record, "state": "queued"})
        jobs.enqueue(tx, record)
        return str(record["id"])

    return str(jobs.ledger.write(build).value)


@dataclass
class Day:
    """What a day through the executor did, in the replay's terms (job names are the
    trace's): `run` for the metrics, and job id -> the trace's job."""

    run: Run
    traced: dict[str, Job] = field(default_factory=dict)


def run_day(
    jobs: Jobs,
    clock: Clock,
    trace: Sequence[Job],
    request_of: Callable[[Job], Any],
    pass_interval: float | None = 60.0,
    until: float | None = None,
    tick: Callable[[float, float], None] | None = None,
    *,
    name: str = "production",
    total_mib: int = 0,
    priority_of: Callable[[Job], int] | None = None,
    nodes: VirtualNodes | None = None,
) -> Day:
    """Production's loop over the day, from the clock's time on. Each job is recorded at
    its arrival (record_arrival, the clock set to it); at each tick (every `pass_interval`
    virtual seconds, or with None at the next arrival or end of a run) `refresh` runs;
    `tick(virtual seconds, wall seconds the tick took)` after each. Stops at `until`
    (virtual seconds; what is still queued then is `waiting`), or without it once every
    job has arrived and left the ledger's live state, or nothing more can happen (what is
    still queued: `refused`, as the replay counts it). `priority_of`: the job's priority,
    else its request's. `nodes`: the pool's virtual nodes (ticks at events need their runs'
    ends)."""
    day = Day(Run(name, total_mib))
    run = day.run
    assert pass_interval is not None or nodes is not None, "ticks at events need the nodes"
    names: dict[str, str] = {}  # job id -> the trace's job id
    pending = sorted(trace, key=lambda j: (j.arrival, j.id))
    next_job = 0
    while True:
        seconds = (clock.at - T0).total_seconds()
        if until is not None and seconds >= until:
            run.waiting.extend(names[e["job"]] for e in jobs.ledger.read().state.queue.values())
            break
        began = time.perf_counter()
        at = clock.at
        while next_job < len(pending) and micros(pending[next_job].arrival) <= micros(seconds):
            job = pending[next_job]
            request = request_of(job)
            if priority_of is not None:
                request = replace(request, priority=priority_of(job))
            clock.at = at_seconds(job.arrival)  # submit records it as it comes
            job_id = record_arrival(jobs, job, request)
            names[job_id], day.traced[job_id] = job.id, job
            next_job += 1
        clock.at = at
        outcome = refresh(jobs)
        run.passes += 1
        state = jobs.ledger.read().state
        _count(state, outcome.events, names, seconds, run)
        if tick is not None:
            tick(seconds, time.perf_counter() - began)
        if next_job == len(pending) and not state.jobs:
            break
        nxt = _next_tick(seconds, pass_interval, pending, next_job, nodes)
        if nxt is None:  # nothing will arrive or end: what waits can never start
            run.refused.extend(names[e["job"]] for e in state.queue.values())
            break
        clock.at = at_seconds(nxt)
        assert clock.at > at, f"the clock must move on from {seconds} s"
    return day


def at_seconds(seconds: float) -> datetime:
    """The instant `seconds` after the trace's start, on the clock's grid."""
    return T0 + timedelta(microseconds=micros(seconds))


def _next_tick(
    seconds: float,
    pass_interval: float | None,
    pending: Sequence[Job],
    next_job: int,
    nodes: VirtualNodes | None,
) -> float | None:
    if pass_interval is not None:
        return seconds + pass_interval
    assert nodes is not None
    times = [pending[next_job].arrival] if next_job < len(pending) else []
    end = nodes.next_end()
    if end is not None:
        times.append((end - micros(T0.timestamp())) / 1e6)
    return min(times, default=None)


def _count(
    state: Any, events: Sequence[Any], names: Mapping[str, str], now: float, run: Run
) -> None:
    """The tick's starts (memory held, from the slices its placement holds, in the ledger's
    `state` after the tick), refusals and re-cuts, into `run`."""
    for event in events:
        if isinstance(event, Launched) and event.kind == "started":
            job = state.jobs[event.job]
            name = names[event.job]
            run.starts[name] = now
            run.ends[name] = now + float(job["argv"][-1])
            held = job["placement"]["slices"]
            run.held_mib[name] = sum(int(state.slices[s]["memory_mib"]) for s in held)
        elif isinstance(event, Reshaped) and event.kind == "reshaped":
            run.recuts.append((now, event.gpu))
        elif isinstance(event, Refused) and event.code is not None:  # can never fit
            run.refused.append(names[str(event.job)])
