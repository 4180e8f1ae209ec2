"""submit / jobs / logs / cancel against a simulated node behind a real OpenSSH server."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.sshd import SshdFleet

PY = sys.executable


def _cli(home: Path, inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "gpupoolctl.cli.main", "-q", "-i", str(inventory), *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        timeout=60,
    )


def test_jobs_over_ssh(sshd_fleet: SshdFleet, tmp_path: Path) -> None:
    host = sshd_fleet.hosts[0]
    state_dir = tmp_path / "sim-state"
    inventory = tmp_path / "fleet.yaml"
    variables = sshd_fleet.host_vars(host, sim="l40s-4", sim_state_dir=str(state_dir))
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"far-l40s": variables}}}))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd_fleet.known_hosts, home / ".ssh" / "known_hosts")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return _cli(home, inventory, *args)

    def jobs() -> dict[str, dict[str, Any]]:
        listed = run("jobs", "--all", "-o", "json")
        assert listed.returncode == 0, listed.stderr
        return {j["id"]: j for j in json.loads(listed.stdout)}

    code = "import time; print('over ssh', flush=True); time.sleep(30)"
    submitted = run("submit", "--name", "far", "--", PY, "-c", code)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    pid_file = state_dir / "jobs" / "far-l40s" / job_id / "pid.json"
    try:
        # The SSH session that launched it has ended; the job runs on.
        job = jobs()[job_id]
        assert job["state"] == "running" and job["host"] == "far-l40s"
        for _ in range(50):
            logs = run("logs", job_id)
            if logs.stdout:
                break
        assert logs.returncode == 0 and logs.stdout == "over ssh\n"
        cancelled = run("cancel", job_id, "--grace", "2")
        assert cancelled.returncode == 0, cancelled.stderr
        job = jobs()[job_id]
        assert job["state"] == "cancelled" and job["exit_code"] == 143
        waited = run("submit", "--wait", "--", PY, "-c", "import sys; print('bye'); sys.exit(4)")
        assert waited.returncode == 4 and waited.stdout == "bye\n", waited.stderr
        pool = json.loads(run("pool", "--no-refresh", "-o", "json").stdout)
        assert all(s["state"] == "free" for n in pool["nodes"] for s in n["slices"])
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(json.loads(pid_file.read_text())["pgid"], signal.SIGKILL)


# Rank 0 listens on the rendezvous address and port; rank 1 connects to it and says hello.
# A real TCP meeting between the job's processes on two hosts (127.0.0.2 and .3).
RENDEZVOUS = r"""
import os, socket, time
rank, addr = os.environ["PET_NODE_RANK"], os.environ["PET_MASTER_ADDR"]
port = int(os.environ["PET_MASTER_PORT"])
if rank == "0":
    with socket.create_server((addr, port)) as server:
        server.settimeout(30)
        conn, _ = server.accept()
        print("rank 0 heard:", conn.recv(100).decode(), flush=True)
else:
    for _ in range(300):
        try:
            with socket.create_connection((addr, port), timeout=1) as conn:
                conn.sendall(b"hello from rank " + rank.encode())
                break
        except OSError:
            time.sleep(0.1)
    else:
        raise SystemExit("no rendezvous")
    print("rank", rank, "met", addr, flush=True)
"""


def test_a_two_node_job_meets_at_its_rendezvous_over_ssh(
    sshd_fleet: SshdFleet, tmp_path: Path
) -> None:
    first, second = sshd_fleet.hosts[:2]
    state_dir = tmp_path / "sim-state"
    inventory = tmp_path / "fleet.yaml"
    hosts = {
        name: sshd_fleet.host_vars(host, sim="l40s-4", sim_state_dir=str(state_dir))
        for name, host in (("far-a", first), ("far-b", second))
    }
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd_fleet.known_hosts, home / ".ssh" / "known_hosts")

    waited = _cli(
        home,
        inventory,
        "submit",
        "--gpus",
        "6",
        "--profile",
        "gpu",
        "--wait",
        "--",
        PY,
        "-c",
        RENDEZVOUS,
    )
    assert waited.returncode == 0, waited.stderr
    (job,) = json.loads(_cli(home, inventory, "jobs", "--all", "-o", "json").stdout)
    assert job["state"] == "done" and job["host"] == "far-a,far-b"
    heard = _cli(home, inventory, "logs", job["id"], "--host", "far-a").stdout
    met = _cli(home, inventory, "logs", job["id"], "--host", "far-b").stdout
    assert heard == "rank 0 heard: hello from rank 1\n"
    # Node 0 is reached at its inventory address, not the name the workstation uses.
    assert met == f"rank 1 met {hosts['far-a']['ansible_host']}\n"


def test_a_two_node_train_job_meets_over_ssh_and_reports_its_split(
    sshd_fleet: SshdFleet, tmp_path: Path
) -> None:
    """The train workload on two sim L40S nodes behind real sshd, at two sites: its ranks
    meet at node 0's inventory address, every step crosses the WAN of gpupool_site_links,
    and its compute/communication split reaches the job's final ledger record."""
    first, second = sshd_fleet.hosts[2:4]
    state_dir = tmp_path / "sim-state"
    inventory = tmp_path / "fleet.yaml"
    hosts = {
        name: sshd_fleet.host_vars(host, sim="l40s-4", sim_state_dir=str(state_dir), site=site)
        for name, host, site in (("far-a", first, "east"), ("far-b", second, "west"))
    }
    links = [{"sites": ["east", "west"], "gbps": 100, "rtt_ms": 2}]
    inventory.write_text(
        yaml.safe_dump({"all": {"vars": {"gpupool_site_links": links}, "hosts": hosts}})
    )
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd_fleet.known_hosts, home / ".ssh" / "known_hosts")
    waited = _cli(
        home, inventory, "submit", "--gpus", "8", "--profile", "gpu", "--wait", "--",
        "gpupoolctl-workload", "train", "--params", "1e8", "--steps", "3",
    )  # fmt: skip
    assert waited.returncode == 0, waited.stderr
    (job,) = json.loads(_cli(home, inventory, "jobs", "--all", "-o", "json").stdout)
    assert job["state"] == "done" and job["host"] == "far-a,far-b"
    from gpupoolctl.ledger import Ledger

    ledger = Ledger(home / ".local" / "state" / "gpupoolctl" / "ledger.jsonl")
    report = ledger.read().state.finished[job["id"]]["report"]
    assert report["steps"] == 3 and report["bound_by"] == "wan"
    assert report["compute_s"] > 0 and report["comm_links"]["wan"] > 0
