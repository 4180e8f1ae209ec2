"""`logs --backend slurm`'s reader: the file Slurm names as the job's StdOut, in chunks that
never split a character, and clear errors when the file is not on this machine."""

from __future__ import annotations

import time
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.slurm.client import SlurmClient, SlurmError
from gpupoolctl.slurm.jobs import SlurmUnknownJob, output
from gpupoolctl.slurm.parse import SlurmJob, parse_show_jobs

SHOW = (
    "JobId=42 JobName=train UserId=amy(1000) JobState=RUNNING Reason=None "
    "NodeList=node1 StdErr=/shared/err-42.txt StdIn=/dev/null StdOut=/shared/slurm-42.out "
    "Power="
)


def test_scontrol_names_the_output_files() -> None:
    (job,) = parse_show_jobs(SHOW)
    assert job.stdout_path == "/shared/slurm-42.out" and job.stderr_path == "/shared/err-42.txt"
    (unset,) = parse_show_jobs(SHOW.replace("/shared/err-42.txt", "(null)"))
    assert unset.stderr_path is None


class Shown:
    """A client whose scontrol shows one job."""

    def __init__(self, job: SlurmJob | None) -> None:
        self.job = job

    def show_job(self, job_id: str) -> SlurmJob | None:
        return self.job


def client_for(job: SlurmJob | None) -> SlurmClient:
    return cast(SlurmClient, Shown(job))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(text=st.text(max_size=300), chunk=st.integers(min_value=4, max_value=17))
def test_chunks_join_to_the_whole_file_and_never_split_a_character(
    tmp_path: Path, text: str, chunk: int
) -> None:
    path = tmp_path / "slurm-7.out"
    path.write_bytes(text.encode("utf-8"))
    client = client_for(SlurmJob("7", state="COMPLETED", stdout_path=str(path)))
    offset, parts = 0, []
    for _ in range(1000):
        piece = output(client, "7", offset=offset, max_bytes=chunk)
        assert "\ufffd" not in piece["text"] or "\ufffd" in text
        parts.append(piece["text"])
        offset = piece["next_offset"]
        if offset >= piece["size"]:
            break
    assert "".join(parts) == text
    assert piece["active"] is False


def test_a_pending_job_has_no_output_yet(tmp_path: Path) -> None:
    job = SlurmJob("8", state="PENDING", stdout_path=str(tmp_path / "slurm-8.out"))
    piece = output(client_for(job), "8")
    assert (piece["text"], piece["size"], piece["active"]) == ("", 0, True)


def test_a_file_written_on_another_node_is_named_with_the_node(tmp_path: Path) -> None:
    job = SlurmJob("9", state="RUNNING", nodes="gpu07", stdout_path=str(tmp_path / "x.out"))
    with pytest.raises(SlurmError, match=r"x\.out: not on this machine \(it ran on gpu07\)"):
        output(client_for(job), "9")


def test_a_job_that_just_started_has_no_file_yet_not_a_remote_one(tmp_path: Path) -> None:
    # slurmd creates the file as the script starts, a moment after the job reads RUNNING.
    path = str(tmp_path / "y.out")
    just = SlurmJob("12", state="RUNNING", nodes="gpu07", started=time.time() - 1, stdout_path=path)
    piece = output(client_for(just), "12")
    assert (piece["text"], piece["active"]) == ("", True)
    old = SlurmJob("13", state="RUNNING", nodes="gpu07", started=time.time() - 60, stdout_path=path)
    with pytest.raises(SlurmError, match="not on this machine"):
        output(client_for(old), "13")


def test_a_job_slurm_forgot_says_where_to_look() -> None:
    with pytest.raises(SlurmUnknownJob, match=r"slurm-10\.out in the folder it was submitted"):
        output(client_for(None), "10")


def test_a_running_jobs_half_written_character_waits_for_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "slurm-11.out"
    path.write_bytes("ok é".encode()[:-1])  # the job has written only é's first byte so far
    running = client_for(SlurmJob("11", state="RUNNING", stdout_path=str(path)))
    piece = output(running, "11")
    assert piece["text"] == "ok " and piece["next_offset"] == 3 and piece["active"]
    path.write_bytes("ok é".encode())
    assert output(running, "11", offset=piece["next_offset"])["text"] == "é"


def test_reading_a_long_file_asks_slurmctld_once_not_per_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import stat
    import sys

    from gpupoolctl.cli.main import run

    log = tmp_path / "slurm-12.out"
    log.write_text("line\n" * 40_000)  # 200 kB: four chunks of 64 KiB
    calls = tmp_path / "calls"
    show = SHOW.replace("JobId=42", "JobId=12").replace("RUNNING", "COMPLETED")
    show = show.replace("/shared/slurm-42.out", str(log)).replace("Reason=None", "ExitCode=0:0")
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\necho \'{show}\'\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(sys, "argv", ["gpupoolctl", "logs", "--backend", "slurm", "12"])
    with pytest.raises(SystemExit) as done:
        run()
    assert done.value.code == 0
    out, _ = capsys.readouterr()
    assert out == log.read_text()
    assert calls.read_text().splitlines() == ["show job -o 12"]
