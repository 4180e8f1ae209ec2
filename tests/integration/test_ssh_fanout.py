"""The agent over real SSH: parallel fan-out, one session per host, failure isolation."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpupoolctl.remote import FAILED, OK, UNREACHABLE, run_agent
from tests.sshd import TEST_TIMEOUTS, SshdFleet, TargetFactory, free_port

pytestmark = pytest.mark.ssh


def test_ping_four_hosts_in_parallel(sshd_fleet: SshdFleet, ssh_target: TargetFactory) -> None:
    targets = [ssh_target(host) for host in sshd_fleet.hosts]
    seen: list[str] = []
    started = time.monotonic()
    results = run_agent(
        targets,
        {"verb": "ping"},
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
        on_progress=lambda result: seen.append(result.name),
    )
    wall = time.monotonic() - started
    assert [r.name for r in results] == [h.name for h in sshd_fleet.hosts]
    for result in results:
        assert result.outcome == OK, result.error
        assert result.data == {"pong": True}
        assert result.error is None
        assert result.stats == {"connections": 1, "sessions": 1}
    assert sorted(seen) == sorted(t.name for t in targets)
    # Parallel: the run costs about one host, not the sum of all of them.
    assert wall < sum(r.elapsed for r in results) * 0.9 + 0.2


def test_one_connection_and_one_session_per_host(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory
) -> None:
    marks = [host.mark() for host in sshd_fleet.hosts]
    results = run_agent(
        [ssh_target(host) for host in sshd_fleet.hosts],
        {"verb": "ping"},
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert all(r.outcome == OK for r in results), [r.error for r in results]
    for host, mark in zip(sshd_fleet.hosts, marks, strict=True):
        assert host.connections_since(mark) == 1, host.log_text()[-2000:]
        assert host.sessions_since(mark) == 1, host.log_text()[-2000:]


def test_payload_cached_once_per_hash_on_node(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory
) -> None:
    host = sshd_fleet.hosts[0]
    for _ in range(2):
        (result,) = run_agent(
            [ssh_target(host)],
            {"verb": "ping"},
            known_hosts=sshd_fleet.known_hosts,
            timeouts=TEST_TIMEOUTS,
        )
        assert result.outcome == OK, result.error
    from gpupoolctl.remote import agent_payload

    cached = list((host.cache_dir / "gpupoolctl").iterdir())
    assert [p.name for p in cached] == [f"agent-{agent_payload().sha256}"]
    assert cached[0].stat().st_mode & 0o777 == 0o700
    assert (cached[0] / ".complete").is_file()
    # The second run found the unpacked agent and compiled bytecode from the first.
    assert list((cached[0] / "gpupoolctl" / "agent").glob("__pycache__/main.*.pyc"))


def test_closed_port_is_unreachable(sshd_fleet: SshdFleet, ssh_target: TargetFactory) -> None:
    host = sshd_fleet.hosts[0]
    port = free_port(host.address)  # nothing listens there
    (result,) = run_agent(
        [ssh_target(host, name="closed", ansible_port=port)],
        {"verb": "ping"},
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert result.outcome == UNREACHABLE
    assert f"{host.address}:{port}" in result.error
    assert "refused" in result.error.lower()
    assert result.elapsed < 2


def test_unresolvable_name_is_unreachable(ssh_target: TargetFactory, sshd_fleet: SshdFleet) -> None:
    host = sshd_fleet.hosts[0]
    (result,) = run_agent(
        [ssh_target(host, name="ghost", ansible_host="no-such-host.invalid")],
        {"verb": "ping"},
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert result.outcome == UNREACHABLE
    assert "cannot resolve no-such-host.invalid" in result.error


def test_bad_hosts_do_not_stop_good_ones(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    good = [ssh_target(host) for host in sshd_fleet.hosts[:3]]
    closed = ssh_target(
        sshd_fleet.hosts[3], name="closed", ansible_port=free_port(sshd_fleet.hosts[3].address)
    )
    no_python = ssh_target(
        sshd_fleet.hosts[3], name="nopython", python=str(tmp_path / "missing" / "python3")
    )
    results = run_agent(
        [closed, *good, no_python],
        {"verb": "ping"},
        forks=2,
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    outcomes = {r.name: r.outcome for r in results}
    assert outcomes == {
        "closed": UNREACHABLE,
        "node1": OK,
        "node2": OK,
        "node3": OK,
        "nopython": FAILED,
    }
    assert [r.name for r in results] == ["closed", "node1", "node2", "node3", "nopython"]


def test_agent_error_is_failed_with_type_and_message(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory
) -> None:
    (result,) = run_agent(
        [ssh_target(sshd_fleet.hosts[1])],
        {"verb": "no-such-verb"},
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert result.outcome == FAILED
    assert result.error_type == "BadRequest"
    assert result.error == "BadRequest: unknown verb 'no-such-verb'"


def test_sim_facts_behind_sshd(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    targets = [
        ssh_target(host, sim={"template": "dgx-h100", "state_dir": str(tmp_path / "sim")})
        for host in sshd_fleet.hosts[:2]
    ]
    results = run_agent(
        targets,
        {"verb": "facts"},
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    for target, result in zip(targets, results, strict=True):
        assert result.outcome == OK, result.error
        assert result.data["host"] == target.name
        assert result.data["sim"] is True
        assert len(result.data["gpus"]) == 8
    uuids = [{g["uuid"] for g in r.data["gpus"]} for r in results]
    assert not uuids[0] & uuids[1]  # each simulated node has its own cards
