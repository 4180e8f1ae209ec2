"""`submit|jobs|cancel --backend slurm` and `stress ramp --backend slurm` against real
Slurm daemons (the slurm_cluster fixture: munged, slurmctld and one slurmd on loopback).

The node has 8 whole `test` GPUs and 4 `h100_1g.10gb` MIG slices, and 16 CPUs from its
config (SlurmdParameters=config_overrides: slurmd takes the configured CPUs instead of
draining a node that claims more cores than this machine has), so a ramp of up to 8
concurrent one-GPU jobs fits.
"""

from __future__ import annotations

import json
import subprocess
import sys
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


def cli(
    cluster: SlurmCluster, folder: Path, *args: str, timeout: float = CLI_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """gpupoolctl run in `folder` (sbatch writes slurm-<id>.out there) with a private HOME."""
    env = {k: v for k, v in cluster.env.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(folder), "NO_COLOR": "1"})
    return subprocess.run(
        [sys.executable, "-m", "gpupoolctl.cli.main", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


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
    assert cli(cluster, tmp_path, "cancel", "--backend", "slurm", "--user=x").returncode == 2


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
    # Nothing left behind in Slurm by the ramp.
    left = cluster.run("squeue", "--noheader", "--states=PENDING,RUNNING", "--format=%j")
    assert "stress-" not in left.stdout
