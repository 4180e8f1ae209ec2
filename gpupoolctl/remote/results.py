"""Per-host results and how a transport's raw outcome is classified into one of them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.remote.bootstrap import ERROR_PREFIX, missing_interpreter_message

OK = "ok"
FAILED = "failed"
UNREACHABLE = "unreachable"
TIMED_OUT = "timed-out"
OUTCOMES = (OK, FAILED, UNREACHABLE, TIMED_OUT)
# The agent's error type on a simulated node that is down: unreachable, for sim hosts only.
NODE_DOWN = "NodeDown"

_EXCERPT = 300  # characters of stderr quoted in a one-line error


@dataclass
class HostResult:
    """How one host ended. `error` is one line (None when ok); `error_type` is the agent's
    error type on an agent failure, or a transport category (e.g. "HostKeyUnknown")."""

    name: str
    outcome: str
    data: Any = None
    error: str | None = None
    error_type: str | None = None
    elapsed: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "outcome": self.outcome,
            "data": self.data,
            "error": self.error,
            "error_type": self.error_type,
            "elapsed": round(self.elapsed, 3),
            "stats": dict(self.stats),
        }


class HostFailure(Exception):
    """Raised by a transport for a per-host problem; the fan-out turns it into a HostResult."""

    def __init__(self, outcome: str, message: str, error_type: str | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message
        self.error_type = error_type


@dataclass
class ExecResult:
    """What came back from the one remote exec."""

    exit_status: int
    stdout: bytes
    stderr: bytes
    stats: dict[str, int] = field(default_factory=dict)


def one_line(text: str, limit: int = _EXCERPT) -> str:
    flat = " | ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def stderr_excerpt(stderr: bytes) -> str:
    """The end of stderr, where a traceback's actual error is."""
    text = stderr.decode("utf-8", "replace").strip()
    lines = [line for line in text.splitlines() if line.strip()]
    bootstrap = [line for line in lines if line.startswith(ERROR_PREFIX)]
    if bootstrap:
        return one_line(bootstrap[-1])
    return one_line("\n".join(lines[-3:])) if lines else "(no stderr)"


def find_envelope(stdout: bytes) -> dict[str, Any] | None:
    """The agent's JSON envelope: the whole of stdout, or else its last JSON line (a login
    script on the node may print before the agent does)."""
    text = stdout.decode("utf-8", "replace").strip()
    candidates = [text, *reversed(text.splitlines())]
    for candidate in candidates:
        candidate = candidate.strip()
        if not candidate.startswith("{"):
            continue
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict) and "ok" in value:
            return value
    return None


def classify_exec(name: str, python: str, result: ExecResult, elapsed: float) -> HostResult:
    """Turn the exec's exit status and output into ok / failed with a one-line reason."""
    stats = dict(result.stats)
    envelope = find_envelope(result.stdout)
    if envelope is None:
        if result.exit_status == 127:  # the shell's "command not found"
            return HostResult(
                name,
                FAILED,
                error=missing_interpreter_message(python),
                error_type="NoPython",
                elapsed=elapsed,
                stats=stats,
            )
        if result.exit_status == 126:
            return HostResult(
                name,
                FAILED,
                error_type="NoPython",
                elapsed=elapsed,
                stats=stats,
                error=f"python interpreter {python!r} on the node cannot be executed: "
                + stderr_excerpt(result.stderr),
            )
        return HostResult(
            name,
            FAILED,
            error_type="NoAnswer",
            elapsed=elapsed,
            stats=stats,
            error=f"agent gave no JSON answer (exit {result.exit_status}): "
            + stderr_excerpt(result.stderr),
        )
    return classify_envelope(name, envelope, elapsed, stats)


def classify_envelope(
    name: str, envelope: dict[str, Any], elapsed: float, stats: dict[str, int]
) -> HostResult:
    """The agent's envelope -> ok, or failed with "<type>: <one line>"."""
    if envelope.get("ok") is True:
        return HostResult(name, OK, data=envelope.get("data"), elapsed=elapsed, stats=stats)
    error = envelope.get("error") or {}
    if not isinstance(error, dict):
        error = {"type": "AgentError", "message": str(error)}
    error_type = str(error.get("type") or "AgentError")
    message = one_line(str(error.get("message") or "(no message)"))
    return HostResult(
        name,
        FAILED,
        error=f"{error_type}: {message}",
        error_type=error_type,
        elapsed=elapsed,
        stats=stats,
    )
