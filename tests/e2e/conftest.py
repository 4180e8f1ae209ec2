"""Run the real `gpupoolctl` command line in a subprocess, isolated in a temporary HOME."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@pytest.fixture
def cli(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_", "NO_COLOR"))
    }
    env.update({"HOME": str(home), "GPUPOOL_SIM_DIR": str(tmp_path / "sim"), "COLUMNS": "200"})

    def run(*args: str, extra_env: dict[str, str] | None = None, timeout: float = 120) -> Run:
        proc = subprocess.run(
            [sys.executable, "-m", "gpupoolctl.cli.main", *args],
            capture_output=True,
            stdin=subprocess.DEVNULL,  # never a terminal: commands must not wait for a person
            text=True,
            env={**env, **(extra_env or {})},
            timeout=timeout,
            cwd=tmp_path,
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def spawn(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """The same command line in the background; the caller waits for it."""
        return subprocess.Popen(
            [sys.executable, "-m", "gpupoolctl.cli.main", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, **(extra_env or {})},
            cwd=tmp_path,
        )

    run.spawn = spawn  # type: ignore[attr-defined]
    run.sim_dir = tmp_path / "sim"  # type: ignore[attr-defined]
    run.cwd = tmp_path  # type: ignore[attr-defined]
    run.tmp = tmp_path  # type: ignore[attr-defined]
    return run


@pytest.fixture
def jobs_cli(cli):
    """The cli fixture, and afterwards no job of the test left running."""
    import contextlib
    import signal

    yield cli
    for pid_file in Path(cli.sim_dir).glob("jobs/*/*/pid.json"):
        pgid = json.loads(pid_file.read_text())["pgid"]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
