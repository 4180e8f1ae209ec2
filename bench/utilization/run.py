"""Utilization benchmark: static whole-card allocation vs gpupoolctl pooling on one job trace.

    python bench/utilization/run.py [--seed 2025] [--layout mixed] [--json FILE]

See README.md for the definitions. Both runs replay the same seeded trace (jobtrace.py) in
virtual time through gpupoolctl.sched's schedule_pass / order_queue / place (replay.py) on
the bundled simulated pool:

  static  the `training` layout applied (every card whole); every job holds whole cards
          (`profile="gpu"`, at least its memory), all at one priority: FIFO.
  pooled  the `--layout` label applied (default `mixed`); every job asks its memory only
          (best-fit: the smallest slice that fits), multi-GPU jobs on one node; the
          trace's priorities (training low, inference normal) with aging.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import simpool  # noqa: E402
from jobtrace import Job, make_trace  # noqa: E402
from replay import Run, replay  # noqa: E402

from gpupoolctl.sched import JobRequest  # noqa: E402


def static_request(job: Job) -> JobRequest:
    return (
        JobRequest(gpus=job.gpus, profile="gpu", memory_mib=None, same_node=job.gpus > 1)
        if job.memory_mib <= 0
        else _whole(job)
    )


def _whole(job: Job) -> JobRequest:
    # A whole card with at least the job's memory. JobRequest.validate() refuses profile and
    # memory together for users; place() takes both as filters, which is what this needs.
    return JobRequest(
        gpus=job.gpus, profile="gpu", memory_mib=job.memory_mib, same_node=job.gpus > 1
    )


def pooled_request(job: Job) -> JobRequest:
    return JobRequest(gpus=job.gpus, memory_mib=job.memory_mib, same_node=job.gpus > 1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(0, min(len(ordered) - 1, round(q * (len(ordered) - 1))))
    return ordered[rank]


def metrics(run: Run, jobs: list[Job]) -> dict[str, Any]:
    done = [j for j in jobs if j.id in run.starts]
    makespan = max(run.ends.values()) - min(j.arrival for j in jobs)
    used = sum(j.memory_mib * j.gpus * j.duration for j in done)
    held = sum(run.held_mib[j.id] * j.duration for j in done)
    waits = [run.starts[j.id] - j.arrival for j in done]
    by_kind = {}
    for kind in ("inference", "training"):
        kind_waits = [run.starts[j.id] - j.arrival for j in done if j.kind == kind]
        by_kind[kind] = {
            "mean_wait_min": statistics.fmean(kind_waits) / 60 if kind_waits else 0.0,
            "p95_wait_min": percentile(kind_waits, 0.95) / 60,
        }
    return {
        "name": run.name,
        "jobs_run": len(done),
        "refused": len(run.refused),
        "makespan_h": makespan / 3600,
        "utilization": used / (run.total_mib * makespan),
        "held_utilization": held / (run.total_mib * makespan),
        "mean_wait_min": statistics.fmean(waits) / 60,
        "p95_wait_min": percentile(waits, 0.95) / 60,
        "by_kind": by_kind,
        "passes": run.passes,
    }


def bound(jobs: list[Job], total_mib: int) -> dict[str, float]:
    """The trace's capacity bound: no schedule can finish before the last job could (its
    arrival + duration), nor before the pool's memory has had time to hold all the work
    (total job memory-time / total memory, from the first arrival)."""
    start = min(j.arrival for j in jobs)
    work = sum(j.memory_mib * j.gpus * j.duration for j in jobs)
    by_arrival = max(j.arrival + j.duration for j in jobs) - start
    by_memory = work / total_mib
    makespan = max(by_arrival, by_memory)
    return {
        "makespan_h": makespan / 3600,
        "by_arrival_h": by_arrival / 3600,
        "by_memory_h": by_memory / 3600,
        "utilization": work / (total_mib * makespan),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--layout", default="mixed", choices=["mixed", "inference"])
    parser.add_argument("--mix", default="issue", choices=["issue", "broad"])
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply the number of jobs (load sweep)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    jobs = make_trace(args.seed, round(1800 * args.scale), round(48 * args.scale), args.mix)
    whole = simpool.pool_slices("training")
    sliced = simpool.pool_slices(args.layout)
    total = sum(s["memory_mib"] for s in whole)  # physical memory: the same for both runs
    static = replay("static", jobs, whole, total, _whole, lambda j: 50)
    pooled = replay("pooled", jobs, sliced, total, pooled_request, lambda j: j.priority)
    rows = [metrics(static, jobs), metrics(pooled, jobs)]
    limit = bound(jobs, total)

    inference = sum(1 for j in jobs if j.kind == "inference")
    sliced_gib = sum(s["memory_mib"] for s in sliced) / 1024
    print(
        f"trace (seed {args.seed}, mix {args.mix}, x{args.scale:g}): {len(jobs)} jobs in 24 h "
        f"({inference} inference, {len(jobs) - inference} training); pool: "
        f"{len({s['host'] for s in whole})} hosts, {len(whole)} cards, {total / 1024:.0f} GiB; "
        f"static = whole cards, pooled = `{args.layout}` layout ({len(sliced)} slices, "
        f"{sliced_gib:.0f} GiB)"
    )
    print(f"{'':34s}{'static':>12s}{'pooled':>12s}")
    lines = [
        ("GPU-memory utilization (used)", "utilization", "{:.1%}"),
        ("  memory held by jobs", "held_utilization", "{:.1%}"),
        ("mean queue wait (min)", "mean_wait_min", "{:.1f}"),
        ("p95 queue wait (min)", "p95_wait_min", "{:.1f}"),
        ("makespan (h)", "makespan_h", "{:.2f}"),
        ("jobs run / refused", None, None),
    ]
    for label, key, fmt in lines:
        if key is None:
            cells = [f"{r['jobs_run']}/{r['refused']}" for r in rows]
        else:
            cells = [fmt.format(r[key]) for r in rows]
        print(f"{label:34s}{cells[0]:>12s}{cells[1]:>12s}")
    for kind in ("inference", "training"):
        cells = [
            f"{r['by_kind'][kind]['mean_wait_min']:.0f}/{r['by_kind'][kind]['p95_wait_min']:.0f}"
            for r in rows
        ]
        print(f"{'  ' + kind + ' wait mean/p95 (min)':34s}{cells[0]:>12s}{cells[1]:>12s}")
    ratio = rows[1]["utilization"] / rows[0]["utilization"]
    share = rows[1]["utilization"] / limit["utilization"]
    print(
        f"capacity bound: makespan >= {limit['makespan_h']:.2f} h (arrivals: "
        f"{limit['by_arrival_h']:.2f} h, memory: {limit['by_memory_h']:.2f} h) -> "
        f"utilization <= {limit['utilization']:.1%}"
    )
    met_ratio = "met" if ratio >= 2 else "NOT met"
    met_share = "met" if share >= 0.9 else "NOT met"
    print(
        f"pooled / static utilization: {ratio:.2f}x (target >= 2x: {met_ratio}); "
        f"pooled / bound: {share:.1%} (target >= 90%: {met_share})"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"runs": rows, "bound": limit, "ratio": ratio, "share_of_bound": share}, indent=2
            )
        )


if __name__ == "__main__":
    main()
