"""Fan-out mechanics with the local transport: forks bound, order, progress, isolation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpupoolctl.errors import UsageError
from gpupoolctl.remote import OK, Timeouts, host_request, run_agent
from gpupoolctl.remote.target import SimSpec, Target, target_from_vars


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keep the agent's zip cache out of the real ~/.cache (tests may override it again).
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def _slow_python(tmp_path: Path) -> tuple[Path, Path]:
    """An interpreter wrapper that logs when it was busy, then runs the real agent."""
    log = tmp_path / "busy.log"
    wrapper = tmp_path / "slow-python"
    wrapper.write_text(
        "#!/bin/sh\n"
        "start=$(date +%s.%N)\n"
        "sleep 0.3\n"
        f'echo "$start $(date +%s.%N)" >> {log}\n'
        f'exec {sys.executable} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper, log


def _max_overlap(log: Path) -> int:
    events: list[tuple[float, int]] = []
    for line in log.read_text().splitlines():
        start, end = map(float, line.split())
        events += [(start, 1), (end, -1)]
    busy = peak = 0
    for _, step in sorted(events):  # ends sort before starts at the same instant
        busy += step
        peak = max(peak, busy)
    return peak


@pytest.mark.parametrize("forks", [1, 3])
def test_forks_bound_concurrency(tmp_path: Path, forks: int) -> None:
    wrapper, log = _slow_python(tmp_path)
    targets = [
        target_from_vars(f"h{i}", {"transport": "local", "python": str(wrapper)}) for i in range(6)
    ]
    results = run_agent(targets, {"verb": "ping"}, forks=forks)
    assert [r.outcome for r in results] == [OK] * 6, [r.error for r in results]
    assert _max_overlap(log) == forks


def test_results_in_input_order_and_progress_per_host(tmp_path: Path) -> None:
    wrapper, _ = _slow_python(tmp_path)
    fast = {"transport": "local"}
    slow = {"transport": "local", "python": str(wrapper)}
    targets = [target_from_vars("slow", slow), target_from_vars("fast", fast)]
    finished: list[str] = []
    results = run_agent(targets, {"verb": "ping"}, on_progress=lambda r: finished.append(r.name))
    assert [r.name for r in results] == ["slow", "fast"]
    assert finished == ["fast", "slow"]


def test_per_host_problems_never_raise(tmp_path: Path) -> None:
    targets = [
        target_from_vars("ok", {"transport": "local"}),
        target_from_vars("gone", {"transport": "local", "python": str(tmp_path / "nope")}),
    ]
    results = run_agent(targets, {"verb": "ping"}, timeouts=Timeouts(command=10))
    assert [r.outcome for r in results] == ["ok", "failed"]


def test_empty_and_bad_forks() -> None:
    assert run_agent([], {"verb": "ping"}) == []
    with pytest.raises(UsageError):
        run_agent([target_from_vars("x", {"transport": "local"})], {"verb": "ping"}, forks=0)


def test_host_request_adds_host_and_sim() -> None:
    target = Target("gpu-7", None, None, None, None, "python3", "ssh", SimSpec("dgx-h100", "/s"))
    assert host_request(target, {"verb": "facts", "args": {}}) == {
        "v": 1,
        "verb": "facts",
        "args": {},
        "host": "gpu-7",
        "sim": {"template": "dgx-h100", "state_dir": "/s"},
    }
    plain = Target("n", "10.0.0.1", None, None, None, "python3", "ssh", None)
    assert host_request(plain, {"verb": "ping"})["sim"] is None


def test_timeouts_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Timeouts(command=0)
    assert Timeouts().total == Timeouts().connect + Timeouts().auth + Timeouts().command


def test_importing_remote_does_not_import_paramiko() -> None:
    code = (
        "import sys, gpupoolctl.remote\n"
        "bad = [m for m in ('paramiko', 'fabric', 'invoke') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
