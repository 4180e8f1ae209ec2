"""Waiting for and cancelling Slurm jobs (gpupoolctl.slurm.jobs): retries of failed polls, the
backoff, what an ended job exits with. A stand-in client answers from a script of states;
a fake clock makes the backoff visible without sleeping."""

from __future__ import annotations

import json
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import cast

import pytest

from gpupoolctl.cli.main import run
from gpupoolctl.errors import ExitCode
from gpupoolctl.slurm import jobs
from gpupoolctl.slurm.client import SlurmClient, SlurmError
from gpupoolctl.slurm.jobs import (
    MAX_POLL_FAILURES,
    SlurmJobEnded,
    SlurmUnknownJob,
    cancel,
    exit_status,
    wait,
)
from gpupoolctl.slurm.parse import SlurmJob

TIME_OUT = SlurmError("squeue failed (exit 1): slurm_load_jobs error: Socket timed out")


class Clock:
    """time.monotonic and time.sleep for one test: sleeping moves the clock."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


class Scripted:
    """squeue answers in order: a state word (the job as listed) or an exception (raised);
    the last answer repeats."""

    def __init__(self, answers: Iterable[str | Exception], job_id: str = "5") -> None:
        self.answers = list(answers)
        self.job_id = job_id
        self.polls = 0
        self.cancelled: list[str] = []

    def queue(self, user: str | None = None) -> list[SlurmJob]:
        answer = self.answers[min(self.polls, len(self.answers) - 1)]
        self.polls += 1
        if isinstance(answer, Exception):
            raise answer
        return [SlurmJob(job_id=self.job_id, state=answer, exit_code=0)]

    def finished_job(self, job_id: str) -> SlurmJob | None:
        return None

    def scancel(self, job_ids: Sequence[str]) -> None:
        self.cancelled.extend(job_ids)

    def slurm(self) -> SlurmClient:
        return cast(SlurmClient, self)  # what the code under test calls of a client


def test_wait_rides_out_failed_polls_on_the_backoff() -> None:
    client = Scripted(["PENDING", TIME_OUT, TIME_OUT, "RUNNING", "COMPLETED"])
    clock, errors = Clock(), []
    job = wait(client.slurm(), "5", on_error=errors.append, sleep=clock.sleep, clock=clock)
    assert job.state == "COMPLETED"
    assert errors == [TIME_OUT, TIME_OUT]
    # Failures keep growing the pause; a new state starts it over.
    assert clock.pauses == [0.5, 0.75, 1.125, 0.5]


def test_wait_gives_up_after_several_failures_in_a_row() -> None:
    client = Scripted(["RUNNING", *[TIME_OUT] * MAX_POLL_FAILURES])
    clock = Clock()
    with pytest.raises(SlurmError, match=f"after {MAX_POLL_FAILURES} failed polls in a row"):
        wait(client.slurm(), "5", sleep=clock.sleep, clock=clock)
    assert client.polls == 1 + MAX_POLL_FAILURES


def test_failures_that_are_not_in_a_row_do_not_add_up() -> None:
    flaky = [TIME_OUT, "RUNNING"] * (MAX_POLL_FAILURES * 2)
    client = Scripted([*flaky, "COMPLETED"])
    clock = Clock()
    assert wait(client.slurm(), "5", sleep=clock.sleep, clock=clock).ok


def test_wait_times_out_with_the_last_state() -> None:
    clock = Clock()
    with pytest.raises(SlurmError, match=r"job 5 still RUNNING after 3s"):
        wait(Scripted(["RUNNING"]).slurm(), "5", timeout_s=3, sleep=clock.sleep, clock=clock)
    assert sum(clock.pauses) <= 3


def test_an_unknown_job_is_not_asked_again() -> None:
    client = Scripted(["RUNNING"], job_id="6")  # lists another job only
    with pytest.raises(SlurmUnknownJob, match="Slurm does not know job 5"):
        wait(client.slurm(), "5", sleep=Clock().sleep)
    assert client.polls == 1


@pytest.mark.parametrize(
    ("job", "code"),
    [
        (SlurmJob("1", state="COMPLETED", exit_code=0), 0),
        (SlurmJob("1", state="FAILED", exit_code=7), 7),
        (SlurmJob("1", state="CANCELLED", signal=15), 143),
        # Slurm's 0:0 for a job that never ran (or whose node failed): never exit 0.
        (SlurmJob("1", state="CANCELLED", exit_code=0), 1),
        (SlurmJob("1", state="NODE_FAIL", exit_code=0), 1),
        (SlurmJob("1", state="BOOT_FAIL"), 1),
        (SlurmJob("1", state="DEADLINE", exit_code=0), 1),
    ],
)
def test_a_job_that_did_not_end_ok_never_exits_0(job: SlurmJob, code: int) -> None:
    assert exit_status(job) == code


def test_cancel_of_an_ended_job_says_so_and_cancels_nothing() -> None:
    client = Scripted(["COMPLETED"])
    with pytest.raises(SlurmJobEnded, match=r"job 5 had already ended \(COMPLETED") as caught:
        cancel(client.slurm(), "5")
    assert caught.value.exit_code == ExitCode.ERROR
    assert client.cancelled == []


def test_cancel_settles_on_the_backoff_not_in_a_tight_loop() -> None:
    client = Scripted(["RUNNING"])  # never settles
    clock = Clock()
    job = cancel(client.slurm(), "5", settle_s=15.0, sleep=clock.sleep, clock=clock)
    assert job.state == "RUNNING" and client.cancelled == ["5"]
    # wait()'s backoff, bounded by settle_s: 8 squeue calls in 15 s (the look-up, then one
    # before each pause and one after the last), where a 0.2 s loop made up to 75.
    assert clock.pauses == [0.5, 0.75, 1.125, 1.6875, 2.53125, 3.796875]
    assert client.polls == 8


def test_cancel_returns_once_slurm_confirms() -> None:
    client = Scripted(["RUNNING", "RUNNING", "CANCELLED"])
    clock = Clock()
    job = cancel(client.slurm(), "5", sleep=clock.sleep, clock=clock)
    assert job.state == "CANCELLED" and clock.pauses == [0.5]


def _fake(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_cli_cancel_that_slurm_does_not_confirm_warns_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    running = {"jobs": [{"job_id": 5, "job_state": "RUNNING", "user_name": "alice"}]}
    _fake(tmp_path, "squeue", f"echo '{json.dumps(running)}'\n")
    _fake(tmp_path, "scancel", f'echo "$*" >> "{tmp_path / "scancelled"}"\n')
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(jobs, "CANCEL_SETTLE_S", 1.0)
    monkeypatch.setattr(sys, "argv", ["gpupoolctl", "cancel", "--backend", "slurm", "5"])
    with pytest.raises(SystemExit) as caught:
        run()
    assert caught.value.code == ExitCode.ERROR
    out, err = capsys.readouterr()
    assert "cancelled" not in out
    assert "job 5 was signalled but Slurm has not confirmed it ended (still RUNNING)" in err
    assert (tmp_path / "scancelled").read_text() == "5\n"
