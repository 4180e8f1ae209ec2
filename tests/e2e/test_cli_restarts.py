"""--max-restarts, --checkpoint-dir, --time-limit and --signal through the real command line
on the bundled simulated pool."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_cli_jobs import L40S, jobs_json, submit

PY = sys.executable


def test_each_try_is_told_its_job_restart_count_and_checkpoint_folder(jobs_cli) -> None:
    code = (
        "import json, os; print(json.dumps({k: v for k, v in os.environ.items() "
        "if k.startswith(('GPUPOOL_', 'TORCHELASTIC_'))}))"
    )
    run = jobs_cli(
        "-q",
        "-l",
        L40S,
        "submit",
        "--max-restarts",
        "3",
        "--checkpoint-dir",
        "ck/%j/100%%",
        "--time-limit",
        "1h",
        "--wait",
        "--",
        PY,
        "-c",
        code,
    )
    assert run.code == 0, run.stderr
    env = json.loads(run.stdout)
    (job,) = jobs_json(jobs_cli).values()
    assert env["GPUPOOL_JOB_ID"] == job["id"] and env["GPUPOOL_RUN"] == "1"
    assert env["GPUPOOL_RESTART_COUNT"] == env["TORCHELASTIC_RESTART_COUNT"] == "0"
    assert env["TORCHELASTIC_MAX_RESTARTS"] == "3"
    assert env["GPUPOOL_CHECKPOINT_DIR"] == f"ck/{job['id']}/100%"
    assert env["GPUPOOL_TIME_LIMIT_S"] == "3600"
    assert job["restarts"] == "0/3" and job["state"] == "done"
    table = jobs_cli("-q", "jobs", "--all").stdout
    assert "RESTARTS" in table.splitlines()[0] and "0/3" in table


TRAPS = r"""
import signal, sys, time
def usr1(signum, frame):
    open("warned", "w").write(str(time.time()))
def term(signum, frame):
    open("stopped", "w").write(str(time.time()))
    sys.exit(0)
signal.signal(signal.SIGUSR1, usr1)
signal.signal(signal.SIGTERM, term)
print("started", flush=True)
time.sleep(30)
"""


def test_time_limit_warns_then_stops_and_is_recorded_failed(jobs_cli, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    began = time.time()
    run = jobs_cli(
        "-q",
        "-l",
        L40S,
        "submit",
        "--time-limit",
        "2s",
        "--signal",
        "USR1@1",
        "--max-restarts",
        "2",
        "--workdir",
        str(work),
        "--wait",
        "--",
        PY,
        "-c",
        TRAPS,
    )
    assert time.time() - began < 20
    assert run.code == 1, run.stderr  # it exited 0 on SIGTERM, but the limit ended it
    assert run.stdout == "started\n"
    warned = float((work / "warned").read_text())
    stopped = float((work / "stopped").read_text())
    assert 0.7 < stopped - warned < 1.5  # the second it was promised
    (job,) = jobs_json(jobs_cli).values()
    assert job["state"] == "failed" and job["reason"] == "time limit reached (2s)"
    assert job["restarts"] == "0/2"  # a time limit is not a failure to retry


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--signal", "KILL"), "cannot be caught"),
        (("--signal", "USR1@soon"), "bad time after @"),
        (("--signal", "USR1@60", "--time-limit", "1m"), "before the time limit"),
        (("--time-limit", "4 hours"), "bad time"),
        (("--time-limit", "0"), "out of range"),
        (("--checkpoint-dir", "/ck/%u"), "unknown '%u'"),
    ],
)
def test_bad_values_are_one_line_and_exit_2(cli, args: tuple[str, ...], words: str) -> None:
    run = cli("-q", "submit", *args, "--", "true")
    assert run.code == 2 and "Traceback" not in run.stderr
    assert len(run.stderr.splitlines()) == 1 and words in run.stderr, run.stderr
    assert run.stdout == ""


def test_a_killed_sim_job_restarts_and_resumes_from_its_checkpoint(jobs_cli) -> None:
    job_id = submit(
        jobs_cli,
        "-l",
        L40S,
        "submit",
        "--max-restarts",
        "1",
        "--checkpoint-dir",
        "ck/%j",
        "--",
        "gpupoolctl-workload",
        "sim",
        "--work",
        "1",
        "--sigma",
        "0",
        "--kappa",
        "0",
        "--checkpoint-every",
        "0.1",
    )
    home = Path(jobs_cli.tmp) / "home"
    checkpoint = home / "ck" / job_id / "sim.json"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            done_before = json.loads(checkpoint.read_text())["progress"]
        except (OSError, ValueError):
            done_before = 0
        if done_before >= 0.3:
            break
        time.sleep(0.05)
    folder = Path(jobs_cli.sim_dir) / "jobs" / L40S / job_id
    os.killpg(json.loads((folder / "pid.json").read_text())["pgid"], signal.SIGKILL)
    deadline = time.monotonic() + 40  # the back-off before the first restart is 10 s
    while time.monotonic() < deadline:
        job = jobs_json(jobs_cli)[job_id]
        if job["state"] in ("done", "failed"):
            break
        time.sleep(0.5)
    shown = {k: job.get(k) for k in ("state", "reason", "exit_code", "run", "restarts")}
    assert job["state"] == "done" and job["run"] == 2 and job["restarts"] == "1/1", shown
    report = json.loads(jobs_cli("-q", "logs", job_id).stdout)
    assert report["resumed_from"] >= round(done_before, 6) and report["completed"]
    # The work before the kill was not done again: only what was left, at the card's rate.
    assert report["elapsed"] < (1 - done_before) / report["rate"] + 0.6, report
    first = (folder / "stdout").read_text()
    assert first == ""  # the killed try never finished
