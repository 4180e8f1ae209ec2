"""The same stress scenario through gpupoolctl's own scheduler and through a real Slurm, side by
side: both knees (Kneedle, USL N*, latency knee) and throughput / queue wait per level.

    python bench/slurm-vs-pool/run.py [--levels 1,2,4,8,12,16] [--work 1s] [--hold 8s]
                                      [--tuned] [--json FILE] [--skip-slurm]

Each run is one `gpupoolctl stress ramp` subprocess (closed model, `sleep` workload, the same
flags for every backend, a fresh HOME each):

- pool: the bundled sim pool (gpupoolctl/data/sim.yaml, local transport, its own ledger);
- slurm: `--backend slurm` against a loopback Slurm cluster started with tests/slurm.py
  (munged, slurmctld, one slurmd; root only), one node with 32 whole `test` GPUs and 32 CPUs
  (SlurmdParameters=config_overrides), everything else as tests/slurm.py configures it
  (sched/builtin, Slurm's default batch_sched_delay of 3 s);
- slurm-tuned (with --tuned): the same cluster with SchedulerParameters=batch_sched_delay=0,
  the first knob of Slurm's high-throughput guide.

A run that fails (a non-zero exit other than 4, no result file, a level where every job
failed) is reported as failed, never shown as a measurement. Every subprocess has a time-out,
and the cluster is stopped (its jobs cancelled) whatever happens.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.slurm import SlurmCluster, slurm_missing_reason, start_cluster  # noqa: E402

SIM_INVENTORY = REPO_ROOT / "gpupoolctl" / "data" / "sim.yaml"
NODE = "node1"
NODE_GPUS = 32
TUNED = "SchedulerParameters=batch_sched_delay=0"


def progress(message: str) -> None:
    sys.stderr.write(f"[slurm-vs-pool] {message}\n")
    sys.stderr.flush()


def ramp_flags(args: argparse.Namespace) -> list[str]:
    return [
        "--levels", args.levels, "--load-model", "closed",
        "--workload", "sleep", "--work", args.work,
        "--warmup", args.warmup, "--hold", args.hold, "--drain", args.drain,
        "--job-timeout", "2m", "--name", "slurm-vs-pool",
    ]  # fmt: skip


def run_ramp(
    label: str, prefix: Sequence[str], extra: Sequence[str], env: dict[str, str], root: Path,
    args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    """One `stress ramp` subprocess; its result document, or why there is none."""
    from gpupoolctl.errors import GpupoolError
    from gpupoolctl.stress import result as results

    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    saved = root / "result.json"
    argv = [sys.executable, "-m", "gpupoolctl.cli.main", *prefix, "stress", "ramp",
            *ramp_flags(args), *extra, "--save", str(saved), "-o", "json"]  # fmt: skip
    clean = {k: v for k, v in env.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    clean.update({"HOME": str(home), "GPUPOOL_SIM_DIR": str(root / "sim"), "NO_COLOR": "1"})
    progress(f"{label}: {' '.join(argv[3:])}")
    started = time.perf_counter()
    try:
        done = subprocess.run(
            argv, cwd=root, env=clean, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=args.timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"label": label, "ok": False, "problem": f"timed out after {args.timeout}s"}
    wall = time.perf_counter() - started
    doc: dict[str, Any] = {"label": label, "exit_code": done.returncode, "wall_s": wall}
    if done.returncode not in (0, 4) or not saved.exists():
        tail = done.stderr.strip().splitlines()[-3:]
        return {**doc, "ok": False, "problem": f"exit {done.returncode}: {' | '.join(tail)}"}
    try:
        result = results.load(saved)
    except GpupoolError as exc:
        return {**doc, "ok": False, "problem": f"result unreadable: {exc}"}
    levels = [
        {
            "level": lv.level,
            "submitted": lv.submitted,
            "completed": lv.completed,
            "failed": lv.failed,
            "throughput": lv.throughput,
            "queue_wait_p50_s": lv.queue_wait.p50,
            "queue_wait_p95_s": lv.queue_wait.p95,
            "turnaround_p95_s": lv.turnaround.p95,
            "phases_s": dict(lv.phases),
        }
        for lv in result.levels
    ]
    dead = [lv["level"] for lv in levels if lv["submitted"] and lv["completed"] == 0]
    knees = result.knees
    points = () if knees is None else (
        ("kneedle", knees.kneedle), ("usl", knees.usl), ("latency", knees.latency)
    )  # fmt: skip
    doc.update(
        ok=not dead,
        problem=f"every job failed at levels {dead}" if dead else None,
        backend=result.backend,
        transport=result.transport,
        levels=levels,
        knees={name: {"level": p.level, "value": p.value, "note": p.note} for name, p in points},
        warnings=[line for line in done.stderr.splitlines() if "warning" in line][:5],
    )
    return doc


def slurm_cluster(root: Path, params: str) -> SlurmCluster:
    """The loopback cluster every Slurm run uses (one node, NODE_GPUS `test` GPUs and as
    many CPUs), with `params` (slurm.conf lines, "" or TUNED + newline) added; started."""
    dev = root / "dev" / NODE
    files = [str(dev / f"gpu{k}") for k in range(NODE_GPUS)]
    node_lines = (
        f"{params}SlurmdParameters=config_overrides\n"
        f"NodeName={NODE} CPUs={NODE_GPUS} Gres=gpu:test:{NODE_GPUS}\n"
    )
    gres = f"NodeName={NODE} Name=gpu Type=test File={dev}/gpu[0-{NODE_GPUS - 1}]\n"
    return start_cluster(
        root / "cluster", node_lines=node_lines, gres_conf=gres, device_files=files
    )


def slurm_runs(args: argparse.Namespace, base: Path) -> list[dict[str, Any]]:
    reason = slurm_missing_reason()
    if reason:
        return [{"label": "slurm", "ok": False, "problem": f"skipped: {reason}"}]
    variants = [("slurm", "")] + ([("slurm-tuned", TUNED + "\n")] if args.tuned else [])
    runs = []
    for label, params in variants:
        root = base / label
        progress(f"{label}: starting a loopback Slurm cluster")
        with slurm_cluster(root, params) as cluster:
            doc = run_ramp(label, [], ["--backend", "slurm"], cluster.env, root / "run", args)
            doc["slurm_config"] = params.strip() or "defaults of tests/slurm.py"
            sdiag = cluster.run("sdiag")
            doc["sdiag"] = [
                line.strip()
                for line in sdiag.stdout.splitlines()
                if line.strip().startswith(("Jobs submitted", "Jobs started", "Mean cycle"))
            ]
        runs.append(doc)
    return runs


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _knee(run: dict[str, Any], name: str) -> str:
    point = (run.get("knees") or {}).get(name) or {}
    level = point.get("level")
    return f"{level:g}" if isinstance(level, int | float) else "none"


def render(doc: dict[str, Any]) -> str:
    runs = [r for r in doc["runs"] if r.get("ok")]
    lines = [
        f"slurm-vs-pool: closed model, sleep {doc['args']['work']}, levels "
        f"{doc['args']['levels']}, hold {doc['args']['hold']} ({doc['machine']})",
    ]
    for run in doc["runs"]:
        if not run.get("ok"):
            lines.append(f"  {run['label']}: FAILED ({run.get('problem')})")
    if not runs:
        return "\n".join(lines)
    head = "  level | " + " | ".join(f"{r['label']:>26}" for r in runs)
    lines += ["", "  jobs/s and queue wait p50 / p95 per level:", head]
    levels = [lv["level"] for lv in runs[0]["levels"]]
    for index, level in enumerate(levels):
        cells = []
        for run in runs:
            lv = run["levels"][index] if index < len(run["levels"]) else None
            cells.append(
                "-"
                if lv is None
                else f"{_f(lv['throughput'], '.2f')}/s  {_f(lv['queue_wait_p50_s'], '.2f')}"
                f" / {_f(lv['queue_wait_p95_s'], '.2f')} s"
            )
        lines.append(f"  {level:>5g} | " + " | ".join(f"{c:>26}" for c in cells))
    lines += ["", "  knees (level):", "  " + " " * 24 + "".join(f"{r['label']:>14}" for r in runs)]
    for name, meaning in (
        ("kneedle", "diminishing returns"),
        ("usl", "USL capacity peak N*"),
        ("latency", "latency knee"),
    ):
        lines.append(f"  {meaning:<24}" + "".join(f"{_knee(r, name):>14}" for r in runs))
    for run in runs:
        for name in ("kneedle", "usl", "latency"):
            note = ((run.get("knees") or {}).get(name) or {}).get("note")
            if note:
                lines.append(f"    {run['label']} {name}: {note}")
        # The submit call: ledger + launch for the pool, the sbatch call for Slurm.
        means = [
            sum(lv["phases_s"].get(p, 0.0) for p in ("ledger", "launch"))
            for lv in run["levels"]
            if lv["submitted"]
        ]
        if means:
            lines.append(
                f"    {run['label']}: submit call {min(means) * 1e3:.0f}-{max(means) * 1e3:.0f} ms"
                " per job (ledger + launch phases, level means)"
            )
        if run.get("sdiag"):
            lines.append(f"    {run['label']} sdiag: {'; '.join(run['sdiag'])}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,2,4,8,12,16")
    parser.add_argument("--work", default="1s", help="how long each sleep job runs")
    parser.add_argument("--warmup", default="2s")
    parser.add_argument("--hold", default="8s")
    parser.add_argument("--drain", default="30s")
    parser.add_argument("--timeout", type=float, default=900.0, help="per ramp, seconds")
    parser.add_argument("--tuned", action="store_true", help="also Slurm with batch_sched_delay=0")
    parser.add_argument("--skip-slurm", action="store_true")
    parser.add_argument("--json", type=Path, help="write the full results here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = (
        f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}"
    )
    with tempfile.TemporaryDirectory(prefix="slurm-vs-pool-") as folder:
        base = Path(folder)
        pool_prefix = ["-i", str(SIM_INVENTORY), "--ledger", str(base / "pool" / "ledger")]
        runs = [run_ramp("pool", pool_prefix, [], dict(os.environ), base / "pool", args)]
        if not args.skip_slurm:
            runs += slurm_runs(args, base)
    doc = {"args": vars(args) | {"json": str(args.json) if args.json else None},
           "machine": machine, "runs": runs}  # fmt: skip
    print(render(doc))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2, default=str))
    return 0 if all(r.get("ok") for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
