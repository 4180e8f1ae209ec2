"""Run the real `gpupoolctl` command line in a subprocess, isolated in a temporary HOME; or,
for tests of several operators sharing one pool, as real other users (tests/users.py) in a
folder their group shares."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests import users as test_users


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def _base_env(home: Path, sim_dir: Path) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_", "NO_COLOR"))
    }
    env.update({"HOME": str(home), "GPUPOOL_SIM_DIR": str(sim_dir), "COLUMNS": "200"})
    return env


def _runner(
    base: Path,
    env: dict[str, str],
    as_user: Callable[[str], tuple[list[str], dict[str, str]]] | None = None,
) -> Callable[..., Run]:
    """`run(*args, extra_env=, timeout=, user=)`: the CLI in `base`; `user` (a test user's
    name) runs it as that user, with the command line prefix and environment `as_user`
    gives."""

    def run(
        *args: str,
        extra_env: dict[str, str] | None = None,
        timeout: float = 120,
        user: str | None = None,
    ) -> Run:
        switch: list[str] = []
        own: dict[str, str] = {}
        if user is not None:
            if as_user is None:
                raise ValueError("this fixture runs commands as the test's own user only")
            switch, own = as_user(user)
        proc = subprocess.run(
            [*switch, sys.executable, "-m", "gpupoolctl.cli.main", *args],
            capture_output=True,
            stdin=subprocess.DEVNULL,  # never a terminal: commands must not wait for a person
            text=True,
            env={**env, **own, **(extra_env or {})},
            timeout=timeout,
            cwd=base,
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)

    def spawn(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """The same command line in the background, as the test's own user; the caller
        waits for it."""
        return subprocess.Popen(
            [sys.executable, "-m", "gpupoolctl.cli.main", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, **(extra_env or {})},
            cwd=base,
        )

    run.spawn = spawn  # type: ignore[attr-defined]
    run.sim_dir = Path(env["GPUPOOL_SIM_DIR"])  # type: ignore[attr-defined]
    run.cwd = base  # type: ignore[attr-defined]
    run.tmp = base  # type: ignore[attr-defined]
    return run


def _kill_jobs(sim_dir: Path) -> None:
    """No job of the test left running."""
    for pid_file in sim_dir.glob("jobs/*/*/pid.json"):
        pgid = json.loads(pid_file.read_text())["pgid"]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@pytest.fixture
def cli(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    return _runner(tmp_path, _base_env(home, tmp_path / "sim"))


@pytest.fixture
def jobs_cli(cli):
    """The cli fixture, and afterwards no job of the test left running."""
    yield cli
    _kill_jobs(Path(cli.sim_dir))


@pytest.fixture(scope="session")
def operators() -> test_users.Users:
    """The test users (made once per machine); skipped with the reason where they cannot be
    made or cannot run gpupoolctl."""
    why = test_users.unavailable()
    if why:
        pytest.skip(why)
    made = test_users.ensure()
    why = test_users.unreachable(made, _base_env(Path("/nonexistent"), Path("/nonexistent")))
    if why:
        pytest.skip(why)
    return made


@pytest.fixture
def shared_cli(operators: test_users.Users) -> Iterator[Callable[..., Run]]:
    """The cli fixture for a pool several operators share, set up as the README's "Sharing
    one pool" says: the ledger (GPUPOOL_LEDGER) and the simulated nodes' state in a folder
    their group shares (setgid), each user with a home of their own. `user=` runs a command
    as one of tests/users.py's users, without it as the test (root, a pool admin). Afterwards
    no job of the test is left running and the folder is gone."""
    base = operators.shared_folder()
    try:
        env = _base_env(base / "home" / "root", base / "sim")
        env["GPUPOOL_LEDGER"] = str(base / "ledger.jsonl")

        def as_user(name: str) -> tuple[list[str], dict[str, str]]:
            login = {"HOME": str(base / "home" / name), "USER": name, "LOGNAME": name}
            return operators.run_as(name), login  # as a login sets them

        run = _runner(base, env, as_user)
        yield run
        _kill_jobs(Path(run.sim_dir))
    finally:
        shutil.rmtree(base, ignore_errors=True)
