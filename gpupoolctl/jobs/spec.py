"""What a user submits: the command, its environment, and the request for slices."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.redact import looks_secret
from gpupoolctl.sched import JobRequest

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_GRACE_S = 30.0
MAX_GRACE_S = 3600  # longer than an hour is a job that ignores SIGTERM, not a grace


@dataclass(frozen=True)
class JobSpec:
    argv: list[str]
    request: JobRequest
    name: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    requeue: bool = False  # when preempted, wait in the queue again
    grace_s: float = DEFAULT_GRACE_S  # SIGTERM -> SIGKILL when preempted or cancelled
    policy: str = "best-fit"

    def validate(self) -> None:
        if not self.argv or not all(isinstance(a, str) for a in self.argv):
            raise UsageError("no command given: put it after --, e.g. submit -- python run.py")
        if any("\0" in a for a in self.argv):
            raise UsageError("the command must not contain NUL bytes")
        for key, value in self.env.items():
            if not _ENV_NAME.fullmatch(key):
                raise UsageError(f"bad environment variable name {key!r}")
            if "\0" in value:
                raise UsageError(f"environment variable {key} must not contain NUL bytes")
            if looks_secret(key):
                # The ledger is read with less and grep: secrets never go in it.
                raise UsageError(
                    f"refusing --env {key}: secrets are never recorded in the ledger; set it "
                    "on the node (e.g. in a file the job reads)"
                )
        if not 0 <= self.grace_s <= MAX_GRACE_S:  # also refuses NaN and infinity
            raise UsageError(f"--grace must be between 0 and {MAX_GRACE_S} seconds")
        self.request.validate()

    def record(self) -> dict[str, Any]:
        """The fields every job record starts with."""
        return {
            "name": self.name,
            "argv": list(self.argv),
            "env": dict(self.env),
            "workdir": self.workdir,
            "request": self.request.to_dict(),
            "requeue": self.requeue,
            "grace_s": self.grace_s,
            "policy": self.policy,
        }


def parse_env(items: list[str]) -> dict[str, str]:
    """['A=1', 'B=x=y'] -> {'A': '1', 'B': 'x=y'}; values are data, never expanded."""
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"bad --env {item!r}: use NAME=VALUE")
        env[key] = value
    return env
