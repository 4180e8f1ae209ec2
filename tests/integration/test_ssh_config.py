"""ssh_config resolution over real SSH: Host aliases and ProxyJump."""

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
