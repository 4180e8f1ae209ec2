"""Host key checking over real SSH: unknown refused, changed refused loudly, accept-new."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupoolctl.remote import FAILED, OK, HostResult, Target, run_agent
from tests.sshd import TEST_TIMEOUTS, SshdFleet, TargetFactory, keygen

pytestmark = pytest.mark.ssh


def _ping(target: Target, known_hosts: Path, accept_new: bool = False) -> HostResult:
    (result,) = run_agent(
        [target],
        {"verb": "ping"},
        known_hosts=known_hosts,
        accept_new=accept_new,
        timeouts=TEST_TIMEOUTS,
    )
    return result


def test_unknown_host_key_is_refused(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    host = sshd_fleet.hosts[0]
    marks = host.mark()
    (result,) = run_agent(
        [ssh_target(host)], {"verb": "ping"}, known_hosts=known_hosts, timeouts=TEST_TIMEOUTS
    )
    assert result.outcome == FAILED
    assert result.error_type == "HostKeyUnknown"
    assert host.name in result.error
    assert host.known_hosts_name in result.error
    assert "--accept-new-host-keys" in result.error
    assert f"ssh-keyscan -p {host.port} {host.address}" in result.error
    assert known_hosts.read_text() == ""  # nothing recorded without accept-new
    assert host.sessions_since(marks) == 0  # refused before any login


def test_changed_host_key_is_refused_even_with_accept_new(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    host = sshd_fleet.hosts[1]
    impostor = keygen(tmp_path / "other_host_key").split()
    known_hosts = tmp_path / "known_hosts"
    content = f"{host.known_hosts_name} {impostor[0]} {impostor[1]}\n"
    known_hosts.write_text(content)
    for accept_new in (False, True):
        result = _ping(ssh_target(host), known_hosts, accept_new)
        assert result.outcome == FAILED
        assert result.error_type == "HostKeyChanged"
        assert "HOST KEY CHANGED" in result.error
        assert "man-in-the-middle" in result.error
        assert host.name in result.error
        assert f"ssh-keygen -R '{host.known_hosts_name}'" in result.error
        assert known_hosts.read_text() == content


def test_accept_new_records_keys_then_strict_run_succeeds(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "ssh" / "known_hosts"  # not there yet: created 0600
    targets = [ssh_target(host) for host in sshd_fleet.hosts]
    first = run_agent(
        targets, {"verb": "ping"}, known_hosts=known_hosts, accept_new=True, timeouts=TEST_TIMEOUTS
    )
    assert [r.outcome for r in first] == [OK] * len(targets), [r.error for r in first]
    lines = sorted(known_hosts.read_text().splitlines())
    assert lines == sorted(host.known_hosts_line() for host in sshd_fleet.hosts)
    assert known_hosts.stat().st_mode & 0o777 == 0o600
    second = run_agent(targets, {"verb": "ping"}, known_hosts=known_hosts, timeouts=TEST_TIMEOUTS)
    assert [r.outcome for r in second] == [OK] * len(targets), [r.error for r in second]
    assert sorted(known_hosts.read_text().splitlines()) == lines  # nothing appended twice


def test_accept_new_keeps_existing_entries(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    kept = "# managed by hand\n" + sshd_fleet.hosts[0].known_hosts_line()  # no final newline
    known_hosts.write_text(kept)
    results = run_agent(
        [ssh_target(host) for host in sshd_fleet.hosts[:2]],
        {"verb": "ping"},
        known_hosts=known_hosts,
        accept_new=True,
        timeouts=TEST_TIMEOUTS,
    )
    assert [r.outcome for r in results] == [OK, OK], [r.error for r in results]
    assert known_hosts.read_text() == f"{kept}\n{sshd_fleet.hosts[1].known_hosts_line()}\n"


def test_known_hosts_with_marker_lines_still_works(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    # OpenSSH's own syntax (a site CA, a revoked key of another host): common in the
    # system-wide file, and must not stop every connection.
    other = keygen(tmp_path / "ca").split()
    retired = keygen(tmp_path / "retired").split()
    host = sshd_fleet.hosts[0]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(
        f"@cert-authority *.example.com {other[0]} {other[1]}\n"
        f"@revoked\told.example.com {retired[0]} {retired[1]}\n"
        f"{host.known_hosts_line()}\n"
    )
    result = _ping(ssh_target(host), known_hosts)
    assert result.outcome == OK, result.error


@pytest.mark.parametrize("listed", ["alone", "also-trusted", "host-has-another-key"])
def test_revoked_host_key_is_refused_even_with_accept_new(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path, listed: str
) -> None:
    host = sshd_fleet.hosts[2]
    key_type, key_data = host.host_public_key.split()[:2]
    known_hosts = tmp_path / "known_hosts"
    content = f"@revoked * {key_type} {key_data}\n"
    if listed == "also-trusted":  # OpenSSH refuses a revoked key even where a line trusts it
        content += host.known_hosts_line() + "\n"
    if listed == "host-has-another-key":
        other = keygen(tmp_path / "new_host_key").split()
        content += f"{host.known_hosts_name} {other[0]} {other[1]}\n"
    known_hosts.write_text(content)
    mark = host.mark()
    for accept_new in (False, True):
        result = _ping(ssh_target(host), known_hosts, accept_new)
        assert result.outcome == FAILED
        assert result.error_type == "HostKeyRevoked", result.error
        assert "@revoked" in result.error and host.name in result.error
        assert known_hosts.read_text() == content  # never recorded
    assert host.sessions_since(mark) == 0
