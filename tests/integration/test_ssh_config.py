"""ssh_config resolution over real SSH: Host aliases, ProxyJump and ProxyCommand."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupoolctl.remote import FAILED, OK, run_agent, target_from_vars
from tests.sshd import TEST_TIMEOUTS, SshdFleet

pytestmark = pytest.mark.ssh


def test_alias_resolved_through_ssh_config(sshd_fleet: SshdFleet) -> None:
    host = sshd_fleet.hosts[1]
    mark = host.mark()
    # Only the alias: HostName, Port, User and IdentityFile all come from the config file.
    target = target_from_vars(host.name, {})
    (result,) = run_agent(
        [target],
        {"verb": "ping"},
        ssh_config=sshd_fleet.ssh_config,
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert result.outcome == OK, result.error
    assert host.sessions_since(mark) == 1


def test_proxyjump_through_another_sshd(sshd_fleet: SshdFleet, tmp_path: Path) -> None:
    jump, inner = sshd_fleet.hosts[0], sshd_fleet.hosts[1]
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host behind-jump\n"
        f"    HostName {inner.address}\n"
        f"    Port {inner.port}\n"
        f"    User {sshd_fleet.user}\n"
        f"    IdentityFile {sshd_fleet.client_key}\n"
        f"    ProxyJump {jump.name}\n\n" + sshd_fleet.ssh_config.read_text()
    )
    marks = (jump.mark(), inner.mark())
    (result,) = run_agent(
        [target_from_vars("behind-jump", {})],
        {"verb": "ping"},
        ssh_config=config,
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert result.outcome == OK, result.error
    assert result.stats == {"connections": 2, "sessions": 1}
    assert jump.connections_since(marks[0]) == 1
    assert jump.sessions_since(marks[0]) == 0  # only a tunnel on the jump host
    assert inner.connections_since(marks[1]) == 1
    assert inner.sessions_since(marks[1]) == 1


def test_unknown_jump_host_key_is_refused(sshd_fleet: SshdFleet, tmp_path: Path) -> None:
    jump, inner = sshd_fleet.hosts[0], sshd_fleet.hosts[1]
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host behind-jump\n    HostName {inner.address}\n    Port {inner.port}\n"
        f"    ProxyJump {jump.name}\n\n" + sshd_fleet.ssh_config.read_text()
    )
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(inner.known_hosts_line() + "\n")  # the jump host is not there
    (result,) = run_agent(
        [
            target_from_vars(
                "behind-jump",
                {"user": sshd_fleet.user, "identity_file": str(sshd_fleet.client_key)},
            )
        ],
        {"verb": "ping"},
        ssh_config=config,
        known_hosts=known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert result.outcome == FAILED
    assert result.error_type == "HostKeyUnknown"
    assert f"jump host {jump.address}" in result.error


def _bastion_config(fleet: SshdFleet, tmp_path: Path) -> Path:
    """node3 as `inner`, every host reached through OpenSSH's `ssh -W %h:%p` on node1 (the
    classic bastion; %p is ssh_config's port, so the port is set here)."""
    inner = fleet.hosts[2]
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host inner\n    HostName {inner.address}\n    Port {inner.port}\n\n"
        "Host *\n"
        f"    User {fleet.user}\n"
        f"    IdentityFile {fleet.client_key}\n"
        f"    ProxyCommand ssh -F {fleet.ssh_config} -o BatchMode=yes -W %h:%p node1\n"
    )
    return config


def test_proxycommand_reaches_the_host(sshd_fleet: SshdFleet, tmp_path: Path) -> None:
    inner = sshd_fleet.hosts[2]
    mark = inner.mark()
    (result,) = run_agent(
        [target_from_vars("inner", {})],
        {"verb": "ping"},
        ssh_config=_bastion_config(sshd_fleet, tmp_path),
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert result.outcome == OK, result.error
    assert inner.sessions_since(mark) == 1


def test_inventory_address_cannot_add_a_proxycommand(sshd_fleet: SshdFleet, tmp_path: Path) -> None:
    # fabric re-reads the host name as ssh_config text to start a ProxyCommand: a newline in
    # an inventory value would add config lines of its own, run here on the workstation.
    marker = tmp_path / "ran-on-the-workstation"
    target = target_from_vars(
        "evil",
        {"ansible_host": f"*\n    ProxyCommand touch {marker}"},
    )
    (result,) = run_agent(
        [target],
        {"verb": "ping"},
        ssh_config=_bastion_config(sshd_fleet, tmp_path),
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert not marker.exists()
    assert result.outcome == FAILED
    assert result.error_type == "BadHostVars"
    assert "not a host name" in result.error
