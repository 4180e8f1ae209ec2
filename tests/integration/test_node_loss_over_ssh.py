"""A node lost mid-job, over real sshd: one host's sshd is stopped (and its job frozen, as a
hung node's would be), `schedule` declares the node lost after node-dead-after, the job
restarts on the other node from its checkpoint and finishes there, its first slices are
freed; when the node answers again its stale run is killed and it takes work again."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tests.sshd import SshdFleet

DEAD_AFTER_S = 5  # the policy's least: the loss takes this long in real time
# A job that counts steps and keeps its count in the checkpoint folder, as a training
# script keeps its state: it resumes from the count it finds there.
TRAIN = """
import os, sys, time
folder = os.environ["GPUPOOL_CHECKPOINT_DIR"]
os.makedirs(folder, exist_ok=True)
path = os.path.join(folder, "step")
step = int(open(path).read()) if os.path.exists(path) else 0
print(f"run {os.environ['GPUPOOL_RUN']} restart {os.environ['GPUPOOL_RESTART_COUNT']} "
      f"resumed from {step}", flush=True)
# The first run (the one left on the lost node) is slow: resumed when its node returns, it
# must still be running when the next pass reaches it, however loaded the machine is.
pause = 0.5 if os.environ["GPUPOOL_RUN"] == "1" else 0.05
while step < int(sys.argv[1]):
    time.sleep(pause)
    step += 1
    with open(path + ".tmp", "w") as out:
        out.write(str(step))
    os.replace(path + ".tmp", path)
print(f"finished at {step}", flush=True)
"""


def _pgid(state_dir: Path, host: str, node_id: str) -> int:
    return int(json.loads((state_dir / "jobs" / host / node_id / "pid.json").read_text())["pgid"])


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_lost_node_s_job_restarts_elsewhere_from_its_checkpoint(
    sshd_fleet: SshdFleet, tmp_path: Path
) -> None:
    first, second = sshd_fleet.hosts[0], sshd_fleet.hosts[1]
    state_dir = tmp_path / "sim-state"
    inventory = tmp_path / "fleet.yaml"
    hosts = {
        h.name: sshd_fleet.host_vars(h, sim="l40s-4", sim_state_dir=str(state_dir))
        for h in (first, second)
    }
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    policy = tmp_path / "pool.yaml"
    policy.write_text(f"version: 1\nhealth:\n  node-dead-after: {DEAD_AFTER_S}s\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd_fleet.known_hosts, home / ".ssh" / "known_hosts")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update(HOME=str(home), GPUPOOL_POLICY=str(policy))
    checkpoints = tmp_path / "shared" / "ckpt"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gpupoolctl.cli.main", "-q", "-i", str(inventory), *args],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            timeout=60,
        )

    def job(job_id: str) -> dict[str, Any]:
        listed = run("jobs", "--all", "--no-refresh", "-o", "json")
        assert listed.returncode == 0, listed.stderr
        return {j["id"]: j for j in json.loads(listed.stdout)}[job_id]

    def until(what: str, check: Any, seconds: float = 90.0) -> Any:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.2)
        raise AssertionError(f"not in {seconds}s: {what}")

    submitted = run(
        "submit", "--gpus", "4", "--max-restarts", "1",
        "--checkpoint-dir", f"{checkpoints}/%j",
        "--", sys.executable, "-c", TRAIN, "60",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    step_file = checkpoints / job_id / "step"
    lost_host = job(job_id)["host"]
    other = second.name if lost_host == first.name else first.name
    stale = _pgid(state_dir, lost_host, job_id)
    try:
        until("a few steps done", lambda: step_file.exists() and int(step_file.read_text()) >= 5)
        # The node hangs and its network goes: the run stops making progress, sshd is gone.
        os.killpg(stale, signal.SIGSTOP)
        done_before = int(step_file.read_text())
        sshd_fleet.stop_host(lost_host)

        def moved() -> bool:
            passed = run("schedule")
            assert passed.returncode in (0, 3), passed.stderr  # 3: a host did not answer
            again = job(job_id)
            return again["state"] in ("running", "done") and again["host"] == other

        until("the job runs on the other node", moved)
        lost = json.loads(run("drain", "-o", "json").stdout)
        assert [(d["target"], d["source"]) for d in lost] == [(lost_host, "health")]
        until("the second try finished", lambda: run("schedule") and job(job_id)["state"] == "done")
        output = run("logs", job_id).stdout
        assert f"run 2 restart 1 resumed from {done_before}\n" in output, output
        assert output.endswith("finished at 60\n"), output
        assert job(job_id)["restarts"] == "1/1"
        assert _alive(stale)  # frozen on the silent node: nothing could reach it yet

        sshd_fleet.start_host(lost_host)
        os.killpg(stale, signal.SIGCONT)
        back = run("schedule", "-o", "json")
        assert back.returncode == 0, back.stderr
        events = [e["event"] for e in json.loads(back.stdout)]
        assert "stale-run-killed" in events and "node-returned" in events, events
        until("the stale run is gone", lambda: not _alive(stale), 30)
        assert json.loads(run("drain", "-o", "json").stdout) == []
        pool = json.loads(run("pool", "--no-refresh", "-o", "json").stdout)
        assert all(s["state"] == "free" for n in pool["nodes"] for s in n["slices"])
        verify = run("ledger", "verify")
        assert verify.returncode == 0, verify.stdout + verify.stderr
        assert job(job_id)["state"] == "done"  # the stale run never rewrote the record
    finally:
        sshd_fleet.start_host(lost_host)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(stale, signal.SIGCONT)
            os.killpg(stale, signal.SIGKILL)
