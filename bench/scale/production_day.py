"""A day through production's executor on virtual nodes: the ledger it leaves, and `jobs`,
`pool` and `top --once` on that ledger (issue 32, part 6).

    python bench/scale/production_day.py [--nodes 100] [--scale 30] [--hours 24]
                                         [--pass-interval 60] [--keep DIR] [--json FILE]

What runs is production's code, not a replay of it (bench/utilization/production.py, the
executor on virtual nodes the benchmarks share). The fleet is run.py's; the day is its
trace (bench/utilization's reference day, `--scale` times its jobs, memory only):

- each job is recorded as `submit` records it (the job, then its queue entry through
  `JobsCore.enqueue`), in one ledger transaction at its arrival;
- every `--pass-interval` seconds of virtual time `jobs.refreshing.refresh` runs, as
  `gpupoolctl schedule` from cron runs it: settle launches left half-done, reap (poll
  every running job's node; record what ended, release its slices; the hosts' heartbeat),
  then the scheduling pass in rounds, each decided and recorded in one transaction and
  carried out (launches) outside it.

The ledger is a real one in a temporary folder (not durable: no fsync; `--keep` keeps it),
with a virtual clock. The nodes are virtual (`VirtualNodes`): a launch starts no process but
a run of the job's duration on the virtual clock, and a poll reports it exited once that
much time has passed. `submit`'s own pass at each arrival is left out: at this size a pass
per arrival would be most of the run's CPU, and it changes none of the figures measured
here (the ledger's records come from the same transactions either way).

At the end of the day: the ledger's size (journal, snapshot, records) and the wall time of
`gpupoolctl jobs --no-refresh`, `pool --no-refresh` and `top --once`, each run as a command
on that ledger (median of `--repeat`), and the executor's peak resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT, ROOT / "bench" / "utilization"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import jobtrace  # noqa: E402  # bench/utilization/jobtrace.py
from production import Clock, VirtualNodes, run_day, virtual_pool  # noqa: E402
from replay import T0  # noqa: E402  # the day starts when bench/utilization's replay's does

from gpupoolctl.ledger import Ledger  # noqa: E402
from gpupoolctl.timestamps import format_ts  # noqa: E402


def _scale_run() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_scale_run", ROOT / "bench/scale/run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inventory(hosts: Sequence[str], path: Path) -> None:
    """An inventory naming the fleet's hosts (never contacted: every command measured
    reads the ledger only)."""
    lines = ["all:", "  hosts:"]
    lines += [f"    {h}:\n      gpupool_transport: local" for h in hosts]
    path.write_text("\n".join(lines) + "\n")


def timed_command(argv: list[str], env: dict[str, str], repeat: int) -> tuple[float, int]:
    """Median wall seconds of the command, and its output's length (it must succeed)."""
    times, size = [], 0
    for _ in range(repeat):
        began = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - began)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr[-500:]}")
        size = len(done.stdout)
    return statistics.median(times), size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--scale", type=float, default=30.0, help="times the reference day's jobs")
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--pass-interval", type=float, default=60.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write the ledger here and keep it")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--progress", action="store_true", help="a line each virtual hour")
    args = parser.parse_args(argv)

    scale = _scale_run()
    slices = scale.fleet(args.nodes)
    hosts = sorted({s["host"] for s in slices})
    trace = jobtrace.make_trace(
        args.seed, inference=round(1800 * args.scale), training=round(48 * args.scale)
    )
    trace = sorted((j for j in trace if j.arrival < args.hours * 3600), key=lambda j: j.arrival)

    folder = args.keep or Path(tempfile.mkdtemp(prefix="gpupool-day-"))
    folder.mkdir(parents=True, exist_ok=True)
    clock = Clock(T0)
    ledger = Ledger(folder / "ledger.jsonl", durable=False, clock=clock.now)
    ledger.refresh_slices(hosts, slices)
    jobs = virtual_pool(ledger, hosts, VirtualNodes(clock))

    began = time.perf_counter()
    tick_s: list[float] = []

    def progress(seconds: float, took: float) -> None:
        tick_s.append(took)
        if args.progress and seconds % 3600 < args.pass_interval:  # once a virtual hour
            queued = len(ledger.read().state.queue)
            wall_s = time.perf_counter() - began
            line = f"{seconds / 3600:4.0f} h: {queued} queued, last tick {took * 1e3:.0f} ms"
            print(f"  {line}, wall {wall_s:.0f} s", file=sys.stderr, flush=True)

    run_day(jobs, clock, trace, scale.request_of, args.pass_interval, args.hours * 3600, progress)
    ticks = len(tick_s)
    wall = time.perf_counter() - began
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    state = ledger.read().state
    journal = folder / "ledger.jsonl"
    sizes = {p.name: p.stat().st_size for p in folder.iterdir() if p.is_file()}
    inventory(hosts, folder / "fleet.yaml")
    env = {
        **os.environ,
        "GPUPOOL_LEDGER": str(journal),
        "GPUPOOL_INVENTORY": str(folder / "fleet.yaml"),
        "GPUPOOL_NOW": format_ts(clock.at),
    }
    installed = Path(sys.executable).with_name("gpupoolctl")  # the console script
    cli = [str(installed)] if installed.exists() else ["gpupoolctl"]
    latency = {}
    for name, command in (
        ("jobs", ["jobs", "--no-refresh"]),
        ("jobs --all -o json", ["jobs", "--no-refresh", "--all", "-o", "json"]),
        ("pool", ["pool", "--no-refresh"]),
        ("top --once", ["top", "--once"]),
    ):
        latency[name] = timed_command([*cli, *command], env, args.repeat)
    figures = {
        "nodes": args.nodes,
        "slices": len(slices),
        "jobs": len(trace),
        "ticks": ticks,
        "tick_p50_s": statistics.median(tick_s),
        "tick_p95_s": statistics.quantiles(tick_s, n=20)[18] if len(tick_s) > 1 else tick_s[0],
        "tick_max_s": max(tick_s),
        "wall_s": wall,
        "peak_rss_mib": rss,
        "records": state.seq,
        "running_at_end": sum(1 for j in state.jobs.values() if j.get("state") == "running"),
        "queued_at_end": len(state.queue),
        "ended_at_end": dict(Counter(str(j.get("state")) for j in state.finished.values())),
        "ledger_bytes": sizes,
        "latency_s": {k: v[0] for k, v in latency.items()},
        "output_chars": {k: v[1] for k, v in latency.items()},
    }
    print(f"{args.nodes} nodes ({len(slices)} slices), {len(trace)} jobs over {args.hours:g} h,"
          f" {ticks} ticks of {args.pass_interval:g} s: wall {wall:.0f} s,"
          f" peak RSS {rss:.0f} MiB")  # fmt: skip
    p50, p95, top = (figures[k] * 1e3 for k in ("tick_p50_s", "tick_p95_s", "tick_max_s"))
    print(f"  tick (arrivals recorded + refresh): p50 {p50:.0f} ms, p95 {p95:.0f} ms,"
          f" max {top:.0f} ms")  # fmt: skip
    print(
        f"  ledger at the end: {state.seq} records; "
        + ", ".join(f"{n} {b / 2**20:.1f} MiB" for n, b in sorted(sizes.items()))
    )
    ended = ", ".join(f"{n} {k}" for k, n in sorted(figures["ended_at_end"].items()))
    print(f"  at the end: {figures['running_at_end']} running, {figures['queued_at_end']} queued,"
          f" ended and still in the ledger's state: {ended or 'none'}")  # fmt: skip
    for name, (took, chars) in latency.items():
        print(f"  gpupoolctl {name}: {took * 1e3:.0f} ms ({chars} characters)")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if args.keep is None:
        shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
