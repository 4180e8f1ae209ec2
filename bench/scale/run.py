"""How the scheduling pass grows with the pool: a day on a simulated fleet of 1,000 nodes.

    python bench/scale/run.py [--nodes 1000] [--scale 300] [--hours 24] [--seed 2025]
                              [--pass-interval 60] [--profile] [--json FILE]

The fleet: `--nodes` hosts of the bundled pool's three 8-GPU classes (DGX H100, DGX H100 cut
by MIG, MI300X), in turn, half of them in each of two sites, each after the `mixed` layout
of playbooks/layouts.yaml, really applied to a sim node (bench/utilization/simpool.py) and
copied under the fleet's host names. The day: bench/utilization's reference trace
(jobtrace.make_trace) with `--scale` times its jobs, each asking for its memory only
(best-fit), replayed in virtual time through bench/utilization/replay.py, i.e. the real
`sched.schedule_pass` on a `PoolView`, once every `--pass-interval` seconds as `gpupoolctl
schedule` from cron runs it, over the whole queue (production trims nothing; neither does
this).

It reports, per pass: its wall time and how many jobs it was given; over the day: p50, p95
and the maximum of the pass time, the peak queue, the pass time against the queue length (a
least-squares line: what the pass costs per 1,000 queued jobs), and the process's peak
resident memory. `--profile` runs the day under cProfile and prints where its time goes
(cProfile slows the passes: read its shares, not its seconds).

The ledger's size at the end of a day and the latency of `jobs` / `pool` / `top --once` on
it are production_day.py's: they need the day's records as production writes them.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
UTILIZATION = ROOT / "bench" / "utilization"
for folder in (ROOT, UTILIZATION):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import jobtrace  # noqa: E402  # bench/utilization/jobtrace.py
import simpool  # noqa: E402  # bench/utilization/simpool.py
from replay import replay  # noqa: E402  # bench/utilization/replay.py

from gpupoolctl.sched import JobRequest  # noqa: E402

# The bundled pool's 8-GPU hosts, one of each class, whose slices every fleet node copies.
CLASSES = ("sg-dgx01", "sg-dgx02", "dxb-mi300x-01")
SITES = ("singapore", "dubai")


def physical_gpus(nodes: int) -> int:
    """The fleet's cards, counted on the pool as shipped (an AMD card cut in DPX shows as two
    logical GPUs after the layout; as shipped, as one)."""
    shipped = simpool.pool_slices(None)
    per_class = {name: len({s["gpu"] for s in shipped if s["host"] == name}) for name in CLASSES}
    return sum(per_class[CLASSES[number % len(CLASSES)]] for number in range(nodes))


def fleet(nodes: int, layout: str = "mixed") -> list[dict[str, Any]]:
    """The slices of `nodes` hosts: the classes in turn, the first half in the first site."""
    base = simpool.pool_slices(layout)
    by_class = {name: [s for s in base if s["host"] == name] for name in CLASSES}
    slices: list[dict[str, Any]] = []
    for number in range(nodes):
        site = SITES[0] if number < nodes // 2 else SITES[1]
        source = CLASSES[number % len(CLASSES)]
        host = f"{site[:3]}-n{number:04d}"
        for entry in simpool.rename(by_class[source], source, host):
            entry["site"] = site
            slices.append(entry)
    return slices


def request_of(job: jobtrace.Job) -> JobRequest:
    """The job's memory only, on one node when it asks for several GPUs (best-fit)."""
    return JobRequest(gpus=job.gpus, memory_mib=job.memory_mib, same_node=job.gpus > 1)


def per_thousand_queued(log: list[tuple[float, int, float]]) -> tuple[float, float]:
    """The least-squares line of pass seconds on queued jobs: (ms per 1,000 queued, ms at 0)."""
    xs = [float(queued) for _, queued, _ in log]
    ys = [took for _, _, took in log]
    if len(set(xs)) < 2:
        return 0.0, statistics.fmean(ys) * 1e3
    slope, intercept = statistics.linear_regression(xs, ys)
    return slope * 1e6, intercept * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--scale", type=float, default=300.0, help="times the reference day's jobs")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--pass-interval", type=float, default=60.0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    began = time.perf_counter()
    slices = fleet(args.nodes)
    cards = physical_gpus(args.nodes)
    jobs = jobtrace.make_trace(
        args.seed, inference=round(1800 * args.scale), training=round(48 * args.scale)
    )
    jobs = [j for j in jobs if j.arrival < args.hours * 3600]
    built = time.perf_counter() - began
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    run = replay("scale", jobs, slices, 0, request_of, lambda j: j.priority,
                 pass_interval=args.pass_interval, until=args.hours * 3600)  # fmt: skip
    if profiler is not None:
        profiler.disable()
    wall = time.perf_counter() - began
    times = [took for _, _, took in run.pass_log]
    # Percentiles 1..99 of the pass times (one pass: that one, every percentile).
    cuts = statistics.quantiles(times, n=100, method="inclusive") if len(times) > 1 else times * 99
    peak_at, peak_queue, _ = max(run.pass_log, key=lambda row: row[1])
    slope_ms, intercept_ms = per_thousand_queued(run.pass_log)
    figures = {
        "nodes": args.nodes,
        "sites": len(SITES),
        "physical_gpus": cards,
        "slices": len(slices),
        "jobs": len(jobs),
        "started": len(run.starts),
        "waiting_at_end": len(run.waiting),
        "passes": run.passes,
        "pass_p50_s": cuts[49],
        "pass_p95_s": cuts[94],
        "pass_max_s": max(times),
        "peak_queue": peak_queue,
        "peak_at_h": peak_at / 3600,
        "pass_ms_per_1000_queued": slope_ms,
        "pass_ms_at_empty_queue": intercept_ms,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "build_s": built,
        "wall_s": wall,
    }
    print(
        f"fleet: {args.nodes} nodes in {len(SITES)} sites, {cards} GPUs, {len(slices)} slices"
        f" (`mixed` layout); day: {len(jobs)} jobs (seed {args.seed}, x{args.scale:g}),"
        f" {args.hours:g} h, a pass every {args.pass_interval:g} s"
    )
    print(
        f"passes: {run.passes}; pass time p50 {figures['pass_p50_s']:.3f} s,"
        f" p95 {figures['pass_p95_s']:.3f} s, max {figures['pass_max_s']:.3f} s"
        f" (target p95 <= 1 s: {'met' if figures['pass_p95_s'] <= 1 else 'NOT met'})"
    )
    print(
        f"peak queue: {peak_queue} jobs at {peak_at / 3600:.1f} h; pass time ~"
        f" {intercept_ms:.0f} ms + {slope_ms:.0f} ms per 1,000 queued (least squares)"
    )
    print(
        f"peak resident memory: {figures['peak_rss_mib']:.0f} MiB"
        f" (target <= 1024 MiB: {'met' if figures['peak_rss_mib'] <= 1024 else 'NOT met'});"
        f" jobs started {len(run.starts)}, still queued at the end {len(run.waiting)};"
        f" wall {wall:.0f} s"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if profiler is not None:  # the whole day's passes (cProfile slows them: shares count)
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
