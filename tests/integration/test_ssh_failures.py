"""Authentication, missing interpreter and hung commands over real SSH."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from gpupoolctl.remote import FAILED, TIMED_OUT, Timeouts, run_agent
from tests.sshd import TEST_TIMEOUTS, SshdFleet, TargetFactory, keygen

pytestmark = pytest.mark.ssh


def test_wrong_client_key_fails_authentication(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    stranger = tmp_path / "stranger_key"
    keygen(stranger)
    host = sshd_fleet.hosts[2]
    (result,) = run_agent(
        [ssh_target(host, ansible_ssh_private_key_file=str(stranger))],
        {"verb": "ping"},
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert result.outcome == FAILED
    assert result.error_type == "AuthFailed"
    assert f"authentication failed for {sshd_fleet.user}@{host.address}:{host.port}" in (
        result.error
    )
    assert str(stranger) in result.error


def test_missing_interpreter_says_how_to_fix(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no" / "python3")
    (result,) = run_agent(
        [ssh_target(sshd_fleet.hosts[0], python=missing)],
        {"verb": "ping"},
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert result.outcome == FAILED
    assert result.error_type == "NoPython"
    assert f"no python interpreter at '{missing}' on the node" in result.error
    assert "set the `python` host var" in result.error


def test_interpreter_value_is_data_not_code(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    canary = tmp_path / "canary"
    (result,) = run_agent(
        [ssh_target(sshd_fleet.hosts[0], python=f"python3; touch {canary}")],
        {"verb": "ping"},
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert result.outcome == FAILED
    assert result.error_type == "NoPython"
    assert not canary.exists()


def test_hung_command_times_out_within_bound(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    pid_file = tmp_path / "sleeper.pid"
    sleeper = tmp_path / "python-that-hangs"
    sleeper.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    sleeper.chmod(0o755)
    # The bound leaves the answering host room on a loaded 2-core machine (a ping there has
    # taken over 1 s), while staying far below the sleeper's 60 s.
    bound = Timeouts(connect=5, auth=5, command=3.0)
    started = time.monotonic()
    try:
        results = run_agent(
            [ssh_target(sshd_fleet.hosts[3], python=str(sleeper)), ssh_target(sshd_fleet.hosts[2])],
            {"verb": "ping"},
            known_hosts=sshd_fleet.known_hosts,
            timeouts=bound,
        )
    finally:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    wall = time.monotonic() - started
    hung, fine = results
    assert hung.outcome == TIMED_OUT
    assert hung.error == "command did not finish within 3s"
    assert 3.0 <= hung.elapsed < 5.0
    assert fine.outcome == "ok", fine.error
    assert wall < 5.5


def test_a_node_that_answers_without_end_is_cut_off(
    sshd_fleet: SshdFleet,
    ssh_target: TargetFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gpupoolctl.remote import ssh

    monkeypatch.setattr(ssh, "MAX_ANSWER_BYTES", 1 << 20)
    flood = tmp_path / "python-that-floods"
    flood.write_text("#!/bin/sh\nexec head -c 8388608 /dev/zero\n")  # 8 MiB, then it ends
    flood.chmod(0o755)
    flooding, fine = run_agent(
        [ssh_target(sshd_fleet.hosts[3], python=str(flood)), ssh_target(sshd_fleet.hosts[2])],
        {"verb": "ping"},
        known_hosts=sshd_fleet.known_hosts,
        timeouts=TEST_TIMEOUTS,
    )
    assert flooding.outcome == FAILED and flooding.error_type == "AnswerTooLarge"
    assert "more than 1 MiB" in flooding.error
    assert fine.outcome == "ok", fine.error
