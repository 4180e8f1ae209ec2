"""The sim workload keeps its progress in $GPUPOOL_CHECKPOINT_DIR and a new try resumes from
it: the work a killed try did (up to its last save) is not done again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from tests.unit.test_agent_workloads import WORKLOAD, run_workload, workload_env

ROOT = str(Path(__file__).resolve().parents[2])


def saved(folder: Path) -> float:
    try:
        return float(json.loads((folder / "sim.json").read_text())["progress"])
    except (OSError, ValueError, KeyError):
        return 0.0


def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*WORKLOAD, "sim", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )


def until_saved(folder: Path, at_least: float, process: subprocess.Popen[str]) -> float:
    deadline = time.monotonic() + 20
    while saved(folder) < at_least and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.02)
    return saved(folder)


def test_a_killed_try_is_resumed_from_its_last_save(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt" / "j-1"
    env = workload_env(tmp_path, "j-1", GPUPOOL_CHECKPOINT_DIR=str(folder))
    args = ("--work", "3", "--tick", "0.02", "--checkpoint-every", "0.1", "--sigma", "0")
    first = start(env, *args, "--kappa", "0")
    done_before = until_saved(folder, 1.0, first)
    os.killpg(first.pid, signal.SIGKILL)  # as a lost node: nothing is saved on the way out
    first.communicate(timeout=10)
    assert 1.0 <= done_before < 3.0
    second = run_workload(["sim", *args, "--kappa", "0"], env)
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert report["completed"] and report["checkpoint"] == str(folder / "sim.json")
    assert report["resumed_from"] >= round(done_before, 6)  # the last save (the kill came after it)
    # Only what was left was done: rate 1.0 off a simulated node, alone on it.
    assert report["elapsed"] < 3.0 - done_before + 0.6, report
    assert saved(folder) == 3.0


def test_sigterm_saves_the_progress_reached_and_a_finished_run_is_not_redone(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "ckpt"
    env = workload_env(tmp_path, "j-2", GPUPOOL_CHECKPOINT_DIR=str(folder))
    args = ("--work", "2", "--tick", "0.02", "--checkpoint-every", "100", "--kappa", "0")
    first = start(env, *args)
    time.sleep(1.0)  # no periodic save in this time: only the one SIGTERM makes
    assert saved(folder) == 0.0
    os.killpg(first.pid, signal.SIGTERM)
    first.communicate(timeout=10)
    assert first.returncode == -signal.SIGTERM
    reached = saved(folder)
    assert 0.3 < reached < 2.0
    again = run_workload(["sim", *args], env)
    assert again.returncode == 0 and saved(folder) == 2.0
    assert json.loads(again.stdout)["resumed_from"] == round(reached, 6)
    last = json.loads(run_workload(["sim", *args], env).stdout)
    assert last["resumed_from"] == 2.0 and last["elapsed"] < 0.5


def test_without_a_checkpoint_dir_nothing_is_saved_and_a_bad_file_starts_over(
    tmp_path: Path,
) -> None:
    plain = run_workload(["sim", "--work", "0.05"], workload_env(tmp_path, "j-3"))
    report = json.loads(plain.stdout)
    assert report["checkpoint"] is None and report["resumed_from"] == 0
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "sim.json").write_text("{not json")
    env = workload_env(tmp_path, "j-4", GPUPOOL_CHECKPOINT_DIR=str(folder))
    run = run_workload(["sim", "--work", "0.05"], env)
    assert run.returncode == 0 and "starting over" in run.stderr
    assert json.loads(run.stdout)["resumed_from"] == 0
