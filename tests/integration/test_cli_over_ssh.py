"""The real `gpupoolctl` command line against simulated nodes behind real OpenSSH servers."""

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

from tests.sshd import SshdFleet, free_port

TEMPLATES = ["dgx-h100", "a100-pcie-4", "mi300x-8", "l40s-4"]
GPU_COUNTS = {"dgx-h100": 8, "a100-pcie-4": 4, "mi300x-8": 8, "l40s-4": 4}


@pytest.fixture
def fleet_inventory(sshd_fleet: SshdFleet, tmp_path: Path) -> Path:
    hosts: dict[str, Any] = {}
    for host, template in zip(sshd_fleet.hosts, TEMPLATES, strict=False):
        hosts[host.name] = sshd_fleet.host_vars(
            host, sim=template, sim_state_dir=str(tmp_path / "sim-state")
        )
    # A host whose port nobody listens on: must end as unreachable without holding others up.
    hosts["gone"] = sshd_fleet.host_vars(sshd_fleet.hosts[0], sim="l40s-4")
    hosts["gone"]["ansible_port"] = free_port(sshd_fleet.hosts[0].address)
    inventory = {
        "all": {
            "children": {"good": {"hosts": {h: None for h in hosts if h != "gone"}}},
            "hosts": hosts,
        }
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def _home(tmp_path: Path, known_hosts: Path | None) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    if known_hosts is not None:
        shutil.copy(known_hosts, home / ".ssh" / "known_hosts")
    return home


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
    env["HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "gpupoolctl.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_inventory_over_ssh_one_session_per_host(sshd_fleet, fleet_inventory, tmp_path):
    home = _home(tmp_path, sshd_fleet.known_hosts)
    marks = {host.name: host.mark() for host in sshd_fleet.hosts}
    run = _cli(home, "-i", str(fleet_inventory), "-l", "good", "inventory", "-o", "json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["summary"]["ok"] == len(sshd_fleet.hosts)
    for entry, template in zip(doc["hosts"], TEMPLATES, strict=False):
        assert entry["outcome"] == "ok"
        assert len(entry["facts"]["gpus"]) == GPU_COUNTS[template]
        assert entry["facts"]["sim"] is True
    for host in sshd_fleet.hosts:
        assert host.connections_since(marks[host.name]) == 1, host.name
        assert host.sessions_since(marks[host.name]) == 1, host.name


def test_unreachable_host_gives_exit_3_and_the_rest_answer(sshd_fleet, fleet_inventory, tmp_path):
    home = _home(tmp_path, sshd_fleet.known_hosts)
    run = _cli(home, "-i", str(fleet_inventory), "inventory", "-o", "json")
    assert run.returncode == 3, run.stderr
    hosts = {h["name"]: h for h in json.loads(run.stdout)["hosts"]}
    assert hosts["gone"]["outcome"] == "unreachable"
    assert hosts["gone"]["error"]
    assert all(h["outcome"] == "ok" for name, h in hosts.items() if name != "gone")
    # The table form names the failed host and why on stderr.
    table = _cli(home, "-i", str(fleet_inventory), "inventory")
    assert table.returncode == 3
    assert "gone: unreachable" in table.stderr


def test_unknown_host_keys_refused_until_accepted(sshd_fleet, fleet_inventory, tmp_path):
    home = _home(tmp_path, None)
    args = ["-i", str(fleet_inventory), "-l", "good", "inventory", "-o", "json"]
    refused = _cli(home, *args)
    assert refused.returncode == 3
    hosts = json.loads(refused.stdout)["hosts"]
    assert {h["outcome"] for h in hosts} == {"failed"}
    assert all("--accept-new-host-keys" in h["error"] for h in hosts)

    accepted = _cli(home, "--accept-new-host-keys", *args)
    assert accepted.returncode == 0, accepted.stderr
    recorded = (home / ".ssh" / "known_hosts").read_text()
    for host in sshd_fleet.hosts:
        assert host.known_hosts_name in recorded
        assert host.host_public_key.split()[1] in recorded
    again = _cli(home, *args)
    assert again.returncode == 0, again.stderr


def test_sim_reset_over_ssh(sshd_fleet, fleet_inventory, tmp_path):
    home = _home(tmp_path, sshd_fleet.known_hosts)
    run = _cli(home, "-i", str(fleet_inventory), "-l", "good", "sim", "reset", "-o", "json")
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)["hosts"]
    assert [r["template"] for r in rows] == TEMPLATES[: len(rows)]
    state_files = sorted(p.name for p in (tmp_path / "sim-state").glob("*.json"))
    assert state_files == sorted(f"{h.name}.json" for h in sshd_fleet.hosts)
