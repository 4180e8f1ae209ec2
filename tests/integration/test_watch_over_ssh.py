"""`schedule --watch` keeps one agent session per host over real SSH for all its passes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.sshd import SshdFleet

PY = sys.executable


def _cli(home: Path, inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env["HOME"] = str(home)
    return subprocess.run(
        [PY, "-m", "gpupoolctl.cli.main", "-q", "-i", str(inventory), *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        timeout=90,
    )


def test_watch_passes_share_one_ssh_session_and_close_it(
    sshd_fleet: SshdFleet, tmp_path: Path
) -> None:
    host = sshd_fleet.hosts[1]
    state_dir = tmp_path / "sim-state"
    inventory = tmp_path / "fleet.yaml"
    variables = sshd_fleet.host_vars(host, sim="l40s-4", sim_state_dir=str(state_dir))
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"far-l40s": variables}}}))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd_fleet.known_hosts, home / ".ssh" / "known_hosts")
    submitted = _cli(home, inventory, "submit", "--", PY, "-c", "import time; time.sleep(3)")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    mark = host.mark()
    watched = _cli(home, inventory, "-o", "json", "schedule", "--watch", "0.3s", "--passes", "15")
    assert watched.returncode == 0, watched.stderr
    passes = [json.loads(line) for line in watched.stdout.splitlines()]
    assert len(passes) == 15
    listed = _cli(home, inventory, "jobs", "--all", "--no-refresh", "-o", "json")
    (job,) = [j for j in json.loads(listed.stdout) if j["id"] == job_id]
    assert job["state"] == "done"  # the passes polled its node until they saw it end
    # Every pass went through one connection and one agent, which was closed at the end.
    assert host.connections_since(mark) == 1
    assert host.sessions_since(mark) == 1
    assert host.wait_for_log("Close session: ", mark)
