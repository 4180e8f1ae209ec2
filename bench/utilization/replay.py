"""Replay a trace in virtual time through the real queue and placement code.

Event loop: at each arrival or completion time, completions free their slices (view.unhold),
arrivals join the queue (QueueEntry, enqueued at their arrival), then one
`gpupoolctl.sched.schedule_pass` runs: `order_queue` (priority, FIFO, aging) and `place`
for each entry on the PoolView; every placement starts at once and runs its duration.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from jobtrace import Job  # type: ignore[import-not-found]  # bench/utilization/jobtrace.py

from gpupoolctl.sched import JobRequest, PoolView, QueueEntry, schedule_pass

T0 = datetime(2025, 6, 2, tzinfo=UTC)


@dataclass
class Run:
    name: str
    total_mib: int  # physical memory of the pool (whole cards), the denominator
    starts: dict[str, float] = field(default_factory=dict)
    ends: dict[str, float] = field(default_factory=dict)
    held_mib: dict[str, int] = field(default_factory=dict)  # memory of the slices it held
    refused: list[str] = field(default_factory=list)
    passes: int = 0


def replay(
    name: str,
    jobs: list[Job],
    slices: list[dict[str, Any]],
    total_mib: int,
    request_of: Any,
    priority_of: Any,
    policy: str = "best-fit",
) -> Run:
    view = PoolView(slices)
    run = Run(name, total_mib)
    by_id = {j.id: j for j in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.arrival, j.id))
    running: list[tuple[float, str]] = []  # (end, job id)
    queue: dict[str, QueueEntry] = {}
    index = 0
    while index < len(arrivals) or running or queue:
        times = []
        if index < len(arrivals):
            times.append(arrivals[index].arrival)
        if running:
            times.append(running[0][0])
        if not times:  # queued work that can never start
            run.refused.extend(queue)
            break
        now = min(times)
        while running and running[0][0] <= now:
            _, job_id = heapq.heappop(running)
            view.unhold(job_id)
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
            index += 1
        result = schedule_pass(list(queue.values()), view, T0 + timedelta(seconds=now), policy)
        run.passes += 1
        for entry, placement in result.placed:
            job = by_id[entry.id]
            del queue[entry.id]
            run.starts[job.id] = now
            run.ends[job.id] = now + job.duration
            run.held_mib[job.id] = sum(view.slices[s]["memory_mib"] for s in placement.slices)
            heapq.heappush(running, (now + job.duration, job.id))
        for entry, _ in result.never:
            del queue[entry.id]
            run.refused.append(entry.id)
    return run
