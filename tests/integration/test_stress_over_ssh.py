"""`stress ramp` through real OpenSSH: the built-in sim workload launched on simulated nodes
behind two sshd hosts, every agent call over SSH."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from tests.sshd import SshdFleet


def test_a_ramp_over_ssh_runs_the_sim_workload_and_reports_the_ssh_transport(
    sshd_fleet: SshdFleet, tmp_path: Path
) -> None:
    state_dir = tmp_path / "sim-state"
    hosts = {
        "far-l40s": sshd_fleet.host_vars(
            sshd_fleet.hosts[0], sim="l40s-4", sim_state_dir=str(state_dir)
        ),
        "far-a100": sshd_fleet.host_vars(
            sshd_fleet.hosts[1], sim="a100-pcie-4", sim_state_dir=str(state_dir)
        ),
    }
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd_fleet.known_hosts, home / ".ssh" / "known_hosts")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env["HOME"] = str(home)
    argv = [
        sys.executable, "-m", "gpupoolctl.cli.main", "-q", "-i", str(inventory),
        "stress", "ramp", "--levels", "1,3", "--warmup", "0s", "--hold", "3s",
        "--workload", "sim", "--work", "500ms", "--mem", "10G", "-o", "json",
    ]  # fmt: skip
    try:
        done = subprocess.run(
            argv, capture_output=True, stdin=subprocess.DEVNULL, text=True, env=env,
            timeout=180, cwd=tmp_path,
        )  # fmt: skip
    finally:
        for pid_file in state_dir.glob("jobs/*/*/pid.json"):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(json.loads(pid_file.read_text())["pgid"], signal.SIGKILL)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["backend"] == "pool" and result["transport"] == "ssh"
    levels = result["levels"]
    assert [lv["level"] for lv in levels] == [1, 3]
    assert all(lv["completed"] > 0 and lv["failed"] == 0 for lv in levels), done.stderr
    # Agent calls went over SSH and were measured; the jobs ran their half second and more.
    assert all(lv["phases"]["launch"] > 0 for lv in levels)
    assert all(lv["phases"]["run"] >= 0.45 for lv in levels)
    # Each job wrote the sim workload's report: it ran on a simulated card it could see.
    reports = [
        json.loads(out.read_text().strip().splitlines()[-1])
        for out in state_dir.glob("jobs/*/*/stdout")
    ]
    assert reports and all(r["work"] == 0.5 and r["rate"] > 0 for r in reports)
