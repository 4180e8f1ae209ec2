"""Which local folders a fan-out needs before it starts: only those its agents will write."""

from __future__ import annotations

from pathlib import Path

from gpupoolctl.cli.pool import local_state_folders
from gpupoolctl.remote.target import target_from_vars


def test_facts_of_a_local_host_need_no_folder_a_launch_does(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    local = target_from_vars("ws", {"transport": "local"})
    assert local_state_folders([(local, {"verb": "facts"})]) == set()
    assert local_state_folders([(local, {"verb": "launch"})]) == {tmp_path / "state" / "gpupoolctl"}


def test_simulated_hosts_need_their_state_folder_and_ssh_hosts_none(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUPOOL_SIM_DIR", str(tmp_path / "sim"))
    sim = target_from_vars("n1", {"transport": "local", "sim": "l40s-4"})
    far = target_from_vars("n2", {"ansible_host": "192.0.2.7", "sim": "l40s-4"})
    assert local_state_folders([(sim, {"verb": "facts"}), (far, {"verb": "facts"})]) == {
        Path(tmp_path / "sim")
    }
