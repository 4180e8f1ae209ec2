"""Start-up benchmark: wall time of the `gpupoolctl` console script against a bare interpreter.

    python bench/startup/run.py [--rounds 15] [--top 15] [--json FILE] [--before TREE]
        [--no-bytecode-cache]

gpupoolctl is called from cron and CI scripts many times, so the time before a command does
its work counts. One run measures, in subprocesses, with rounds alternating between cases
(every case once per round, the order rotated each round) and medians compared, because a
shared machine's load drifts and all cases should see the same weather:

* `python3 -c pass`: the named peer, the same interpreter as sys.executable;
* `python3 -c "import typer"`: the floor for any typer command line;
* the real console script (the one installed beside sys.executable): `--version`, `--help`,
  `jobs --help`, `jobs`, `ledger show -o json` and `pool --no-refresh -o json`, the last three
  against a small ledger in a temp folder (GPUPOOL_LEDGER, GPUPOOL_LEDGER_NO_FSYNC=1), created
  first by `gpupoolctl pool` on the bundled simulated pool (its state in a temp GPUPOOL_SIM_DIR);
* with `--before TREE` (a folder holding an older copy of the `gpupoolctl` package), every
  console-script case a second time with that copy first on PYTHONPATH, in the same rounds:
  before and after see the same weather.

The cases run with a bytecode cache (PYTHONPYCACHEPREFIX in the temp folder, and
PYTHONDONTWRITEBYTECODE dropped), filled by the warm-up rounds, as an installed copy has its
.pyc files from pip; `--no-bytecode-cache` runs them with the environment as it is.

Each is printed in milliseconds, as a ratio to `python3 -c pass` and as the overhead above it.
Then `python -X importtime` of the console script's entry point running `--version` gives the
modules that cost most (cumulative, top-level imports of the run only).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]

# The entry point exactly as the console script calls it, for -X importtime.
ENTRY = "import sys; from gpupoolctl.cli.main import run; sys.argv[0] = 'gpupoolctl'; run()"


def console_script() -> str:
    """The script pip installed for this interpreter (not a shim earlier on PATH)."""
    beside = Path(sys.executable).parent / "gpupoolctl"
    if beside.is_file():
        return str(beside)
    found = shutil.which("gpupoolctl")
    if found is None:
        raise SystemExit("gpupoolctl is not installed: pip install -e . first")
    return found


def cases(script: str) -> dict[str, list[str]]:
    py = sys.executable
    named = {
        "python3 -c pass": [py, "-c", "pass"],
        'python3 -c "import typer"': [py, "-c", "import typer"],
        # typer >= 0.2x coerces every non-flag option through pydantic, imported on the first
        # value parsed: the floor for any command that parses an option (all but --version).
        'python3 -c "import typer._adapters"': [py, "-c", "import typer._adapters"],
        "gpupoolctl --version": [script, "--version"],
        "gpupoolctl --help": [script, "--help"],
        "gpupoolctl jobs --help": [script, "jobs", "--help"],
        "gpupoolctl jobs": [script, "jobs"],
        "gpupoolctl ledger show -o json": [script, "ledger", "show", "-o", "json"],
        "gpupoolctl pool --no-refresh -o json": [script, "pool", "--no-refresh", "-o", "json"],
    }
    if importlib.util.find_spec("typer._adapters") is None:  # an older typer: no pydantic
        del named['python3 -c "import typer._adapters"']
    return named


def environment(folder: Path, *, bytecode_cache: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "NO_COLOR"))}
    env.update(
        {
            "GPUPOOL_LEDGER": str(folder / "ledger.jsonl"),
            "GPUPOOL_LEDGER_NO_FSYNC": "1",
            "GPUPOOL_SIM_DIR": str(folder / "sim"),
            "COLUMNS": "100",
        }
    )
    if bytecode_cache:
        # Without it (PYTHONDONTWRITEBYTECODE=1 in some shells and CI images), every run
        # compiles gpupoolctl's modules from source: 4-10 ms of "self" time per module in
        # -X importtime that an installed copy never pays.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    return env


def with_before(named: dict[str, list[str]], tree: Path) -> dict[str, list[str]]:
    """Every console-script case twice: as installed, and with the older copy in `tree`."""
    both: dict[str, list[str]] = {}
    for name, argv in named.items():
        both[name] = argv
        if name.startswith("gpupoolctl "):
            # env(1) puts the old tree first on PYTHONPATH for this one process
            both[f"{name} (before)"] = ["env", f"PYTHONPATH={tree}", *argv]
    return both


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL
    )
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return elapsed


def measure(
    named: dict[str, list[str]], env: dict[str, str], cwd: Path, rounds: int
) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {name: [] for name in named}
    order = list(named)
    for _ in range(2):  # warm the page cache and .pyc files; not counted
        for name in order:
            run_once(named[name], env, cwd)
    for index in range(rounds):
        shift = index % len(order)
        for name in order[shift:] + order[:shift]:
            runs[name].append(run_once(named[name], env, cwd))
    return runs


def import_times(args: list[str], env: dict[str, str], cwd: Path, top: int) -> list[dict[str, Any]]:
    """The costliest imports of one CLI run, two levels deep (cumulative time, one run)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", ENTRY, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
    )
    if proc.returncode != 0:
        raise SystemExit(f"-X importtime run failed: {proc.stderr.strip()[-500:]}")
    rows = []
    for line in proc.stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3 or not fields[1].strip().isdigit():
            continue  # the header, or a line that is not -X importtime's
        name = fields[2][1:].rstrip()
        depth = (len(name) - len(name.lstrip(" "))) // 2  # two spaces per level of nesting
        if depth <= 1:
            rows.append(
                {"module": name.strip(), "depth": depth, "cumulative_ms": int(fields[1]) / 1000}
            )
    rows.sort(key=lambda row: row["cumulative_ms"], reverse=True)
    return rows[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="alternating rounds")
    parser.add_argument("--top", type=int, default=15, help="modules shown from -X importtime")
    parser.add_argument(
        "--importtime-args",
        default="--version",
        help="the gpupoolctl arguments whose imports are listed (default: --version)",
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a folder with an older copy of the gpupoolctl package: its cases run alongside",
    )
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="run with the environment's bytecode settings (default: a cache in the temp folder)",
    )
    args = parser.parse_args()
    script = console_script()
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
        folder = Path(tmp)
        env = environment(folder, bytecode_cache=not args.no_bytecode_cache)
        run_once([script, "pool", "-o", "json"], env, folder)  # the ledger, from the sim pool
        named = cases(script)
        if args.before is not None:
            named = with_before(named, args.before.resolve())
        runs = measure(named, env, folder, args.rounds)
        imports = import_times(args.importtime_args.split(), env, folder, args.top)
    peer = statistics.median(runs["python3 -c pass"])
    results: list[dict[str, Any]] = []
    print(
        f"start-up, median of {args.rounds} alternating rounds (console script: {script})\n"
        f"{'case':<49} {'ms':>8} {'x peer':>7} {'over peer ms':>13}"
    )
    for name, times in runs.items():
        median = statistics.median(times)
        row = {
            "case": name,
            "median_ms": round(median * 1000, 1),
            "min_ms": round(min(times) * 1000, 1),
            "ratio_to_peer": round(median / peer, 2),
            "overhead_ms": round((median - peer) * 1000, 1),
        }
        results.append(row)
        print(
            f"{name:<49} {row['median_ms']:>8} {row['ratio_to_peer']:>7} {row['overhead_ms']:>13}"
        )
    print(
        f"\n-X importtime, gpupoolctl {args.importtime_args}: the {args.top} costliest imports "
        "two levels deep (cumulative, one run)"
    )
    for row in imports:
        print(f"  {row['cumulative_ms']:>7.1f} ms  {'  ' * row['depth']}{row['module']}")
    if args.json:
        document = {
            "machine": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
            },
            "rounds": args.rounds,
            "bytecode_cache": not args.no_bytecode_cache,
            "before": str(args.before) if args.before else None,
            "console_script": script,
            "cases": results,
            "importtime_args": args.importtime_args,
            "importtime": imports,
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
