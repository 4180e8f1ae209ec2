"""A real Slurm cluster on loopback: munged, slurmctld and one slurmd, all in a temp folder.

A plain module (not a pytest plugin), like tests/sshd.py:

    from tests.slurm import start_cluster
    with start_cluster(workdir, node_lines="NodeName=n1 Gres=gpu:h100:2\\n",
                       gres_conf="NodeName=n1 Name=gpu Type=h100 File=/.../gpu[0-1]\\n",
                       device_files=[...]) as cluster:
        cluster.env                       # os.environ plus SLURM_CONF: for every client call
        cluster.run("sinfo")              # a client command with that env (CompletedProcess)
        cluster.node("n1")["Gres"]        # `scontrol show node -o`, as a dict
        job = cluster.sbatch("--gres=gpu:h100:1", "--wrap", "true")
        cluster.wait_job(job)["JobState"] # "COMPLETED" (bounded polling of scontrol show job)

One slurmd runs, as the node `live_node` (`slurmd -N`), on 127.0.0.1; every other NodeName
line is kept for slurmctld with an address where nothing listens and State=DOWN, so
`scontrol show node` still shows its configuration. Files: etc/ (slurm.conf, gres.conf),
munge/ (own key and socket), state/, spool/, log/ (one log per daemon), run/ (pid files).
Accounting is off; finished jobs stay visible to `scontrol show job` for MinJobAge.
Needs root (slurmd runs jobs as their submitters) and Debian's slurm-wlm and munge.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpupoolctl.slurm.parse import TERMINAL_STATES, gres_types, parse_show_line

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "sinfo", "squeue", "scancel")
CLUSTER_NAME = "gpupooltest"
PARTITION = "gpupool"
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
JOB_TIMEOUT = 60.0
MIN_JOB_AGE = 600  # seconds a finished job stays in `scontrol show job`
DEFAULT_NODE = "node1"
# The library's readers of `scontrol show -o` lines and Gres strings, under the names the
# tests use (they are checked on their own in tests/unit/test_slurm_parse.py).
parse_show = parse_show_line
parse_gres = gres_types


class SlurmStartError(RuntimeError):
    """A daemon did not come up; the message carries the tail of its log."""


def _find(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None
    )


def slurm_missing_reason() -> str | None:
    """Why a real Slurm cluster cannot be started here, or None when it can."""
    if os.geteuid() != 0:
        return "not root (slurmd must run as root to start jobs)"
    missing = [name for name in (*DAEMONS, *CLIENTS) if _find(name) is None]
    if missing:
        return f"{', '.join(missing)} not found (apt-get install slurm-wlm munge)"
    return None


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def make_device_files(paths: Iterable[str]) -> None:
    """Stand-in GPU device files: character devices like /dev/null (so Slurm accepts them and
    sets CUDA_VISIBLE_DEVICES), or plain files where mknod is not allowed."""
    for text in paths:
        path = Path(text)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            continue
        try:
            os.mknod(path, 0o666 | 0o020000, os.makedev(1, 3))
        except OSError:
            path.touch()


@dataclass
class Daemon:
    name: str
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def log_tail(self, lines: int = 40) -> str:
        """The end of its log file and of its stdout/stderr (munged -F logs only there)."""
        tails = []
        for path in (self.log_path, self.log_path.with_suffix(".out")):
            try:
                text = path.read_text(errors="replace")
            except FileNotFoundError:
                continue
            tails.append(f"[{path.name}]\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(tails) or f"({self.log_path} was not written)"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=STOP_TIMEOUT)


@dataclass
class SlurmCluster:
    root: Path
    conf: Path  # slurm.conf; gres.conf sits next to it
    live_node: str
    nodes: list[str]  # every NodeName in the config, live one included
    ctld_port: int
    slurmd_port: int
    env: dict[str, str]
    daemons: dict[str, Daemon] = field(default_factory=dict)

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- clients ----------------------------------------------------------------------------

    def run(self, *argv: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (never raises on a non-zero exit)."""
        return subprocess.run(
            list(argv),
            env=self.env,
            capture_output=True,
            encoding="utf-8",
            errors="replace",  # job names are raw bytes: a test may submit any
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            cwd=self.root,
        )

    def show(self, kind: str, name: str) -> dict[str, str]:
        """`scontrol show <kind> <name> -o` as a dict; {} when Slurm does not know it."""
        done = self.run("scontrol", "show", kind, name, "-o")
        if done.returncode != 0 or not done.stdout.strip():
            return {}
        return parse_show(done.stdout.strip().splitlines()[0])

    def node(self, name: str) -> dict[str, str]:
        return self.show("node", name)

    def job(self, job_id: str) -> dict[str, str]:
        return self.show("job", job_id)

    def sbatch(self, *args: str) -> str:
        """Submit with `sbatch --parsable` (output in the cluster's folder); the job id."""
        done = self.run(
            "sbatch", "--parsable", f"--output={self.root / 'jobs' / 'slurm-%j.out'}", *args
        )
        if done.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(args)} failed: {done.stderr.strip()}")
        return done.stdout.strip().split(";")[0]

    def job_output(self, job_id: str) -> str:
        return (self.root / "jobs" / f"slurm-{job_id}.out").read_text(errors="replace")

    def wait_job(self, job_id: str, timeout: float = JOB_TIMEOUT) -> dict[str, str]:
        """Poll `scontrol show job` until the job ends; its last record. Raises on timeout."""
        deadline = time.monotonic() + timeout
        record: dict[str, str] = {}
        while time.monotonic() < deadline:
            record = self.job(job_id)
            if record.get("JobState") in TERMINAL_STATES:
                return record
            time.sleep(0.2)
        raise TimeoutError(
            f"job {job_id} not finished in {timeout}s: {record.get('JobState')} "
            f"({record.get('Reason')})\n{self.log_tails()}"
        )

    def log_tails(self) -> str:
        return "\n".join(
            f"--- {daemon.name} ({daemon.log_path}) ---\n{daemon.log_tail()}"
            for daemon in self.daemons.values()
        )

    # -- life -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Cancel this cluster's jobs, then stop slurmd, slurmctld and munged (bounded)."""
        if self.daemons.get("slurmctld") and self.daemons["slurmctld"].alive():
            try:
                self.run("scancel", f"--partition={PARTITION}", timeout=10)
                deadline = time.monotonic() + STOP_TIMEOUT
                while time.monotonic() < deadline:
                    done = self.run("squeue", "--noheader", "--states=RUNNING,COMPLETING")
                    if done.returncode != 0 or not done.stdout.strip():
                        break
                    time.sleep(0.2)
            except (OSError, subprocess.SubprocessError):
                pass  # stopping must go on whatever the clients do
        for name in ("slurmd", "slurmctld", "munged"):
            if name in self.daemons:
                self.daemons[name].stop()


def _node_names(node_lines: str) -> list[str]:
    names = []
    for line in node_lines.splitlines():
        match = re.match(r"\s*NodeName=(\S+)", line)
        if match and match.group(1) != "DEFAULT":
            names.append(match.group(1))
    return names


def _placed_node_lines(node_lines: str, live: str, slurmd_port: int, dead_port: int) -> str:
    """The exported lines, each with where its slurmd is: the live one on 127.0.0.1, the
    others at a port where nothing listens, down from the start."""
    placed = []
    for line in node_lines.splitlines():
        match = re.match(r"\s*NodeName=(\S+)", line)
        if not match or match.group(1) == "DEFAULT":
            placed.append(line)
        elif match.group(1) == live:
            placed.append(f"{line} NodeAddr=127.0.0.1 Port={slurmd_port}")
        else:
            placed.append(
                f"{line} NodeAddr=127.0.0.1 Port={dead_port} State=DOWN Reason=not-started"
            )
    return "\n".join(placed) + "\n"


def _slurm_conf(
    root: Path, node_lines: str, live: str, ctld_port: int, slurmd_port: int, dead_port: int
) -> str:
    settings = {
        "ClusterName": CLUSTER_NAME,
        "SlurmctldHost": "localhost(127.0.0.1)",
        "SlurmctldPort": str(ctld_port),
        "SlurmdPort": str(slurmd_port),
        "SlurmUser": "root",
        "SlurmdUser": "root",
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": f"socket={root / 'munge' / 'munge.sock'}",
        "StateSaveLocation": str(root / "state"),
        "SlurmdSpoolDir": str(root / "spool" / "%n"),
        "SlurmctldPidFile": str(root / "run" / "slurmctld.pid"),
        "SlurmdPidFile": str(root / "run" / "slurmd.pid"),
        "SlurmctldLogFile": str(root / "log" / "slurmctld.log"),
        "SlurmdLogFile": str(root / "log" / "slurmd.log"),
        "SlurmctldDebug": "info",
        "SlurmdDebug": "info",
        # No cgroups: CI machines and containers may not delegate them.
        "ProctrackType": "proctrack/linuxproc",
        "TaskPlugin": "task/none",
        "JobAcctGatherType": "jobacct_gather/none",
        "AccountingStorageType": "accounting_storage/none",
        "JobCompType": "jobcomp/none",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",
        "SchedulerType": "sched/builtin",  # starts a job at submit, no backfill interval
        "MpiDefault": "none",
        "ReturnToService": "2",
        "MinJobAge": str(MIN_JOB_AGE),
        "SlurmdTimeout": "30",
        "MailProg": "/bin/true",
    }
    head = "".join(f"{key}={value}\n" for key, value in settings.items())
    if not re.search(r"(?mi)^\s*GresTypes=", node_lines):
        head += "GresTypes=gpu\n"
    partition = f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
    return head + _placed_node_lines(node_lines, live, slurmd_port, dead_port) + partition


def _launch(daemon: Daemon, argv: list[str], env: Mapping[str, str]) -> None:
    log = open(daemon.log_path.with_suffix(".out"), "ab")  # noqa: SIM115 - the child's now
    try:
        daemon.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=dict(env),
            start_new_session=True,
        )
    finally:
        log.close()


def _wait(cluster: SlurmCluster, daemon: Daemon, what: str, ready: object) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if not daemon.alive():
            raise SlurmStartError(f"{daemon.name} exited before {what}:\n{daemon.log_tail()}")
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise SlurmStartError(f"{daemon.name}: no {what} in {READY_TIMEOUT}s:\n{cluster.log_tails()}")


def _registered(state: str) -> bool:
    # UNKNOWN (a trailing '*': not responding) until slurmd registers; a registration that
    # slurmctld rejected leaves it UNKNOWN+DRAIN+INVALID_REG.
    if not state or state.endswith("*"):
        return False
    return not state.startswith("UNKNOWN") or "INVALID_REG" in state


def start_cluster(
    root: str | os.PathLike[str],
    *,
    node_lines: str | None = None,
    gres_conf: str | None = None,
    live_node: str | None = None,
    device_files: Iterable[str] = (),
    require_idle: bool = True,
) -> SlurmCluster:
    """Start munged, slurmctld and one slurmd (as `live_node`, default: the first NodeName)
    from `node_lines` (slurm.conf NodeName lines, GresTypes optional) and `gres_conf`.

    Without node_lines: one node, `node1`, with two GPUs of type `test`. `device_files` are
    created first (see make_device_files). Returns once the live node has registered, and,
    with require_idle, raises SlurmStartError (with the logs) unless it is IDLE."""
    base = Path(root)
    if node_lines is None:
        files = [str(base / "dev" / DEFAULT_NODE / f"gpu{k}") for k in range(2)]
        node_lines = f"NodeName={DEFAULT_NODE} Gres=gpu:test:2\n"
        gres_conf = f"NodeName={DEFAULT_NODE} Name=gpu Type=test File={files[0][:-1]}[0-1]\n"
        device_files = [*device_files, *files]
    names = _node_names(node_lines)
    if not names:
        raise ValueError("node_lines has no NodeName line")
    live = live_node or names[0]
    if live not in names:
        raise ValueError(f"live node {live!r} is not among {names}")
    reason = slurm_missing_reason()
    if reason:
        raise SlurmStartError(reason)
    for folder in ("etc", "munge", "state", "log", "run", "jobs", f"spool/{live}"):
        (base / folder).mkdir(parents=True, exist_ok=True)
    (base / "munge").chmod(0o700)
    make_device_files(device_files)
    ctld_port, slurmd_port, dead_port = free_port(), free_port(), free_port()
    conf = base / "etc" / "slurm.conf"
    conf.write_text(_slurm_conf(base, node_lines, live, ctld_port, slurmd_port, dead_port))
    (base / "etc" / "gres.conf").write_text(gres_conf or "")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(conf)
    cluster = SlurmCluster(base, conf, live, names, ctld_port, slurmd_port, env)
    try:
        _start_daemons(cluster)
        if require_idle:
            state = cluster.node(live).get("State", "")
            if state != "IDLE":
                raise SlurmStartError(
                    f"node {live} is {state} ({cluster.node(live).get('Reason')}), not IDLE:\n"
                    f"{cluster.log_tails()}"
                )
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start_daemons(cluster: SlurmCluster) -> None:
    base, env = cluster.root, cluster.env
    munge = base / "munge"
    key = munge / "munge.key"
    subprocess.run(
        [_find("mungekey") or "mungekey", "--create", f"--keyfile={key}"],
        check=True,
        capture_output=True,
        timeout=30,
    )
    key.chmod(0o400)
    daemon = cluster.daemons["munged"] = Daemon("munged", base / "log" / "munged.log")
    socket_path = munge / "munge.sock"
    _launch(
        daemon,
        [
            _find("munged") or "munged",
            "--foreground",
            "--force",  # temp folders are not the root-only folders munged insists on
            f"--socket={socket_path}",
            f"--key-file={key}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={daemon.log_path}",
            f"--seed-file={munge / 'munged.seed'}",
        ],
        env,
    )
    _wait(cluster, daemon, "socket", socket_path.exists)
    conf = str(cluster.conf)
    daemon = cluster.daemons["slurmctld"] = Daemon("slurmctld", base / "log" / "slurmctld.log")
    _launch(daemon, [_find("slurmctld") or "slurmctld", "-D", "-f", conf], env)
    _wait(
        cluster,
        daemon,
        "answer to scontrol ping",
        lambda: "is UP" in cluster.run("scontrol", "ping", timeout=10).stdout,
    )
    daemon = cluster.daemons["slurmd"] = Daemon("slurmd", base / "log" / "slurmd.log")
    _launch(daemon, [_find("slurmd") or "slurmd", "-D", "-f", conf, "-N", cluster.live_node], env)
    _wait(
        cluster,
        daemon,
        f"registration of {cluster.live_node}",
        lambda: _registered(cluster.node(cluster.live_node).get("State", "")),
    )
