"""The node enforces a job's time limit on its own (the wrapper): --signal S seconds before
it, SIGTERM at it, SIGKILL after the grace; exit.json says "time-limit". Short limits only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.unit.test_agent_jobs import Agent

PY = sys.executable
TRAPS = r"""
import signal, sys, time
start = time.monotonic()
def note(name):
    def handler(signum, frame):
        with open(name, "w") as out:
            out.write(str(time.monotonic() - start))
        if name == "got-term":
            sys.exit(7)
    return handler
signal.signal(signal.SIGUSR1, note("got-usr1"))
signal.signal(signal.SIGTERM, note("got-term"))
time.sleep(30)
"""


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    return Agent(tmp_path)


def test_the_warning_comes_s_seconds_before_the_limit_then_sigterm(agent: Agent) -> None:
    limits = {"time_limit_s": 2, "signal": "USR1", "signal_s": 1, "grace_s": 5}
    agent.launch("j-1", PY, "-c", TRAPS, **limits)
    status = agent.wait("j-1", timeout=15)
    assert status["state"] == "exited" and status["exit_code"] == 7  # its own TERM handler
    assert status["reason"] == "time-limit"
    warned = float((agent.cwd / "got-usr1").read_text())
    stopped = float((agent.cwd / "got-term").read_text())
    assert 0.6 < warned < 1.6, warned  # 1 s before the 2 s limit (the job starts a bit late)
    assert 0.8 < stopped - warned < 1.3, (warned, stopped)  # the grace it promised: 1 s
    assert stopped < 2.5


def test_a_job_that_ignores_sigterm_is_killed_after_its_grace(agent: Agent) -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"
    agent.launch("j-1", PY, "-c", code, time_limit_s=1, grace_s=0.5)
    status = agent.wait("j-1", timeout=15)
    assert status["signal"] == "SIGKILL" and status["exit_code"] == 137
    assert status["reason"] == "time-limit" and status["ended"] - status["started"] < 3


def test_a_job_that_ends_in_time_has_no_reason(agent: Agent) -> None:
    agent.launch("j-1", PY, "-c", "pass", time_limit_s=20, signal="USR1", signal_s=5)
    status = agent.wait("j-1", timeout=15)
    assert status["exit_code"] == 0 and status["reason"] is None


@pytest.mark.parametrize(
    "limits",
    [{"time_limit_s": 0}, {"time_limit_s": "1h"}, {"signal": "KILL"}, {"grace_s": -1}],
)
def test_bad_limits_are_refused_before_anything_runs(agent: Agent, limits: dict) -> None:
    answer = agent.ask("launch", {"job_id": "j-1", "argv": [PY, "-c", "pass"], **limits})
    assert not answer["ok"] and answer["error"]["type"] == "BadRequest"
    assert not (agent.root / "j-1").exists()


def test_the_signal_verb_sends_the_warning_signals(agent: Agent) -> None:
    agent.launch("j-1", PY, "-c", TRAPS)
    import time

    for _ in range(100):  # until its handlers are installed
        if agent.ok("poll", {"job_ids": ["j-1"]})["jobs"]["j-1"]["state"] == "running":
            time.sleep(0.3)
            break
    answer = agent.ok("signal", {"job_id": "j-1", "signal": "USR1", "wait_s": 0.5})
    assert answer["sent"] and answer["state"] == "running"
    assert (agent.cwd / "got-usr1").exists()
    agent.ok("signal", {"job_id": "j-1", "signal": "KILL", "wait_s": 5})
