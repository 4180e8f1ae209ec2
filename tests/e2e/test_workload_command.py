"""`gpupoolctl-workload` is a command that installing gpupoolctl puts on PATH, not only a word
that `submit --` understands: it runs the same entry point a job's launcher runs."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from gpupoolctl.agent.workloads import RUN_WORKLOAD, WORKLOAD_COMMAND
from gpupoolctl.agent.workloads.__main__ import main


def installed_command() -> Path:
    """The console script `pip install` wrote beside this interpreter."""
    script = Path(sys.executable).parent / WORKLOAD_COMMAND
    if not script.exists():
        pytest.fail(f"{script} is missing: reinstall gpupoolctl (pip install -e '.[test]')")
    return script


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(installed_command()), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)},  # nothing of a job's environment
    )


def test_the_entry_point_is_what_a_jobs_launcher_runs() -> None:
    (entry,) = metadata.entry_points(group="console_scripts", name=WORKLOAD_COMMAND)
    assert entry.load() is main
    assert "from gpupoolctl.agent.workloads.__main__ import main" in RUN_WORKLOAD


def test_the_installed_command_runs_a_workload(tmp_path: Path) -> None:
    done = run("sim", "--work", "0.05", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["workload"] == "sim" and report["completed"] is True


def test_the_installed_command_refuses_an_unknown_workload_in_one_line(tmp_path: Path) -> None:
    done = run("nosuch", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "invalid choice: 'nosuch'" in done.stderr
    helped = run("--help", cwd=tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith(f"usage: {WORKLOAD_COMMAND} ")
