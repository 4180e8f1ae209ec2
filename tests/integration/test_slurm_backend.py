"""`submit|jobs|cancel --backend slurm` and `stress ramp --backend slurm` against real
Slurm daemons (the slurm_cluster fixture: munged, slurmctld and one slurmd on loopback).

The node has 8 whole `test` GPUs and 4 `h100_1g.10gb` MIG slices, and 16 CPUs from its
config (SlurmdParameters=config_overrides: slurmd takes the configured CPUs instead of
draining a node that claims more cores than this machine has), so a ramp of up to 8
concurrent one-GPU jobs fits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.slurm import SlurmCluster

MIG_TYPE = "h100_1g.10gb"
NODE = "node1"
CLI_TIMEOUT = 180


@pytest.fixture(scope="module")
def cluster(slurm_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> SlurmCluster:
    dev = tmp_path_factory.mktemp("slurm-dev") / NODE
    files = [str(dev / f"gpu{k}") for k in range(12)]
    return slurm_cluster(
        node_lines=(
            "SlurmdParameters=config_overrides\n"
            f"NodeName={NODE} CPUs=16 Gres=gpu:test:8,gpu:{MIG_TYPE}:4\n"
        ),
        gres_conf=(
            f"NodeName={NODE} Name=gpu Type=test File={dev}/gpu[0-7]\n"
            f"NodeName={NODE} Name=gpu Type={MIG_TYPE} File={dev}/gpu[8-11]\n"
        ),
        device_files=files,
    )


def _cli_env(cluster: SlurmCluster, folder: Path, path_first: Path | None) -> dict[str, str]:
    env = {k: v for k, v in cluster.env.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(folder), "NO_COLOR": "1"})
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', os.defpath)}"
    return env


def cli(
    cluster: SlurmCluster,
    folder: Path,
    *args: str,
    timeout: float = CLI_TIMEOUT,
    path_first: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """gpupoolctl run in `folder` (sbatch writes slurm-<id>.out there) with a private HOME
    (and `path_first` ahead of PATH, for stand-in commands)."""
    return subprocess.run(
        [sys.executable, "-m", "gpupoolctl.cli.main", *args],
        cwd=folder,
        env=_cli_env(cluster, folder, path_first),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def wait_for_state(cluster: SlurmCluster, job_id: str, state: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while cluster.job(job_id).get("JobState") != state:
        assert time.monotonic() < deadline, f"job {job_id} not {state}: {cluster.job(job_id)}"
        time.sleep(0.2)


def test_submit_lands_with_the_profiles_gres(cluster: SlurmCluster, tmp_path: Path) -> None:
    done = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--profile", "1g.10gb",
               "--name", "mig-job", "--", "echo", "hello")  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    record = cluster.wait_job(job_id)
    assert record["JobState"] == "COMPLETED", record
    assert record["TresPerNode"] == f"gres:gpu:{MIG_TYPE}:1"
    assert record["JobName"] == "mig-job"
    assert (tmp_path / f"slurm-{job_id}.out").read_text() == "hello\n"


def test_wait_exits_with_the_jobs_exit_code(cluster: SlurmCluster, tmp_path: Path) -> None:
    done = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--wait", "--",
               "sh", "-c", "exit 7")  # fmt: skip
    assert done.returncode == 7, done.stderr
    job_id = done.stdout.strip()
    assert cluster.job(job_id)["ExitCode"] == "7:0"
    assert "FAILED (NonZeroExitCode), exit code 7" in done.stderr


def test_jobs_lists_it_with_gres_and_exit_code(cluster: SlurmCluster, tmp_path: Path) -> None:
    done = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--gpus", "2", "--wait",
               "--", "true")  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    listed = cli(cluster, tmp_path, "-o", "json", "jobs", "--backend", "slurm")
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    row = rows[job_id]
    assert (row["state"], row["host"], row["exit_code"]) == ("COMPLETED", NODE, 0)
    assert row["gres"] == "gres:gpu:test:2"
    table = cli(cluster, tmp_path, "jobs", "--backend", "slurm")
    assert any(
        line.split()[:3] == [job_id, "true", "COMPLETED"] for line in table.stdout.splitlines()
    )


def test_logs_reads_and_follows_the_jobs_output_file(cluster: SlurmCluster, tmp_path: Path) -> None:
    script = "import time\nfor i in range(3):\n    print('step', i, flush=True)\n    time.sleep(1)"
    done = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--",
               sys.executable, "-c", script)  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    # -f from the start (pending or running): everything, then it returns when the job ends.
    followed = cli(cluster, tmp_path, "logs", "--backend", "slurm", "-f", job_id)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout == "step 0\nstep 1\nstep 2\n"
    assert cluster.job(job_id)["JobState"] == "COMPLETED"
    shown = cli(cluster, tmp_path, "-o", "json", "logs", "--backend", "slurm", job_id)
    assert json.loads(shown.stdout)["text"] == "step 0\nstep 1\nstep 2\n"
    refused = cli(cluster, tmp_path, "logs", "--backend", "slurm", "--host", NODE, job_id)
    assert refused.returncode == 2 and "one output file" in refused.stderr


def test_cancel_stops_a_long_sleep(cluster: SlurmCluster, tmp_path: Path) -> None:
    done = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--", "sleep", "300")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    cancelled = cli(cluster, tmp_path, "-o", "json", "cancel", "--backend", "slurm", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["state"] == "CANCELLED"
    assert cluster.job(job_id)["JobState"] == "CANCELLED"


def test_cancel_of_an_unknown_job_says_so(cluster: SlurmCluster, tmp_path: Path) -> None:
    done = cli(cluster, tmp_path, "cancel", "--backend", "slurm", "987654")
    assert done.returncode == 1
    assert "Slurm does not know job 987654" in done.stderr
    # Past `--`, an id that is no job id reaches the id check (never scancel).
    bad = cli(cluster, tmp_path, "cancel", "--backend", "slurm", "--", "12;x")
    assert bad.returncode == 2, bad.stderr
    assert "not a Slurm job id: '12;x'" in bad.stderr
    # Before `--`, an option-like id is click's unknown option: also exit 2.
    assert cli(cluster, tmp_path, "cancel", "--backend", "slurm", "--user=x").returncode == 2


def test_cancel_of_an_ended_job_says_it_had_ended(cluster: SlurmCluster, tmp_path: Path) -> None:
    done = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--wait", "--", "true")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    cancelled = cli(cluster, tmp_path, "cancel", "--backend", "slurm", job_id)
    assert cancelled.returncode == 1, cancelled.stderr
    assert f"job {job_id} had already ended (COMPLETED" in cancelled.stderr
    assert "cancelled" not in cancelled.stdout
    assert cluster.job(job_id)["JobState"] == "COMPLETED"


def test_wait_for_a_job_cancelled_before_it_ran_exits_1(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    blocker = cluster.sbatch("--gres=gpu:test:8", "--wrap", "sleep 300")
    try:
        wait_for_state(cluster, blocker, "RUNNING")
        waiting = subprocess.Popen(
            [sys.executable, "-m", "gpupoolctl.cli.main", "submit", "--backend", "slurm",
             "--wait", "--name", "never-ran", "--", "true"],
            cwd=tmp_path, env=_cli_env(cluster, tmp_path, None), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            listed = ""
            while "PENDING" not in listed:
                assert time.monotonic() < deadline, "the job never showed up pending"
                time.sleep(0.2)
                listed = cluster.run(
                    "squeue", "--noheader", "--name=never-ran", "--format=%i|%T"
                ).stdout
            job_id = listed.split("|")[0].strip()
            assert cluster.run("scancel", job_id).returncode == 0
            out, err = waiting.communicate(timeout=60)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.communicate()
    finally:
        cluster.run("scancel", blocker)
    assert cluster.job(job_id)["ExitCode"] == "0:0"  # what Slurm says of a job that never ran
    assert waiting.returncode == 1, err
    assert out.strip() == job_id
    assert f"{job_id}: CANCELLED" in err


def test_a_job_name_that_is_not_utf8_is_shown_not_fatal(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    # The name as raw bytes: Latin-1 'café' (surrogate escapes become the bytes again).
    job_id = cluster.sbatch(os.fsdecode(b"--job-name=caf\xe9"), "--wrap", "sleep 60")
    listed = cli(cluster, tmp_path, "-o", "json", "jobs", "--backend", "slurm")
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert rows[job_id]["name"] == "caf\ufffd"
    cancelled = cli(cluster, tmp_path, "-o", "json", "cancel", "--backend", "slurm", job_id)
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout)["state"] == "CANCELLED"


def test_an_squeue_without_json_lists_pending_arrays(cluster: SlurmCluster, tmp_path: Path) -> None:
    """An older squeue (no --json) falls back to the format, where a pending array is
    `N_[1-3]`: listed, not a parse error."""
    squeue = shutil.which("squeue", path=cluster.env.get("PATH")) or "/usr/bin/squeue"
    stand_in = tmp_path / "old-squeue"
    stand_in.mkdir()
    (stand_in / "squeue").write_text(
        "#!/bin/sh\n"
        'case " $* " in *" --json "*) echo "squeue: unrecognized option \'--json\'" >&2; exit 1;; '
        "esac\n"
        f'exec {squeue} "$@"\n'
    )
    (stand_in / "squeue").chmod(0o755)
    held = cluster.sbatch("--hold", "--array=1-3", "--job-name=held-array", "--wrap", "true")
    try:
        listed = cli(cluster, tmp_path, "-o", "json", "jobs", "--backend", "slurm",
                     path_first=stand_in)  # fmt: skip
    finally:
        cluster.run("scancel", held)
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert rows[f"{held}_[1-3]"]["state"] == "PENDING"
    assert rows[f"{held}_[1-3]"]["name"] == "held-array"


def test_nothing_the_user_gave_is_run_by_a_shell(cluster: SlurmCluster, tmp_path: Path) -> None:
    done = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--wait",
               "--name", "$(touch PWNED1)", "--env", "X=$(touch PWNED2)", "--",
               "sh", "-c", 'printf "%s|%s" "$1" "$X"', "sh", "`touch PWNED3`;$(touch PWNED4)",
               )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    assert sorted(p.name for p in tmp_path.glob("PWNED*")) == []
    assert cluster.job(job_id)["JobName"] == "$(touch PWNED1)"
    output = (tmp_path / f"slurm-{job_id}.out").read_text()
    assert output == "`touch PWNED3`;$(touch PWNED4)|$(touch PWNED2)"


def test_impossible_requests_are_refused_with_the_reason(
    cluster: SlurmCluster, tmp_path: Path
) -> None:
    too_many = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--gpus", "99", "--",
                   "true")  # fmt: skip
    assert too_many.returncode == 5, too_many.stderr
    assert "Requested node configuration is not available" in too_many.stderr
    no_type = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--profile", "7g.80gb",
                  "--", "true")  # fmt: skip
    assert no_type.returncode == 5
    assert f"types: {MIG_TYPE}, test" in no_type.stderr
    island = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--same-island", "--", "true")
    assert island.returncode == 2
    assert "--same-island has no Slurm equivalent" in island.stderr


def test_dry_run_asks_slurm_without_submitting(cluster: SlurmCluster, tmp_path: Path) -> None:
    before = cluster.run("squeue", "--noheader", "--states=all", "--format=%i").stdout.split()
    done = cli(cluster, tmp_path, "submit", "--backend", "slurm", "--dry-run", "--", "true")
    assert done.returncode == 0, done.stderr
    assert f"on nodes {NODE}" in done.stdout
    after = cluster.run("squeue", "--noheader", "--states=all", "--format=%i").stdout.split()
    assert after == before


def test_stress_ramp_through_slurm(cluster: SlurmCluster, tmp_path: Path) -> None:
    saved = tmp_path / "ramp.json"
    done = cli(cluster, tmp_path, "stress", "ramp", "--backend", "slurm", "--levels", "1,2,4",
               "--workload", "sleep", "--work", "500ms", "--warmup", "1s", "--hold", "4s",
               "--drain", "30s", "--save", str(saved), timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr + cluster.log_tails()
    result = json.loads(saved.read_text())
    assert (result["backend"], result["transport"]) == ("slurm", "slurm")
    levels = result["levels"]
    assert [lv["level"] for lv in levels] == [1, 2, 4]
    assert all(lv["failed"] == 0 for lv in levels), levels
    assert all(lv["completed"] >= 1 for lv in levels), levels
    assert all("launch" in lv["phases"] and "queue" in lv["phases"] for lv in levels)
    # Noticing each end (squeue's poll) is measured from Slurm's EndTime, which is whole
    # seconds rounded down: never below 0, never above a job's whole turnaround.
    reaps = [(lv["phases"]["reap"], lv["turnaround"]["mean"]) for lv in levels]
    assert all(0 <= reap <= turnaround for reap, turnaround in reaps), reaps
    # Nothing left behind in Slurm by the ramp.
    left = cluster.run("squeue", "--noheader", "--states=PENDING,RUNNING", "--format=%j")
    assert "stress-" not in left.stdout
