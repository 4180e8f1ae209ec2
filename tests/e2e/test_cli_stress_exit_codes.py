"""`stress ramp`'s exit codes when hosts fail: 3, unless a threshold broke (4) or the harness
measured nothing usable (1); Ctrl-C is 130 even before the ramp started (DESIGN.md: the first
of 1, 4, 3, 5 wins). The real CLI on a simulated pool where one host has no python."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """One good simulated node, one that fails every agent call (no interpreter there)."""
    inventory = tmp_path / "mixed.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"transport": "local"},
                    "hosts": {
                        "good": {"sim": "l40s-4"},
                        "nopython": {"sim": "l40s-4", "python": str(tmp_path / "no-python3")},
                    },
                }
            }
        )
    )
    return inventory


def ramp(cli, inventory: Path, *extra: str, work: tuple[str, ...] | None = None):
    workload = ("--workload", "sleep", "--work", "100ms") if work is None else work
    return cli(
        "-i",
        str(inventory),
        "stress",
        "ramp",
        "--levels",
        "1,2",
        "--warmup",
        "0s",
        "--hold",
        "1s",
        "--drain",
        "20s",
        *workload,
        "-o",
        "json",
        *extra,
        timeout=180,
    )


def test_a_ramp_where_a_host_failed_exits_3_with_the_host_named(cli, mixed) -> None:
    run = ramp(cli, mixed)
    assert run.code == 3, run.stderr
    assert "nopython" in run.stderr and "Traceback" not in run.stderr
    levels = run.json()["levels"]
    assert [lv["level"] for lv in levels] == [1, 2]
    assert all(lv["completed"] > 0 and lv["failed"] == 0 for lv in levels)  # on `good`


def test_a_broken_threshold_wins_over_a_failed_host_exit_4(cli, mixed) -> None:
    run = ramp(cli, mixed, "--threshold", "throughput > 1000000000/s")
    assert run.code == 4, run.stderr
    assert "threshold broken" in run.stderr and "nopython" in run.stderr


def test_a_harness_failure_wins_over_a_failed_host_exit_1(cli, mixed) -> None:
    # Every job fails on the good host too: nothing could run at all.
    failing = "sh -c 'echo no GPU for it >&2; exit 3'"
    run = ramp(cli, mixed, work=("--workload", "cmd", "--cmd", failing))
    assert run.code == 1, run.stderr
    assert "no job succeeded at any level" in run.stderr and "nopython" in run.stderr


def test_ctrl_c_before_the_ramp_started_exits_130_without_a_traceback(cli, tmp_path) -> None:
    """SIGINT while the backend is still reading the pool (before the ramp's own handler is
    in place): 130, one warning, no "Aborted!" and exit 1 from click."""
    home = tmp_path / "home"
    slow = tmp_path / "slow.yaml"
    # A host whose agent call answers late: the ramp is still in prepare() at the SIGINT.
    # (The exit then waits for that call: fan-out threads are joined at exit.)
    sleeper = tmp_path / "slow-python3"
    sleeper.write_text("#!/bin/sh\nexec sleep 8\n")
    sleeper.chmod(0o755)
    slow.write_text(
        yaml.safe_dump(
            {"all": {"vars": {"transport": "local"}, "hosts": {"h": {"python": str(sleeper)}}}}
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(home), "GPUPOOL_SIM_DIR": str(tmp_path / "sim")})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpupoolctl.cli.main",
            "-i",
            str(slow),
            "stress",
            "ramp",
            "--levels",
            "1",
        ],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(3.0)  # the CLI imported and is waiting on the node
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr
    assert "Traceback" not in stderr and "Aborted!" not in stderr
