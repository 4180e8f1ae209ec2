"""Stress-knee benchmark: where `stress ramp` finds the knee of the sim workload's contention
model on the bundled sim pool by the wall clock, round after round, against where the same
ramp finds it in virtual time.

    python bench/stress-knee/run.py [--rounds N] [--quick] [--json FILE]

Each round:

1. wall clock: bench/stress-knee/scenario.yaml through the real CLI as a subprocess
   (`gpupoolctl -l sg-dgx01 --ledger FILE stress ramp --scenario ... --save ... -o json`),
   with a fresh HOME, sim state and ledger: real agent calls, real sim jobs on one node;
2. the peer, in the same run: the same scenario through the same Ramp, metrics and knee
   code on a VirtualClock (gpupoolctl.stress.contention_backend), each submit costing what
   level 1 of this round measured outside the node, so the two differ only by what the
   machine did to the wall-clock run;
3. the model's own peak for that cost, sqrt((T1 + o - sigma T1) / (kappa T1)).

The wall-clock numbers move with the machine's load (the CPU cores other processes keep busy
are measured before and after each round): the spread over the rounds is reported, never
asserted. A round whose ramp did not run (exit other than 0/4, a result that does not load)
is printed as FAILED and the script exits 1. See bench/stress-knee/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from gpupoolctl.stress import result as results  # noqa: E402
from gpupoolctl.stress.clock import VirtualClock  # noqa: E402
from gpupoolctl.stress.contention_backend import ContentionBackend  # noqa: E402
from gpupoolctl.stress.model import RunResult  # noqa: E402
from gpupoolctl.stress.runner import Ramp  # noqa: E402
from gpupoolctl.stress.scenario import load_scenario, scenario_from_flags  # noqa: E402

HERE = Path(__file__).resolve().parent
SCENARIO_FILE = HERE / "scenario.yaml"
NODE = "sg-dgx01"
QUICK = {"--levels": "1..6+1", "--hold": "3s"}
MARGIN_S = 120.0


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine_busy_s() -> float | None:
    """Busy CPU seconds of the whole machine so far (all cores), from /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        ticks = [int(value) for value in fields]
        hertz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / hertz


def background_cores(seconds: float = 1.0) -> float | None:
    """Cores other processes keep busy while this one sleeps."""
    before = machine_busy_s()
    time.sleep(seconds)
    after = machine_busy_s()
    return None if before is None or after is None else (after - before) / seconds


def cli_env(home: Path, sim_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(home), "GPUPOOL_SIM_DIR": str(sim_dir), "NO_COLOR": "1"})
    return env


@dataclass
class Round:
    index: int
    busy_before: float | None = None
    busy_after: float | None = None
    code: int | None = None
    wall_s: float = 0.0
    wall: RunResult | None = None
    virtual: RunResult | None = None
    outside_s: float | None = None  # level 1: turnaround less the run on the node
    expected: float | None = None  # the model's peak for that outside time
    problems: list[str] = field(default_factory=list)


def wall_round(index: int, overrides: dict[str, str]) -> Round:
    one = Round(index)
    one.busy_before = background_cores()
    with tempfile.TemporaryDirectory(prefix="gpupool-stress-knee-") as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        saved = root / "result.json"
        argv = [
            sys.executable, "-m", "gpupoolctl.cli.main", "-l", NODE,
            "--ledger", str(root / "ledger"), "stress", "ramp",
            "--scenario", str(SCENARIO_FILE),
            *(part for flag, value in overrides.items() for part in (flag, value)),
            "--save", str(saved), "-o", "json",
        ]  # fmt: skip
        scenario = load_scenario(SCENARIO_FILE)
        timeout = (
            len(scenario.levels) * (scenario.warmup_s + scenario.hold_s + scenario.drain_s)
            + MARGIN_S
        )
        started = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            cwd=root,
            env=cli_env(root / "home", root / "sim"),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a time-out kills the ramp and the jobs it started
        )
        try:
            _, stderr = proc.communicate(timeout=timeout)
            one.code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate(timeout=10)
            stderr += f"\ntimed out after {timeout:g}s"
        one.wall_s = time.perf_counter() - started
        if one.code not in (0, 4):
            tail = " ".join(stderr.strip().splitlines()[-3:])[-400:]
            one.problems.append(f"exit {one.code}: {tail}")
        else:
            try:
                one.wall = results.load(saved)
            except Exception as exc:  # any unreadable result is a failed round
                one.problems.append(f"result file does not load: {exc}")
    one.busy_after = background_cores()
    return one


def virtual_peer(one: Round, overrides: dict[str, str]) -> None:
    """The same ramp in virtual time, each submit costing what level 1 measured outside."""
    if one.wall is None or not one.wall.levels:
        return
    first = one.wall.levels[0]
    run = first.phases.get("run")
    if run is None or first.turnaround.mean is None:
        return
    one.outside_s = max(0.0, first.turnaround.mean - run)
    base = load_scenario(SCENARIO_FILE)
    flags = {flag.lstrip("-"): value for flag, value in overrides.items()}
    scenario = scenario_from_flags(base, **flags)
    args = scenario.workload.args
    sigma, kappa, work = args["sigma"], args["kappa"], args["work_s"]
    one.expected = math.sqrt((work + one.outside_s - sigma * work) / (kappa * work))
    clock = VirtualClock()
    backend = ContentionBackend(clock, scenario.workload, launch_s=one.outside_s)
    one.virtual = Ramp(scenario, backend, clock=clock).run()


def usl_of(result: RunResult | None) -> dict[str, Any]:
    if result is None or result.knees is None:
        return {}
    usl, kneedle = result.knees.usl, result.knees.kneedle
    return {
        "peak": usl.level,
        "peak_err": usl.extra.get("peak_err"),
        "r2": usl.extra.get("r2"),
        "sigma": usl.extra.get("sigma"),
        "kappa": usl.extra.get("kappa"),
        "note": usl.note,
        "kneedle": kneedle.level,
    }


def round_doc(one: Round) -> dict[str, Any]:
    return {
        "round": one.index,
        "cores_busy_before": one.busy_before,
        "cores_busy_after": one.busy_after,
        "exit_code": one.code,
        "wall_s": one.wall_s,
        "problems": one.problems,
        "outside_s": one.outside_s,
        "model_peak": one.expected,
        "wall": usl_of(one.wall),
        "virtual": usl_of(one.virtual),
        "levels": [lv.level for lv in (one.wall or one.virtual).levels]
        if (one.wall or one.virtual)
        else [],
        "throughput": {
            "wall": [lv.throughput for lv in one.wall.levels] if one.wall else None,
            "virtual": [lv.throughput for lv in one.virtual.levels] if one.virtual else None,
        },
    }


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render(docs: list[dict[str, Any]]) -> list[str]:
    out = [
        f"{'round':>5} {'busy before/after':>17} {'o (s)':>6} {'model N*':>9} {'virtual N*':>11}"
        f" {'wall N* (R^2)':>16} {'wall/model':>10} {'sigma':>7} {'kappa':>8} {'kneedle':>8}",
    ]
    for d in docs:
        wall, virtual = d["wall"], d["virtual"]
        ratio = wall["peak"] / d["model_peak"] if wall.get("peak") and d["model_peak"] else None
        busy = f"{_f(d['cores_busy_before'], '.2f')}/{_f(d['cores_busy_after'], '.2f')}"
        peak = f"{wall['peak']:.2f} ({wall['r2']:.3f})" if wall.get("peak") is not None else "none"
        out.append(
            f"{d['round']:>5} {busy:>17} {_f(d['outside_s'], '.3f'):>6}"
            f" {_f(d['model_peak'], '.2f'):>9} {_f(virtual.get('peak'), '.2f'):>11}"
            f" {peak:>16} {_f(ratio, '.2f'):>10} {_f(wall.get('sigma'), '.3f'):>7}"
            f" {_f(wall.get('kappa'), '.4f'):>8} {_f(wall.get('kneedle'), 'g'):>8}"
        )
        out += [f"      FAILED {p}" for p in d["problems"]]
        if wall and wall.get("peak") is None:
            out.append(f"      wall clock: {wall.get('note')}")
    out += ["", "throughput per level, jobs/s: the virtual-time peer, then each wall-clock round"]
    curves = [(f"virtual {d['round']}", d["throughput"]["virtual"]) for d in docs[:1]]
    curves += [(f"wall {d['round']}", d["throughput"]["wall"]) for d in docs]
    usable = [(name, xs) for name, xs in curves if xs]
    names = next((d["levels"] for d in docs if d["levels"]), [])
    if usable:
        out.append(f"{'level':>6}" + "".join(f"{name:>11}" for name, _ in usable))
        for i in range(max(len(xs) for _, xs in usable)):
            cells = "".join(f"{_f(xs[i] if i < len(xs) else None, '.2f'):>11}" for _, xs in usable)
            out.append(f"{_f(names[i] if i < len(names) else None, 'g'):>6}{cells}")
    ratios = [
        d["wall"]["peak"] / d["model_peak"]
        for d in docs
        if d["wall"].get("peak") and d["model_peak"]
    ]
    found = len(ratios)
    out.append("")
    if ratios:
        out.append(
            f"wall-clock N* / model N* over {found} round(s) with a peak: min {min(ratios):.2f}, "
            f"median {statistics.median(ratios):.2f}, max {max(ratios):.2f}"
        )
    out.append(f"rounds with no capacity peak found by the wall clock: {len(docs) - found}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="levels 1..6, 3 s holds, 1 round")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    overrides = dict(QUICK) if args.quick else {}
    rounds = 1 if args.quick else max(1, args.rounds)
    docs = []
    for index in range(1, rounds + 1):
        progress(f"round {index}/{rounds}: wall clock, `stress ramp` on {NODE} ...")
        one = wall_round(index, overrides)
        progress(f"round {index}/{rounds}: the same ramp in virtual time ...")
        virtual_peer(one, overrides)
        docs.append(round_doc(one))
    header = (
        f"gpupoolctl stress-knee benchmark ({'quick' if args.quick else 'full'}): "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"commit {results.source_commit() or 'unknown'}"
    )
    lines = [header, "", *render(docs)]
    print("\n".join(lines))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"header": header, "rounds": docs}, indent=2) + "\n")
    return 1 if any(d["problems"] for d in docs) else 0


if __name__ == "__main__":
    sys.exit(main())
