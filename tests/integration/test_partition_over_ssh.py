"""`partition apply/assert` through real OpenSSH servers to simulated nodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupoolctl.sim import pynvml as fake_nvml
from gpupoolctl.sim.state import SimState
from tests.sshd import SshdFleet

REPO = Path(__file__).resolve().parents[2]
LAYOUTS = REPO / "playbooks" / "layouts.yaml"
TEMPLATES = ["dgx-h100-mig", "mi300x-8"]


@pytest.fixture
def fleet(sshd_fleet: SshdFleet, tmp_path: Path) -> dict[str, Any]:
    state_dir = tmp_path / "sim-state"
    hosts: dict[str, Any] = {}
    groups: dict[str, Any] = {"h100": {"hosts": {}}, "mi300x": {"hosts": {}}}
    for host, template in zip(sshd_fleet.hosts, TEMPLATES, strict=False):
        hosts[host.name] = sshd_fleet.host_vars(host, sim=template, sim_state_dir=str(state_dir))
        groups["h100" if "dgx" in template else "mi300x"]["hosts"][host.name] = None
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts, "children": groups}}))
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(sshd_fleet.known_hosts, home / ".ssh" / "known_hosts")
    names = list(hosts)
    return {"inventory": inventory, "home": home, "state_dir": state_dir, "names": names}


def gp(fleet: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
    env["HOME"] = str(fleet["home"])
    return subprocess.run(
        [sys.executable, "-m", "gpupoolctl.cli.main", "-i", str(fleet["inventory"]), "-q", *args],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        timeout=180,
    )


def test_apply_and_assert_over_ssh(sshd_fleet, fleet):
    marks = {host.name: host.mark() for host in sshd_fleet.hosts}
    args = ["-f", str(LAYOUTS), "-c", "inference"]
    before = gp(fleet, "partition", "assert", *args)
    assert before.returncode == 4, before.stderr
    applied = gp(fleet, "partition", "apply", *args, "--yes", "-o", "json")
    assert applied.returncode == 0, applied.stderr
    hosts = {h["name"]: h for h in json.loads(applied.stdout)["hosts"]}
    dgx, mi300x = fleet["names"][:2]
    assert len(hosts[dgx]["gpus"]) == 7 and all(g["ok"] for g in hosts[dgx]["gpus"])
    assert len(hosts[mi300x]["gpus"]) == 8 and all(g["ok"] for g in hosts[mi300x]["gpus"])
    held = gp(fleet, "partition", "assert", *args)
    assert held.returncode == 0, held.stdout + held.stderr
    # assert (facts), apply (facts, then one partition exec), assert (facts): four sessions.
    for host in sshd_fleet.hosts[:2]:
        assert host.sessions_since(marks[host.name]) == 4, host.name
    reset = gp(fleet, "partition", "reset", "--yes")
    assert reset.returncode == 0, reset.stderr
    assert gp(fleet, "partition", "assert", "-f", str(LAYOUTS), "-c", "training").returncode == 0


def test_rollback_over_ssh(sshd_fleet, fleet):
    dgx = fleet["names"][0]
    state = SimState.open(dgx, TEMPLATES[0], fleet["state_dir"])
    before = state.data["nvidia"]["gpus"][7]["mig"]["gpu_instances"]
    fake_nvml.sim_add_fault(state, "create_gpu_instance", gpu=7, nth=2)
    run = gp(
        fleet,
        "-l",
        dgx,
        "partition",
        "apply",
        "-f",
        str(LAYOUTS),
        "-c",
        "inference",
        "--yes",
        "-o",
        "json",
    )
    assert run.returncode == 3, run.stderr
    gpus = {g["index"]: g for g in json.loads(run.stdout)["hosts"][0]["gpus"]}
    assert gpus[7]["rolled_back"] is True and gpus[7]["ok"] is False
    assert all(gpus[i]["ok"] for i in range(6))
    after = SimState.load(state.path).data["nvidia"]["gpus"][7]["mig"]["gpu_instances"]

    def shape(instances: list[dict[str, Any]]) -> list[tuple[int, int, int, list[int]]]:
        return [
            (
                gi["profile_id"],
                gi["start"],
                gi["size"],
                [ci["profile_id"] for ci in gi["compute_instances"]],
            )
            for gi in instances
        ]

    assert shape(after) == shape(before)
