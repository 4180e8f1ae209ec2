"""The `local` transport: run the bootstrap in a subprocess on the workstation itself."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

from gpupoolctl.remote.bootstrap import interpreter_argv
from gpupoolctl.remote.results import TIMED_OUT, ExecResult, HostFailure
from gpupoolctl.remote.target import Target


def local_python(target: Target) -> str:
    # The default name means "the node's python3"; on the workstation that is the
    # interpreter running us, which certainly exists and is new enough.
    return sys.executable if target.python == "python3" else target.python


def run_local(target: Target, stdin_data: bytes, timeout: float) -> ExecResult:
    argv = interpreter_argv(local_python(target))
    try:
        # A session of its own, so a time-out can kill whatever the agent started too.
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        return ExecResult(127, b"", str(exc).encode(), {"sessions": 0})
    except PermissionError as exc:
        return ExecResult(126, b"", str(exc).encode(), {"sessions": 0})
    try:
        stdout, stderr = process.communicate(stdin_data, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        # Bounded: a grandchild that left the group may still hold the pipes open.
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.communicate(timeout=2)
        raise HostFailure(
            TIMED_OUT, f"command did not finish within {timeout:g}s", "CommandTimeout"
        ) from None
    except BaseException:
        _kill_group(process)
        process.wait()
        raise
    return ExecResult(process.returncode, stdout, stderr, {"sessions": 1})


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
