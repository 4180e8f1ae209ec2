"""Fan-out benchmark: gpupoolctl's full inventory against clush and Ansible on N real sshd hosts.

    python bench/fanout/run.py [--hosts 32] [--rounds 5] [--delay 0.075] [--json FILE]

Starts N OpenSSH sshd servers on loopback (tests/sshd.py), then, alternating round by round:

* `gpupoolctl -i INV --forks N inventory -o json`  full facts from simulated GPU nodes
* `clush -b -f N -w node[1-N] true`                OpenSSH, one `true` per host
* `ansible all -f N -m command -a true`            forks = N, pipelining on, cold per round

Every round is checked (exit code; for gpupoolctl summary.ok == N and GPUs on every host) and a
failed round is reported, never timed as a success. sshd's logs give SSH connections and
sessions per host per run. Then the same inventory goes through a latency-injecting relay
(bench/latency_proxy.py, `--delay` each way) and wall time is reported in round trips, next to
one plain `ssh true` and one single-host gpupoolctl run through the same relay.

Only loopback traffic; every subprocess has a timeout. See bench/fanout/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.latency_proxy import LatencyProxy  # noqa: E402
from tests.sshd import SshdFleet, SshdHost, sshd_missing_reason, start_fleet  # noqa: E402

TEMPLATES = ("dgx-h100", "dgx-h100-mig", "a100-pcie-4", "l40s-4", "mi300x-8")
RUN_TIMEOUT = 90.0  # seconds, any one timed command
SHORT_TIMEOUT = 20.0  # start-up probes, one-host runs, clean-up
LOG_SETTLE = 2.0  # sshd children may log just after the client returned
CLUSH_RATIO_TARGET = 1.0  # gpupoolctl / clush <= this
ANSIBLE_RATIO_TARGET = 5.0  # ansible / gpupoolctl >= this
LATENCY_RTTS_TARGET = 8  # wall <= 8 RTT + LATENCY_SLACK_S
LATENCY_SLACK_S = 0.5
SSHD_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_HINT = {
    "clush": "pip install clustershell",
    "ansible": "pip install ansible-core",
}


# ---------------------------------------------------------------- results


@dataclass
class Sample:
    """One timed command: wall seconds, whether it did everything it was asked."""

    tool: str
    round: int
    wall_s: float
    ok: bool
    detail: str = ""
    sessions: list[int] = field(default_factory=list)  # per host, from sshd's log
    connections: list[int] = field(default_factory=list)
    host_elapsed_s: list[float] = field(default_factory=list)  # gpupoolctl's own per-host
    client_cpu_s: float | None = None  # see Measured
    server_cpu_s: float | None = None
    machine_busy_s: float | None = None


@dataclass
class ToolSummary:
    tool: str
    command: str
    rounds: int
    ok_rounds: int
    min_s: float | None
    median_s: float | None
    sessions_per_host: tuple[int, int] | None  # min, max over hosts and ok rounds
    connections_per_host: tuple[int, int] | None
    client_cpu_s: float | None = None  # medians over ok rounds, see Measured
    server_cpu_s: float | None = None
    machine_busy_s: float | None = None
    skipped: str | None = None


@dataclass
class Check:
    name: str
    value: float | None
    target: str
    passed: bool | None  # None: not measured

    @property
    def verdict(self) -> str:
        return {True: "PASS", False: "MISS", None: "n/a"}[self.passed]


# ---------------------------------------------------------------- environment


@dataclass
class Workspace:
    root: Path
    fleet: SshdFleet
    home: Path  # HOME for gpupoolctl, clush and ansible: ~/.ssh/known_hosts = the fleet's
    inventory: Path  # gpupoolctl, YAML with sim: templates
    ansible_inventory: Path
    ansible_cfg: Path  # empty, so no ansible.cfg of this machine's user applies
    sim_dir: Path
    python: str  # the nodes' interpreter (node_python)

    def env(self, home: Path | None = None) -> dict[str, str]:
        """The caller's environment minus anything that would pull in a personal config."""
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("GPUPOOL_", "XDG_", "ANSIBLE_", "SSH_AUTH_SOCK", "CLUSTERSHELL"))
        }
        env.update(
            {
                "HOME": str(home or self.home),
                "GPUPOOL_SIM_DIR": str(self.sim_dir),
                "NO_COLOR": "1",
                "LC_ALL": "C.UTF-8",
            }
        )
        return env


def tool_path(name: str) -> str | None:
    """The console script next to this interpreter first (skips pyenv-style shims, which add a
    shell start per call), else whatever PATH finds."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def node_python() -> str:
    """The nodes' interpreter, the same for gpupoolctl and Ansible: python3 on sshd's default
    PATH. A bare `python3` would resolve through the login shell's start-up files (bash reads
    ~/.bashrc for sshd sessions), which on a developer box may be a pyenv shim costing more
    than the agent itself."""
    return shutil.which("python3", path=SSHD_DEFAULT_PATH) or sys.executable


def host_range(count: int, prefix: str = "node") -> str:
    return f"{prefix}[1-{count}]"


def write_home(home: Path, known_hosts_text: str) -> Path:
    ssh = home / ".ssh"
    ssh.mkdir(parents=True, exist_ok=True, mode=0o700)
    (ssh / "known_hosts").write_text(known_hosts_text)
    return home


def gpupoolctl_inventory(
    path: Path,
    fleet: SshdFleet,
    sim_dir: Path,
    addresses: dict[str, tuple[str, int]],
    python: str,
) -> Path:
    """YAML inventory: one host per sshd, templates mixed, reached at `addresses[name]`."""
    lines = ["all:", "  vars:", f"    sim_state_dir: {json.dumps(str(sim_dir))}", "  hosts:"]
    for index, host in enumerate(fleet.hosts):
        address, port = addresses[host.name]
        lines += [
            f"    {host.name}:",
            f"      ansible_host: {address}",
            f"      ansible_port: {port}",
            f"      ansible_user: {json.dumps(fleet.user)}",
            f"      ansible_ssh_private_key_file: {json.dumps(str(fleet.client_key))}",
            f"      sim: {TEMPLATES[index % len(TEMPLATES)]}",
            f"      ansible_python_interpreter: {json.dumps(python)}",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def ansible_inventory(path: Path, fleet: SshdFleet, python: str) -> Path:
    """INI inventory: the aliases resolve through the fleet's ssh_config (-F), which also
    names the key, the user, the port and the known_hosts file."""
    ssh_args = f"-F {fleet.ssh_config} -o BatchMode=yes"
    lines = ["[all]", *(host.name for host in fleet.hosts), "", "[all:vars]"]
    lines += [
        f"ansible_python_interpreter={python}",
        f"ansible_ssh_common_args='{ssh_args}'",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def empty_file(path: Path) -> Path:
    path.write_text("")
    return path


@contextmanager
def workspace(count: int) -> Iterator[Workspace]:
    with tempfile.TemporaryDirectory(prefix="gpupool-fanout-") as tmp:
        root = Path(tmp)
        with start_fleet(count, root / "fleet") as fleet:
            sim_dir, python = root / "sim", node_python()
            direct = {h.name: (h.address, h.port) for h in fleet.hosts}
            yield Workspace(
                root=root,
                fleet=fleet,
                home=write_home(root / "home", fleet.known_hosts.read_text()),
                inventory=gpupoolctl_inventory(
                    root / "inventory.yaml", fleet, sim_dir, direct, python
                ),
                ansible_inventory=ansible_inventory(root / "ansible.ini", fleet, python),
                ansible_cfg=empty_file(root / "ansible.cfg"),
                sim_dir=sim_dir,
                python=python,
            )


# ---------------------------------------------------------------- running commands


@dataclass
class Outcome:
    code: int | None  # None: timed out or could not start
    stdout: str
    stderr: str
    wall_s: float


def timed(argv: Sequence[str], env: dict[str, str], cwd: Path, timeout: float) -> Outcome:
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            list(argv),
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        wall = time.perf_counter() - started
        return Outcome(None, _text(exc.stdout), f"timed out after {timeout:g}s", wall)
    except OSError as exc:
        return Outcome(None, "", f"cannot run {argv[0]}: {exc}", time.perf_counter() - started)
    return Outcome(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - started)


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def _tail(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else "..." + text[-limit:]


def check_inventory_json(outcome: Outcome, expected: int) -> tuple[bool, str, list[float]]:
    """gpupoolctl succeeded only if every host answered ok with at least one GPU."""
    if outcome.code != 0:
        return False, f"exit {outcome.code}: {_tail(outcome.stderr)}", []
    try:
        document = json.loads(outcome.stdout)
    except json.JSONDecodeError as exc:
        return False, f"not JSON: {exc}", []
    hosts = document.get("hosts", [])
    ok = document.get("summary", {}).get("ok")
    no_gpus = [h["name"] for h in hosts if not ((h.get("facts") or {}).get("gpus"))]
    elapsed = [float(h.get("elapsed_s") or 0.0) for h in hosts]
    if ok != expected or len(hosts) != expected or no_gpus:
        failed = [f"{h['name']}: {h.get('error')}" for h in hosts if h.get("outcome") != "ok"]
        why = f"summary.ok={ok} of {expected}, no GPUs on {no_gpus[:3]}, {failed[:3]}"
        return False, why, elapsed
    return True, "", elapsed


def check_exit(outcome: Outcome) -> tuple[bool, str]:
    if outcome.code == 0:
        return True, ""
    return False, f"exit {outcome.code}: {_tail(outcome.stderr or outcome.stdout)}"


def check_ansible(outcome: Outcome, names: Sequence[str]) -> tuple[bool, str]:
    ok, why = check_exit(outcome)
    if not ok:
        return ok, why
    answered = {line.split(" | ")[0] for line in outcome.stdout.splitlines() if " | " in line}
    missing = sorted(set(names) - answered)
    if missing:
        return False, f"no result line for {missing[:5]}"
    return True, ""


@dataclass
class Tool:
    name: str
    argv: list[str]
    run: Callable[[int], Sample]


# ---------------------------------------------------------------- CPU accounting (Linux /proc)


def _clock_ticks() -> int:
    try:
        return int(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100


def children_cpu_s() -> float:
    """CPU of this process's waited-for children (a tool and every process it waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_busy_s() -> float | None:
    """Busy CPU seconds of the whole machine so far (all cores), from /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    ticks = [int(value) for value in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / _clock_ticks()


def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from "state" (field 3) on


def sshd_reaped_cpu_s(host: SshdHost) -> float | None:
    """CPU of everything the host's listening sshd has reaped: each connection's sshd, the
    session's shell and the command it ran (the agent, `true`, Ansible's module)."""
    if host.process is None:
        return None
    fields = _proc_stat(host.process.pid)
    if fields is None:
        return None
    return (int(fields[13]) + int(fields[14])) / _clock_ticks()  # cutime + cstime


def wait_sshd_idle(hosts: Sequence[SshdHost], timeout: float = LOG_SETTLE) -> None:
    """Wait until no listening sshd has a child (connection) left, so its CPU is reaped."""
    masters = {host.process.pid for host in hosts if host.process is not None}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = False
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            fields = _proc_stat(int(entry.name))
            if fields is not None and int(fields[1]) in masters:
                busy = True
                break
        if not busy:
            return
        time.sleep(0.05)


@dataclass
class Measured:
    outcome: Outcome
    sessions: list[int]  # per host, from sshd's log
    connections: list[int]
    client_cpu_s: float  # the tool's own processes
    server_cpu_s: float | None  # every sshd connection + the remote commands, all hosts
    machine_busy_s: float | None  # all cores, whole machine, during the run


def measure(
    hosts: Sequence[SshdHost],
    argv: Sequence[str],
    env: dict[str, str],
    cwd: Path,
    after: Callable[[], None] | None = None,
) -> Measured:
    """Run one timed command and account for what it cost on both ends of SSH. `after` runs
    untimed before the server side is read (e.g. closing Ansible's ControlPersist masters)."""
    marks = [host.mark() for host in hosts]
    server_before = [sshd_reaped_cpu_s(host) for host in hosts]
    client_before, busy_before = children_cpu_s(), machine_busy_s()
    outcome = timed(argv, env, cwd, RUN_TIMEOUT)
    client = children_cpu_s() - client_before
    busy_after = machine_busy_s()
    if after is not None:
        after()
    wait_sshd_idle(hosts)
    server_after = [sshd_reaped_cpu_s(host) for host in hosts]
    pairs = list(zip(server_before, server_after, strict=True))
    server = None
    if all(a is not None and b is not None for a, b in pairs):
        server = sum(b - a for a, b in pairs if a is not None and b is not None)
    busy = None
    if busy_before is not None and busy_after is not None:
        busy = busy_after - busy_before
    return Measured(
        outcome,
        [h.sessions_since(m) for h, m in zip(hosts, marks, strict=True)],
        [h.connections_since(m) for h, m in zip(hosts, marks, strict=True)],
        client,
        server,
        busy,
    )


def sample_of(tool: str, round_no: int, measured: Measured, ok: bool, why: str) -> Sample:
    return Sample(
        tool=tool,
        round=round_no,
        wall_s=measured.outcome.wall_s,
        ok=ok,
        detail=why,
        sessions=measured.sessions,
        connections=measured.connections,
        client_cpu_s=measured.client_cpu_s,
        server_cpu_s=measured.server_cpu_s,
        machine_busy_s=measured.machine_busy_s,
    )


# ---------------------------------------------------------------- the three tools


def gpupoolctl_tool(ws: Workspace, exe: str) -> Tool:
    count = len(ws.fleet.hosts)
    argv = [exe, "-i", str(ws.inventory), "--forks", str(count), "inventory", "-o", "json"]

    def run(round_no: int) -> Sample:
        measured = measure(ws.fleet.hosts, argv, ws.env(), ws.root)
        ok, why, elapsed = check_inventory_json(measured.outcome, count)
        sample = sample_of("gpupoolctl", round_no, measured, ok, why)
        sample.host_elapsed_s = elapsed
        return sample

    return Tool("gpupoolctl", argv, run)


def clush_tool(ws: Workspace, exe: str) -> Tool:
    count = len(ws.fleet.hosts)
    ssh_options = f"-F {ws.fleet.ssh_config} -oBatchMode=yes"
    argv = [exe, "-b", "-f", str(count), "-w", host_range(count), "-o", ssh_options, "true"]

    def run(round_no: int) -> Sample:
        measured = measure(ws.fleet.hosts, argv, ws.env(), ws.root)
        ok, why = check_exit(measured.outcome)
        return sample_of("clush", round_no, measured, ok, why)

    return Tool("clush", argv, run)


def ansible_tool(ws: Workspace, exe: str) -> Tool:
    count = len(ws.fleet.hosts)
    names = [h.name for h in ws.fleet.hosts]
    argv = [exe, "all", "-i", str(ws.ansible_inventory), "-f", str(count)]
    argv += ["-m", "command", "-a", "true", "-o"]

    def run(round_no: int) -> Sample:
        # A fresh ControlPath folder per round: each round is a cold ad-hoc run, as typed by a
        # person (Ansible's ControlPersist=60s would otherwise carry masters across rounds).
        control_dir = ws.root / "ansible-cp" / f"round{round_no}"
        control_dir.mkdir(parents=True)
        env = ws.env()
        env.update(
            {
                "ANSIBLE_PIPELINING": "True",
                "ANSIBLE_FORKS": str(count),
                "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
                "ANSIBLE_LOCAL_TEMP": str(ws.root / "ansible-tmp"),
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_DEPRECATION_WARNINGS": "False",
                "ANSIBLE_RETRY_FILES_ENABLED": "False",
                "ANSIBLE_CONFIG": str(ws.ansible_cfg),  # empty: no ansible.cfg from elsewhere
            }
        )
        measured = measure(
            ws.fleet.hosts, argv, env, ws.root, after=lambda: close_control_masters(control_dir)
        )
        ok, why = check_ansible(measured.outcome, names)
        return sample_of("ansible", round_no, measured, ok, why)

    return Tool("ansible", argv, run)


def close_control_masters(control_dir: Path) -> None:
    """End the ControlPersist masters of one Ansible round (not timed)."""
    for socket_path in control_dir.iterdir():
        argv = ["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "unused"]
        with suppress(subprocess.TimeoutExpired):
            subprocess.run(argv, capture_output=True, timeout=SHORT_TIMEOUT, check=False)


# ---------------------------------------------------------------- fan-out rounds


def build_tools(ws: Workspace) -> tuple[list[Tool], dict[str, str]]:
    """The tools that are installed, and why the others are skipped."""
    makers = {"gpupoolctl": gpupoolctl_tool, "clush": clush_tool, "ansible": ansible_tool}
    tools: list[Tool] = []
    skipped: dict[str, str] = {}
    for name, make in makers.items():
        exe = tool_path(name)
        if exe is None:
            hint = INSTALL_HINT.get(name, "pip install -e .")
            skipped[name] = f"{name} not found; install it with: {hint}"
            continue
        tools.append(make(ws, exe))
    return tools, skipped


def warm_up(ws: Workspace, tools: Sequence[Tool]) -> list[Sample]:
    """One untimed run each: sim state files, the agent's zip cache on the nodes, .pyc files
    and page cache are then as warm for every tool as in the timed rounds."""
    return [tool.run(0) for tool in tools]


def run_rounds(tools: Sequence[Tool], rounds: int, progress: Callable[[str], None]) -> list[Sample]:
    samples: list[Sample] = []
    for round_no in range(1, rounds + 1):
        for tool in tools:  # ABCABC...: drift and noise hit every tool alike
            sample = tool.run(round_no)
            samples.append(sample)
            state = "ok" if sample.ok else f"FAILED ({sample.detail})"
            progress(f"round {round_no} {tool.name:<10} {sample.wall_s:6.3f}s {state}")
    return samples


def summarize(tool: Tool, samples: Sequence[Sample]) -> ToolSummary:
    mine = [s for s in samples if s.tool == tool.name]
    good = [s for s in mine if s.ok]
    walls = [s.wall_s for s in good]
    sessions = [n for s in good for n in s.sessions]
    connections = [n for s in good for n in s.connections]
    return ToolSummary(
        tool=tool.name,
        command=" ".join(tool.argv),
        rounds=len(mine),
        ok_rounds=len(good),
        min_s=min(walls) if walls else None,
        median_s=statistics.median(walls) if walls else None,
        sessions_per_host=(min(sessions), max(sessions)) if sessions else None,
        connections_per_host=(min(connections), max(connections)) if connections else None,
        client_cpu_s=_median([s.client_cpu_s for s in good]),
        server_cpu_s=_median([s.server_cpu_s for s in good]),
        machine_busy_s=_median([s.machine_busy_s for s in good]),
    )


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def ratio_checks(summaries: dict[str, ToolSummary]) -> list[Check]:
    def median(name: str) -> float | None:
        summary = summaries.get(name)
        return summary.median_s if summary else None

    ours, clush, ansible = median("gpupoolctl"), median("clush"), median("ansible")
    checks = []
    value = ours / clush if ours and clush else None
    passed = None if value is None else value <= CLUSH_RATIO_TARGET
    checks.append(Check("gpupoolctl/clush (median)", value, f"<= {CLUSH_RATIO_TARGET:g}", passed))
    value = ansible / ours if ours and ansible else None
    passed = None if value is None else value >= ANSIBLE_RATIO_TARGET
    checks.append(
        Check("ansible/gpupoolctl (median)", value, f">= {ANSIBLE_RATIO_TARGET:g}", passed)
    )
    ours_sessions = summaries.get("gpupoolctl")
    span = ours_sessions.sessions_per_host if ours_sessions else None
    passed = None if span is None else span == (1, 1)
    checks.append(
        Check("gpupoolctl SSH sessions per host (max)", span[1] if span else None, "== 1", passed)
    )
    return checks


# ---------------------------------------------------------------- start-up cost


def startup_costs(ws: Workspace, gpupoolctl: str | None, repeat: int = 3) -> dict[str, float]:
    """Best of `repeat` wall seconds: an empty interpreter, gpupoolctl --version, an
    interpreter that imports fabric + paramiko (what the ssh transport loads), and the agent
    of one simulated node run locally as sshd would run it (no SSH)."""
    probes = {
        "python3 -c pass": [sys.executable, "-c", "pass"],
        "python3 -c 'import fabric, paramiko'": [sys.executable, "-c", "import fabric, paramiko"],
    }
    if gpupoolctl:
        probes["gpupoolctl --version"] = [gpupoolctl, "--version"]
    costs: dict[str, float] = {}
    for label, argv in probes.items():
        outcomes = [timed(argv, ws.env(), ws.root, SHORT_TIMEOUT) for _ in range(repeat)]
        good = [o.wall_s for o in outcomes if o.code == 0]
        if good:
            costs[label] = min(good)
    costs.update(agent_cost(ws, repeat))
    return costs


def agent_cost(ws: Workspace, repeat: int) -> dict[str, float]:
    """Wall and CPU of the node side alone: the bootstrap + agent answering `facts` for one
    sim host, with the same stdin gpupoolctl sends (its zip cache already warm)."""
    from gpupoolctl.remote.bootstrap import encode_stdin, interpreter_argv
    from gpupoolctl.remote.fanout import host_request
    from gpupoolctl.remote.payload import agent_payload
    from gpupoolctl.remote.target import target_from_vars

    host = ws.fleet.hosts[0]
    variables = ws.fleet.host_vars(host, sim=TEMPLATES[0], sim_state_dir=str(ws.sim_dir))
    target = target_from_vars(host.name, variables)
    request = {"v": 1, "verb": "facts", "args": {}}
    stdin = encode_stdin(agent_payload(), host_request(target, request))
    env = ws.env()
    env.update({"PATH": SSHD_DEFAULT_PATH, "XDG_CACHE_HOME": str(host.cache_dir)})
    python = ws.python
    walls, cpus = [], []
    for _ in range(repeat):
        cpu_before, started = children_cpu_s(), time.perf_counter()
        try:
            proc = subprocess.run(
                interpreter_argv(python),
                input=stdin,
                env=env,
                capture_output=True,
                timeout=SHORT_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            continue
        if proc.returncode == 0:
            walls.append(time.perf_counter() - started)
            cpus.append(children_cpu_s() - cpu_before)
    if not walls:
        return {}
    return {"agent on 1 node (no ssh) wall": min(walls), "agent on 1 node cpu": min(cpus)}


# ---------------------------------------------------------------- latency


@dataclass
class LatencyReport:
    delay_s: float
    rtt_s: float
    hosts: int
    rounds: int
    ok_rounds: int
    walls_s: list[float]
    host_elapsed_median_s: float | None  # gpupoolctl's per-host elapsed, all hosts and rounds
    host_elapsed_max_s: float | None
    one_host: OneHost  # through the relay
    one_host_direct: OneHost  # straight to sshd: what the same runs cost without the RTT
    proxy_connections: int
    failures: list[str]

    @property
    def min_s(self) -> float | None:
        return min(self.walls_s) if self.walls_s else None

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.walls_s) if self.walls_s else None

    @property
    def target_s(self) -> float:
        return LATENCY_RTTS_TARGET * self.rtt_s + LATENCY_SLACK_S


def proxy_ssh_config(
    path: Path, fleet: SshdFleet, addresses: dict[str, tuple[str, int]], known_hosts: Path
) -> Path:
    path.write_text(
        "".join(
            f"Host {name}\n    HostName {address}\n    Port {port}\n    User {fleet.user}\n"
            f"    IdentityFile {fleet.client_key}\n    UserKnownHostsFile {known_hosts}\n"
            "    BatchMode yes\n\n"
            for name, (address, port) in addresses.items()
        )
    )
    return path


def proxied_known_hosts(fleet: SshdFleet, addresses: dict[str, tuple[str, int]]) -> str:
    """known_hosts lines naming the relay's address:port with each real host's key."""
    lines = []
    for host in fleet.hosts:
        address, port = addresses[host.name]
        key_type, key_data = host.host_public_key.split()[:2]
        lines.append(f"[{address}]:{port} {key_type} {key_data}\n")
    return "".join(lines)


@dataclass
class OneHost:
    """Best of a few single-host runs, straight to sshd or through the relay."""

    ssh_s: float | None  # `ssh HOST true`, OpenSSH
    gpupoolctl_s: float | None  # `gpupoolctl -l HOST inventory`, wall
    gpupoolctl_elapsed_s: float | None  # the same, gpupoolctl's in-process per-host time


def one_host_runs(
    ws: Workspace,
    gpupoolctl: str,
    inventory: Path,
    ssh_config: Path,
    env: dict[str, str],
    failures: list[str],
    repeat: int = 3,
) -> OneHost:
    first = ws.fleet.hosts[0].name
    ours = [gpupoolctl, "-i", str(inventory), "-l", first, "inventory", "-o", "json"]
    walls, elapsed, ssh_walls = [], [], []
    for _ in range(repeat):
        outcome = timed(ours, env, ws.root, SHORT_TIMEOUT)
        ok, why, host_elapsed = check_inventory_json(outcome, 1)
        if ok:
            walls.append(outcome.wall_s)
            elapsed += host_elapsed
        else:
            failures.append(f"one host gpupoolctl: {why}")
        ssh = ["ssh", "-F", str(ssh_config), "-o", "BatchMode=yes", first, "true"]
        outcome = timed(ssh, env, ws.root, SHORT_TIMEOUT)
        ok, why = check_exit(outcome)
        if ok:
            ssh_walls.append(outcome.wall_s)
        else:
            failures.append(f"one host ssh: {why}")
    return OneHost(
        ssh_s=min(ssh_walls, default=None),
        gpupoolctl_s=min(walls, default=None),
        gpupoolctl_elapsed_s=min(elapsed, default=None),
    )


def proxied_fanout(
    ws: Workspace,
    argv: Sequence[str],
    env: dict[str, str],
    rounds: int,
    failures: list[str],
    progress: Callable[[str], None],
) -> tuple[list[float], list[float]]:
    """Wall seconds of the ok rounds, and gpupoolctl's per-host elapsed over them."""
    count = len(ws.fleet.hosts)
    walls: list[float] = []
    elapsed: list[float] = []
    for round_no in range(1, rounds + 1):
        outcome = timed(argv, env, ws.root, RUN_TIMEOUT)
        ok, why, host_elapsed = check_inventory_json(outcome, count)
        progress(f"latency round {round_no} {outcome.wall_s:6.3f}s {'ok' if ok else why}")
        if ok:
            walls.append(outcome.wall_s)
            elapsed += host_elapsed
        else:
            failures.append(f"round {round_no}: {why}")
    return walls, elapsed


def latency_run(
    ws: Workspace, gpupoolctl: str, delay: float, rounds: int, progress: Callable[[str], None]
) -> LatencyReport:
    fleet = ws.fleet
    count = len(fleet.hosts)
    failures: list[str] = []
    direct = one_host_runs(ws, gpupoolctl, ws.inventory, fleet.ssh_config, ws.env(), failures)
    backends = [(h.address, h.port) for h in fleet.hosts]
    with LatencyProxy(backends, delay) as proxy:
        addresses = {h.name: proxy.address_for((h.address, h.port)) for h in fleet.hosts}
        home = write_home(ws.root / "home-proxy", proxied_known_hosts(fleet, addresses))
        inventory = gpupoolctl_inventory(
            ws.root / "inventory-proxy.yaml", fleet, ws.sim_dir, addresses, ws.python
        )
        config = proxy_ssh_config(
            ws.root / "ssh_config-proxy", fleet, addresses, home / ".ssh" / "known_hosts"
        )
        env = ws.env(home)
        argv = [gpupoolctl, "-i", str(inventory), "--forks", str(count), "inventory", "-o", "json"]
        walls, elapsed = proxied_fanout(ws, argv, env, rounds, failures, progress)
        relayed = one_host_runs(ws, gpupoolctl, inventory, config, env, failures)
        connections = proxy.connections
    return LatencyReport(
        delay_s=delay,
        rtt_s=2 * delay,
        hosts=count,
        rounds=rounds,
        ok_rounds=len(walls),
        walls_s=walls,
        host_elapsed_median_s=statistics.median(elapsed) if elapsed else None,
        host_elapsed_max_s=max(elapsed) if elapsed else None,
        one_host=relayed,
        one_host_direct=direct,
        proxy_connections=connections,
        failures=failures,
    )


def latency_check(report: LatencyReport) -> Check:
    value = report.median_s
    target = f"<= {LATENCY_RTTS_TARGET} RTT + {LATENCY_SLACK_S:g} s = {report.target_s:.2f} s"
    passed = None if value is None else value <= report.target_s
    return Check(
        f"{report.hosts} hosts through {report.rtt_s * 1000:g} ms RTT (median wall)",
        value,
        target,
        passed,
    )


# ---------------------------------------------------------------- report


def _s(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _span(span: tuple[int, int] | None) -> str:
    if span is None:
        return "-"
    return str(span[0]) if span[0] == span[1] else f"{span[0]}..{span[1]}"


def _rtt(seconds: float | None, rtt: float) -> str:
    return "-" if seconds is None else f"{seconds:.3f} s = {seconds / rtt:.1f} RTT"


def one_host_lines(latency: dict[str, Any], rtt: float) -> list[str]:
    """One host through the relay, and what the relay added over the same run without it."""
    relayed, direct = latency["one_host"], latency["one_host_direct"]
    lines = []
    for key, label in (
        ("ssh_s", "OpenSSH `ssh HOST true`"),
        ("gpupoolctl_s", "gpupoolctl -l HOST inventory, wall"),
        ("gpupoolctl_elapsed_s", "gpupoolctl -l HOST, in-process per host"),
    ):
        through, straight = relayed[key], direct[key]
        added = None if through is None or straight is None else through - straight
        lines.append(
            f"  1 host, {label}: {_rtt(through, rtt)} (loopback {_s(straight)} s; "
            f"added {_rtt(added, rtt)})"
        )
    return lines


def background_warning(cores: Sequence[float | None], cpus: int | None) -> list[str]:
    known = [c for c in cores if c is not None]
    if not known or max(known) < 0.25:
        return []
    shown = ", ".join(f"{c:.2f}" for c in known)
    return [
        f"WARNING: other processes kept {shown} of {cpus} cores busy (before, after): the "
        "sshd nodes, the agents and the tools share what is left; timings are pessimistic"
    ]


def render(result: dict[str, Any]) -> str:
    out = [
        f"gpupoolctl fan-out benchmark: {result['hosts']} sshd hosts on loopback, "
        f"{result['rounds']} alternating rounds (+1 untimed warm-up), "
        f"{result['cpus']} CPUs, Python {result['python']}",
        "peers: clush -b -f N (OpenSSH via the fleet's ssh_config); ansible ad-hoc with "
        "forks=N (not the default 5), pipelining on, default ssh_args (ControlPersist) but a "
        "fresh ControlPath per round, i.e. every round cold; nodes' python: "
        f"{result['node_python']} for both gpupoolctl and ansible",
        *background_warning(result["background_cores"], result["cpus"]),
        "",
        f"{'tool':<11}{'ok':>6}{'min s':>8}{'median s':>10}{'sess/host':>11}{'conn/host':>11}"
        f"{'client cpu':>12}{'server cpu':>12}{'busy cpu':>10}",
    ]
    for summary in result["tools"]:
        if summary["skipped"]:
            out.append(f"{summary['tool']:<11} skipped: {summary['skipped']}")
            continue
        out.append(
            f"{summary['tool']:<11}{summary['ok_rounds']:>3}/{summary['rounds']:<2}"
            f"{_s(summary['min_s']):>8}{_s(summary['median_s']):>10}"
            f"{_span(summary['sessions_per_host']):>11}{_span(summary['connections_per_host']):>11}"
            f"{_s(summary['client_cpu_s'], 2):>12}{_s(summary['server_cpu_s'], 2):>12}"
            f"{_s(summary['machine_busy_s'], 2):>10}"
        )
    out.append(
        "  cpu columns: CPU seconds (medians): the tool's own processes; every sshd connection "
        "plus the remote command, all hosts; the whole machine during the run "
        f"(at most {result['cpus']} x wall)"
    )
    for sample in result["samples"]:
        if not sample["ok"]:
            out.append(f"  FAILED {sample['tool']} round {sample['round']}: {sample['detail']}")
    elapsed = result.get("gpupoolctl_host_elapsed_s")
    if elapsed:
        out.append(
            f"gpupoolctl per-host elapsed (in-process, connect..answer): median "
            f"{elapsed['median']:.3f} s, max {elapsed['max']:.3f} s"
        )
    out.append("start-up: " + ", ".join(f"{k} {v:.3f} s" for k, v in result["startup"].items()))
    latency = result.get("latency")
    if latency:
        rtt = latency["rtt_s"]
        out += [
            "",
            f"latency: {latency['hosts']} hosts through LatencyProxy, {latency['delay_s']:g} s "
            f"each way (RTT {rtt:g} s), {latency['ok_rounds']}/{latency['rounds']} rounds ok, "
            f"{latency['proxy_connections']} relayed connections",
            f"  gpupoolctl inventory wall: min {_rtt(latency['min_s'], rtt)}, "
            f"median {_rtt(latency['median_s'], rtt)}",
            f"  per host in-process: median {_rtt(latency['host_elapsed_median_s'], rtt)}, "
            f"max {_rtt(latency['host_elapsed_max_s'], rtt)}",
            *one_host_lines(latency, rtt),
        ]
        added = latency.get("added_vs_loopback_s")
        if added is not None:
            out.append(
                f"  added by the RTT (median latency wall - median loopback wall): "
                f"{_rtt(added, rtt)}"
            )
        out += [f"  FAILED {failure}" for failure in latency["failures"]]
    out += ["", "targets:"]
    for check in result["checks"]:
        value = "-" if check["value"] is None else f"{check['value']:.2f}"
        verdict = {True: "PASS", False: "MISS", None: "n/a"}[check["passed"]]
        out.append(f"  {check['name']:<46} {value:>7}  target {check['target']:<30} {verdict}")
    return "\n".join(out)


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=32, help="sshd hosts (default 32)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per tool (default 5)")
    parser.add_argument(
        "--delay",
        type=float,
        default=0.075,
        help="latency run: seconds added each way (default 0.075, RTT 0.15)",
    )
    parser.add_argument(
        "--latency-rounds",
        type=int,
        default=3,
        help="gpupoolctl runs through the relay (default 3; 0 skips)",
    )
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)
    if not 1 <= args.hosts <= 200 or args.rounds < 1 or args.delay < 0:
        parser.error("need 1 <= --hosts <= 200, --rounds >= 1, --delay >= 0")
    return args


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def background_cores(seconds: float = 1.0) -> float | None:
    """Cores other processes keep busy while this one sleeps (other work on a shared box
    competes with the sshd "nodes" and the tools for the same CPUs)."""
    before = machine_busy_s()
    time.sleep(seconds)
    after = machine_busy_s()
    return None if before is None or after is None else (after - before) / seconds


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    background_before = background_cores()
    with workspace(args.hosts) as ws:
        tools, skipped = build_tools(ws)
        for reason in skipped.values():
            progress(f"skipping: {reason}")
        warm = warm_up(ws, tools)
        for sample in warm:
            if not sample.ok:
                progress(f"warm-up {sample.tool} failed: {sample.detail}")
        samples = run_rounds(tools, args.rounds, progress)
        summaries = {tool.name: summarize(tool, samples) for tool in tools}
        for name, reason in skipped.items():
            summaries[name] = ToolSummary(name, "", 0, 0, None, None, None, None, skipped=reason)
        ours = next((t for t in tools if t.name == "gpupoolctl"), None)
        exe = ours.argv[0] if ours else None
        startup = startup_costs(ws, exe)
        checks = ratio_checks(summaries)
        latency = None
        if exe and args.latency_rounds > 0:
            latency = latency_run(ws, exe, args.delay, args.latency_rounds, progress)
            checks.append(latency_check(latency))
        python = ws.python
    background_after = background_cores()
    elapsed = [e for s in samples if s.tool == "gpupoolctl" and s.ok for e in s.host_elapsed_s]
    latency_doc = None
    if latency is not None:
        latency_doc = {
            **asdict(latency),
            "min_s": latency.min_s,
            "median_s": latency.median_s,
            "target_s": latency.target_s,
        }
        loopback = summaries.get("gpupoolctl")
        if loopback and loopback.median_s is not None and latency.median_s is not None:
            latency_doc["added_vs_loopback_s"] = latency.median_s - loopback.median_s
    return {
        "hosts": args.hosts,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "templates": list(TEMPLATES),
        "node_python": python,
        "background_cores": [background_before, background_after],
        "tools": [
            asdict(summaries[name])
            for name in ("gpupoolctl", "clush", "ansible")
            if name in summaries
        ],
        "samples": [asdict(s) for s in samples],
        "gpupoolctl_host_elapsed_s": (
            {"median": statistics.median(elapsed), "max": max(elapsed)} if elapsed else None
        ),
        "startup": startup,
        "latency": latency_doc,
        "checks": [{**asdict(c), "verdict": c.verdict} for c in checks],
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = sshd_missing_reason()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 1
    result = benchmark(args)
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
