"""A submit killed at each step leaves a running recorded job or a free slice, never a leak."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PY = sys.executable
HOST = "dxb-l40s-01"


class Cli:
    def __init__(self, tmp_path: Path) -> None:
        home = tmp_path / "home"
        home.mkdir()
        self.sim = tmp_path / "sim"
        self.cwd = tmp_path
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
        self.env.update({"HOME": str(home), "GPUPOOL_SIM_DIR": str(self.sim)})

    def __call__(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [PY, "-m", "gpupoolctl.cli.main", "-q", "-l", HOST, *args],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**self.env, **env},
            cwd=self.cwd,
            timeout=60,
        )

    def json(self, *args: str) -> Any:
        run = self(*args, "-o", "json")
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)


@pytest.mark.parametrize("step", ["1", "2", "3", "4"])
def test_killed_submit_is_settled_by_the_next_jobs(tmp_path: Path, step: str) -> None:
    cli = Cli(tmp_path)
    code = "import time; time.sleep(0.4); print('ran')"
    crashed = cli("submit", "--name", "crashy", "--", PY, "-c", code, GPUPOOL_TEST_CRASH_AFTER=step)
    assert crashed.returncode == -9, crashed.stderr  # it really died mid-submit
    left = cli.json("jobs", "--no-refresh")
    assert len(left) == 1 and left[0]["state"] in ("queued", "pending", "running")
    settled = cli.json("jobs")  # recovery, reap, schedule
    assert settled[0]["state"] in ("running", "done"), settled  # never pending, never lost
    for _ in range(40):
        final = cli.json("jobs")[0]
        if final["state"] == "done":
            break
    assert final["state"] == "done" and final["exit_code"] == 0, final
    assert cli("logs", final["id"]).stdout == "ran\n"  # it ran exactly once
    pool = cli.json("pool", "--no-refresh")
    assert [s for n in pool["nodes"] for s in n["slices"] if s["state"] == "held"] == []
    verify = cli("ledger", "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    folders = sorted(p.name for p in (cli.sim / "jobs" / HOST).iterdir())
    if step == "2":  # placed, never launched: fenced there, then run again as its second run
        assert folders == [final["id"], f"{final['id']}.2"]
        assert (cli.sim / "jobs" / HOST / final["id"] / "fenced").exists()
    else:
        assert folders == [final["id"]]
