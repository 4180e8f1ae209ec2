"""The bootstrap's stdin framing and command line, run through a real interpreter."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gpupoolctl.remote import OK, run_agent, target_from_vars
from gpupoolctl.remote.bootstrap import (
    BOOTSTRAP,
    encode_stdin,
    interpreter_argv,
    remote_command,
)
from gpupoolctl.remote.payload import Payload, agent_payload


def _run(stdin: bytes, env_cache: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        interpreter_argv(sys.executable),
        input=stdin,
        capture_output=True,
        timeout=30,
        env={"XDG_CACHE_HOME": str(env_cache), "PATH": "/usr/bin:/bin"},
    )


def test_round_trip(tmp_path: Path) -> None:
    request = {"v": 1, "verb": "ping", "host": "h1", "sim": None}
    done = _run(encode_stdin(agent_payload(), request), tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"v": 1, "ok": True, "data": {"pong": True}, "error": None}


def test_modules_in_the_working_folder_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The local transport starts the agent in the operator's working folder, which may be a
    # shared one (/tmp, a team's project folder): a planted stdlib name there must not run.
    shared = tmp_path / "shared"
    shared.mkdir()
    marker = tmp_path / "planted-code-ran"
    for name in ("hashlib", "tempfile", "zipfile", "shutil", "json"):
        (shared / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    monkeypatch.chdir(shared)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (result,) = run_agent([target_from_vars("ws", {"transport": "local"})], {"verb": "facts"})
    assert not marker.exists(), marker.read_text()
    assert result.outcome == OK, result.error


def test_hash_mismatch_is_refused(tmp_path: Path) -> None:
    real = agent_payload()
    forged = Payload(real.data[:-1] + bytes([real.data[-1] ^ 1]), real.sha256)
    done = _run(encode_stdin(forged, {"v": 1, "verb": "ping"}), tmp_path)
    assert done.returncode == 3
    assert b"gpupoolctl-bootstrap: payload hash mismatch" in done.stderr
    assert not (tmp_path / "gpupoolctl" / f"agent-{real.sha256}").exists()


def test_truncated_payload_is_refused(tmp_path: Path) -> None:
    stdin = encode_stdin(agent_payload(), {"v": 1, "verb": "ping"})
    done = _run(stdin[:200], tmp_path)
    assert done.returncode == 3
    assert b"payload truncated" in done.stderr


def test_bad_header_is_refused(tmp_path: Path) -> None:
    done = _run(b'{"v": 1, "verb": "ping"}', tmp_path)
    assert done.returncode == 3
    assert b"bad header" in done.stderr


@pytest.mark.parametrize("python", ["python3", "/opt/py 3/bin/python", "py;rm -rf /"])
def test_remote_command_quotes_every_word(python: str) -> None:
    words = shlex.split(remote_command(python))
    assert words == ["exec", python, "-c", BOOTSTRAP]


def test_bootstrap_needs_no_escaping_inside_single_quotes() -> None:
    # One pair of quotes on the wire keeps the command short and readable in ps/sshd logs.
    assert "'" not in BOOTSTRAP
    assert remote_command("python3").endswith("-c '" + BOOTSTRAP + "'")


def test_an_unusable_cache_falls_back_to_a_folder_in_the_temp_dir(tmp_path: Path) -> None:
    """XDG_CACHE_HOME that cannot hold a folder (here a file): the agent is unpacked under
    $TMPDIR/gpupoolctl-<uid> instead, and the request is still answered."""
    (tmp_path / "cache").write_text("not a folder")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    request = {"v": 1, "verb": "ping", "host": "h1", "sim": None}
    payload = agent_payload()
    done = subprocess.run(
        interpreter_argv(sys.executable),
        input=encode_stdin(payload, request),
        capture_output=True,
        timeout=30,
        env={
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "TMPDIR": str(tmp),
            "PATH": "/usr/bin:/bin",
        },
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["data"] == {"pong": True}
    store = tmp / f"gpupoolctl-{os.getuid()}" / f"agent-{payload.sha256}"
    assert (store / ".complete").is_file()
