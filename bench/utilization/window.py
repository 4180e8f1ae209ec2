"""Measures over the day window [0, W) of arrivals (the contended day), not the makespan.

- utilization: sum over jobs of memory used x GPUs x (run time inside the window) /
  (physical pool memory x W); `held` the same with the memory of the slices held;
- finished: jobs whose run ended inside the window (end <= W), per class;
- waits per class, over the jobs that arrived in the window and can run at all (refused
  ones, which no slice of the pool can ever serve, are counted apart): start - arrival, or,
  for a job still queued at W, W - arrival (it has waited at least that long, so a
  percentile that lands on such a job is a lower bound, marked `censored`);
- recuts: re-cuts made (0 without a hook);
- bound(): the most utilization any schedule could reach in the window (see there).
"""

from __future__ import annotations

from typing import Any

from jobtrace import DAY, Job  # type: ignore[import-not-found]
from replay import Run  # type: ignore[import-not-found]

CLASSES = ("inference", "training")


def overlap(start: float, end: float, window: float) -> float:
    return max(0.0, min(end, window) - max(start, 0.0))


def percentile(values: list[tuple[float, bool]], q: float) -> tuple[float, bool]:
    """The nearest-rank q-quantile of (value, censored) pairs: (value, censored)."""
    ordered = sorted(values)
    if not ordered:
        return 0.0, False
    rank = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[rank]


def metrics(run: Run, jobs: list[Job], window: float = DAY) -> dict[str, Any]:
    inside = [j for j in jobs if 0 <= j.arrival < window]
    refused = set(run.refused)
    used = held = 0.0
    for job in inside:
        if job.id in run.starts:
            seconds = overlap(run.starts[job.id], run.ends[job.id], window)
            used += job.memory_mib * job.gpus * seconds
            held += run.held_mib[job.id] * seconds
    capacity = run.total_mib * window
    by_class: dict[str, Any] = {}
    for kind in CLASSES:
        mine = [j for j in inside if j.kind == kind]
        waits: list[tuple[float, bool]] = []
        for job in mine:
            if job.id in refused:
                continue
            start = run.starts.get(job.id)
            if start is not None and start < window:
                waits.append((start - job.arrival, False))
            else:  # still queued at the end of the window: waited at least this long
                waits.append((window - job.arrival, True))
        p50, p50_censored = percentile(waits, 0.50)
        p95, p95_censored = percentile(waits, 0.95)
        by_class[kind] = {
            "jobs": len(mine),
            "finished": sum(1 for j in mine if run.ends.get(j.id, window + 1) <= window),
            "refused": sum(1 for j in mine if j.id in refused),
            "queued_at_end": sum(1 for _, censored in waits if censored),
            "p50_wait_min": p50 / 60,
            "p50_censored": p50_censored,
            "p95_wait_min": p95 / 60,
            "p95_censored": p95_censored,
        }
    return {
        "name": run.name,
        "utilization": used / capacity,
        "held_utilization": held / capacity,
        "finished": sum(c["finished"] for c in by_class.values()),
        "refused": sum(c["refused"] for c in by_class.values()),
        "queued_at_end": sum(c["queued_at_end"] for c in by_class.values()),
        "by_class": by_class,
        "recuts": len(run.recuts),
        "passes": run.passes,
        "rebuilds": run.rebuilds,
    }


def bound(
    jobs: list[Job], capacity_mib: int, window: float = DAY, step: float = 300.0
) -> dict[str, float]:
    """The most GPU-memory utilization any schedule could reach in the window.

    `simple`: min(1, work the jobs could do inside the window / capacity), where a job can
    do at most memory x GPUs x min(duration, W - arrival) there (it cannot start before it
    arrives): the issue's bound, with that one refinement.

    `refined`: split the window at any time s. Before s the pool can do at most
    min(capacity x s, sum of memory x GPUs x min(duration, s - arrival) over the jobs that
    arrived before s); after s at most min(capacity x (W - s), sum of memory x GPUs x
    min(duration, W - max(arrival, s))) (a job that arrived before s may still run after it
    if it started late, hence max(arrival, s) and no job left out). Every s gives a valid
    bound (the two parts are disjoint times); the minimum over s (every `step` seconds) is
    kept, and the same with hour-long segments (each segment at most the smaller of its
    capacity and what the jobs that arrived by its end could do in it). It sees that the
    pool starts empty and that work arriving late cannot fill the early hours. Like the
    simple bound it ignores slice granularity, vendors, sites and the one-node rule: it is
    optimistic for every schedule (a fluid, preemptible relaxation)."""
    capacity = capacity_mib * window
    items = [
        (j.arrival, j.duration, j.memory_mib * j.gpus) for j in jobs if 0 <= j.arrival < window
    ]
    simple = sum(m * min(d, window - a) for a, d, m in items)
    best = simple
    s = step
    while s < window:
        before = sum(m * min(d, s - a) for a, d, m in items if a < s)
        after = sum(m * min(d, window - max(a, s)) for a, d, m in items)
        best = min(best, min(capacity_mib * s, before) + min(capacity_mib * (window - s), after))
        s += step
    segments, u = 0.0, 0.0
    while u < window:
        v = min(window, u + 3600.0)
        can = sum(m * min(d, v - max(a, u)) for a, d, m in items if a < v)
        segments += min(capacity_mib * (v - u), can)
        u = v
    best = min(best, segments)
    return {"simple": min(1.0, simple / capacity), "refined": min(1.0, best / capacity)}


def granular_bound(
    jobs: list[Job],
    capacity_mib: int,
    sizes: dict[str, list[int]],
    window: float = DAY,
) -> float:
    """The most utilization a pool that hands each job a slice of its own can reach in the
    window, whatever its layouts: a job holds at least the smallest slice any card it may
    use could be cut into (`sizes`: vendor -> every slice size its cards can have, from
    the catalogs), so memory it holds but does not use is lost to everyone. Fill the
    window's held capacity with the jobs that waste the least first (a fractional
    knapsack: value = memory used x time in the window, weight = memory held x that time):
    an upper bound for every one-job-per-slice schedule, ignoring time, sites and nodes.
    """
    capacity = capacity_mib * window
    items = []
    for job in jobs:
        if not 0 <= job.arrival < window:
            continue
        time_in = min(job.duration, window - job.arrival)
        pools = [sizes[job.vendor]] if job.vendor else list(sizes.values())
        fits = [size for vendor_sizes in pools for size in vendor_sizes if size >= job.memory_mib]
        if not fits:
            continue
        held = min(fits)
        items.append((job.memory_mib / held, job.memory_mib * job.gpus * time_in, held))
    used, room = 0.0, capacity
    for ratio, value, _ in sorted(items, key=lambda i: -i[0]):
        weight = value / ratio
        take = min(1.0, room / weight) if weight else 1.0
        used += value * take
        room -= weight * take
        if room <= 0:
            break
    return min(1.0, used / capacity)
