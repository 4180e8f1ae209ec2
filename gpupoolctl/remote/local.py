"""The `local` transport: run the bootstrap in a subprocess on the workstation itself (once
per request, or once per session: LocalStream)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

from gpupoolctl.remote.bootstrap import interpreter_argv
from gpupoolctl.remote.results import TIMED_OUT, ExecResult, HostFailure
from gpupoolctl.remote.stream import Stream, StreamEnded
from gpupoolctl.remote.target import Target

_CHUNK = 65536
_GRACE_S = 2.0  # how long a closed serve-mode agent may take to leave on its own


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


class LocalStream(Stream):
    """A serve-mode agent in a subprocess of the workstation (a session of its own, so
    closing it kills whatever it started but its detached jobs)."""

    def __init__(self, target: Target) -> None:
        super().__init__()
        argv = interpreter_argv(local_python(target))
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            bufsize=0,
        )
        assert self.process.stdin and self.process.stdout and self.process.stderr
        self._in = self.process.stdin.fileno()
        self._out = self.process.stdout.fileno()
        self._err: int | None = self.process.stderr.fileno()
        os.set_blocking(self._in, False)

    def read_some(self, deadline: float) -> bytes:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            watched = [self._out] + ([self._err] if self._err is not None else [])
            ready, _, _ = select.select(watched, [], [], remaining)
            if self._err is not None and self._err in ready:
                chunk = os.read(self._err, _CHUNK)
                if chunk:
                    self.keep_stderr(chunk)
                else:
                    self._err = None  # stderr closed; stdout may still have data
            if self._out in ready:
                return os.read(self._out, _CHUNK)

    def write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            _, ready, _ = select.select([], [self._in], [], remaining)
            if not ready:
                continue
            try:
                written = os.write(self._in, view)
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise StreamEnded from exc
            view = view[written:]

    def exit_status(self, wait: float) -> int | None:
        try:
            return self.process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            return None

    def close(self, *, graceful: bool) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()  # type: ignore[union-attr]  # EOF: the agent leaves
        # Killed while not yet reaped, so its group id cannot belong to anyone else yet; its
        # jobs are in sessions of their own and live on.
        if self.exit_status(_GRACE_S if graceful else 0.0) is None:
            _kill_group(self.process)
            self.process.wait()
        for pipe in (self.process.stdout, self.process.stderr):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]
