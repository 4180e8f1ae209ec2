"""Stress-harness benchmark: the harness's own speed, and the bundled sim pool's knee over local
transport and over real SSH, side by side.

    python bench/stress-harness/run.py [--quick] [--json FILE] [--skip-ssh]

1. Harness: `Ramp(scenario, NoopBackend())` in this process, closed model 1..64x2, then an
   open model at 1,000 / 2,000 / 4,000 arrivals/s. Per level: submissions/s, the harness's own
   bookkeeping per submission (LevelResult.harness_s), dropped arrivals and how late the
   schedule ran. Target: >= 2,000 submissions/s, so the harness is never the bottleneck.
2. Knee: bench/stress-harness/scenario.yaml run twice through the real CLI
   (`gpupoolctl -i INV --ledger FILE stress ramp --scenario ... --save ... -o json`), each with
   a fresh HOME, sim state and ledger: (a) the bundled sim pool (gpupoolctl/data/sim.yaml,
   local transport, its agents run by the SSH nodes' python3); (b) the same six nodes
   (names, templates) each behind its own OpenSSH sshd on 127.0.0.x (tests/sshd.py), so
   every agent call goes over SSH. Every run is
   checked (exit 0 or 4, the result file loads, no level where every job failed) and a
   failed run is reported, never shown as a measurement.

The peer: the pool runs' own cost per submission (ledger + launch, and turnaround), against
which the harness's overhead is given as a percentage.

Only loopback traffic; every subprocess has a timeout. See bench/stress-harness/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import yaml  # noqa: E402

from gpupoolctl.stress import scenario as scenarios  # noqa: E402
from gpupoolctl.stress.backend import NoopBackend  # noqa: E402
from gpupoolctl.stress.model import LevelResult, RunResult  # noqa: E402
from gpupoolctl.stress.runner import Ramp  # noqa: E402
from tests.sshd import sshd_missing_reason, start_fleet  # noqa: E402

HERE = Path(__file__).resolve().parent
SCENARIO_FILE = HERE / "scenario.yaml"
SIM_INVENTORY = REPO_ROOT / "gpupoolctl" / "data" / "sim.yaml"
SSHD_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

HARNESS_TARGET = 2000.0  # submissions per second, from the issue
SCHEDULE_KEPT = 0.99  # open model: issued / planned arrivals at the target rate
CLI_MARGIN_S = 120.0  # a CLI ramp's time-out: its worst case (every drain used) plus this
PHASE_ORDER = ("ledger", "launch", "queue", "run")
# From the submit-path speed issue: SSH within 0.9x of local at every level, and a job's
# launch phase (placed -> the agent's launch answer) at level 1 within these, median.
SSH_RATIO_TARGET = 0.9
LAUNCH_P50_LOCAL_S = 0.020
LAUNCH_P50_SSH_EXTRA_S = 0.020  # over one round trip to the node


@dataclass(frozen=True)
class Plan:
    """How long each part runs: the full benchmark or --quick."""

    harness_levels: str
    harness_warmup: str
    harness_hold: str
    open_rates: tuple[float, ...]
    open_hold: str
    knee_overrides: dict[str, str] = field(default_factory=dict)  # CLI flags over the file


FULL = Plan("1..64x2", "500ms", "2s", (1000.0, 2000.0, 4000.0), "2s")
QUICK = Plan(
    "1..64x4",
    "200ms",
    "500ms",
    (2000.0, 4000.0),
    "1s",
    {"--levels": "1,2,4,6,8,12", "--warmup": "500ms", "--hold": "3s"},
)


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
    """Cores other processes keep busy while this one sleeps: on a shared machine they
    compete with the agents, sshd and the jobs for the same CPUs."""
    before = machine_busy_s()
    time.sleep(seconds)
    after = machine_busy_s()
    return None if before is None or after is None else (after - before) / seconds


# ---------------------------------------------------------------- part 1: the harness alone


def noop_scenario(name: str, model: str, levels: Sequence[float], warmup: str, hold: str) -> Any:
    return scenarios.Scenario(
        name=name,
        model=model,
        levels=tuple(levels),
        warmup_s=scenarios.parse_seconds(warmup, "warm-up", allow_zero=True),
        hold_s=scenarios.parse_seconds(hold, "hold"),
        drain_s=1.0,
        job_timeout_s=10.0,
        workload=scenarios.Workload("sleep", {"seconds": 0.001}),  # never runs: noop backend
        requests=(
            scenarios.RequestShape(weight=8, mem="10G"),
            scenarios.RequestShape(weight=2, mem="20G"),
        ),
    )


def harness_level(level: LevelResult) -> dict[str, Any]:
    window = level.window_s
    planned = level.submitted + level.dropped
    return {
        "level": level.level,
        "window_s": window,
        "submitted": level.submitted,
        "completed": level.completed,
        "failed": level.failed,
        "dropped": level.dropped,
        "submissions_per_s": level.submitted / window if window > 0 else 0.0,
        "throughput": level.throughput,
        "harness_us": level.harness_s * 1e6,
        # Open model: turnaround counts from the planned arrival, so with a no-op backend it
        # is how late the harness issued the submission.
        "late_p50_ms": _ms(level.turnaround.p50),
        "late_p99_ms": _ms(level.turnaround.p99),
        "issued_share": level.submitted / planned if planned else None,
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def harness_part(plan: Plan) -> dict[str, Any]:
    closed = noop_scenario(
        "harness-closed",
        "closed",
        scenarios.parse_levels(plan.harness_levels),
        plan.harness_warmup,
        plan.harness_hold,
    )
    progress(f"harness: closed model, levels {plan.harness_levels}, no-op backend ...")
    closed_run = Ramp(closed, NoopBackend()).run()
    opened = noop_scenario(
        "harness-open", "open", plan.open_rates, plan.harness_warmup, plan.open_hold
    )
    progress(
        "harness: open model at "
        + ", ".join(f"{r:g}" for r in plan.open_rates)
        + " arrivals/s, no-op backend ..."
    )
    open_run = Ramp(opened, NoopBackend()).run()
    closed_rows = [harness_level(lv) for lv in closed_run.levels]
    open_rows = [harness_level(lv) for lv in open_run.levels]
    peak = max(closed_rows, key=lambda row: row["submissions_per_s"])
    at_target = next((r for r in open_rows if r["level"] == HARNESS_TARGET), None)
    schedule_ok = None
    if at_target is not None:
        schedule_ok = (
            at_target["dropped"] == 0 and (at_target["issued_share"] or 0) >= SCHEDULE_KEPT
        )
    return {
        "closed": closed_rows,
        "open": open_rows,
        "peak_submissions_per_s": peak["submissions_per_s"],
        "peak_level": peak["level"],
        "harness_us_mean": weighted_mean([(r["harness_us"], r["submitted"]) for r in closed_rows]),
        "target": HARNESS_TARGET,
        "passed": peak["submissions_per_s"] >= HARNESS_TARGET,
        "schedule_kept_at_target": schedule_ok,
    }


def weighted_mean(pairs: Sequence[tuple[float | None, float]]) -> float | None:
    usable = [(v, w) for v, w in pairs if v is not None and w > 0]
    total = math.fsum(w for _, w in usable)
    if not usable or total <= 0:
        return None
    return math.fsum(v * w for v, w in usable) / total


# ---------------------------------------------------------------- part 2: the knee, via the CLI


@dataclass(frozen=True)
class SimNode:
    name: str
    template: str


def _sim_hosts(group: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, variables) of every simulated host of an inventory tree, in file order."""
    for name, variables in (group.get("hosts") or {}).items():
        if isinstance(variables, dict) and "sim" in variables:
            yield name, variables
    for child in (group.get("children") or {}).values():
        if isinstance(child, dict):
            yield from _sim_hosts(child)


def sim_pool_nodes(path: Path = SIM_INVENTORY) -> list[SimNode]:
    """The bundled pool's simulated hosts in file order: (name, sim template)."""
    found: dict[str, str] = {}
    for name, variables in _sim_hosts(yaml.safe_load(path.read_text())["all"]):
        found.setdefault(name, str(variables["sim"]))
    return [SimNode(name, template) for name, template in found.items()]


def node_python() -> str:
    """The nodes' interpreter: python3 on sshd's default PATH, not a login shell's shim."""
    return shutil.which("python3", path=SSHD_DEFAULT_PATH) or sys.executable


def local_inventory(path: Path, python: str, source: Path = SIM_INVENTORY) -> Path:
    """The bundled pool as shipped, with every node's agent run by `python`: the SSH run's
    interpreter, so the two runs differ only in the transport. (Locally the agent would
    otherwise be this process's interpreter, which may start several times slower than
    the system python3, e.g. a pyenv build with .pth files, and every job wrapper pays it.)"""
    tree = yaml.safe_load(source.read_text())
    for _, variables in _sim_hosts(tree["all"]):
        variables["ansible_python_interpreter"] = python
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


def ssh_inventory(path: Path, nodes: Sequence[SimNode], fleet: Any, sim_dir: Path) -> Path:
    """The bundled pool's nodes, same names and templates, each at its own sshd."""
    python = node_python()
    hosts = {
        node.name: fleet.host_vars(
            host, sim=node.template, sim_state_dir=str(sim_dir), ansible_python_interpreter=python
        )
        for node, host in zip(nodes, fleet.hosts, strict=True)
    }
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}, sort_keys=False))
    return path


@dataclass
class CliRun:
    transport: str
    code: int | None  # None: timed out or could not start
    wall_s: float
    stderr_tail: str
    result: RunResult | None = None
    problems: list[str] = field(default_factory=list)  # the run is not a measurement
    notes: list[str] = field(default_factory=list)  # worth knowing, not a failure
    rtt_s: float | None = None  # one round trip to a node (ssh: median TCP connect to sshd)

    @property
    def ok(self) -> bool:
        return not self.problems


def cli_env(home: Path, sim_dir: Path) -> dict[str, str]:
    """This environment minus anything that points at a personal config or state."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GPUPOOL_", "XDG_", "SSH_AUTH_SOCK"))
    }
    env.update(
        {"HOME": str(home), "GPUPOOL_SIM_DIR": str(sim_dir), "NO_COLOR": "1", "LC_ALL": "C.UTF-8"}
    )
    return env


def cli_timeout(plan: Plan) -> float:
    """Worst case of the ramp as planned (every level uses its whole drain) plus a margin."""
    base = scenarios.load_scenario(SCENARIO_FILE)
    over = plan.knee_overrides
    levels = scenarios.parse_levels(over["--levels"]) if "--levels" in over else base.levels
    warmup = scenarios.parse_seconds(over.get("--warmup", base.warmup_s), allow_zero=True)
    hold = scenarios.parse_seconds(over.get("--hold", base.hold_s))
    return len(levels) * (warmup + hold + base.drain_s) + CLI_MARGIN_S


def run_cli(
    transport: str, inventory: Path, root: Path, sim_dir: Path, plan: Plan, known_hosts: str = ""
) -> CliRun:
    """One `stress ramp` as a subprocess: its progress goes to our stderr as it comes."""
    from gpupoolctl.stress import result as results

    home = root / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True, mode=0o700)
    (home / ".ssh" / "known_hosts").write_text(known_hosts)
    saved = root / "result.json"
    argv = [
        sys.executable,
        "-m",
        "gpupoolctl.cli.main",
        "-i",
        str(inventory),
        "--ledger",
        str(root / "ledger"),
        "stress",
        "ramp",
        "--scenario",
        str(SCENARIO_FILE),
        *(part for flag, value in plan.knee_overrides.items() for part in (flag, value)),
        "--save",
        str(saved),
        "-o",
        "json",
    ]
    timeout = cli_timeout(plan)
    lines: list[str] = []
    started = time.perf_counter()
    code: int | None
    with open(root / "stdout.json", "w") as stdout:
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=cli_env(home, sim_dir),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a time-out kills the ramp and the jobs it started
        )
        assert proc.stderr is not None
        reader = threading.Thread(
            target=_forward, args=(proc.stderr, transport, lines), daemon=True
        )
        reader.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            code = None
            lines.append(f"timed out after {timeout:g}s")
        reader.join(timeout=10)
    run = CliRun(transport, code, time.perf_counter() - started, " ".join(lines[-5:])[-600:])
    if code not in (0, 4):
        run.problems.append(f"exit {code}: {run.stderr_tail}")
        return run
    try:
        run.result = results.load(saved)
    except Exception as exc:  # any unreadable result is a failed run, never a traceback
        run.problems.append(f"result file does not load: {exc}")
        return run
    for level in run.result.levels:
        if level.completed == 0 and level.failed > 0:
            top = ", ".join(f"{k} x{v}" for k, v in level.errors.items())
            run.problems.append(f"level {level.level:g}: every job failed ({top})")
        elif level.submitted == 0:
            # Closed-model waves longer than the hold (short --quick levels over SSH): the
            # level's throughput still counts, its latencies are simply not measured.
            run.notes.append(
                f"level {level.level:g}: no submission started inside the steady window "
                "(queue wait not measured there)"
            )
    return run


def _forward(stream: Any, label: str, lines: list[str]) -> None:
    for line in stream:
        text = line.rstrip("\n")
        lines.append(text)
        progress(f"  [{label}] {text}")


def knee_part(plan: Plan, skip_ssh: bool) -> dict[str, CliRun | str]:
    runs: dict[str, CliRun | str] = {}
    with tempfile.TemporaryDirectory(prefix="gpupool-stress-bench-") as tmp:
        base = Path(tmp)
        local = base / "local"
        local.mkdir()
        progress("knee: bundled sim pool over local transport ...")
        inventory = local_inventory(local / "inventory.yaml", node_python())
        runs["local"] = run_cli("local", inventory, local, local / "sim", plan)
        if skip_ssh:
            runs["ssh"] = "skipped (--skip-ssh)"
            return runs
        reason = sshd_missing_reason()
        if reason:
            runs["ssh"] = f"skipped: {reason}"
            return runs
        nodes = sim_pool_nodes()
        ssh = base / "ssh"
        ssh.mkdir()
        progress(f"knee: the same {len(nodes)} nodes behind {len(nodes)} sshd on loopback ...")
        with start_fleet(len(nodes), ssh / "fleet") as fleet:
            inventory = ssh_inventory(ssh / "inventory.yaml", nodes, fleet, ssh / "sim")
            rtt = round_trip_s(fleet.hosts[0].address, fleet.hosts[0].port)
            runs["ssh"] = run_cli(
                "ssh", inventory, ssh, ssh / "sim", plan, fleet.known_hosts.read_text()
            )
            runs["ssh"].rtt_s = rtt
    return runs


def round_trip_s(address: str, port: int, tries: int = 21) -> float:
    """One network round trip to a node: the median time of a TCP connect to its sshd
    (SYN, SYN-ACK), before the ramp starts."""
    import socket

    times = []
    for _ in range(tries):
        started = time.perf_counter()
        with socket.create_connection((address, port), timeout=5):
            times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


# ---------------------------------------------------------------- summing up


def level_doc(level: LevelResult) -> dict[str, Any]:
    return {
        "level": level.level,
        "submitted": level.submitted,
        "completed": level.completed,
        "failed": level.failed,
        "throughput": level.throughput,
        "queue_wait_p95_s": level.queue_wait.p95,
        "turnaround_mean_s": level.turnaround.mean,
        "phases_s": dict(level.phases),
        "launch_p50_s": level.launch.p50,
        "launch_p95_s": level.launch.p95,
        "harness_us": level.harness_s * 1e6,
    }


def knee_doc(result: RunResult) -> dict[str, Any]:
    knees = result.knees
    if knees is None:
        return {}
    return {
        name: {
            "level": point.level,
            "value": point.value,
            "note": point.note,
            "r2": point.extra.get("r2"),
            "peak_err": point.extra.get("peak_err"),
        }
        for name, point in (
            ("kneedle", knees.kneedle),
            ("usl", knees.usl),
            ("latency", knees.latency),
        )
    }


def pooled_cost(result: RunResult) -> dict[str, float | None]:
    """Per job over all levels (weighted by jobs): submit call (ledger + launch),
    turnaround, and the harness's own bookkeeping under real load."""
    levels = result.levels

    def mean_of(phase: str) -> float | None:
        return weighted_mean([(lv.phases.get(phase), lv.submitted) for lv in levels])

    ledger, launch = mean_of("ledger"), mean_of("launch")
    submit = None if ledger is None and launch is None else (ledger or 0.0) + (launch or 0.0)
    return {
        "submit_s": submit,
        "ledger_s": ledger,
        "launch_s": launch,
        "turnaround_s": weighted_mean([(lv.turnaround.mean, lv.submitted) for lv in levels]),
        "harness_s": weighted_mean([(lv.harness_s, lv.submitted) for lv in levels]),
    }


def run_doc(run: CliRun | str) -> dict[str, Any]:
    if isinstance(run, str):
        return {"skipped": run}
    doc: dict[str, Any] = {
        "transport": run.transport,
        "exit_code": run.code,
        "wall_s": run.wall_s,
        "ok": run.ok,
        "problems": run.problems,
        "notes": run.notes,
        "rtt_s": run.rtt_s,
    }
    if run.result is not None:
        from gpupoolctl.stress.report_text import knee_lines

        doc.update(
            levels=[level_doc(lv) for lv in run.result.levels],
            knees=knee_doc(run.result),
            knee_lines=knee_lines(run.result.knees),
            pooled=pooled_cost(run.result),
            stopped_early=run.result.stopped_early,
        )
    return doc


def overhead_ratios(harness: dict[str, Any], runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    noop_s = (harness["harness_us_mean"] or 0.0) / 1e6
    out: dict[str, Any] = {}
    for name, doc in runs.items():
        pooled = doc.get("pooled")
        if not pooled:
            continue
        submit, turnaround = pooled["submit_s"], pooled["turnaround_s"]
        out[name] = {
            "of_submit": noop_s / submit if submit else None,
            "of_turnaround": noop_s / turnaround if turnaround else None,
        }
    return out


# ---------------------------------------------------------------- report


def _f(value: float | None, fmt: str = ".1f", missing: str = "-") -> str:
    return missing if value is None else format(value, fmt)


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f}us"
    if seconds < 0.01:
        return f"{seconds * 1e3:.1f}ms"
    if seconds < 1.0:
        return f"{seconds * 1e3:.0f}ms"
    return f"{seconds:.2f}s"


def _pct(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:.2g}%"


def render_harness(h: dict[str, Any]) -> list[str]:
    out = [
        "harness alone: Ramp(scenario, NoopBackend()) in-process, closed model",
        f"{'level':>6}{'submitted':>11}{'subm/s':>10}{'harness us/subm':>17}",
    ]
    for row in h["closed"]:
        out.append(
            f"{row['level']:>6g}{row['submitted']:>11}{row['submissions_per_s']:>10.0f}"
            f"{row['harness_us']:>17.1f}"
        )
    verdict = "PASS" if h["passed"] else "MISS"
    out += [
        f"  peak {h['peak_submissions_per_s']:.0f} submissions/s at level {h['peak_level']:g}; "
        f"target >= {h['target']:.0f}/s: {verdict}; "
        f"mean harness overhead {h['harness_us_mean']:.1f} us per submission",
        "",
        "harness alone, open model (lateness = issue time - planned arrival)",
        f"{'rate/s':>7}{'planned':>9}{'issued':>8}{'dropped':>9}{'subm/s':>9}"
        f"{'late p50':>10}{'late p99':>10}",
    ]
    for row in h["open"]:
        planned = row["submitted"] + row["dropped"]
        out.append(
            f"{row['level']:>7g}{planned:>9}{row['submitted']:>8}{row['dropped']:>9}"
            f"{row['submissions_per_s']:>9.0f}{_f(row['late_p50_ms'], '.1f'):>8}ms"
            f"{_f(row['late_p99_ms'], '.1f'):>8}ms"
        )
    kept = h["schedule_kept_at_target"]
    if kept is not None:
        out.append(
            f"  at {h['target']:.0f} arrivals/s: "
            + ("schedule kept (nothing dropped): PASS" if kept else "schedule not kept: MISS")
        )
    return out


def render_knees(runs: dict[str, dict[str, Any]], ratios: dict[str, Any]) -> list[str]:
    out = ["", "knee of the bundled sim pool (scenario.yaml through `gpupoolctl stress ramp`)"]
    measured = {name: doc for name, doc in runs.items() if doc.get("levels")}
    for name, doc in runs.items():
        if "skipped" in doc:
            out.append(f"  {name}: {doc['skipped']}")
        else:
            state = "ok" if doc["ok"] else "FAILED"
            out.append(
                f"  {name}: exit {doc['exit_code']}, {doc['wall_s']:.0f} s wall, {state}"
                + (f" ({doc['stopped_early']})" if doc.get("stopped_early") else "")
            )
            out += [f"    FAILED {p}" for p in doc["problems"]]
            out += [f"    note: {n}" for n in doc["notes"]]
    if not measured:
        return out
    local, ssh = measured.get("local"), measured.get("ssh")
    by_level: dict[float, dict[str, dict[str, Any]]] = {}
    for name, doc in measured.items():
        for row in doc["levels"]:
            by_level.setdefault(row["level"], {})[name] = row
    out += [
        "",
        f"{'level':>6}{'local X/s':>11}{'ssh X/s':>9}{'ssh/local':>11}"
        f"{'local qw p95':>14}{'ssh qw p95':>12}{'local done':>12}{'ssh done':>10}",
    ]
    for level in sorted(by_level):
        rows = by_level[level]
        lx = rows.get("local", {}).get("throughput")
        sx = rows.get("ssh", {}).get("throughput")
        ratio = sx / lx if lx and sx is not None else None
        out.append(
            f"{level:>6g}{_f(lx, '.2f'):>11}{_f(sx, '.2f'):>9}{_f(ratio, '.2f'):>11}"
            f"{_dur(rows.get('local', {}).get('queue_wait_p95_s')):>14}"
            f"{_dur(rows.get('ssh', {}).get('queue_wait_p95_s')):>12}"
            f"{_done(rows.get('local')):>12}{_done(rows.get('ssh')):>10}"
        )
    out += _side_by_side(
        "mean phases per job (ledger / launch / queue / run), seconds", by_level, _phases, 30
    )
    out += _side_by_side(
        "launch phase per job (placed -> launch answered), p50 / p95", by_level, _launch, 22
    )
    out += render_targets(by_level, measured)
    out += ["", f"{'knee':<24}{'local':>22}{'ssh':>22}"]
    for key, label in (
        ("kneedle", "Kneedle (dimin. returns)"),
        ("usl", "USL N* (R^2)"),
        ("latency", "latency knee (qw p95)"),
    ):
        out.append(f"{label:<24}{_knee(local, key):>22}{_knee(ssh, key):>22}")
    for name, doc in measured.items():
        out.append(f"  {name}:")
        out += [f"    {line}" for line in doc["knee_lines"]]
    out += ["", "peer: one pooled submission, mean over all levels"]
    for name, doc in measured.items():
        pooled = doc["pooled"]
        share = ratios.get(name, {})
        out.append(
            f"  {name}: submit call {_dur(pooled['submit_s'])} (ledger {_dur(pooled['ledger_s'])}"
            f" + launch {_dur(pooled['launch_s'])}), turnaround {_dur(pooled['turnaround_s'])}; "
            f"harness bookkeeping under this load {_f((pooled['harness_s'] or 0) * 1e6)} us"
        )
        out.append(
            f"    harness overhead (no-op) is {_pct(share.get('of_submit'))} of one pooled "
            f"submission over {name} ({_pct(share.get('of_turnaround'))} of its turnaround)"
        )
    return out


def _launch(row: dict[str, Any] | None) -> str:
    if not row:
        return "-"
    return f"{_dur(row.get('launch_p50_s'))} / {_dur(row.get('launch_p95_s'))}"


def render_targets(
    by_level: dict[float, dict[str, dict[str, Any]]], measured: dict[str, dict[str, Any]]
) -> list[str]:
    """The submit-path targets, each PASS or MISS with its figure."""
    out = ["", "targets"]
    ratios = {}
    for level, rows in sorted(by_level.items()):
        lx = rows.get("local", {}).get("throughput")
        sx = rows.get("ssh", {}).get("throughput")
        if lx and sx is not None:
            ratios[level] = sx / lx
    if ratios:
        low = min(ratios, key=lambda k: ratios[k])
        verdict = "PASS" if ratios[low] >= SSH_RATIO_TARGET else "MISS"
        out.append(
            f"  ssh/local >= {SSH_RATIO_TARGET} at every level: {verdict} "
            f"(lowest {ratios[low]:.2f} at level {low:g})"
        )
    first = min(by_level) if by_level else None
    for name in ("local", "ssh"):
        row = by_level.get(first, {}).get(name) if first is not None else None
        p50 = row.get("launch_p50_s") if row else None
        if p50 is None:
            continue
        bound = LAUNCH_P50_LOCAL_S
        how = f"<= {_dur(bound)}"
        rtt = measured.get(name, {}).get("rtt_s")
        if name == "ssh":
            bound = (rtt or 0.0) + LAUNCH_P50_SSH_EXTRA_S
            how = f"<= 1 RTT ({_dur(rtt)}) + {_dur(LAUNCH_P50_SSH_EXTRA_S)}"
        verdict = "PASS" if p50 <= bound else "MISS"
        out.append(f"  launch p50 at level {first:g}, {name} {how}: {verdict} ({_dur(p50)})")
    return out


def _done(row: dict[str, Any] | None) -> str:
    if not row:
        return "-"
    return f"{row['completed']}/{row['submitted']}"


def _side_by_side(
    title: str,
    by_level: dict[float, dict[str, dict[str, Any]]],
    cell: Callable[[dict[str, Any] | None], str],
    width: int,
) -> list[str]:
    """A titled table: one row per level, `cell` of the local and of the SSH run."""
    lines = ["", title, f"{'level':>6}  {'local':<{width}}{'ssh':<{width}}"]
    for level in sorted(by_level):
        rows = by_level[level]
        lines.append(
            f"{level:>6g}  {cell(rows.get('local')):<{width}}{cell(rows.get('ssh')):<{width}}"
        )
    return lines


def _phases(row: dict[str, Any] | None) -> str:
    if not row:
        return "-"
    phases = row["phases_s"]
    return " / ".join(_f(phases.get(p), ".3f") for p in PHASE_ORDER)


def _knee(doc: dict[str, Any] | None, key: str) -> str:
    if not doc or key not in doc["knees"]:
        return "-"
    point = doc["knees"][key]
    if point["level"] is None:
        return "none"
    if key == "usl":
        text = f"{point['level']:.1f}"
        if point.get("peak_err") is not None:
            text += f"+/-{point['peak_err']:.1f}"
        return text + f" ({_f(point.get('r2'), '.2f')})"
    return f"{point['level']:g}"


def render(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    out = [
        f"gpupoolctl stress-harness benchmark ({doc['mode']}): {env['cpus']} CPUs, "
        f"Python {env['python']}, commit {env['commit']}",
        "other processes kept "
        + ", ".join(_f(c, ".2f") for c in env["background_cores"])
        + " cores busy (before, after)",
        "",
        *render_harness(doc["harness"]),
        *render_knees(doc["knee"], doc["overhead"]),
    ]
    return "\n".join(out)


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer, shorter levels: about a minute in all"
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("--skip-ssh", action="store_true", help="no sshd run, local only")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from gpupoolctl.stress.result import source_commit

    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    busy_before = background_cores()
    harness = harness_part(plan)
    runs = {name: run_doc(run) for name, run in knee_part(plan, args.skip_ssh).items()}
    busy_after = background_cores()
    doc = {
        "mode": "quick" if args.quick else "full",
        "environment": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "commit": source_commit(),
            "date": time.strftime("%Y-%m-%d"),
            "scenario": str(SCENARIO_FILE.relative_to(REPO_ROOT)),
            "knee_overrides": plan.knee_overrides,
            "background_cores": [busy_before, busy_after],
        },
        "harness": harness,
        "knee": runs,
        "overhead": overhead_ratios(harness, runs),
    }
    print(render(doc))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    failed = [doc for doc in runs.values() if "skipped" not in doc and not doc["ok"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
