"""The local transport: the same bootstrap and agent, in a subprocess on the workstation."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpupoolctl.remote import FAILED, OK, TIMED_OUT, Timeouts, agent_payload, run_agent
from gpupoolctl.remote.target import target_from_vars


@pytest.fixture(autouse=True)
def _private_cache(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keep the agent's zip cache out of the real ~/.cache (tests may override it again).
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def _local(name: str, **variables: object) -> object:
    return target_from_vars(name, {"transport": "local", **variables})


def test_ping_and_cache_under_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    results = run_agent([_local("ws-a"), _local("ws-b")], {"verb": "ping"})
    assert [(r.name, r.outcome, r.data) for r in results] == [
        ("ws-a", OK, {"pong": True}),
        ("ws-b", OK, {"pong": True}),
    ]
    cached = tmp_path / "cache" / "gpupoolctl" / f"agent-{agent_payload().sha256}"
    assert (cached / ".complete").is_file()
    source = Path(__file__).resolve().parents[2] / "gpupoolctl" / "agent" / "main.py"
    assert (cached / "gpupoolctl" / "agent" / "main.py").read_text() == source.read_text()
    # Unpacked so that Python keeps compiled bytecode for the next run.
    assert list((cached / "gpupoolctl" / "agent").glob("__pycache__/main.*.pyc"))
    assert cached.stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "cache" / "gpupoolctl").stat().st_mode & 0o777 == 0o700


def test_unwritable_cache_falls_back_to_tmpdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A path under a regular file cannot be created, even by root.
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    (result,) = run_agent([_local("ws")], {"verb": "ping"})
    assert result.outcome == OK, result.error
    fallback = list((tmp_path / "tmp").glob("gpupoolctl-*/agent-*"))
    assert [p.name for p in fallback] == [f"agent-{agent_payload().sha256}"]


def test_unmarked_cached_copy_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A folder without its completion marker was not written by a finished unpack: distrust it.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cached = tmp_path / "gpupoolctl" / f"agent-{agent_payload().sha256}"
    (cached / "gpupoolctl").mkdir(parents=True)
    (tmp_path / "gpupoolctl").chmod(0o700)
    (cached / "gpupoolctl" / "__init__.py").write_text("raise SystemExit('tampered')\n")
    (result,) = run_agent([_local("ws")], {"verb": "ping"})
    assert result.outcome == OK, result.error
    assert (cached / ".complete").is_file()
    assert "tampered" not in (cached / "gpupoolctl" / "__init__.py").read_text()


def test_versions_unused_for_a_week_are_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = tmp_path / "gpupoolctl"
    folder.mkdir(mode=0o700)
    old_dir, old_zip, recent = folder / "agent-0ld", folder / "agent-0ld.zip", folder / "agent-new"
    old_dir.mkdir()
    old_zip.write_bytes(b"")
    recent.mkdir()
    eight_days_ago = time.time() - 8 * 86400
    for path in (old_dir, old_zip):
        os.utime(path, (eight_days_ago, eight_days_ago))
    (result,) = run_agent([_local("ws")], {"verb": "ping"})
    assert result.outcome == OK, result.error
    assert not old_dir.exists() and not old_zip.exists()
    assert recent.exists()


def test_missing_interpreter(tmp_path: Path) -> None:
    (result,) = run_agent([_local("ws", python=str(tmp_path / "python9"))], {"verb": "ping"})
    assert result.outcome == FAILED
    assert result.error_type == "NoPython"
    assert "set the `python` host var" in result.error


def test_hung_local_agent_times_out(tmp_path: Path) -> None:
    sleeper = tmp_path / "python-that-hangs"
    sleeper.write_text("#!/bin/sh\nexec sleep 60\n")
    sleeper.chmod(0o755)
    (result,) = run_agent(
        [_local("ws", python=str(sleeper))], {"verb": "ping"}, timeouts=Timeouts(command=0.5)
    )
    assert result.outcome == TIMED_OUT
    assert result.elapsed < 2.5


def test_sim_facts_locally(tmp_path: Path) -> None:
    target = _local("sim-a", sim="dgx-h100", sim_state_dir=str(tmp_path))
    (result,) = run_agent([target], {"verb": "facts"})
    assert result.outcome == OK, result.error
    assert result.data["host"] == "sim-a"
    assert result.data["sim"] is True
    assert len(result.data["gpus"]) == 8
