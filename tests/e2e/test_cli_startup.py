"""Cheap commands stay cheap: what a fresh `gpupoolctl` process imports for them.

Speed itself is measured in bench/startup, not here: these tests check the imports that
make start-up slow (a command module, the stress stack, SSH) are not loaded where not needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Runs the console script's entry point, then reports every module the run imported.
WRAPPER = """
import json, sys
from gpupoolctl.cli.main import run
sys.argv[0] = "gpupoolctl"
try:
    run()
    code = 0
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 1
sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n")
sys.exit(code)
"""
HEAVY = ("numpy", "scipy", "matplotlib", "paramiko", "fabric", "gpupoolctl.stress")
COMMAND_MODULES = (
    "export_cmd",
    "inventory_cmd",
    "jobs_cmd",
    "ledger_cmd",
    "partition_cmd",
    "sim_cmd",
    "stress_cmd",
)


def _imported(tmp_path: Path, *args: str) -> tuple[str, set[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(tmp_path), "GPUPOOL_SIM_DIR": str(tmp_path / "sim")})
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = proc.stderr.rpartition("\nMODULES ")[2]
    return proc.stdout, set(json.loads(report))


def _loaded(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


@pytest.mark.parametrize(
    ("args", "command_modules"),
    [
        (("--version",), set()),
        (("--help",), set()),
        (("pool", "--help"), {"ledger_cmd"}),
        (("jobs", "--help"), {"jobs_cmd"}),
        (("-o", "json", "sim", "--help"), {"sim_cmd"}),
    ],
    ids=["version", "help", "pool-help", "jobs-help", "sim-help"],
)
def test_cheap_commands_import_only_what_they_need(tmp_path, args, command_modules):
    out, modules = _imported(tmp_path, *args)
    assert out.startswith(("gpupoolctl ", "Usage: gpupoolctl"))
    assert [name for name in HEAVY if _loaded(modules, name)] == []
    loaded = {name for name in COMMAND_MODULES if f"gpupoolctl.cli.{name}" in modules}
    assert loaded == command_modules


def test_version_alone_loads_neither_typer_nor_the_root(tmp_path):
    out, modules = _imported(tmp_path, "--version")
    assert out == "gpupoolctl 0.1.0\n"
    assert not _loaded(modules, "typer") and "gpupoolctl.cli.root" not in modules
    # with anything else on the line typer answers, as before
    out, modules = _imported(tmp_path, "-q", "--version")
    assert out == "gpupoolctl 0.1.0\n" and _loaded(modules, "typer")


@pytest.mark.parametrize(
    "args",
    [("jobs",), ("pool", "--no-refresh"), ("ledger", "show", "-o", "json"), ("jobs", "--help")],
    ids=["jobs", "pool-no-refresh", "ledger-show", "jobs-help"],
)
def test_read_only_commands_load_neither_pydantic_nor_tabulate(tmp_path, args):
    ledger = tmp_path / "ledger.jsonl"
    _imported(tmp_path, "-q", "--ledger", str(ledger), "pool")  # records the bundled slices
    out, modules = _imported(tmp_path, "-q", "--ledger", str(ledger), "--forks", "8", *args)
    assert out
    assert not _loaded(modules, "pydantic")  # typer's coercion of option values
    assert not _loaded(modules, "tabulate")  # plain ASCII tables


def test_an_option_value_to_refuse_still_gets_typers_error(tmp_path):
    # The check above could pass by never coercing: a bad value must still be refused.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(tmp_path), "GPUPOOL_SIM_DIR": str(tmp_path / "sim")})
    proc = subprocess.run(
        [sys.executable, "-c", WRAPPER, "--forks", "0", "jobs"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Invalid value for '--forks'" in proc.stderr


def test_the_report_shows_what_a_command_does_import(tmp_path):
    # The check above could pass by looking in the wrong place: a command that does load the
    # stress stack (a tiny ramp on the harness alone) must show it in the same report.
    args = ("stress", "ramp", "--backend", "noop", "--levels", "1", "--hold", "0.2s")
    out, modules = _imported(tmp_path, "-o", "json", *args, "--warmup", "0s", "--drain", "0s")
    assert json.loads(out)["scenario"]["levels"] == [1]
    assert _loaded(modules, "gpupoolctl.stress")
    assert "gpupoolctl.cli.stress_cmd" in modules and "gpupoolctl.cli.jobs_cmd" not in modules


def test_reading_the_ledger_does_not_load_the_scheduler(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    _imported(tmp_path, "-q", "--ledger", str(ledger), "pool")  # records the bundled slices
    out, modules = _imported(
        tmp_path, "-q", "--ledger", str(ledger), "ledger", "show", "-o", "json"
    )
    assert [r["op"] for r in json.loads(out)] == ["slices"]
    assert not _loaded(modules, "gpupoolctl.sched")
    assert [name for name in HEAVY if _loaded(modules, name)] == []


def test_jobs_on_an_idle_pool_lists_from_the_ledger_alone(tmp_path):
    """Nothing running, pending or queued: `jobs` lists the ledger's jobs without loading
    the job service, the scheduler or the inventory. With a queued job it refreshes as
    before (the control: the same report shows them loaded)."""
    ledger = tmp_path / "ledger.jsonl"
    base = ("-q", "--ledger", str(ledger))
    _imported(tmp_path, *base, "pool")  # records the bundled slices
    for _ in range(2):  # --wait: each has ended and been recorded when submit returns
        _imported(tmp_path, *base, "submit", "--wait", "--profile", "gpu", "--", "true")
    out, modules = _imported(tmp_path, *base, "-o", "json", "jobs")
    assert sorted(j["state"] for j in json.loads(out)) == ["done", "done"]
    for heavy in ("gpupoolctl.jobs.service", "gpupoolctl.sched", "gpupoolctl.inventory"):
        assert not _loaded(modules, heavy), heavy
    # Every whole card held: the next whole-card job stays queued, and `jobs` refreshes.
    _imported(tmp_path, *base, "alloc", "--profile", "gpu", "--gpus", "32")
    _imported(tmp_path, *base, "submit", "--profile", "gpu", "--", "true")
    out, modules = _imported(tmp_path, *base, "-o", "json", "jobs")
    assert "queued" in {j["state"] for j in json.loads(out)}
    assert _loaded(modules, "gpupoolctl.jobs.service") and _loaded(modules, "gpupoolctl.sched")
