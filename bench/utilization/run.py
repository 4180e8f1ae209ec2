"""Utilization benchmark: static whole cards vs fixed layouts (vs elastic) on seeded days.

    python bench/utilization/run.py [--day reference|contended|both] [--seeds 2025,2026,2027]
                                    [--recut-cost 10] [--pass-interval 60] [--workers 2]
                                    [--executor replay|production] [--json FILE]

See README.md for the definitions. Every run replays a seeded trace (jobtrace.py) in
virtual time through gpupoolctl.sched's schedule_pass / order_queue / place (replay.py) on
the bundled simulated pool, with the layouts of playbooks/layouts.yaml really applied
through the sim driver (simpool.py). `--executor production` runs each day through
production's own loop on virtual nodes instead (production.py; README: the same figures but
the elastic column's, and why).

The reference day (the first edition, same output):
  static  the `training` layout applied (every card whole); every job holds whole cards
          (`profile="gpu"`, at least its memory), all at one priority: FIFO.
  pooled  the `--layout` label applied (default `mixed`); every job asks its memory only
          (best-fit: the smallest slice that fits), multi-GPU jobs on one node; the
          trace's priorities (training low, inference normal) with aging.

The contended day, measured over its 24 h window of arrivals (window.py):
  static      as above (whole cards, FIFO), with the job's vendor and site pin;
  <layout>    every label of playbooks/layouts.yaml applied, jobs asking their memory,
              vendor and site pin, trace priorities; `best fixed` is the one with the
              highest utilization, chosen in hindsight per seed;
  elastic     starts from the `mixed` layout; every pass runs with the elastic section of
              playbooks/pool.yaml (as shipped), and the re-cuts it decides are made,
              each card out of the pool for --recut-cost seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

import simpool  # noqa: E402
import window  # noqa: E402
from jobtrace import DAY, Job, make_contended_trace, make_trace  # noqa: E402
from replay import RECUT_COST_S, Run, replay  # noqa: E402

from gpupoolctl.inventory import load_inventory  # noqa: E402
from gpupoolctl.partition import load_spec  # noqa: E402
from gpupoolctl.sched import Holder, JobRequest, PoolView  # noqa: E402


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


# -- the contended day -------------------------------------------------------------------------


def site_globs() -> dict[str, str]:
    """site -> a host glob that matches exactly that site's hosts (inventories/sim.yaml)."""
    hosts = list(load_inventory(simpool.INVENTORY).hosts.values())
    globs = {}
    for site in sorted({str(h.vars.get("site")) for h in hosts}):
        names = [h.name for h in hosts if h.vars.get("site") == site]
        prefix = names[0].split("-")[0] + "-"  # sg-..., dxb-...
        others = [h.name for h in hosts if h.vars.get("site") != site]
        mine = all(n.startswith(prefix) for n in names)
        assert mine and not any(n.startswith(prefix) for n in others), (site, names)
        globs[site] = prefix + "*"
    return globs


SITE_GLOBS: dict[str, str] = {}


def _host(job: Job) -> str | None:
    if not job.pinned:
        return None
    if not SITE_GLOBS:
        SITE_GLOBS.update(site_globs())
    return SITE_GLOBS[str(job.site)]


def contended_static_request(job: Job) -> JobRequest:
    """Whole cards with at least the job's memory, of its vendor, at its site if pinned."""
    return JobRequest(
        gpus=job.gpus,
        profile="gpu",
        memory_mib=job.memory_mib,
        vendor=job.vendor,
        host=_host(job),
        same_node=job.gpus > 1,
    )


def contended_request(job: Job) -> JobRequest:
    """The job's memory (best-fit), vendor and site pin; multi-GPU on one node."""
    return JobRequest(
        gpus=job.gpus,
        memory_mib=job.memory_mib,
        vendor=job.vendor,
        host=_host(job),
        same_node=job.gpus > 1,
    )


POLICY = HERE.parents[1] / "playbooks" / "pool.yaml"  # the shipped example, as it is


def slice_sizes(slices: list[dict[str, Any]]) -> dict[str, list[int]]:
    """vendor -> every slice size the pool's cards can have (whole, each MIG profile, each
    AMD partition), from the catalogs: what window.granular_bound needs."""
    from gpupoolctl.hw import amd_modes, catalog

    sizes: dict[str, set[int]] = {}
    for entry in slices:
        vendor, model = str(entry["vendor"]), str(entry.get("model") or "")
        found = sizes.setdefault(vendor, set())
        found.add(int(entry["memory_mib"]))
        nvidia = catalog.find_nvidia_model(name=model) if vendor == "nvidia" else None
        if nvidia is not None and nvidia.mig is not None:
            found.update(p.memory_mib for p in nvidia.mig.profiles)
        product = amd_modes.find_product(market_name=model) if vendor == "amd" else None
        if product is not None:
            found.update(
                int(entry["memory_mib"]) // product.compute_modes[c] for c, _ in product.allowed
            )
    return {vendor: sorted(found) for vendor, found in sizes.items()}


def inventory_hosts() -> Any:
    """How a policy rule's host pattern selects hosts: through the bundled inventory, as the
    CLI reads them (sched.elastic.InHosts)."""
    inventory = load_inventory(simpool.INVENTORY)
    chosen: dict[str, set[str]] = {}

    def in_hosts(pattern: str, host: str) -> bool:
        if pattern not in chosen:
            chosen[pattern] = {h.name for h in inventory.select(pattern)}
        return host in chosen[pattern]

    return in_hosts


def pool_policy(policy_file: Path) -> Any:
    """The pool policy file, read by the product's own parser: what the elastic column's
    passes read (its elastic section, or a window's in force at the pass's time)."""
    from gpupoolctl.policy import load_policy

    return load_policy(policy_file)


# Where the elastic column starts (elastic-start.yaml): every card whole, the A100s in MIG
# mode as one full-size instance (their mode changes need a reset, which elastic never does).
ELASTIC_START = "elastic-start"
ELASTIC_START_FILE = HERE / "elastic-start.yaml"


def day_of(task: dict[str, Any]) -> dict[str, Any]:
    """The task's trace and how its jobs ask (requests, priorities), and how its passes run
    (every event, or on a cadence until the end of the window; the policy), whichever
    executor runs it."""
    static = task["column"] == "static"
    priority_of = (lambda j: 50) if static else (lambda j: j.priority)
    if task["day"] == "reference":
        jobs = make_trace(task["seed"], task["inference"], task["training"], task["mix"])
        return {
            "jobs": jobs,
            "request_of": _whole if static else pooled_request,
            "priority_of": priority_of,
            "until": None,
            "pass_interval": None,
            "policy": None,
        }
    return {
        "jobs": make_contended_trace(task["seed"], task["total"]),
        "request_of": contended_static_request if static else contended_request,
        "priority_of": priority_of,
        "until": DAY,
        "pass_interval": task["pass_interval"],
        "policy": pool_policy(task["policy"]) if task["column"] == "elastic" else None,
    }


def replay_task(task: dict[str, Any]) -> tuple[str, Run, float]:
    """One run (in a worker process): returns (key, run, wall seconds). The replay, or with
    task["executor"] == "production" production's executor on virtual nodes."""
    if task.get("executor") == "production":
        return production_task(task)
    began = time.perf_counter()
    day = day_of(task)
    run = replay(
        task["column"],
        day["jobs"],
        task["slices"],
        task["total"],
        day["request_of"],
        day["priority_of"],
        until=day["until"],
        recut_cost=task["recut_cost"],
        pass_interval=day["pass_interval"],
        # Trimming is exact only for passes without re-cuts (replay.trimmed): the elastic
        # column gets the whole queue, as production does.
        trim=task["column"] != "elastic",
        pool_policy=day["policy"],
        in_hosts=inventory_hosts() if task["day"] == "contended" else None,
    )
    return task["key"], run, time.perf_counter() - began


def production_task(task: dict[str, Any]) -> tuple[str, Run, float]:
    """The task's day through production's executor (production.py): the column's layout
    applied to simulated nodes in a temporary folder, the ledger there (not durable), the
    trace's jobs submitted at their arrivals, `refresh` at each tick; the elastic column's
    re-cuts made by the agent on those simulated cards."""
    import tempfile

    import production
    from replay import T0

    from gpupoolctl.ledger import Ledger

    began = time.perf_counter()
    day = day_of(task)
    with tempfile.TemporaryDirectory(prefix="gpupool-bench-day-") as folder:
        sim = Path(folder) / "sim"
        slices = simpool.applied(task["label"], sim, task["layouts"])
        assert slices == task["slices"], "the simulated nodes are not the replay's pool"
        clock = production.Clock(T0)
        ledger = Ledger(Path(folder) / "ledger.jsonl", durable=False, clock=clock.now)
        hosts = sorted({s["host"] for s in slices})
        ledger.refresh_slices(hosts, slices)
        nodes = production.VirtualNodes(clock, simpool.sim_specs(sim))
        jobs = production.virtual_pool(
            ledger, hosts, nodes, policy=day["policy"], in_hosts=inventory_hosts()
        )
        ran = production.run_day(
            jobs,
            clock,
            day["jobs"],
            day["request_of"],
            day["pass_interval"],
            day["until"],
            name=task["column"],
            total_mib=task["total"],
            priority_of=day["priority_of"],
            nodes=nodes,
        )
    return task["key"], ran.run, time.perf_counter() - began


def rebuild_cost(slices: list[dict[str, Any]], repeat: int = 20) -> float:
    """Milliseconds to build a PoolView of `slices` with every other slice held (one hold
    per slice): what the replay pays each time the slice set changes."""
    holders = [Holder(f"j{n}", slices=(s["id"],)) for n, s in enumerate(slices) if n % 2 == 0]
    began = time.perf_counter()
    for _ in range(repeat):
        PoolView(slices, holders)
    return 1000 * (time.perf_counter() - began) / repeat


def cell(value: float, censored: bool, fmt: str = "{:.0f}") -> str:
    return (">=" if censored else "") + fmt.format(value)


def print_contended(seed: int, jobs: list[Job], rows: list[dict[str, Any]], limit: dict) -> None:
    inference = sum(1 for j in jobs if j.kind == "inference")
    amd = sum(1 for j in jobs if j.vendor == "amd")
    nvidia = sum(1 for j in jobs if j.vendor == "nvidia")
    pinned = sum(1 for j in jobs if j.pinned)
    print(
        f"contended day, seed {seed}: {len(jobs)} jobs in 24 h ({inference} inference, "
        f"{len(jobs) - inference} training; {nvidia} ask nvidia, {amd} amd; {pinned} pinned "
        f"to their site)"
    )
    width = 12
    names = [r["label"] for r in rows]
    print(f"{'':30s}" + "".join(f"{n:>{width}s}" for n in names))

    def line(label: str, cells: list[str]) -> None:
        print(f"{label:30s}" + "".join(f"{c:>{width}s}" for c in cells))

    line("GPU-memory utilization", [f"{r['utilization']:.1%}" for r in rows])
    line("  memory held by jobs", [f"{r['held_utilization']:.1%}" for r in rows])
    line("finished in window", [str(r["finished"]) for r in rows])
    for kind in ("inference", "training"):
        line(f"  {kind} finished", [str(r["by_class"][kind]["finished"]) for r in rows])
    for kind in ("inference", "training"):
        for q in ("p50", "p95"):
            line(
                f"{kind} wait {q} (min)",
                [
                    cell(r["by_class"][kind][f"{q}_wait_min"], r["by_class"][kind][f"{q}_censored"])
                    for r in rows
                ],
            )
    line("queued at window end", [str(r["queued_at_end"]) for r in rows])
    line("refused (never fit)", [str(r["refused"]) for r in rows])
    line("re-cuts", [str(r["recuts"]) for r in rows])
    print(
        f"capacity bound (window): utilization <= {limit['refined']:.1%} "
        f"(simple: min(1, demand in window / capacity) = {limit['simple']:.1%}); "
        f"one job per slice, any layout: <= {limit['granular']:.1%}"
    )


def contended_summary(seeds: list[int], results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    ratios: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        ratios.setdefault(name, []).append(value)

    verdicts: dict[str, list[bool]] = {}
    for seed in seeds:
        data = results[seed]
        by = {r["label"]: r for r in data["rows"]}
        static, best = by["static"], by[data["best_fixed"]]
        bound = data["bound"]["refined"]
        add("best fixed / static", best["utilization"] / static["utilization"])
        add("best fixed / bound", best["utilization"] / bound)
        add("best fixed / slice bound", best["utilization"] / data["bound"]["granular"])
        if "elastic" in by:
            elastic = by["elastic"]
            add("elastic / static", elastic["utilization"] / static["utilization"])
            add("elastic / best fixed", elastic["utilization"] / best["utilization"])
            add("elastic / bound", elastic["utilization"] / bound)
            add("elastic / slice bound", elastic["utilization"] / data["bound"]["granular"])
            p95 = elastic["by_class"]["inference"]["p95_wait_min"]
            best_p95 = best["by_class"]["inference"]["p95_wait_min"]
            for name, ok in (
                ("elastic >= 2.0x static", elastic["utilization"] >= 2 * static["utilization"]),
                ("elastic >= 1.2x best fixed", elastic["utilization"] >= 1.2 * best["utilization"]),
                ("elastic within 10% of bound", elastic["utilization"] >= 0.9 * bound),
                ("inference p95 <= best fixed", p95 <= best_p95),
            ):
                verdicts.setdefault(name, []).append(ok)
    return {"ratios": ratios, "targets": verdicts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--day",
        default="both",
        choices=["reference", "contended", "both"],
        help="the reference day (first edition), the contended day, or both (default)",
    )
    parser.add_argument("--seeds", default="2025,2026,2027", help="comma-separated seeds")
    parser.add_argument("--seed", type=int, help="one seed (the same as --seeds N)")
    parser.add_argument("--layout", default="mixed", choices=["mixed", "inference"])
    parser.add_argument("--mix", default="issue", choices=["issue", "broad"])
    parser.add_argument(
        "--scale", type=float, default=1.0, help="reference day: multiply the number of jobs"
    )
    parser.add_argument(
        "--recut-cost",
        type=float,
        default=RECUT_COST_S,
        help="seconds a re-cut GPU is out of the pool (elastic)",
    )
    parser.add_argument(
        "--pass-interval",
        type=float,
        default=60.0,
        help="contended day: virtual seconds between schedule passes (cron: every minute)",
    )
    parser.add_argument(
        "--workers", type=int, default=min(2, os.cpu_count() or 1), help="replay processes"
    )
    parser.add_argument(
        "--policy", type=Path, default=POLICY, help="pool policy for the elastic column"
    )
    parser.add_argument("--no-elastic", action="store_true", help="leave the elastic column out")
    parser.add_argument(
        "--executor",
        default="replay",
        choices=["replay", "production"],
        help="what runs each day: the replay (replay.py), or production's executor on "
        "virtual nodes (production.py)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    seeds = [args.seed] if args.seed is not None else [int(s) for s in args.seeds.split(",")]
    days = ["reference", "contended"] if args.day == "both" else [args.day]
    began = time.perf_counter()

    layouts = list(load_spec(simpool.LAYOUTS).labels)
    wanted = set(layouts) | {"training", args.layout}
    slices = {label: simpool.pool_slices(label) for label in sorted(wanted)}
    slices[ELASTIC_START] = simpool.pool_slices(ELASTIC_START, ELASTIC_START_FILE)
    whole = slices["training"]
    total = sum(s["memory_mib"] for s in whole)  # physical memory: the same for every run
    hook_present = not args.no_elastic

    tasks: list[dict[str, Any]] = []
    base = {
        "total": total,
        "recut_cost": args.recut_cost,
        "pass_interval": args.pass_interval,
        "policy": args.policy,
        "executor": args.executor,
    }
    for seed in seeds:
        if "reference" in days:
            for column, label in (("static", "training"), ("pooled", args.layout)):
                tasks.append(
                    {
                        **base,
                        "key": f"reference/{seed}/{column}",
                        "day": "reference",
                        "seed": seed,
                        "column": column,
                        "label": label,
                        "layouts": str(simpool.LAYOUTS),
                        "slices": slices[label],
                        "inference": round(1800 * args.scale),
                        "training": round(48 * args.scale),
                        "mix": args.mix,
                    }
                )
        if "contended" in days:
            columns = [("static", "training")] + [(label, label) for label in layouts]
            if hook_present:
                columns.append(("elastic", ELASTIC_START))
            for column, label in columns:
                tasks.append(
                    {
                        **base,
                        "key": f"contended/{seed}/{column}",
                        "day": "contended",
                        "seed": seed,
                        "column": column,
                        "label": label,
                        "layouts": str(
                            ELASTIC_START_FILE if label == ELASTIC_START else simpool.LAYOUTS
                        ),
                        "slices": slices[label],
                    }
                )
    runs: dict[str, Run] = {}
    walls: dict[str, float] = {}
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            for key, run, wall in pool.map(replay_task, tasks):
                runs[key], walls[key] = run, wall
    else:
        for task in tasks:
            key, run, wall = replay_task(task)
            runs[key], walls[key] = run, wall

    report: dict[str, Any] = {}
    if "reference" in days:
        report["reference"] = {}
        if len(days) > 1:
            print("== reference day (first edition) ==")
        for seed in seeds:
            static, pooled = runs[f"reference/{seed}/static"], runs[f"reference/{seed}/pooled"]
            report["reference"][str(seed)] = print_reference(
                seed, args, static, pooled, whole, slices[args.layout], total
            )
    if "contended" in days:
        report["contended"] = {}
        if len(days) > 1:
            print("\n== contended day ==")
        sliced = {label: slices[label] for label in layouts}
        print(
            f"pool: {len(whole)} cards, {total / 1024:.0f} GiB; fixed layouts from "
            f"playbooks/layouts.yaml: "
            + ", ".join(
                f"{label} ({len(s)} slices, {sum(x['memory_mib'] for x in s) / 1024:.0f} GiB)"
                for label, s in sliced.items()
            )
            + f"; passes every {args.pass_interval:g} s; window 24 h of arrivals"
        )
        results: dict[int, dict[str, Any]] = {}
        for seed in seeds:
            jobs = make_contended_trace(seed, total)
            rows = []
            columns = ["static", *layouts] + (["elastic"] if hook_present else [])
            for column in columns:
                row = window.metrics(runs[f"contended/{seed}/{column}"], jobs)
                row["label"] = column
                rows.append(row)
            fixed = [r for r in rows if r["label"] in layouts]
            best = max(fixed, key=lambda r: r["utilization"])
            hindsight = dict(best, label="best fixed")
            rows.insert(len(layouts) + 1, hindsight)
            limit = window.bound(jobs, total)
            limit["granular"] = window.granular_bound(jobs, total, slice_sizes(whole))
            print()
            print_contended(seed, jobs, rows, limit)
            print(f"best fixed = `{best['label']}`, chosen in hindsight by utilization")
            results[seed] = {
                "rows": [r for r in rows if r is not hindsight],
                "best_fixed": best["label"],
                "bound": limit,
                "jobs": len(jobs),
            }
            report["contended"][str(seed)] = results[seed]
        summary = contended_summary(seeds, results)
        report["contended_summary"] = summary
        print("\nsummary over seeds " + ", ".join(map(str, seeds)) + ":")
        for name, values in summary["ratios"].items():
            cells = ", ".join(f"{v:.2f}" for v in values)
            print(f"  {name:24s} {cells}  (mean {sum(values) / len(values):.2f})")
        if summary["targets"]:
            for name, oks in summary["targets"].items():
                word = "met" if all(oks) else "NOT met"
                print(f"  target {name}: {word} ({sum(oks)}/{len(oks)} seeds)")
        else:
            print(
                "  targets (elastic >= 2.0x static, >= 1.2x best fixed, within 10% of the "
                "bound, inference p95 <= best fixed): no elastic column yet (elastic_hook)"
            )
        largest = max(sliced.values(), key=len)
        cost = rebuild_cost(largest)
        report["rebuild_ms"] = {"slices": len(largest), "ms": cost}
        print(
            f"  PoolView rebuild (a re-cut changes the slice set): {cost:.1f} ms for "
            f"{len(largest)} slices with half of them held"
        )
    wall = time.perf_counter() - began
    report["wall_s"] = wall
    report["replay_wall_s"] = walls
    if len(days) > 1 or len(seeds) > 1:
        print(f"\nwall time {wall:.1f} s ({args.workers} worker(s))")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


def print_reference(
    seed: int,
    args: argparse.Namespace,
    static_run: Run,
    pooled_run: Run,
    whole: list[dict[str, Any]],
    sliced: list[dict[str, Any]],
    total: int,
) -> dict[str, Any]:
    """The first edition's table for one seed (same lines); returns its JSON."""
    jobs = make_trace(seed, round(1800 * args.scale), round(48 * args.scale), args.mix)
    rows = [metrics(static_run, jobs), metrics(pooled_run, jobs)]
    limit = bound(jobs, total)
    inference = sum(1 for j in jobs if j.kind == "inference")
    sliced_gib = sum(s["memory_mib"] for s in sliced) / 1024
    print(
        f"trace (seed {seed}, mix {args.mix}, x{args.scale:g}): {len(jobs)} jobs in 24 h "
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
    return {"runs": rows, "bound": limit, "ratio": ratio, "share_of_bound": share}


if __name__ == "__main__":
    main()
