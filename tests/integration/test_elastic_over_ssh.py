"""An elastic re-cut over a real OpenSSH server: a simulated DGX H100 behind sshd, a small
job queued, `schedule` re-cuts an idle card through the agent over SSH (the path
`partition apply` takes), and the job runs on a MIG device of the new layout."""

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

PY = sys.executable


def test_schedule_recuts_an_idle_card_over_ssh(sshd_fleet: SshdFleet, tmp_path: Path) -> None:
    host = sshd_fleet.hosts[0]
    state_dir = tmp_path / "sim-state"
    inventory = tmp_path / "fleet.yaml"
    variables = sshd_fleet.host_vars(host, sim="dgx-h100", sim_state_dir=str(state_dir))
    inventory.write_text(
        yaml.safe_dump({"all": {"children": {"h100": {"hosts": {"far-dgx": variables}}}}})
    )
    policy = tmp_path / "pool.yaml"
    policy.write_text(
        "version: 1\nelastic:\n  min-idle: 0s\n  batch-window: 0s\n"
        "  rules:\n    - hosts: h100\n      keep-whole: 6\n"
    )
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd_fleet.known_hosts, home / ".ssh" / "known_hosts")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env["HOME"] = str(home)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpupoolctl.cli.main", "-q", "-i", str(inventory),
             "--pool-policy", str(policy), *args],
            capture_output=True, stdin=subprocess.DEVNULL, text=True, env=env, timeout=90,
        )  # fmt: skip

    code = "import os, time; print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(30)"
    submitted = run("submit", "--mem", "20G", "--", PY, "-c", code)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    pid_file = state_dir / "jobs" / "far-dgx" / job_id / "pid.json"
    try:
        shown = json.loads(run("ledger", "show", "--op", "reshape", "-o", "json").stdout)
        states = [r["data"]["state"] for r in shown]
        assert states == ["reserved", "done"], shown
        assert shown[1]["data"]["before"] == "whole card"
        assert "2g.20gb" in shown[1]["data"]["after"] or "1g.20gb" in shown[1]["data"]["after"]
        listed = json.loads(run("jobs", "-o", "json").stdout)
        (job,) = listed
        assert job["state"] == "running" and "/mig-" in job["slice"], job
        for _ in range(50):
            logs = run("logs", job_id)
            if logs.stdout:
                break
        assert logs.stdout.startswith("MIG-"), logs.stdout
        # One card was cut for one job; the other seven stay whole.
        pool = json.loads(run("pool", "--no-refresh", "-o", "json").stdout)
        kinds = {}
        for entry in pool["nodes"][0]["slices"]:
            kinds.setdefault(entry["slice"].split("/")[1], set()).add(entry["kind"])
        assert sum(1 for k in kinds.values() if k == {"gpu"}) == 7
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(json.loads(pid_file.read_text())["pgid"], signal.SIGKILL)
