"""mig-parted style hooks: commands the operator wants run around an apply on the node.

Each command is an argv list, run without a shell (nothing is interpreted), with stdin closed
and its output captured (the agent's stdout carries its one JSON answer), under a time limit.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

HOOK_TIMEOUT_S = 60.0
_OUTPUT_TAIL = 2000  # characters of a hook's output kept in the answer


def _tail(text: str) -> str:
    return text if len(text) <= _OUTPUT_TAIL else "..." + text[-_OUTPUT_TAIL:]


def run_command(hook: str, argv: list[str], timeout: float = HOOK_TIMEOUT_S) -> dict[str, Any]:
    started = time.monotonic()
    result: dict[str, Any] = {"hook": hook, "argv": argv, "rc": None, "ok": False, "error": None}
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.stdout or "") + (exc.stderr or "")
        if isinstance(output, bytes):
            output = output.decode("utf-8", "replace")
        result.update(error=f"timed out after {timeout:g} s", output=_tail(output))
    except OSError as exc:  # not found, not executable
        result.update(error=f"cannot run {argv[0]!r}: {exc.strerror or exc}", output="")
    else:
        result.update(rc=done.returncode, output=_tail(done.stdout + done.stderr))
        if done.returncode == 0:
            result["ok"] = True
        else:
            result["error"] = f"exited with status {done.returncode}"
    result["elapsed_s"] = round(time.monotonic() - started, 3)
    return result


class HookRunner:
    """Runs the commands of each hook in order; remembers every result for the answer."""

    def __init__(self, hooks: dict[str, list[list[str]]], timeout: float = HOOK_TIMEOUT_S):
        self._hooks = hooks
        self._timeout = timeout
        self.results: list[dict[str, Any]] = []

    def run(self, hook: str) -> str | None:
        """Run one hook's commands, stopping at the first failure; its error, or None."""
        for argv in self._hooks.get(hook, []):
            result = run_command(hook, argv, self._timeout)
            self.results.append(result)
            if not result["ok"]:
                return f"hook {hook} ({argv[0]}) failed: {result['error']}"
        return None
