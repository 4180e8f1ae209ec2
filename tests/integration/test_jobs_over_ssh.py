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
